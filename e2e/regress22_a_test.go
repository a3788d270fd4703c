package e2e_test

// Regression tests for issue 22 (part a): findings 1, 4 and 5. Black-box: they talk to
// the bridge through NATS only (actions, results, events, cancel requests, decisions,
// the DLQ) and look at Hermes through the fake's records.
//
//   - Finding 1: a governed run waiting for a tool approval has published a
//     pending_approval result with the id <action_id>:pending:<k>; nothing may read it as
//     a terminal result (a takeover after a hand-back or a kill, a duplicate with the
//     same key, a cancel request).
//   - Finding 4: an action cancelled before it arrived must not keep its idempotency key,
//     whichever path (idle endpoint: one-write start; busy endpoint: ordinary) it takes.
//   - Finding 5: an approval action or a decision close to 1 MiB must not leave its
//     action stuck (its park record, or the decided record, exceeds the bucket's limit).
//   - Found on the way: a bound run taken over with a cancel flag is settled cancelled
//     without being stopped (TestRegress22_CancelTakenOverRunStops).
//
// Not covered: an owner killed between publishing a run's pending_approval result and
// recording the approval in the action record (no crash point lies between the two):
// the decision then finds no waiting approval (decision_early, then the DLQ) and the
// run waits until its deadline.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// ---- helpers (issue 22, part a) ----

// r22RunHarness is a harness whose fake runs approvalRunAgent (one tool that asks for an
// approval), with short ack wait, lease and shutdown grace, so that a replica that stops
// hands its run back at once and another one may take it over after about 2 s. more
// adjusts the configuration further (for example a Hook).
func r22RunHarness(t *testing.T, more func(*bridge.Config)) *harness {
	return newHarness(t, withFake(hermestest.WithAgent(approvalRunAgent)), withConfig(func(c *bridge.Config) {
		c.AckWait = 2 * time.Second
		c.Heartbeat = 500 * time.Millisecond
		c.Lease = 2 * time.Second
		c.ShutdownGrace = 500 * time.Millisecond
		c.ApprovalTTL = time.Minute
		if more != nil {
			more(c)
		}
	}))
}

// r22PendingRun publishes a governed run with key and waits for its tool approval's
// pending_approval result; it returns the action id, the approval's input_sha256 and
// the run's id.
func r22PendingRun(t *testing.T, h *harness, key string, opts ...client.PublishOption) (id, sha, runID string) {
	t.Helper()
	id = h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "clean " + key}), IdempotencyKey: key}, opts...)
	p := h.pendingOf(id)
	out := output(t, p)
	sha, runID = jstr(out, "input_sha256"), jstr(out, "run_id")
	if p.Status != events.StatusPendingApproval || len(sha) != 64 || runID == "" {
		t.Fatalf("pending result of %s: status %s output %s", id, p.Status, p.Output)
	}
	return id, sha, runID
}

// r22Approve publishes a decision approving (once) a run's tool approval with hash sha.
func r22Approve(t *testing.T, h *harness, id, sha string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.client.Decide(ctx, id, events.Approval{Decision: events.DecisionApprove, Approver: "ops",
		InputSHA256: sha, Choice: events.ChoiceOnce}); err != nil {
		t.Fatalf("decide %s: %v", id, err)
	}
}

// r22Stored describes what the output stream holds on an action's results subject: the
// number of messages and the last one's id and status (for failure messages).
func r22Stored(h *harness, id string) string {
	subj := "hermes.results." + id
	s, err := h.js.Stream(context.Background(), h.cfg.WithDefaults().OutputStream)
	if err != nil {
		return "<output stream: " + err.Error() + ">"
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		return "<stream info: " + err.Error() + ">"
	}
	n := info.State.Subjects[subj]
	if n == 0 {
		return "no result message"
	}
	m, err := s.GetLastMsgForSubject(context.Background(), subj)
	if err != nil {
		return fmt.Sprintf("%d result messages (last: %v)", n, err)
	}
	var r struct {
		Status   string  `json:"status"`
		ReplayOf *string `json:"replay_of"`
	}
	_ = json.Unmarshal(m.Data, &r)
	replay := ""
	if r.ReplayOf != nil {
		replay = ", replay_of " + *r.ReplayOf
	}
	return fmt.Sprintf("%d result message(s), the last with id %s and status %s%s", n, m.Header.Get(nats.MsgIdHdr), r.Status, replay)
}

