package e2e_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// TestZombieOwnerNeverSends (issue 11, findings 6 and 12): a replica freezes (SIGSTOP,
// heartbeats and all) right after it claimed an unsafe chat and before it sent it;
// another replica takes the action over once the claim's revision has stood still for
// the lease, and sends it. When the frozen replica is thawed it finds its claim taken
// over at its next compare-and-set: it neither sends nor settles. With and without an
// idempotency key (the key claim does not fence; the dispatched mark does).
func TestZombieOwnerNeverSends(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"", "k-zombie"} {
		name := "unkeyed"
		if key != "" {
			name = "keyed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, withoutBridge())
			zombie := h.startProc(fastRecovery(), withEnv("HERMES_BRIDGE_CRASH_AT", "claimed:1:stop"))
			id := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"zombie"}`), IdempotencyKey: key})
			zombie.waitLog(30*time.Second, "stopping the process at claimed")
			taker := h.startProc(fastRecovery())
			res, _ := h.follow(id)
			requireCompleted(t, res)
			if n := h.fake.Calls("chat"); n != 1 {
				t.Fatalf("chat calls %d before the thaw, want 1", n)
			}
			if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			zombie.waitLog(20*time.Second, "the claim was taken over by another delivery")
			h.waitIdle(30 * time.Second)
			if n := h.fake.Calls("chat"); n != 1 {
				t.Errorf("chat calls %d after the thaw, want 1 (the zombie must not send)", n)
			}
			if n := h.results(id); n != 1 {
				t.Errorf("%d result messages, want 1", n)
			}
			// Its job's one line is written when the job returns, just after the log line
			// waited for above: poll for it.
			h.eventually(10*time.Second, func() error {
				for _, l := range zombie.actionLines(id) {
					if l.str("status") == "taken_over" {
						return nil
					}
				}
				return fmt.Errorf("the zombie logged no taken_over line: %v", zombie.actionLines(id))
			})
			for _, l := range zombie.actionLines(id) {
				// A redelivery it got after the thaw finds the result (duplicate:...).
				if st := l.str("status"); st != "taken_over" && !strings.HasPrefix(st, "duplicate:") {
					t.Errorf("the zombie logged status %q for the action, want taken_over (or duplicate:)", st)
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
