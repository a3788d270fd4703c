package e2e_test

import (
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// TestKillAfterDispatchNeverResends: the real binary SIGKILLs itself right after it
// recorded an unsafe chat as dispatched; a fresh process settles the redelivered action
// failed/outcome_unknown without calling Hermes again.
func TestKillAfterDispatchNeverResends(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutBridge())
	p := h.startProc(crashAt("dispatched", 1))
	id := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"send the report"}`)})
	if killed, _ := p.waitExit(30 * time.Second); !killed {
		t.Fatalf("the bridge was not killed at the dispatched point")
	}
	h.startProc()
	res, _ := h.follow(id)
	e := requireFailed(t, res, "outcome_unknown")
	if !e.UncertainOutcome {
		t.Errorf("uncertain_outcome false")
	}
	if c := h.fake.Calls("chat"); c > 1 {
		t.Errorf("chat calls %d, want at most 1", c)
	}
	h.waitIdle(20 * time.Second)
	if n := h.results(id); n != 1 {
		t.Errorf("%d result messages, want 1", n)
	}
}