// r22Diag is the state of an action for a failure message: its results, its record, and
// the bridge consumer's counts.
func r22Diag(h *harness, id string) string {
	cons := "?"
	cfg := h.cfg.WithDefaults()
	if c, err := h.js.Consumer(context.Background(), cfg.ActionsStream, cfg.Consumer); err == nil {
		if info, err := c.Info(context.Background()); err == nil {
			cons = fmt.Sprintf("%d undelivered, %d awaiting ack", info.NumPending, info.NumAckPending)
		}
	}
	return fmt.Sprintf("results: %s; record state %s; consumer: %s", r22Stored(h, id), h.recordState(id), cons)
}

// r22HeaderSize is the size of hdr on the wire (NATS/1.0 status line, one line per
// value, the blank line), which counts against the server's max payload.
func r22HeaderSize(hdr nats.Header) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range hdr {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// r22JSON encodes v without escaping <, > and & (JSON allows them raw, as a publisher
// that is not written in Go may well send them).
func r22JSON(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	requireOK(t, enc.Encode(v))
	return bytes.TrimRight(b.Bytes(), "\n")
}

// r22Fill returns v's JSON with the string field set by set grown so that the message
// (hdr and data) is room bytes under the server's max payload. The filler starts with
// lt '<' characters (raw in the message, six bytes each once escaped by encoding/json).
func r22Fill(t *testing.T, h *harness, hdr nats.Header, room, lt int, set func(s string) any) []byte {
	t.Helper()
	max := int(h.nc.MaxPayload())
	base := r22JSON(t, set(strings.Repeat("<", lt)))
	n := max - room - r22HeaderSize(hdr) - len(base) + lt
	if n < lt {
		t.Fatalf("max payload %d leaves no room for the filler", max)
	}
	data := r22JSON(t, set(strings.Repeat("<", lt)+strings.Repeat("r", n-lt)))
	if total := r22HeaderSize(hdr) + len(data); total > max || total < max-room-8 {
		t.Fatalf("the message is %d bytes, want just under the max payload %d", total, max)
	}
	return data
}

// r22TooLargeLogged reports whether the bridge logged a record over the bucket's limit
// (for failure messages only).
func r22TooLargeLogged(h *harness) bool {
	return strings.Contains(h.logs.String(), "bytes, limit")
}

// r22KeyCalls counts the chat requests that reached the fake with Idempotency-Key key.
func r22KeyCalls(h *harness, key string) int {
	n := 0
	for _, r := range h.requests("chat") {
		if r.IdempotencyKey == key {
			n++
		}
	}
	return n
}

// ---- finding 1: a run's pending_approval result is not terminal ----

// TestRegress22_PendingRunNotTerminal (finding 1): a governed run waiting for a tool
// approval has published a pending_approval result (<action_id>:pending:1). Whether a
// result is terminal is read from its status, never from its id (schemas/README.md, "Results"), so:
// a replica that takes the run over after a hand-back or a kill follows it to its real
// result; a duplicate with the same key waits for the run's terminal result and replays
// it; a cancel request finds the action running and cancels it.
func TestRegress22_PendingRunNotTerminal(t *testing.T) {
	runParallel(t, map[string]func(*testing.T){
		"HandBack": r22HandBack, "Killed": r22Killed, "DuplicateKey": r22DuplicateKey, "Cancel": r22Cancel,
	})
}

// r22HandBack (1a): the replica running the run is shut down gracefully while the run
// waits for its approval (it hands the run back); another replica runs. After an
// approve decision the action ends completed, with one terminal result and one run.
func r22HandBack(t *testing.T) {
	h := r22RunHarness(t, nil)
	const key = "r22-handback"
	id, sha, _ := r22PendingRun(t, h, key)
	h.startBridge() // replica 1
	h.stopBridge(0) // the owner hands the run back
	r22Approve(t, h, id, sha)

	r22CompletedOnce(t, h, id, key, "hand-back")
	wantEq(t, h.fake.ToolRuns("terminal"), 1, "the approved tool ran %d times, want 1")
	h.requireResults(2, 10*time.Second, id)
}

// r22CompletedOnce requires the approved run's action to settle completed with the
// run's output within 20s, after one run at Hermes (after: what ended its owner).
func r22CompletedOnce(t *testing.T, h *harness, id, key, after string) {
	t.Helper()
	res, err := h.terminalWithin(id, 20*time.Second)
	if err != nil {
		t.Fatalf("no terminal result within 20s of the owner's %s and the approval (%v): %s; Hermes started %d run(s) for the key, the tool ran %d time(s)",
			after, err, r22Diag(h, id), h.fake.RunsStartedFor(key), h.fake.ToolRuns("terminal"))
	}
	requireCompleted(t, res)
	if out := output(t, res); jstr(out, "status") != "completed" || jstr(out, "output") != "cleaned clean "+key {
		t.Errorf("result output %s, want the run's completed output", res.Output)
	}
	wantEq(t, h.fake.RunsStartedFor(key), 1, "Hermes started %d runs for the action, want 1")
}

// r22Killed (1b): the same with the owner SIGKILLed (a bridge process) instead; another
// process (ack wait 1 s, lease 2 s) takes over.
func r22Killed(t *testing.T) {
	h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(approvalRunAgent)))
	owner := h.startProc(fastRecovery())
	const key = "r22-killed"
	id, sha, _ := r22PendingRun(t, h, key)
	// The pending result is published just before the owner records the approval it
	// waits for; kill it once it has (a kill between the two is another window, see the
	// package comment).
	owner.waitLog(10*time.Second, `"message":"the run waits for a tool approval"`)
	owner.kill()
	h.startProc(fastRecovery())
	r22Approve(t, h, id, sha)

	r22CompletedOnce(t, h, id, key, "kill")
	h.requireResults(2, 20*time.Second, id)
}

