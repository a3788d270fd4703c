package e2e_test

// Regression tests for issue 11 (approvals, cancellation of approved actions, duplicate
// result messages, approval CloudEvent ids). Black-box: they talk to the bridge through
// NATS only and look at Hermes through the fake's records.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// ---- helpers (issue 11) ----

// liveTap is a core NATS subscription (not JetStream) that records every message
// published on one subject, duplicates the stream would discard included.
type liveTap struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

// tap subscribes to subject on the test's own connection and waits until the server
// knows the subscription, so nothing published afterwards is missed.
func (h *harness) tap(subject string) *liveTap {
	h.t.Helper()
	lt := &liveTap{}
	sub, err := h.nc.Subscribe(subject, func(m *nats.Msg) {
		lt.mu.Lock()
		lt.msgs = append(lt.msgs, m)
		lt.mu.Unlock()
	})
	if err != nil {
		h.t.Fatalf("subscribe %s: %v", subject, err)
	}
	h.t.Cleanup(func() { _ = sub.Unsubscribe() })
	requireOK(h.t, h.nc.FlushTimeout(5*time.Second), "flush: %v")
	return lt
}

func (lt *liveTap) count() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return len(lt.msgs)
}

// ids returns the CloudEvent id (ce-id header, any case) of every message seen.
func (lt *liveTap) ids() []string {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	out := make([]string, 0, len(lt.msgs))
	for _, m := range lt.msgs {
		out = append(out, headerFold(m.Header, "ce-id"))
	}
	return out
}

// countID counts the messages whose CloudEvent id is id.
func (lt *liveTap) countID(id string) int {
	n := 0
	for _, x := range lt.ids() {
		if x == id {
			n++
		}
	}
	return n
}

// headerFold reads a header value whatever the case of its name.
func headerFold(h nats.Header, name string) string {
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// quiet waits (polling, bounded by max) until lt has seen no new message for window.
func (h *harness) quiet(lt *liveTap, window, max time.Duration) {
	h.t.Helper()
	last, since := lt.count(), time.Now()
	h.until(max, "a quiet window", func() bool {
		if n := lt.count(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= window
	})
}

// publishCopy publishes action a for op under action id id as its own stream message,
// built the way client.Client builds a binary-mode action, with Nats-Msg-Id msgID (so
// that the stream's duplicate window does not merge copies of one action).
func (h *harness) publishCopy(op, id, msgID string, a events.Action) {
	h.t.Helper()
	data, err := json.Marshal(a)
	requireOK(h.t, err)
	hdr := binaryHeader(id, events.TypeAction, events.CapabilityID("primary", op))
	hdr.Set("ce-source", client.DefaultSource)
	hdr.Set(nats.MsgIdHdr, msgID)
	h.publishRaw("hermes.actions.primary."+op, hdr, data)
}

// terminalWithin follows id until its terminal result, for at most d; it does not fail
// the test by itself.
func (h *harness) terminalWithin(id string, d time.Duration) (*events.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return h.client.Follow(ctx, id, nil, nil)
}

// recordState returns the state of the action record of id ("<absent: err>" when it
// cannot be read).
func (h *harness) recordState(id string) string {
	store, err := kvstore.Open(context.Background(), h.js, kvstore.Config{Bucket: "HERMES_IDEMPOTENCY"})
	if err != nil {
		return "<store: " + err.Error() + ">"
	}
	e, err := store.Get(context.Background(), kvstore.ActionKey(id))
	if err != nil {
		return "<absent: " + err.Error() + ">"
	}
	return string(e.Record.State)
}

// ---- tests ----

// TestRegress11ApprovedRetryAfter429 (finding 1): an approved deletion whose first
// DELETE is refused by Hermes's concurrency gate (429 rate_limit_exceeded: certain
// non-execution) is retried and completes; Hermes sees the 429'd DELETE and exactly one
// more.
func TestRegress11ApprovedRetryAfter429(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) { c.ApprovalTTL = time.Minute }))
	id, out := parkedDelete(t, h, "r11-429", "r11-429")
	// The gate's own answer: 429, code rate_limit_exceeded, Retry-After: 1.
	h.fake.InjectFault(hermestest.Fault{Route: "session_delete", Status: http.StatusTooManyRequests})
	h.decide(id, events.DecisionApprove, out.InputSHA256)

	res, err := h.terminalWithin(id, 12*time.Second)
	if err != nil {
		t.Fatalf("no terminal result within 12s after the approval (record state %s, %d DELETE requests): %v",
			h.recordState(id), len(h.requests("session_delete")), err)
	}
	requireCompleted(t, res)
	wantEq(t, h.fake.PendingFaults(), 0, "the 429 fault was not consumed (%d pending)")
	if rs := h.requests("session_delete"); len(rs) != 2 {
		t.Errorf("fake received %d DELETE requests, want 2 (the 429 and one that succeeded)", len(rs))
	}
	h.requireResults(2, 10*time.Second, id)
}

