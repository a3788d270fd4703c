package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/e2e/owned"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// bridgeLabel is the pprof label that names the replica a goroutine belongs to: each
// bridge runs under it (startBridge), and goroutines inherit their creator's labels.
const bridgeLabel = "e2e.bridge"

// bridgeGoroutines counts the goroutines alive now that belong to bridge replica.
func bridgeGoroutines(t *testing.T, replica string) int {
	t.Helper()
	n, err := owned.Goroutines(bridgeLabel, replica)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStreamGoroutinesPerStream: a chat_stream in flight costs the bridge at most three
// goroutines, whatever the number of streams: the worker of its delivery, which reads
// the stream and publishes its events, and the HTTP transport's reader and writer of
// its connection; no goroutine per call, per wait, per timer or per publisher. Counted
// by the replica's pprof label with 20 and then 100 streams held open by the fake
// after their first event: (count at 100 - count at 20) / 80.
func TestStreamGoroutinesPerStream(t *testing.T) {
	t.Parallel()
	const few, many, perStream = 20, 100, 3
	gate := make(chan struct{})
	hold := func(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return hermestest.Reply{Text: "held"}
	}
	h := newHarness(t, withFake(hermestest.WithAgent(hold), hermestest.WithMaxConcurrentRuns(0)),
		withConfig(func(c *bridge.Config) {
			c.AckWait = 30 * time.Second // heartbeats every 10 s: none while the streams are counted
			c.Workers = many
			c.Endpoints[0].MaxConcurrency = many
		}))
	defer close(gate) // before the harness's cleanups stop the bridge and the fake

	// held publishes streams until n are in flight at the fake and returns the bridge's
	// goroutines once their count is steady (the first events are republished).
	var ids []string
	held := func(n int) int {
		t.Helper()
		for len(ids) < n {
			ids = append(ids, h.publish("chat_stream", events.Action{Input: mustJSON(t, map[string]string{"prompt": "hold"})}))
		}
		h.until(60*time.Second, fmt.Sprintf("%d streams in flight", n), func() bool { return h.fake.InFlight() == n })
		last, steady := -1, 0
		h.until(30*time.Second, "a steady goroutine count", func() bool {
			g := bridgeGoroutines(t, "r0")
			if g == last {
				steady++
			} else {
				last, steady = g, 0
			}
			return steady >= 100 // the same for 1 s: under a loaded make test, 100 ms was not steady
		})
		return last
	}
	idle := bridgeGoroutines(t, "r0")
	atFew := held(few)
	atMany := held(many)
	per := float64(atMany-atFew) / (many - few)
	t.Logf("bridge goroutines: %d idle, %d with %d streams, %d with %d: %.2f per stream", idle, atFew, few, atMany, many, per)
	if per > perStream || per < 1 {
		t.Errorf("%.2f bridge goroutines per stream in flight, want at least 1 and at most %d", per, perStream)
	}
}
