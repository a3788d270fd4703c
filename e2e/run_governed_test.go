package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// runAgent scripts the fake's runs by their user text: "slow" waits until its context
// ends (a stop) or release closes; "fail" fails; anything else runs one tool and answers.
func runAgent(release <-chan struct{}) hermestest.Option {
	return hermestest.WithAgent(func(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
		switch {
		case strings.HasPrefix(turn.UserText, "slow"):
			select {
			case <-release:
			case <-ctx.Done():
			}
			return hermestest.Reply{Text: "slow done"}
		case strings.HasPrefix(turn.UserText, "fail"):
			return hermestest.Reply{Fail: "the model provider refused"}
		}
		return hermestest.Reply{Text: "two files", Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command":"ls"}`, Output: "a b"}}}
	})
}

// TestGovernedRun: one run action starts one run, republishes its lifecycle in order
// (tool events as tool, answer deltas as text, reasoning.available as thought without
// text) and settles with the run's status, output and usage; a duplicate publish with the
// same key replays it without a second run.
func TestGovernedRun(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, withFake(runAgent(release)))

	res, evs := h.call("run", map[string]any{"input": "list files"}, withKey("k-run-1"))
	checkRunEvents(t, res, evs, "two files")
	out := output(t, res)
	if jstr(out, "status") != "completed" || jstr(out, "output") != "two files" || jpath(out, "tools_ran") != true ||
		jpath(out, "events_complete") != true || jpath(out, "reattached") != false || jint(out, "event_count") != int64(len(evs)) ||
		!strings.HasPrefix(jstr(out, "run_id"), "run_") || jint(out, "usage", "total_tokens") == 0 {
		t.Fatalf("run output %s", res.Output)
	}
	requireEq(t, h.fake.RunsStartedFor("k-run-1"), 1, "runs started for the key: %d, want 1")

	// The same key again (another action id): the first run's result, no second run.
	res2 := h.callOK("run", map[string]any{"input": "list files"}, withKey("k-run-1"))
	if res2.ReplayOf == nil || *res2.ReplayOf != res.ActionID || h.fake.RunsStarted() != 1 {
		t.Fatalf("duplicate: replay_of %v, runs started %d", res2.ReplayOf, h.fake.RunsStarted())
	}

	// A run that fails ends failed with run_failed and the run's id.
	res, _ = h.call("run", map[string]any{"input": "fail now"}, withKey("k-run-fail"))
	e := requireFailed(t, res, "run_failed")
	if detail(e, "run_status") != "failed" || !strings.HasPrefix(detail(e, "run_id"), "run_") || e.Retryable {
		t.Fatalf("failed run: %s", errString(e))
	}
	// The key is required.
	res, _ = h.call("run", map[string]any{"input": "list files"})
	requireFailed(t, res, "idempotency_key_required")
}

// checkRunEvents checks a completed run's events: contiguous sequences, kinds by event
// name, text only from the answer's deltas, the last event run.completed.
func checkRunEvents(t *testing.T, res *events.Result, evs []*events.EventData, wantText string) {
	t.Helper()
	requireCompleted(t, res)
	var text strings.Builder
	var names []string
	for i, e := range evs {
		if e.Sequence != int64(i) {
			t.Fatalf("event %d has sequence %d", i, e.Sequence)
		}
		name := jstr(jsonValue(t, e.Event.Data), "event")
		names = append(names, name)
		want := map[string]string{"tool.started": "tool", "tool.completed": "tool", "message.delta": "data",
			"reasoning.available": "thought", "run.completed": "done"}[name]
		if want == "" {
			want = "progress"
		}
		if e.Kind != want {
			t.Errorf("event %d (%s): kind %s, want %s", i, name, e.Kind, want)
		}
		if name != "message.delta" && e.Text != "" {
			t.Errorf("event %d (%s) carries text %q", i, name, e.Text)
		}
		text.WriteString(e.Text)
	}
	if len(names) < 3 || names[0] != "tool.started" || names[len(names)-1] != "run.completed" {
		t.Fatalf("run event names %v", names)
	}
	if text.String() != wantText {
		t.Errorf("assembled text %q, want %q", text.String(), wantText)
	}
}

// TestGovernedRunCancelAndDeadline: a cancel request mid-run stops the run (POST /stop)
// and settles cancelled; a deadline mid-run stops it and settles deadline_exceeded.
func TestGovernedRunCancelAndDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, withFake(runAgent(release)))

	id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "slow cancel"}), IdempotencyKey: "k-cancel"})
	runID := h.waitRunStatus("k-cancel", "running")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := h.client.Cancel(ctx, id)
	if err != nil || reply.State != "cancelled" {
		t.Fatalf("cancel: %+v, %v", reply, err)
	}
	res, _ := h.follow(id)
	if res.Status != events.StatusCancelled || res.Error == nil || res.Error.Code != "cancelled" || detail(res.Error, "run_id") != runID {
		t.Fatalf("cancelled run: %s %s", res.Status, errString(res.Error))
	}
	if r, _ := h.fake.Run(runID); r.Status != "cancelled" {
		t.Fatalf("the fake's run is %q, want cancelled", r.Status)
	}
	requireEq(t, len(h.requests("run_stop")), 1, "stop requests: %d, want 1")

	id = h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "slow deadline"}), IdempotencyKey: "k-deadline",
		TimeoutMS: ptr(int64(1500))})
	res, _ = h.follow(id)
	e := requireFailed(t, res, "deadline_exceeded")
	if detail(e, "run_status") != "cancelled" {
		t.Fatalf("deadline: %s", errString(e))
	}
}

// waitRunStatus waits until the fake's run started with key has status, and returns its id.
func (h *harness) waitRunStatus(key, status string) string {
	h.t.Helper()
	var id string
	h.eventually(10*time.Second, func() error {
		for _, rid := range h.fake.RunIDs() {
			if r, ok := h.fake.Run(rid); ok && r.IdempotencyKey == key && r.Status == status {
				id = rid
				return nil
			}
		}
		return fmt.Errorf("no run with key %s in status %s", key, status)
	})
	return id
}