// TestRegress11CancelApprovedInFlight (finding 3): a cancel request for an approved
// deletion whose DELETE is in flight at Hermes is answered "cancelled" at once, the
// call is aborted, and the result is cancelled with uncertain_outcome.
func TestRegress11CancelApprovedInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) { c.ApprovalTTL = time.Minute }))
	id, out := parkedDelete(t, h, "r11-cancel", "r11-cancel")
	// Hermes holds the DELETE (until the client goes away, or 6s).
	h.fake.InjectFault(hermestest.Fault{Route: "session_delete", Delay: 6 * time.Second})
	h.decide(id, events.DecisionApprove, out.InputSHA256)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	requireOK(t, h.fake.WaitCalls(wctx, "session_delete", 1), "the approved DELETE never reached Hermes: %v")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	r, err := h.client.Cancel(ctx, id)
	if err != nil {
		t.Fatalf("no reply to the cancel request within 2s (record state %s): %v", h.recordState(id), err)
	}
	if r.ActionID != id || r.State != events.CancelCancelled {
		t.Fatalf("cancel reply %+v after %s, want state cancelled for %s", r, time.Since(start), id)
	}
	res, err := h.terminalWithin(id, 3*time.Second)
	requireOK(t, err, "no terminal result within 3s of the cancel: %v")
	if res.Status != events.StatusCancelled || res.Error == nil || res.Error.Code != "cancelled" || !res.Error.UncertainOutcome {
		t.Fatalf("result %s %s, want cancelled with uncertain_outcome true", res.Status, errString(res.Error))
	}
	wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1")
}

// TestRegress11OnePendingMessage (finding 8a): an action id published three times (as
// three stream messages) that parks publishes its pending_approval result once: a live
// core subscriber sees exactly one <id>:pending message.
func TestRegress11OnePendingMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const id = "r11-pending-1"
	lt := h.tap("hermes.results." + id)
	a := events.Action{Input: mustJSON(t, `{"session_id":"r11-pending-session"}`), IdempotencyKey: "r11-pending"}
	for i := 1; i <= 3; i++ {
		h.publishCopy("session_delete", id, fmt.Sprintf("%s-copy-%d", id, i), a)
	}
	if p := h.pendingOf(id); p.Status != events.StatusPendingApproval {
		t.Fatalf("status %s, want pending_approval", p.Status)
	}
	h.waitIdle(10 * time.Second) // all three copies delivered and acknowledged
	h.quiet(lt, 500*time.Millisecond, 5*time.Second)

	if n := lt.countID(id + ":pending"); n != 1 || lt.count() != 1 {
		t.Fatalf("live subscriber saw %d %s:pending messages (ids %v), want exactly one message", n, id, lt.ids())
	}
	wantEq(t, h.fake.Calls("session_delete"), 0, "the parked action reached Hermes %d times")
}

// TestRegress11OneResultMessage (finding 8b): an action id published twice at once (two
// stream messages) runs once and publishes its terminal result once: a live core
// subscriber sees exactly one <id>:result message. The hook holds the owner between
// storing its result and publishing it, where the duplicate, woken by the stored
// result, republishes it.
func TestRegress11OneResultMessage(t *testing.T) {
	t.Parallel()
	const id = "r11-result-1"
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.Hook = func(p bridge.Point, actionID string) {
			if p == bridge.PointStored && actionID == id {
				time.Sleep(300 * time.Millisecond)
			}
		}
	}))
	h.fake.InjectFault(hermestest.Fault{Route: "chat", Delay: 300 * time.Millisecond})
	lt := h.tap("hermes.results." + id)
	a := events.Action{Input: mustJSON(t, `{"prompt":"answer once"}`)}
	h.publishCopy("chat", id, id+"-copy-1", a)
	h.publishCopy("chat", id, id+"-copy-2", a)

	res, err := h.terminalWithin(id, 10*time.Second)
	requireOK(t, err, "no terminal result: %v")
	requireCompleted(t, res)
	h.waitIdle(10 * time.Second)
	h.quiet(lt, 500*time.Millisecond, 5*time.Second)

	if n := lt.countID(id + ":result"); n != 1 || lt.count() != 1 {
		t.Errorf("live subscriber saw %d %s:result messages (ids %v), want exactly one message", n, id, lt.ids())
	}
	wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
}