// r22DuplicateKey (1c): a second action with the same key and input, published while
// the first waits for its tool approval, gets no result until the first ends; then it
// replays the first's terminal result (replay_of, same status and output). One run.
func r22DuplicateKey(t *testing.T) {
	const first, second, key = "r22-dup-first", "r22-dup-second", "r22-dup"
	claimed := make(chan struct{})
	var once sync.Once
	h := r22RunHarness(t, func(c *bridge.Config) {
		c.Hook = func(p bridge.Point, actionID string) {
			if p == bridge.PointClaimed && actionID == second {
				once.Do(func() { close(claimed) })
			}
		}
	})
	_, sha, _ := r22PendingRun(t, h, key, client.WithActionID(first))
	h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "clean " + key}), IdempotencyKey: key},
		client.WithActionID(second))
	select {
	case <-claimed:
	case <-time.After(10 * time.Second):
		t.Fatalf("the duplicate was not claimed within 10s")
	}
	// The duplicate now resolves its key while the first still waits: for a bounded
	// while, it must publish nothing.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if h.results(second) > 0 {
			t.Errorf("the duplicate got a result while the original waits for its tool approval: %s", r22Stored(h, second))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	r22Approve(t, h, first, sha)
	orig, err := h.terminalWithin(first, 20*time.Second)
	if err != nil {
		t.Fatalf("the original has no terminal result within 20s of its approval (%v): %s", err, r22Diag(h, first))
	}
	requireCompleted(t, orig)
	dup, err := h.terminalWithin(second, 10*time.Second)
	if err != nil {
		t.Fatalf("the duplicate has no terminal result within 10s of the original's (%v): %s", err, r22Diag(h, second))
	}
	if dup.Status != orig.Status || dup.ReplayOf == nil || *dup.ReplayOf != first || !sameJSON(t, dup.Output, orig.Output) {
		t.Fatalf("duplicate: status %s replay_of %v output %s; want %s, replay_of %s, the original's output %s",
			dup.Status, dup.ReplayOf, dup.Output, orig.Status, first, orig.Output)
	}
	wantEq(t, h.fake.RunsStartedFor(key), 1, "Hermes started %d runs for the key, want 1")
	h.waitIdle(10 * time.Second)
	if n := h.results(second); n != 1 {
		t.Errorf("the duplicate has %d result messages, want exactly one (its terminal replay): %s", n, r22Stored(h, second))
	}
}

