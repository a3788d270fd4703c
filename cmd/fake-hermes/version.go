package main

import (
	"runtime/debug"

	"github.com/hermes-bridge/hermes-bridge/cmd/internal/buildinfo"
)

// version is set at build time: `make build` and `make install` pass
// -ldflags "-X main.version=$(git describe --tags --always --dirty)", as for hermes-bridge.
var version = "dev"

// versionString is what --version prints after "fake-hermes ": the version stamped at
// build time, else the module version the go command recorded (`go install
// module@v1.2.3`, or a pseudo-version in a clone), else "dev"; then the VCS revision
// when known, and the Go version and platform (the line hermes-bridge version prints).
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return versionFrom(version, bi)
}

// versionFrom is the version line of build info bi (buildinfo.Line).
func versionFrom(stamped string, bi *debug.BuildInfo) string { return buildinfo.Line(stamped, bi) }
