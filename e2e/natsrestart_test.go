package e2e_test

import (
	"testing"
	"time"
)

// TestNATSRestartMidLoad: two bridge processes run on a NATS server with file storage
// that restarts twice while a few hundred mixed actions are in flight and still being
// published (the publisher retries with the same Nats-Msg-Id). The bridges reconnect;
// every action settles exactly once, no unsafe call is duplicated, events stay
// contiguous, and nothing published before or during an outage is lost.
func TestNATSRestartMidLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bridge processes across NATS restarts: skipped in -short mode")
	}
	fig := runLoad(t, loadSpec{
		Name:          "nats-restart",
		Tag:           "nr",
		Actions:       400,
		Rate:          100,
		Publishers:    8,
		Replicas:      2,
		Workers:       8,
		Deltas:        6,
		Delay:         30 * time.Millisecond,
		NATSRestartAt: []float64{0.25, 0.6},
		Settle:        90 * time.Second,
	})
	wantEq(t, fig.NATSRestarts, 2, "%d NATS restarts, want 2")
	for i, n := range fig.Reconnects {
		if n != fig.NATSRestarts {
			t.Errorf("bridge process %d logged %d reconnects, want %d", i+1, n, fig.NATSRestarts)
		}
	}
}
