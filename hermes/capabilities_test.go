package hermes_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// serveFakeAt starts fake on addr ("127.0.0.1:0" for any port; hermestest's StartAt) and
// returns the address it listens on and its Close (also run at the test's end).
func serveFakeAt(t *testing.T, addr string, fake *hermestest.Server) (string, func()) {
	t.Helper()
	if err := fake.StartAt(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	return strings.TrimPrefix(fake.URL, "http://"), fake.Close
}

// TestCapabilitiesNoticesUpgrade: an endpoint restarted on the same address as a newer
// Hermes (0.19 without runs idempotency, then 0.21.3 with durable runs idempotency) is
// seen as durable by the same client once the capabilities TTL has passed, and not
// before (the answer is cached).
func TestCapabilitiesNoticesUpgrade(t *testing.T) {
	old := hermestest.NewUnstartedServer()
	addr, stop := serveFakeAt(t, "127.0.0.1:0", old)
	const ttl = 300 * time.Millisecond
	c, err := hermes.New("http://"+addr, hermes.WithAPIKey(old.APIKey()), hermes.WithCapabilitiesTTL(ttl))
	noErr(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	caps, err := c.Capabilities(ctx)
	noErr(t, err)
	if caps.DurableRunIdempotency() {
		t.Fatal("0.19 advertises durable runs idempotency")
	}
	read := time.Now()
	stop()
	newer := hermestest.NewUnstartedServer(hermestest.WithVersion(hermestest.Version021))
	serveFakeAt(t, addr, newer)
	// Within the TTL the cached answer stands (no request reaches the new server).
	caps, err = c.Capabilities(ctx)
	noErr(t, err)
	if time.Since(read) < ttl && (caps.DurableRunIdempotency() || newer.Calls("capabilities") != 0) {
		t.Fatalf("read again within the TTL: durable %v, %d requests", caps.DurableRunIdempotency(), newer.Calls("capabilities"))
	}
	for !caps.DurableRunIdempotency() {
		if ctx.Err() != nil {
			t.Fatal("the upgraded endpoint was never seen as durable")
		}
		time.Sleep(ttl / 10)
		caps, err = c.Capabilities(ctx)
		noErr(t, err)
	}
	if d := time.Since(read); d < ttl {
		t.Fatalf("the upgrade was seen after %v, before the TTL %v", d, ttl)
	}
}

// TestCapabilitiesOneFetchInFlight: many concurrent readers of a cold cache cause one
// request; a failed read is not kept for long (a later reader asks again and succeeds).
func TestCapabilitiesOneFetchInFlight(t *testing.T) {
	fake, c := fakeServer(t, hermestest.WithVersion(hermestest.Version021))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var durable atomic.Int32
	for range 32 {
		wg.Go(func() {
			caps, err := c.Capabilities(ctx)
			if err == nil && caps.DurableRunIdempotency() {
				durable.Add(1)
			}
		})
	}
	wg.Wait()
	if n := fake.Calls("capabilities"); n != 1 || durable.Load() != 32 {
		t.Fatalf("%d requests for 32 concurrent readers (want 1), %d saw durable", n, durable.Load())
	}

	// An endpoint that is down: the failure is answered, then asked again.
	fake2 := hermestest.NewUnstartedServer(hermestest.WithVersion(hermestest.Version021))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	noErr(t, err)
	addr := l.Addr().String()
	noErr(t, l.Close())
	c2, err := hermes.New("http://"+addr, hermes.WithAPIKey(fake2.APIKey()))
	noErr(t, err)
	if _, err := c2.Capabilities(ctx); err == nil {
		t.Fatal("capabilities of a closed port: no error")
	}
	serveFakeAt(t, addr, fake2)
	var caps *hermes.Capabilities
	for caps == nil {
		if ctx.Err() != nil {
			t.Fatal("a failed read was kept: the endpoint, up again, was never read")
		}
		time.Sleep(50 * time.Millisecond)
		caps, _ = c2.Capabilities(ctx)
	}
	if !caps.DurableRunIdempotency() {
		t.Fatal("0.21.3 not durable")
	}

	// A caller whose context ends stops waiting; the read goes on for the others.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	c3, err := hermes.New(fake.URL, hermes.WithAPIKey(fake.APIKey()))
	noErr(t, err)
	if _, err := c3.Capabilities(cctx); !errors.Is(err, context.Canceled) {
		var he *hermes.Error
		if !errors.As(err, &he) || he.Code != hermes.CodeCancelled {
			t.Fatalf("a cancelled caller: %v", err)
		}
	}
	if caps, err := c3.Capabilities(ctx); err != nil || !caps.DurableRunIdempotency() {
		t.Fatalf("after a cancelled caller: %v", err)
	}
}
