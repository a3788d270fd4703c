package e2e_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestZombieOwnerNeverSends (issue 11, findings 6 and 12): a replica freezes (SIGSTOP,
// heartbeats and all) before it sent an unsafe chat, and another replica runs the
// action; when the frozen replica is thawed it never sends. Two places, with and
// without an idempotency key:
//   - at the start: the first delivery freezes right before its one-write start
//     (kvstore.Ledger.Start); the taker starts the action itself, and the thawed
//     replica's Create is refused: it finds the result and logs duplicate:.
//   - after a claim: the first delivery is refused by Hermes (a 429, certain
//     non-execution) and released; the retry claims the record on the ordinary path
//     and freezes right after that claim (its third pass of the claimed point: the
//     first start, the retry's start, its claim). The taker takes the record over once
//     its revision has stood still for the lease and sends; the thawed replica's mark
//     (a compare-and-set on the revision it held) fails: it logs taken_over. The key
//     claim does not fence; the mark does.
func TestZombieOwnerNeverSends(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, key, stopAt, status string
		refuseFirst               bool
	}{
		{name: "at the start/unkeyed", stopAt: "claimed:1:stop", status: "duplicate:"},
		{name: "at the start/keyed", key: "k-zombie", stopAt: "claimed:1:stop", status: "duplicate:"},
		{name: "after a claim/unkeyed", stopAt: "claimed:3:stop", status: "taken_over", refuseFirst: true},
		{name: "after a claim/keyed", key: "k-zombie", stopAt: "claimed:3:stop", status: "taken_over", refuseFirst: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, withoutBridge())
			calls := 1
			if c.refuseFirst {
				h.fake.InjectFault(hermestest.Fault{Route: "chat", Status: 429})
				calls = 2 // the refusal and the send
			}
			zombie := h.startProc(fastRecovery(), withEnv("HERMES_BRIDGE_CRASH_AT", c.stopAt))
			id := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"zombie"}`), IdempotencyKey: c.key})
			zombie.waitLog(30*time.Second, "stopping the process at claimed")
			taker := h.startProc(fastRecovery())
			h.followOK(id)
			if n := h.fake.Calls("chat"); n != calls {
				t.Fatalf("chat calls %d before the thaw, want %d", n, calls)
			}
			requireOK(t, zombie.cmd.Process.Signal(syscall.SIGCONT))
			if c.status == "taken_over" {
				zombie.waitLog(20*time.Second, "the claim was taken over by another delivery")
			}
			h.waitIdle(30 * time.Second)
			if n := h.fake.Calls("chat"); n != calls {
				t.Errorf("chat calls %d after the thaw, want %d (the zombie must not send)", n, calls)
			}
			wantEq(t, h.results(id), 1, "%d result messages, want 1")
			// Its job's one line is written when the job returns: poll for it.
			h.eventually(20*time.Second, func() error {
				for _, l := range zombie.actionLines(id) {
					if strings.HasPrefix(l.str("status"), c.status) && l.num("delivery") == zombieDelivery(c.refuseFirst) {
						return nil
					}
				}
				return fmt.Errorf("the zombie logged no %s line for its frozen delivery: %v", c.status, zombie.actionLines(id))
			})
			for _, l := range zombie.actionLines(id) {
				// A redelivery it got after the thaw finds the result (duplicate:...); the
				// refused first delivery retried.
				st := l.str("status")
				if st != c.status && !strings.HasPrefix(st, "duplicate:") && !(c.refuseFirst && st == "retrying") {
					t.Errorf("the zombie logged status %q for the action, want %s (or duplicate:)", st, c.status)
				}
			}
			for _, l := range taker.actionLines(id) {
				if st := l.str("status"); !strings.HasPrefix(st, "completed") {
					t.Errorf("the taker logged status %q, want completed", st)
				}
			}
		})
	}
}

// zombieDelivery is the delivery the zombie froze in: its first, or its retry's.
func zombieDelivery(refuseFirst bool) float64 {
	if refuseFirst {
		return 2
	}
	return 1
}
