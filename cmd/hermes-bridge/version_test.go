package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionSources (issue 13): the version stamped by `make build` / `make install`
// (-ldflags -X main.version=...) wins; a `go install` without it falls back to the
// module version, then to the VCS revision the go command recorded.
func TestVersionSources(t *testing.T) {
	withVCS := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "83f27c8abcdef0123456789"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tt := range []struct {
		name    string
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{"stamped by make", "v1.4.0-3-g83f27c8-dirty", withVCS, "v1.4.0-3-g83f27c8-dirty (83f27c8abcde, modified) "},
		{"go install module@version", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0 "},
		{"go install in a clone", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201120000-83f27c8abcde+dirty"}},
			"v0.0.0-20261201120000-83f27c8abcde+dirty "},
		{"revision only", "dev", withVCS, "dev (83f27c8abcde, modified) "},
		{"nothing known", "dev", nil, "dev "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionFrom(tt.stamped, tt.bi); !strings.HasPrefix(got, tt.want) {
				t.Errorf("versionFrom = %q, want prefix %q", got, tt.want)
			}
		})
	}
}
