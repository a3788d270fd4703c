package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestRunOperations: the five run operations through NATS only, against the fake:
// run_start answers the run id at once, run_status polls it to its end, run_events
// republishes its lifecycle (on a run nobody subscribed to yet), and run_approval and
// run_stop (both need a bridge approval) reach Hermes.
func TestRunOperations(t *testing.T) {
	release := make(chan struct{})
	agent := func(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
		switch turn.UserText {
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
			}
			return hermestest.Reply{Text: "slow done"}
		case "approve me":
			return hermestest.Reply{Text: "cleaned", Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command":"rm -rf build/"}`,
				Output: "ok", Approval: &hermestest.Approval{Command: "rm -rf build/"}}}}
		}
		return hermestest.Reply{Text: "two files", Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command":"ls"}`, Output: "a b"}}}
	}
	h := newHarness(t, withFake(hermestest.WithAgent(agent)))
	defer close(release)

	start := func(text, key string) string {
		t.Helper()
		res := h.callOK("run_start", map[string]any{"input": text}, withKey(key))
		out := output(t, res)
		id := jstr(out, "run_id")
		if id == "" || jstr(out, "status") != "started" {
			t.Fatalf("run_start output %s", res.Output)
		}
		return id
	}

	// run_start needs a key.
	res, _ := h.call("run_start", map[string]any{"input": "x"})
	requireFailed(t, res, "idempotency_key_required")

	// run_events on a fresh run: the whole lifecycle, in order, ending with run.completed.
	id := start("list files", "k-events")
	res, evs := h.call("run_events", map[string]any{"run_id": id})
	checkStream(t, res, evs, "run_events", "two files")
	var names []string
	for _, e := range evs {
		names = append(names, jstr(jsonValue(t, e.Event.Data), "event")) // run events carry their name in the data
	}
	if got := names; len(got) < 3 || got[0] != "tool.started" || got[len(got)-1] != "run.completed" {
		t.Fatalf("run_events names %v", got)
	}

	// run_status of the finished run.
	res = h.callOK("run_status", map[string]any{"run_id": id})
	if out := output(t, res); jstr(out, "status") != "completed" || jstr(out, "output") != "two files" {
		t.Fatalf("run_status output %s", res.Output)
	}
	// A second subscription to the events: the queue is gone (404 run_not_found).
	res, _ = h.call("run_events", map[string]any{"run_id": id})
	if e := requireFailed(t, res, "remote_rejected"); detail(e, "remote_code") != "run_not_found" || e.HTTPStatus != 404 {
		t.Fatalf("second run_events: %s", errString(e))
	}

	// run_stop needs a bridge approval; pre-approved, it stops a live run.
	slow := start("slow", "k-slow")
	stop := func(a *events.Action) { a.IdempotencyKey = "k-stop"; preApproved(a) }
	res = h.callOK("run_stop", map[string]any{"run_id": slow}, stop)
	if out := output(t, res); jstr(out, "status") != "stopping" {
		t.Fatalf("run_stop output %s", res.Output)
	}
	h.eventually(10*time.Second, func() error {
		return statusIs(h, slow, "cancelled")
	})

	// run_approval answers a pending tool approval.
	ap := start("approve me", "k-ap")
	h.eventually(10*time.Second, func() error {
		if r, ok := h.fake.Run(ap); !ok || r.PendingApprovals != 1 {
			return fmt.Errorf("run %s: pending approvals %+v", ap, r)
		}
		return nil
	})
	decide := func(a *events.Action) { a.IdempotencyKey = "k-decide"; preApproved(a) }
	res = h.callOK("run_approval", map[string]any{"run_id": ap, "choice": "once"}, decide)
	if out := output(t, res); jstr(out, "choice") != "once" || jint(out, "resolved") != 1 {
		t.Fatalf("run_approval output %s", res.Output)
	}
	h.eventually(10*time.Second, func() error { return statusIs(h, ap, "completed") })
	if n := h.fake.ToolRuns("terminal"); n < 2 {
		t.Fatalf("tool runs %d, want the approved one too", n)
	}
}

// statusIs reads a run's status through the fake.
func statusIs(h *harness, id, want string) error {
	r, ok := h.fake.Run(id)
	if !ok || r.Status != want {
		return fmt.Errorf("run %s: status %q, want %q", id, r.Status, want)
	}
	return nil
}
