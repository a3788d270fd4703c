package e2e_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// The terminal result message of an action carries the optional Hermes-Bridge-Duration-Ms
// header (milliseconds from the action's publish to its result), outside the CloudEvent
// attributes; the pending_approval result does not, nor does a result settled by an
// approval decision (its delivery is the decision, not the action).
func TestResultDurationHeader(t *testing.T) {
	h := newHarness(t)
	res := h.callOK("chat", map[string]any{"prompt": "how long"})
	s, err := h.js.Stream(context.Background(), "HERMES_OUTPUT")
	requireOK(t, err)
	last := func(id string) jetstream.RawStreamMsg {
		t.Helper()
		m, err := s.GetLastMsgForSubject(context.Background(), "hermes.results."+id)
		requireOK(t, err)
		return *m
	}
	m := last(res.ActionID)
	v := m.Header.Get(events.HeaderDurationMs)
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || ms > 30_000 {
		t.Fatalf("%s = %q on the result, want milliseconds", events.HeaderDurationMs, v)
	}
	for k := range m.Header {
		if k == "ce-duration" || k == "ce-durationms" {
			t.Fatalf("duration leaked into the CloudEvent attributes: %v", m.Header)
		}
	}

	// A parked deletion: no header on its pending result, nor on the result its decision
	// settles.
	input := mustJSON(t, map[string]any{"session_id": "sess-duration"})
	id := h.publish("session_delete", events.Action{Input: input, IdempotencyKey: "duration-del"})
	p := h.pendingOf(id)
	if p.Status != events.StatusPendingApproval {
		t.Fatalf("pending %+v", p)
	}
	if v := last(id).Header.Get(events.HeaderDurationMs); v != "" {
		t.Fatalf("pending result has %s: %s", events.HeaderDurationMs, v)
	}
	hash, err := events.InputSHA256(input)
	requireOK(t, err)
	requireOK(t, h.client.Decide(context.Background(), id, events.Approval{Decision: events.DecisionDeny, Approver: "t", InputSHA256: hash}))
	if r, _ := h.follow(id); r.Status != events.StatusFailed {
		t.Fatalf("denied %+v", r)
	}
	if v := last(id).Header.Get(events.HeaderDurationMs); v != "" {
		t.Fatalf("result settled by a decision has %s: %s", events.HeaderDurationMs, v)
	}
}
