package e2e_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// runBridgeOnce runs a bridge with h's configuration until it has started or Run
// returned, and returns Run's error (nil: it started and was stopped).
func (h *harness) runBridgeOnce() error {
	h.t.Helper()
	nc, _ := natsembed.Connect(h.t, h.ns)
	logs := &syncBuffer{}
	b, err := bridge.New(nc, h.cfg, zerolog.New(io.MultiWriter(logs, h.logs)))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case err := <-done:
			return err
		case <-deadline:
			h.t.Fatal("the bridge neither started nor failed within 15s")
		case <-time.After(20 * time.Millisecond):
			if strings.Contains(logs.String(), `"message":"bridge started"`) {
				cancel()
				return <-done
			}
		}
	}
}

// TestOutputStreamBindRefusals: a bridge that binds an output stream it did not
// provision refuses one the result log cannot rely on, naming what to change: a byte
// limit that discards old messages (it could discard a result a key refers to) and
// direct gets (a follower could answer a read of the result log from behind).
// Provisioning then repairs the stream, and a bridge binds it again.
func TestOutputStreamBindRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		change func(*jetstream.StreamConfig)
		want   string
	}{
		{"discard_old", func(sc *jetstream.StreamConfig) {
			sc.MaxBytes, sc.Discard = 1<<20, jetstream.DiscardOld
		}, "discards its oldest messages"},
		{"allow_direct", func(sc *jetstream.StreamConfig) { sc.AllowDirect = true }, "allows direct gets"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.stopBridge(0)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			name := h.cfg.WithDefaults().OutputStream
			s, err := h.js.Stream(ctx, name)
			requireOK(t, err)
			sc := s.CachedInfo().Config
			c.change(&sc)
			if _, err := h.js.UpdateStream(ctx, sc); err != nil {
				t.Fatalf("update the output stream: %v", err)
			}

			h.cfg.Provision = false
			err = h.runBridgeOnce()
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), name) {
				t.Fatalf("binding the changed stream: %v; want an error naming %s and %q", err, name, c.want)
			}

			h.cfg.Provision = true
			requireOK(t, h.runBridgeOnce(), "provisioning did not repair the stream: %v")
			h.cfg.Provision = false
			requireOK(t, h.runBridgeOnce(), "binding the provisioned stream: %v")
		})
	}
}
