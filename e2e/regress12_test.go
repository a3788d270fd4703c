package e2e_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// TestRegress12ResultStoredAcrossOutage (issue 12, finding 4): Hermes has answered an
// unsafe chat and the NATS server goes down just before the bridge stores the result,
// for two seconds. The replica keeps its claim and retries the append until the server
// is back: the action ends completed (not outcome_unknown), with one Hermes call and one
// result message.
func TestRegress12ResultStoredAcrossOutage(t *testing.T) {
	const id = "regress12-outage"
	var h *harness
	var fired atomic.Bool
	restarted := make(chan error, 1)
	h = newHarness(t, withConfig(func(c *bridge.Config) {
		c.Hook = func(p bridge.Point, actionID string) {
			if p != bridge.PointStored || actionID != id || !fired.CompareAndSwap(false, true) {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.ns.Shutdown(ctx); err != nil {
				t.Errorf("shutdown NATS: %v", err)
			}
			go func() {
				time.Sleep(2 * time.Second) // the outage
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				restarted <- h.ns.Restart(ctx)
			}()
		}
	}))
	h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"answered before the outage"}`), IdempotencyKey: "r12-outage"},
		client.WithActionID(id))
	select {
	case err := <-restarted:
		requireOK(t, err, "restart NATS: %v")
	case <-time.After(60 * time.Second):
		t.Fatal("the hook never fired, or NATS did not come back within 60s")
	}
	res, err := h.followBy(id, time.Now().Add(60*time.Second))
	requireOK(t, err, "follow: %v")
	requireCompleted(t, res)
	wantEq(t, h.fake.Calls("chat"), 1, "%d chat calls, want 1")
	h.requireResults(1, 20*time.Second, id)
}

// TestRegress12AckPendingRoomForReplicas (issue 12, finding 5): by default the shared
// consumer leaves room for several replicas at full concurrency; a limit that only one
// replica's deliveries fit in is warned about at start.
func TestRegress12AckPendingRoomForReplicas(t *testing.T) {
	t.Parallel()
	const warning = "the consumer's max ack pending is less than two replicas hold"
	h := newHarness(t)
	info, err := h.js.Consumer(context.Background(), "HERMES_ACTIONS", "hermes-bridge")
	requireOK(t, err)
	ci, err := info.Info(context.Background())
	requireOK(t, err)
	if want := bridge.DefaultMaxAckPending(h.cfg.Endpoints[0].MaxConcurrency); ci.Config.MaxAckPending != want {
		t.Errorf("default max ack pending %d, want %d", ci.Config.MaxAckPending, want)
	}
	if held := bridge.HeldPerReplica(h.cfg.Endpoints[0].MaxConcurrency); ci.Config.MaxAckPending < 8*held {
		t.Errorf("default max ack pending %d has no room for 8 replicas holding %d each", ci.Config.MaxAckPending, held)
	}
	if strings.Contains(h.logs.String(), warning) {
		t.Errorf("the default limit was warned about")
	}

	tight := newHarness(t, withConfig(func(c *bridge.Config) { c.Workers = 10; c.MaxAckPending = 10 }))
	if !strings.Contains(tight.logs.String(), warning) {
		t.Errorf("no warning for max ack pending 10 with 10 workers; logs:\n%s", truncate(tight.logs.String(), 3000))
	}
}