// r22Cancel (1d): a cancel request sent while the run waits for its approval (its owner
// handed it back; another replica runs) is answered "cancelled", and the action ends
// with one terminal result, cancelled; the run is stopped and its tool never runs.
func r22Cancel(t *testing.T) {
	h := r22RunHarness(t, nil)
	const key = "r22-cancel"
	id, _, runID := r22PendingRun(t, h, key)
	h.startBridge()
	h.stopBridge(0)

	r, err := r22CancelRequest(h, id)
	if err != nil {
		t.Fatalf("no reply to three cancel requests of 4s each: %v (%s)", err, r22Diag(h, id))
	}
	if r.State != events.CancelCancelled {
		t.Errorf("cancel reply %q for a run that waits for its tool approval, want %q (%s)", r.State, events.CancelCancelled, r22Diag(h, id))
	}
	res, err := h.terminalWithin(id, 20*time.Second)
	if err != nil {
		t.Fatalf("no terminal result within 20s of the cancel request (%v): %s; the fake's run is %s", err, r22Diag(h, id), r22RunStatus(h, runID))
	}
	if res.Status != events.StatusCancelled || res.Error == nil || res.Error.Code != "cancelled" {
		t.Fatalf("result %s %s, want cancelled", res.Status, errString(res.Error))
	}
	h.eventually(10*time.Second, func() error {
		if s := r22RunStatus(h, runID); s != "cancelled" {
			return fmt.Errorf("the fake's run is %s (stop requests: %d), want cancelled", s, len(h.requests("run_stop")))
		}
		return nil
	})
	wantEq(t, h.fake.ToolRuns("terminal"), 0, "the tool of a cancelled run ran %d times")
	h.requireResults(2, 10*time.Second, id)
}

// r22CancelRequest sends a cancel request for id and returns the reply; a request
// that times out is sent again (schemas/README.md, "Cancellation and deadlines": the requester asks again), up to three
// times: the stopped replica's queue subscription may still receive the first one.
func r22CancelRequest(h *harness, id string) (*events.CancelReply, error) {
	var err error
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		var r *events.CancelReply
		r, err = h.client.Cancel(ctx, id)
		cancel()
		if err == nil {
			return r, nil
		}
	}
	return nil, err
}

