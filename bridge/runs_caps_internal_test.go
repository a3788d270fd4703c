package bridge

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// serveFake starts fake on addr ("127.0.0.1:0" for any port; hermestest's StartAt) and
// returns the address it listens on and its Close (also run at the test's end).
func serveFake(t *testing.T, addr string, fake *hermestest.Server) (string, func()) {
	t.Helper()
	if err := fake.StartAt(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	return strings.TrimPrefix(fake.URL, "http://"), fake.Close
}

// syncBuffer is a log sink safe for the driver's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunCapabilitiesNoticeUpgrade: the endpoint restarts on the same address as a newer
// Hermes (0.19 without runs idempotency, then 0.21.3 with durable runs idempotency)
// under a running bridge. The bridge's RunCapabilities answer (what a takeover of an
// unbound run decides on) turns durable once CapabilitiesTTL has passed, without a
// restart of the bridge, and the change is logged.
func TestRunCapabilitiesNoticeUpgrade(t *testing.T) {
	ns := natsembed.RunTest(t)
	nc, _ := natsembed.Connect(t, ns)
	old := hermestest.NewUnstartedServer()
	addr, stop := serveFake(t, "127.0.0.1:0", old)

	cfg := validConfig()
	cfg.Endpoints[0].BaseURL = "http://" + addr
	key := old.APIKey()
	cfg.Endpoints[0].Key = func() string { return key }
	const ttl = 300 * time.Millisecond
	cfg.CapabilitiesTTL = ttl
	var logs syncBuffer
	b, err := New(nc, cfg, zerolog.New(&logs))
	noErr(t, err)
	durable := func() bool {
		t.Helper()
		d := b.newDriver(core.KindAction, "a1", nil, nil)
		d.act.endpointID = "primary"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ev := d.runOp(ctx, &core.RunRequest{Op: core.RunCapabilities})
		if ev.Status != core.OK {
			t.Fatalf("capabilities: status %v", ev.Status)
		}
		return ev.Run.Durable
	}
	if durable() {
		t.Fatal("0.19 without runs idempotency: durable")
	}
	read := time.Now()
	stop()
	serveFake(t, addr, hermestest.NewUnstartedServer(hermestest.WithVersion(hermestest.Version021)))
	deadline := time.Now().Add(20 * time.Second)
	for !durable() {
		if time.Now().After(deadline) {
			t.Fatal("the upgraded endpoint was never seen as durable")
		}
		time.Sleep(ttl / 10)
	}
	if d := time.Since(read); d < ttl {
		t.Fatalf("the upgrade was seen after %v, before the TTL %v: capabilities are not cached", d, ttl)
	}
	if !strings.Contains(logs.String(), "the endpoint's advertised runs idempotency changed") {
		t.Fatalf("the change was not logged: %s", logs.String())
	}
}
