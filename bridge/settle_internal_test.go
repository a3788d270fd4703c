package bridge

import (
	"context"
	"testing"
	"time"
)

// TestSettleContext: the writes that end an action outlive shutdown and get at least
// settleFor, or until the action's deadline when that is later.
func TestSettleContext(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	stop() // shutdown already began
	for _, tc := range []struct {
		name     string
		deadline time.Time
		want     time.Duration
	}{
		{"deadline passed", time.Now().Add(-time.Minute), settleFor},
		{"deadline sooner than settleFor", time.Now().Add(time.Second), settleFor},
		{"deadline later", time.Now().Add(5 * time.Minute), 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := settleContext(parent, tc.deadline)
			defer cancel()
			if ctx.Err() != nil {
				t.Fatalf("the settle context is done at once: %v", ctx.Err())
			}
			end, ok := ctx.Deadline()
			if !ok {
				t.Fatal("no deadline")
			}
			if got := time.Until(end); got > tc.want || got < tc.want-5*time.Second {
				t.Errorf("deadline in %s, want about %s", got, tc.want)
			}
		})
	}
}