// TestRegress22_CancelTakenOverRunStops (found while checking finding 1d): a cancel
// request for a bound governed run whose owner handed it back (graceful shutdown) while
// another replica runs is answered "cancelled" from the records (the cancel flag); the
// replica that takes the run over must stop the run on Hermes (POST /stop) and settle
// what it ended as, not settle "cancelled, certainly not started" and leave the run
// going. No approvals are involved.
func TestRegress22_CancelTakenOverRunStops(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, withFake(runAgent(release)), withConfig(func(c *bridge.Config) {
		c.AckWait = 2 * time.Second
		c.Heartbeat = 500 * time.Millisecond
		c.Lease = 2 * time.Second
		c.ShutdownGrace = 500 * time.Millisecond
	}))
	const key = "r22-cancel-taken-over"
	id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "slow: runs until stopped"}), IdempotencyKey: key})
	runID := h.waitRunStatus(key, "running")
	h.startBridge()
	h.stopBridge(0) // the owner hands the bound run back

	r, err := r22CancelRequest(h, id)
	if err != nil {
		t.Fatalf("no reply to three cancel requests of 4s each: %v (%s)", err, r22Diag(h, id))
	}
	if r.State != events.CancelCancelled {
		t.Fatalf("cancel reply %q, want %q", r.State, events.CancelCancelled)
	}
	res, err := h.terminalWithin(id, 20*time.Second)
	if err != nil {
		t.Fatalf("no terminal result within 20s of the cancel request (%v): %s", err, r22Diag(h, id))
	}
	if res.Status != events.StatusCancelled || res.Error == nil || res.Error.Code != "cancelled" {
		t.Fatalf("result %s %s, want cancelled", res.Status, errString(res.Error))
	}
	// The run existed on Hermes: it must have been stopped.
	h.eventually(10*time.Second, func() error {
		if s := r22RunStatus(h, runID); s != "cancelled" {
			return fmt.Errorf("after the action settled %s (%s), the fake's run is %s (stop requests: %d), want cancelled",
				res.Status, errString(res.Error), s, len(h.requests("run_stop")))
		}
		return nil
	})
	if d := detail(res.Error, "run_id"); d != runID {
		t.Errorf("the cancelled result names run %q, want %q", d, runID)
	}
}

func r22RunStatus(h *harness, runID string) string {
	if r, ok := h.fake.Run(runID); ok {
		return r.Status
	}
	return "<unknown>"
}

// ---- finding 4: a cancel before arrival does not keep the key ----

// TestRegress22_CancelledBeforeArrivalFreesKey (finding 4): an unsafe keyed action (chat
// with an idempotency_key) cancelled before it arrived (the cancel request is answered
// "unknown") settles cancelled without reaching Hermes, and does not keep its key: a
// later action with the same key runs, with the same input (completed, not a replay of
// "cancelled") and with another input (completed, not idempotency_conflict). The same
// whether the endpoint was idle when the cancelled action came (one-write start) or
// busy (every slot taken: the ordinary path); the busy cases are the control.
func TestRegress22_CancelledBeforeArrivalFreesKey(t *testing.T) {
	for _, busy := range []bool{false, true} {
		for _, same := range []bool{true, false} {
			name := map[bool]string{false: "IdleEndpoint", true: "BusyEndpoint"}[busy] + "/" +
				map[bool]string{true: "SameInput", false: "OtherInput"}[same]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r22CancelledBeforeArrival(t, busy, same)
			})
		}
	}
}

func r22CancelledBeforeArrival(t *testing.T, busy, same bool) {
	h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent)), withConfig(func(c *bridge.Config) {
		c.Endpoints[0].MaxConcurrency = 1 // one slot: a blocked chat makes the endpoint busy
		c.Workers = 4
	}))
	const id, key = "r22-early-cancel", "r22-early-key"
	if s := h.cancel(id); s != events.CancelUnknown {
		t.Fatalf("cancel before arrival: %q, want %q", s, events.CancelUnknown)
	}
	var blocker string
	if busy {
		blocker = h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"block: holds the only slot"}`)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		requireOK(t, h.fake.WaitCalls(ctx, "chat", 1), "the blocking chat never reached Hermes: %v")
	}
	h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"first use of the key"}`), IdempotencyKey: key}, client.WithActionID(id))
	res, err := h.terminalWithin(id, 15*time.Second)
	if err != nil {
		t.Fatalf("the action cancelled before it arrived has no terminal result within 15s (%v): %s", err, r22Diag(h, id))
	}
	if res.Status != events.StatusCancelled {
		t.Fatalf("the action cancelled before it arrived: %s %s, want cancelled", res.Status, errString(res.Error))
	}
	requireEq(t, r22KeyCalls(h, key), 0, "the action cancelled before it arrived reached Hermes %d times")
	if busy { // free the slot for the next action
		if s := h.cancel(blocker); s != events.CancelCancelled {
			t.Fatalf("cancel the blocking chat: %q", s)
		}
		if _, err := h.terminalWithin(blocker, 15*time.Second); err != nil {
			t.Fatalf("the blocking chat did not end: %v", err)
		}
	}

	in := `{"prompt":"first use of the key"}`
	if !same {
		in = `{"prompt":"another use of the key"}`
	}
	next := h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: key})
	r2, err := h.terminalWithin(next, 15*time.Second)
	if err != nil {
		t.Fatalf("the next action with the key has no terminal result within 15s (%v): %s", err, r22Diag(h, next))
	}
	if r2.Status != events.StatusCompleted || r2.Error != nil || r2.ReplayOf != nil {
		replay := "<nil>"
		if r2.ReplayOf != nil {
			replay = *r2.ReplayOf
		}
		t.Fatalf("the next action with the key (same input %v): status %s, error %s, replay_of %s; want completed by its own "+
			"call: the action cancelled before it arrived (%s) kept the idempotency key", same, r2.Status, errString(r2.Error), replay, id)
	}
	wantEq(t, r22KeyCalls(h, key), 1, "chat calls with the key: %d, want 1 (the next action's)")
}