// TestRegress11ApprovalIDWithColon (finding 9a): an approval CloudEvent whose id holds
// colons (del-7:approval:1), published exactly as deploy/README.md's approver example
// does, approves the parked action.
func TestRegress11ApprovalIDWithColon(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const id = "del-7"
	_, out := parkedDelete(t, h, "r11-colon-session", "r11-colon", client.WithActionID(id))

	// nats pub hermes.approvals.del-7 --jetstream -H ce-specversion:1.0 -H ce-id:del-7:approval:1
	//   -H ce-source:urn:approver:alice -H ce-type:hermes.bridge.approval.v1
	//   -H content-type:application/json '{"decision":"approve",...}'
	hdr := nats.Header{}
	hdr.Set("ce-specversion", "1.0")
	hdr.Set("ce-id", "del-7:approval:1")
	hdr.Set("ce-source", "urn:approver:alice")
	hdr.Set("ce-type", "hermes.bridge.approval.v1")
	hdr.Set("content-type", "application/json")
	body := `{"decision":"approve","approver":"alice","reason":"ticket 42","input_sha256":"` + out.InputSHA256 + `"}`
	h.publishRaw("hermes.approvals."+id, hdr, []byte(body))

	res, err := h.terminalWithin(id, 10*time.Second)
	if err != nil {
		ignored := strings.Contains(h.logs.String(), "ignored an approval message that is not an approval CloudEvent")
		t.Fatalf("no terminal result within 10s after the approval (record state %s, bridge logged the approval as not an approval CloudEvent: %v): %v",
			h.recordState(id), ignored, err)
	}
	requireCompleted(t, res)
	wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1")
}

// TestRegress11UndecodableDecisionDeadLettered (finding 9b): a message on
// hermes.approvals.<id> that is not a CloudEvent, and an approval CloudEvent whose data
// is not a valid decision, are each copied to hermes.dlq with a reason; the parked
// action keeps waiting and a later valid approval runs it.
func TestRegress11UndecodableDecisionDeadLettered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) { c.ApprovalTTL = time.Minute }))
	id, out := parkedDelete(t, h, "r11-dlq", "r11-dlq")
	subject := "hermes.approvals." + id

	notCE := []byte("approve it, please")
	h.publishRaw(subject, nil, notCE)
	maybe := []byte(`{"decision":"maybe","approver":"e2e","input_sha256":"` + out.InputSHA256 + `"}`)
	h.publishRaw(subject, binaryHeader(events.NewActionID(), events.TypeApproval, ""), maybe)
	h.waitIdle(10 * time.Second) // both decisions handled

	msgs := h.dlqWithin(2, 3*time.Second)
	found := map[string]bool{}
	for i, m := range msgs {
		what := ""
		switch string(m.Data) {
		case string(notCE):
			what = "not a CloudEvent"
		case string(maybe):
			what = "decision maybe"
		default:
			t.Errorf("dlq message %d carries an unexpected payload %q", i, truncate(string(m.Data), 80))
			continue
		}
		found[what] = true
		if r := m.Header.Get("Hermes-Dlq-Reason"); r == "" {
			t.Errorf("dlq copy (%s) has no Hermes-Dlq-Reason header: %v", what, m.Header)
		}
		if s := m.Header.Get("Hermes-Dlq-Subject"); s != subject {
			t.Errorf("dlq copy (%s): Hermes-Dlq-Subject %q, want %q", what, s, subject)
		}
	}
	for _, what := range []string{"not a CloudEvent", "decision maybe"} {
		if !found[what] {
			t.Errorf("the approval message (%s) was not copied to hermes.dlq (dlq holds %d messages)", what, len(msgs))
		}
	}

	// Still parked: no terminal result, record parked, Hermes not called.
	if m := h.lastOutput("hermes.results." + id); !strings.HasSuffix(m.Header.Get(nats.MsgIdHdr), ":pending") {
		t.Fatalf("a bad decision settled the parked action (last result %s)", m.Header.Get(nats.MsgIdHdr))
	}
	requireEq(t, h.recordState(id), string(kvstore.StateParked), "record state %s after bad decisions, want parked")
	if c := h.fake.Calls("session_delete"); c != 0 {
		t.Fatalf("a bad decision reached Hermes")
	}
	h.decide(id, events.DecisionApprove, out.InputSHA256)
	res, err := h.terminalWithin(id, 10*time.Second)
	requireOK(t, err, "no terminal result after a valid approval: %v")
	requireCompleted(t, res)
	wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1")
}
