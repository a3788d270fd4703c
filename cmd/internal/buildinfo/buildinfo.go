// Package buildinfo is the version line the repository's commands print (hermes-bridge
// version, fake-hermes --version).
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Line is the version line: the version stamped at build time (`make build` and `make
// install` set it from git describe; "dev" when not stamped), else the module version
// the go command recorded in bi (`go install module@v1.2.3`, or a pseudo-version in a
// clone), else "dev"; then the VCS revision when known, and the Go version and platform.
func Line(stamped string, bi *debug.BuildInfo) string {
	v := stamped
	rev, modified := "", false
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