// ---- finding 5: approvals near 1 MiB ----

// TestRegress22_LargeApprovalNeverStuck (finding 5): an approval action, or a decision,
// close to the server's max payload (1 MiB) must not leave its action stuck. A
// session_delete with a stale pre-approval (decided two hours ago, so it parks) whose
// reason fills the message reaches, within 30 s, either a pending_approval result that
// an approve decision then completes, or a terminal failed result naming the field
// (invalid_action or payload_too_large). A decision whose reason (deny) or approver
// (approve) fills the message is, within 10 s, either applied (the action ends
// approval_denied, or completed) or dead-lettered with a Hermes-Dlq-Reason, and then a
// later valid decision still ends the action.
func TestRegress22_LargeApprovalNeverStuck(t *testing.T) {
	runParallel(t, map[string]func(*testing.T){
		"StalePreApprovalReason":  r22LargeAction,
		"DecisionDenyReason":      func(t *testing.T) { r22LargeDecision(t, events.DecisionDeny) },
		"DecisionApproveApprover": func(t *testing.T) { r22LargeDecision(t, events.DecisionApprove) },
	})
}

// r22LargeHarness has a short retry backoff ceiling relaxed (a failing 1 MiB write is
// retried a few times a second, not fifty) and a one-minute approval window.
func r22LargeHarness(t *testing.T) *harness {
	return newHarness(t, withConfig(func(c *bridge.Config) {
		c.ApprovalTTL = time.Minute
		c.RetryBase = 200 * time.Millisecond
		c.RetryMax = time.Second
	}))
}

func r22LargeAction(t *testing.T) {
	h := r22LargeHarness(t)
	const id, sid, key = "r22-large-action", "r22-large-session", "r22-large"
	h.callOK("session_create", map[string]any{"body": map[string]any{"id": sid}}, withKey("create-"+key))
	input := mustJSON(t, map[string]any{"session_id": sid})
	hash, err := events.InputSHA256(input)
	requireOK(t, err)
	stale := time.Now().Add(-2 * time.Hour).UTC()
	hdr := binaryHeader(id, events.TypeAction, events.CapabilityID("primary", "session_delete"))
	data := r22Fill(t, h, hdr, 64, 0, func(s string) any {
		return events.Action{Input: input, IdempotencyKey: key, Approval: &events.Approval{Decision: events.DecisionApprove,
			Approver: "e2e", Reason: s, InputSHA256: hash, DecidedAt: &stale}}
	})
	h.publishRaw("hermes.actions.primary.session_delete", hdr, data)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	pendingSeen := false
	var derr error
	final, err := h.client.Follow(ctx, id, nil, func(p *events.Result) {
		mu.Lock()
		defer mu.Unlock()
		if pendingSeen {
			return
		}
		pendingSeen = true
		derr = h.client.Decide(ctx, id, events.Approval{Decision: events.DecisionApprove, Approver: "e2e",
			InputSHA256: jstr(output(t, p), "input_sha256")})
	})
	mu.Lock()
	seen, decided := pendingSeen, derr
	mu.Unlock()
	if err != nil {
		t.Fatalf("a %d-byte session_delete with a stale pre-approval has no terminal result within 30s (%v); pending_approval result seen and approved: %v (decide error %v); %s; "+
			"the bridge logged a record over the bucket's limit: %v", len(data), err, seen, decided, r22Diag(h, id), r22TooLargeLogged(h))
	}
	switch final.Status {
	case events.StatusCompleted:
		if !seen {
			t.Fatalf("the action completed without a pending_approval result (its pre-approval is stale)")
		}
		wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1")
	case events.StatusFailed:
		e := final.Error
		if e == nil || (e.Code != "invalid_action" && e.Code != "payload_too_large") {
			t.Fatalf("failed with %s, want invalid_action or payload_too_large", errString(e))
		}
		if s := errString(e); !strings.Contains(s, "approval") && !strings.Contains(s, "reason") {
			t.Errorf("the error does not name the field (approval.reason): %s", s)
		}
		wantEq(t, h.fake.Calls("session_delete"), 0, "a refused action reached Hermes (%d calls)")
	default:
		t.Fatalf("result %s %s", final.Status, errString(final.Error))
	}
}

