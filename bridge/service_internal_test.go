package bridge

import "testing"

func TestServiceVersion(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-rc.1 (0123456789ab) go1.26.0 linux/amd64", "1.2.3-rc.1"},
		{"v0.4.1-0.20261201120000-0123456789ab", "0.4.1-0.20261201120000-0123456789ab"},
		{"1.0.0+build.7", "1.0.0+build.7"},
		{"dev (0123456789ab, modified) go1.26.0 linux/amd64", "0.0.0-dev"},
		{"3a0550e-dirty", "0.0.0-dev"},
		{"", "0.0.0-dev"},
		{"v1.2", "0.0.0-dev"},
	} {
		if got := serviceVersion(tt.in); got != tt.want {
			t.Errorf("serviceVersion(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
