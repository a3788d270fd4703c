package bridge

import (
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

func TestServiceVersion(t *testing.T) {
	nc, _ := natsembed.Connect(t, natsembed.RunTest(t))
	for _, tt := range []struct{ in, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-rc.1 (0123456789ab) go1.26.0 linux/amd64", "1.2.3-rc.1"},
		{"v0.4.1-0.20261201120000-0123456789ab", "0.4.1-0.20261201120000-0123456789ab"},
		{"1.0.0+build.7", "1.0.0+build.7"},
		{"dev (0123456789ab, modified) go1.26.0 linux/amd64", "0.0.0-dev"},
		{"3a0550e-dirty", "0.0.0-dev"},
		{"", "0.0.0-dev"},
		{"v1.2", "0.0.0-dev"},
		{"v1.2.3-4-g0123abc-dirty", "1.2.3-4-g0123abc-dirty"},
		{"v1.2.3-01", "0.0.0-dev"},   // a numeric pre-release with a leading zero: not semver
		{"v1.2.3-a..b", "0.0.0-dev"}, // an empty identifier
	} {
		got := serviceVersion(tt.in)
		if got != tt.want {
			t.Errorf("serviceVersion(%q) = %q, want %q", tt.in, got, tt.want)
		}
		// micro accepts whatever serviceVersion returns.
		svc, err := micro.AddService(nc, micro.Config{Name: "v", Version: got})
		if err != nil {
			t.Errorf("micro refuses %q: %v", got, err)
			continue
		}
		_ = svc.Stop()
	}
}