// r22LargeDecision publishes, for a parked session_delete, a decision whose reason (deny)
// or approver (approve) fills the message. The filler starts with 4096 '<' (raw in the
// message, escaped to six bytes each by the record's JSON encoding), so that the message
// stays 2 KiB under the max payload (a DLQ copy with its headers fits) and the record is
// still over the limit.
func r22LargeDecision(t *testing.T, decision string) {
	h := r22LargeHarness(t)
	sid := "r22-large-" + decision
	id, out := parkedDelete(t, h, sid, sid)
	hdr := binaryHeader(events.NewActionID(), events.TypeApproval, "")
	field := map[string]string{events.DecisionDeny: "reason", events.DecisionApprove: "approver"}[decision]
	data := r22Fill(t, h, hdr, 2048, 4096, func(s string) any {
		ap := events.Approval{Decision: decision, Approver: "e2e", Reason: "test", InputSHA256: out.InputSHA256}
		if decision == events.DecisionDeny {
			ap.Reason = s
		} else {
			ap.Approver = s
		}
		return ap
	})
	subject := "hermes.approvals." + id
	h.publishRaw(subject, hdr, data)

	// Applied (a terminal result) or dead-lettered, within 10 s.
	var dead *jetstream.RawStreamMsg
	applied := false
	deadline := time.Now().Add(10 * time.Second)
	for !applied && dead == nil && time.Now().Before(deadline) {
		applied = h.results(id) >= 2 // the pending result and a terminal one
		for _, m := range h.dlqWithin(0, 0) {
			if m.Header.Get(events.HeaderDLQSubject) == subject {
				dead = m
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	switch {
	case applied:
		res, err := h.terminalWithin(id, 5*time.Second)
		requireOK(t, err, "follow: %v")
		if decision == events.DecisionDeny {
			requireFailed(t, res, "approval_denied")
		} else {
			requireCompleted(t, res)
		}
	case dead != nil:
		if r := dead.Header.Get(events.HeaderDLQReason); r == "" {
			t.Errorf("the dead-lettered decision has no %s header", events.HeaderDLQReason)
		}
		h.decide(id, events.DecisionApprove, out.InputSHA256)
		res, err := h.terminalWithin(id, 15*time.Second)
		if err != nil {
			t.Fatalf("after the large decision was dead-lettered, a valid approval did not end the action within 15s (%v): %s", err, r22Diag(h, id))
		}
		requireCompleted(t, res)
	default:
		t.Fatalf("within 10s a %d-byte %s decision (its %s filling it) was neither applied (%s) nor dead-lettered (no DLQ copy from %s); "+
			"the bridge logged a record over the bucket's limit: %v",
			len(data), decision, field, r22Diag(h, id), subject, r22TooLargeLogged(h))
	}
}
