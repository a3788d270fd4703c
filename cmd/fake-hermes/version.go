package main

import (
	"runtime"
	"runtime/debug"
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

func versionFrom(stamped string, bi *debug.BuildInfo) string {
	v, rev, modified := stamped, "", false
	if bi != nil {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				rev = s.Value[:12]
			case s.Key == "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev != "" {
		if modified {
			rev += ", modified"
		}
		v += " (" + rev + ")"
	}
	return v + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
