package main

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

func TestApproveFlagsInterspersed(t *testing.T) {
	var o cmdOptions
	pos, err := parseArgs(clientCommands["approve"].flagSet("approve", &o), []string{"abc", "--yes", "--reason", "ok then", "--no-follow"})
	if err != nil || len(pos) != 1 || pos[0] != "abc" || !o.yes || !o.noFollow || o.reason != "ok then" {
		t.Fatalf("pos %v err %v o %+v", pos, err, o)
	}
	o = cmdOptions{}
	if _, err := parseArgs(clientCommands["cancel"].flagSet("cancel", &o), []string{"x"}); err != nil || o.timeout != defaultCancelTimeout {
		t.Fatalf("cancel default timeout %s err %v", o.timeout, err)
	}
}

func TestPrintRequest(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	req := &pendingRequest{
		CapabilityID: "cap:hermes_agent:primary:response_delete",
		// A bidi override and an escape character must not reach the terminal raw.
		Input:       json.RawMessage("{\"response_id\":\"resp_1\u202e\",\"n\":[1,2]}"),
		InputSHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		ExpiresAt:   "2026-01-01T00:14:32Z",
	}
	var b strings.Builder
	printRequest(&b, "a1", req, now)
	want := `action a1 waits for approval
  capability:   cap:hermes_agent:primary:response_delete
  input_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
  expires_at:   2026-01-01T00:14:32Z (in 14m32s)
  input:
    {
      "response_id": "resp_1\u202e",
      "n": [
        1,
        2
      ]
    }
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	if got := expiresIn(now.Add(-3*time.Second), now); got != "expired 3s ago" {
		t.Fatalf("expiresIn: %q", got)
	}
}

func TestEscapeInvisible(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n":    "plain text\n",
		"héllo ✓":         "héllo ✓",
		"a\x1b[31mb":      `a\u001b[31mb`,
		"x\u2066y\u200bz": `x\u2066y\u200bz`,
		"bad\xffutf8":     `bad\ufffdutf8`,
		"\U000E0041":      `\udb40\udc41`, // a tag character (format, invisible)
	} {
		if got := escapeInvisible(in); got != want {
			t.Errorf("escapeInvisible(%q) = %q, want %q", in, got, want)
		}
	}
	if got := sanitize("two\nlines"); got != `two\nlines` {
		t.Errorf("sanitize: %q", got)
	}
}

// approvalsEnv seeds a NATS server with what the bridge writes for parked actions
// and returns the CLI environment and a JetStream context on the server.
type approvalsEnv struct {
	t   *testing.T
	nc  *nats.Conn
	js  jetstream.JetStream
	env map[string]string
}

func newApprovalsEnv(t *testing.T) *approvalsEnv {
	t.Helper()
	s := natsembed.RunTest(t)
	nc, js := natsembed.Connect(t, s)
	ctx := context.Background()
	for _, sc := range []jetstream.StreamConfig{
		{Name: client.DefaultOutputStream, Subjects: []string{"hermes.events.>", "hermes.results.>"}},
		{Name: "HERMES_APPROVALS", Subjects: []string{"hermes.approvals.>"}},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	return &approvalsEnv{t: t, nc: nc, js: js, env: map[string]string{"NATS_URL": s.ClientURL(), "USER": "alice"}}
}

func (e *approvalsEnv) publishResult(r *events.Result) {
	e.t.Helper()
	h, body, err := events.EncodeResult("hermes-bridge/test", r, events.TraceContext{})
	noErr(e.t, err)
	if _, err := e.js.PublishMsg(context.Background(), &nats.Msg{Subject: "hermes.results." + r.ActionID, Header: h, Data: body}); err != nil {
		e.t.Fatal(err)
	}
}

// park writes what the bridge writes for a parked action: park.<id> in KV and the
// pending_approval result.
func (e *approvalsEnv) park(store *kvstore.Store, id, op string, input string, expires time.Time) string {
	e.t.Helper()
	sum, err := events.InputSHA256(json.RawMessage(input))
	noErr(e.t, err)
	capID := events.CapabilityID("primary", op)
	if _, err := store.Create(context.Background(), kvstore.ParkKey(id), kvstore.Record{
		State: kvstore.StateParked, ActionID: id, CapabilityID: capID, InputSHA256: sum, ExpiresAt: expires,
	}); err != nil {
		e.t.Fatal(err)
	}
	out, _ := json.Marshal(map[string]any{
		"capability_id": capID, "input": json.RawMessage(input), "input_sha256": sum,
		"expires_at": expires.UTC().Format(time.RFC3339Nano),
	})
	e.publishResult(&events.Result{ActionID: id, CapabilityID: capID, Status: events.StatusPendingApproval, Output: out})
	return sum
}

// decisions subscribes to the approvals of id and returns a function that
// waits for the next decision (nil after d).
func (e *approvalsEnv) decisions(id string) func(d time.Duration) *events.Approval {
	e.t.Helper()
	ch := make(chan *nats.Msg, 8)
	sub, err := e.nc.ChanSubscribe("hermes.approvals."+id, ch)
	noErr(e.t, err)
	e.t.Cleanup(func() { sub.Unsubscribe() })
	e.nc.Flush()
	return func(d time.Duration) *events.Approval {
		select {
		case m := <-ch:
			if got := m.Header.Get(events.HeaderType); got != events.TypeApproval {
				e.t.Fatalf("decision type %q", got)
			}
			ap, err := events.DecodeApproval(m.Data)
			if err != nil {
				e.t.Fatalf("decision %s: %v", m.Data, err)
			}
			return ap
		case <-time.After(d):
			return nil
		}
	}
}

func TestApprovalsIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	e := newApprovalsEnv(t)
	ctx := context.Background()

	// Before the bridge provisioned the bucket: a clear connection-class error.
	code, _, errOut := runMain(ctx, e.env, "", "pending")
	if code != exitUsage || !strings.Contains(errOut, "KV bucket HERMES_IDEMPOTENCY not found") {
		t.Fatalf("pending without bucket: exit %d stderr %s", code, errOut)
	}

	store, err := kvstore.Open(ctx, e.js, kvstore.Config{Provision: true})
	noErr(t, err)
	code, out, errOut := runMain(ctx, e.env, "", "pending")
	if code != exitOK || out != "no parked actions\n" {
		t.Fatalf("empty pending: exit %d out %q stderr %s", code, out, errOut)
	}
	code, out, _ = runMain(ctx, e.env, "", "pending", "--json")
	if code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty pending --json: exit %d out %q", code, out)
	}

	now := time.Now()
	input := `{"response_id":"resp_42"}`
	sumA := e.park(store, "act-a", "response_delete", input, now.Add(15*time.Minute))
	e.park(store, "act-old", "session_delete", `{"session_id":"s1"}`, now.Add(-time.Minute))
	// An unrelated record in the bucket is not listed.
	if _, err := store.Create(ctx, "act.act-a", kvstore.Record{State: kvstore.StateParked, ActionID: "act-a"}); err != nil {
		t.Fatal(err)
	}

	// pending: a table, soonest expiry first.
	code, out, errOut = runMain(ctx, e.env, "", "pending")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 3 {
		t.Fatalf("pending: exit %d stderr %s\n%s", code, errOut, out)
	}
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "ACTION CAPABILITY EXPIRES INPUT_SHA256" {
		t.Fatalf("header %q", lines[0])
	}
	if f := strings.Fields(lines[1]); len(f) != 4 || f[0] != "act-old" || f[1] != "cap:hermes_agent:primary:session_delete" || f[2] != "expired" {
		t.Fatalf("line 1 %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) != 5 || f[0] != "act-a" || f[1] != "cap:hermes_agent:primary:response_delete" ||
		f[2] != "in" || !(strings.HasPrefix(f[3], "14m") || f[3] == "15m0s") || f[4] != sumA[:12]+"…" {
		t.Fatalf("line 2 %q", lines[2])
	}
	code, out, _ = runMain(ctx, e.env, "", "pending", "--json")
	var list []parkedAction
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != exitOK || len(list) != 2 {
		t.Fatalf("pending --json: exit %d err %v\n%s", code, err, out)
	}
	if a := list[1]; a.ActionID != "act-a" || a.InputSHA256 != sumA || a.Expired || !a.ExpiresAt.Equal(now.Add(15*time.Minute)) || !list[0].Expired {
		t.Fatalf("pending --json: %+v", list)
	}

	next := e.decisions("act-a")

	// Without --yes and without a terminal: the request is shown, nothing is published.
	code, out, errOut = runMain(ctx, e.env, "", "approve", "act-a")
	if code != exitUsage || !strings.Contains(errOut, "stdin is not a terminal") || !strings.Contains(errOut, "--yes") ||
		!strings.Contains(out, "cap:hermes_agent:primary:response_delete") {
		t.Fatalf("approve without --yes: exit %d\n%s\n%s", code, out, errOut)
	}
	if ap := next(200 * time.Millisecond); ap != nil {
		t.Fatalf("a decision was published without confirmation: %+v", ap)
	}

	// approve --yes --no-follow: shows capability and input, publishes the decision
	// with the input_sha256 of the pending result, and waits for its effect: no bridge
	// runs here, so none comes within --timeout (exit 2).
	code, out, errOut = runMain(ctx, e.env, "", "approve", "act-a", "--yes", "--no-follow", "--reason", "ticket OPS-42", "--timeout", "300ms")
	if code != exitUsage {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, w := range []string{"action act-a waits for approval", "capability:   cap:hermes_agent:primary:response_delete",
		"input_sha256: " + sumA, "\"response_id\": \"resp_42\"", "(in 1"} {
		if !strings.Contains(out, w) {
			t.Errorf("approve output lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(errOut, "approved: decision published on hermes.approvals.act-a") ||
		!strings.Contains(errOut, "hermes-bridge approve: no effect of the decision on action act-a within --timeout 300ms: is a bridge running? "+
			"The decision is stored (stream HERMES_APPROVALS, message 1) and a bridge applies it when it reads it: hermes-bridge status act-a") {
		t.Errorf("approve stderr:\n%s", errOut)
	}
	ap := next(5 * time.Second)
	if ap == nil || ap.Decision != events.DecisionApprove || ap.InputSHA256 != sumA || ap.Approver != "alice" ||
		ap.Reason != "ticket OPS-42" || ap.DecidedAt == nil || time.Since(*ap.DecidedAt) > time.Minute {
		t.Fatalf("decision %+v", ap)
	}

	// On a terminal: "n" publishes nothing, "y" publishes.
	realIsTerminal := stdinIsTerminal
	stdinIsTerminal = func(io.Reader) bool { return true }
	t.Cleanup(func() { stdinIsTerminal = realIsTerminal })
	code, _, errOut = runMain(ctx, e.env, "n\n", "approve", "act-a", "--no-follow")
	if code != exitFailed || !strings.Contains(errOut, "approve cap:hermes_agent:primary:response_delete for action act-a? [y/N]") ||
		!strings.Contains(errOut, "not confirmed") {
		t.Fatalf("approve answered n: exit %d\n%s", code, errOut)
	}
	if ap := next(200 * time.Millisecond); ap != nil {
		t.Fatalf("a decision was published after n: %+v", ap)
	}
	code, _, errOut = runMain(ctx, map[string]string{"NATS_URL": e.env["NATS_URL"]}, "y\n", "approve", "act-a", "--no-follow", "--timeout", "200ms")
	if ap := next(5 * time.Second); code != exitUsage || ap == nil || ap.Approver != "cli" || ap.Reason != "" {
		t.Fatalf("approve answered y: exit %d decision %+v\n%s", code, ap, errOut)
	}
	stdinIsTerminal = realIsTerminal

	// approve, then follow: a fake bridge settles the action when the decision
	// arrives; approve prints the result and exits like call.
	sumB := e.park(store, "act-b", "session_delete", `{"session_id":"s-9"}`, now.Add(15*time.Minute))
	fake, err := e.nc.Subscribe("hermes.approvals.act-b", func(m *nats.Msg) {
		ap, err := events.DecodeApproval(m.Data)
		if err != nil || ap.InputSHA256 != sumB {
			t.Errorf("fake bridge: decision %s err %v", m.Data, err)
			return
		}
		e.publishResult(&events.Result{ActionID: "act-b", CapabilityID: "cap:hermes_agent:primary:session_delete",
			Status: events.StatusCompleted, Output: json.RawMessage(`{"deleted":true}`)})
	})
	noErr(t, err)
	defer fake.Unsubscribe()
	// The subscription must reach the server before the CLI's decision does (it came
	// second now and then: the decision was missed and the follow waited out --wait).
	noErr(t, e.nc.Flush())
	code, out, errOut = runMain(ctx, e.env, "", "approve", "--yes", "--wait", "10s", "act-b")
	if code != exitOK || !strings.Contains(out, `"status": "completed"`) || !strings.Contains(out, `"deleted": true`) ||
		strings.Contains(errOut, "waiting for approval") {
		t.Fatalf("approve and follow: exit %d\n%s\n%s", code, out, errOut)
	}
	// Now settled: approve and deny say so and exit 1.
	code, _, errOut = runMain(ctx, e.env, "", "approve", "--yes", "act-b")
	if code != exitFailed || !strings.Contains(errOut, "action act-b is already settled: completed") {
		t.Fatalf("approve settled: exit %d\n%s", code, errOut)
	}
	e.publishResult(&events.Result{ActionID: "act-old", CapabilityID: "cap:hermes_agent:primary:session_delete", Status: events.StatusFailed,
		Output: json.RawMessage(`null`), Error: &events.ErrorInfo{Code: "approval_expired", Message: "no decision in time", Category: "permanent"}})
	code, out, errOut = runMain(ctx, e.env, "", "deny", "--yes", "--reason", "late", "act-old")
	if code != exitFailed || out != "" || !strings.Contains(errOut, "already settled: failed (approval_expired: no decision in time)") {
		t.Fatalf("deny settled: exit %d\n%s\n%s", code, out, errOut)
	}

	// deny: the decision carries the reason.
	sumC := e.park(store, "act-c", "response_delete", `{"response_id":"resp_7"}`, now.Add(15*time.Minute))
	nextC := e.decisions("act-c")
	code, out, errOut = runMain(ctx, e.env, "", "deny", "act-c", "--reason", "wrong response", "--approver", "bob", "--yes", "--timeout", "200ms")
	if code != exitUsage || !strings.Contains(out, `"response_id": "resp_7"`) || !strings.Contains(errOut, "denied: decision published on hermes.approvals.act-c") ||
		!strings.Contains(errOut, "no effect of the decision on action act-c within --timeout 200ms") {
		t.Fatalf("deny: exit %d\n%s\n%s", code, out, errOut)
	}
	if ap := nextC(5 * time.Second); ap == nil || ap.Decision != events.DecisionDeny || ap.Reason != "wrong response" || ap.Approver != "bob" || ap.InputSHA256 != sumC {
		t.Fatalf("deny decision %+v", ap)
	}

	// --json: the request goes to stderr, stdout stays empty without an effect.
	code, out, errOut = runMain(ctx, e.env, "", "approve", "act-c", "--yes", "--json", "--no-follow", "--timeout", "200ms")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "resp_7") {
		t.Fatalf("approve --json: exit %d\n%q\n%s", code, out, errOut)
	}

	// A fake bridge settles act-d denied when the decision comes: deny reports it, and
	// with --json prints the result on stdout (issue 26, items 8 and 14).
	e.park(store, "act-d", "response_delete", `{"response_id":"resp_8"}`, now.Add(15*time.Minute))
	fakeD, err := e.nc.Subscribe("hermes.approvals.act-d", func(*nats.Msg) {
		e.publishResult(&events.Result{ActionID: "act-d", CapabilityID: "cap:hermes_agent:primary:response_delete", Status: events.StatusFailed,
			Output: json.RawMessage(`null`), Error: &events.ErrorInfo{Code: "approval_denied", Message: "denied by bob: wrong one", Category: "permanent"}})
	})
	noErr(t, err)
	defer fakeD.Unsubscribe()
	noErr(t, e.nc.Flush())
	code, out, errOut = runMain(ctx, e.env, "", "deny", "act-d", "--reason", "wrong one", "--yes", "--json")
	if code != exitOK || !strings.HasPrefix(out, "{\n") || !strings.Contains(out, `"code": "approval_denied"`) || strings.Contains(out, "resp_8") ||
		!strings.Contains(errOut, "denied: action act-d settled failed (approval_denied: denied by bob: wrong one)") {
		t.Fatalf("deny --json with a bridge: exit %d\n%s\n%s", code, out, errOut)
	}

	// A fake bridge dead-letters act-e's decision: approve names the reason, exit 1.
	e.park(store, "act-e", "response_delete", `{"response_id":"resp_9"}`, now.Add(15*time.Minute))
	fakeE, err := e.nc.Subscribe("hermes.approvals.act-e", func(m *nats.Msg) {
		st, err := e.js.Stream(ctx, "HERMES_APPROVALS")
		if err != nil {
			t.Errorf("fake bridge: %v", err)
			return
		}
		stored, err := st.GetLastMsgForSubject(ctx, m.Subject)
		if err != nil {
			t.Errorf("fake bridge: %v", err)
			return
		}
		if err := e.nc.PublishMsg(&nats.Msg{Subject: "hermes.dlq", Data: m.Data, Header: nats.Header{
			events.HeaderDLQReason: {"no parked action or waiting run approval with this id"}, events.HeaderDLQStream: {"HERMES_APPROVALS"},
			events.HeaderDLQStreamSeq: {strconv.FormatUint(stored.Sequence, 10)}}}); err != nil {
			t.Errorf("fake bridge: %v", err)
		}
	})
	noErr(t, err)
	defer fakeE.Unsubscribe()
	noErr(t, e.nc.Flush())
	code, _, errOut = runMain(ctx, e.env, "", "approve", "act-e", "--yes")
	if code != exitFailed || !strings.Contains(errOut, "hermes-bridge approve: the bridge dead-lettered the decision (stream HERMES_APPROVALS, message ") ||
		!strings.Contains(errOut, "no parked action or waiting run approval with this id; it had no effect on action act-e") {
		t.Fatalf("approve of a dead-lettered decision: exit %d\n%s", code, errOut)
	}

	// No result at all: no pending approval.
	code, _, errOut = runMain(ctx, e.env, "", "approve", "--yes", "never-parked")
	if code != exitFailed || !strings.Contains(errOut, "no pending approval for action never-parked") {
		t.Fatalf("approve unknown: exit %d\n%s", code, errOut)
	}
	// Another output stream name: a connection-class error naming the variable.
	env2 := map[string]string{"NATS_URL": e.env["NATS_URL"], "HERMES_BRIDGE_OUTPUT_STREAM": "NOPE"}
	code, _, errOut = runMain(ctx, env2, "", "approve", "--yes", "act-c")
	if code != exitUsage || !strings.Contains(errOut, "output stream NOPE not found") {
		t.Fatalf("approve without stream: exit %d\n%s", code, errOut)
	}
}

func TestCancelCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	s := natsembed.RunTest(t)
	nc, _ := natsembed.Connect(t, s)
	env := map[string]string{"NATS_URL": s.ClientURL()}
	ctx := context.Background()

	// Nobody answers: no responders.
	code, out, errOut := runMain(ctx, env, "", "cancel", "act-1")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "no bridge answered on hermes.cancel.act-1") {
		t.Fatalf("no responders: exit %d\n%s\n%s", code, out, errOut)
	}

	// A responder that never answers: the timeout.
	silent, err := nc.Subscribe("hermes.cancel.act-silent", func(*nats.Msg) {})
	noErr(t, err)
	defer silent.Unsubscribe()
	nc.Flush()
	code, _, errOut = runMain(ctx, env, "", "cancel", "--timeout", "200ms", "act-silent")
	if code != exitUsage || !strings.Contains(errOut, "no bridge answered on hermes.cancel.act-silent within 200ms") {
		t.Fatalf("timeout: exit %d\n%s", code, errOut)
	}

	// A fake bridge answering each state.
	states := map[string]string{"act-c": "cancelled", "act-s": "already_settled", "act-u": "unknown", "act-x": "confused"}
	sub, err := nc.Subscribe("hermes.cancel.*", func(m *nats.Msg) {
		id := strings.TrimPrefix(m.Subject, "hermes.cancel.")
		b, _ := json.Marshal(events.CancelReply{ActionID: id, State: states[id]})
		m.Respond(b)
	})
	noErr(t, err)
	defer sub.Unsubscribe()
	nc.Flush()
	for _, tt := range []struct {
		id, out string
		code    int
	}{
		{"act-c", "cancelled\n", exitOK},
		{"act-s", "already settled\n", exitOK},
		{"act-u", "unknown (the bridge has no record of this action; if it is still queued it will not run)\n", exitFailed},
		{"act-x", "", exitUsage},
	} {
		code, out, errOut := runMain(ctx, env, "", "cancel", tt.id)
		if code != tt.code || out != tt.out {
			t.Errorf("cancel %s: exit %d out %q, want %d %q; stderr %s", tt.id, code, out, tt.code, tt.out, errOut)
		}
	}
}
