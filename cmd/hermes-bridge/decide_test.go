package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestDecisionDeadLettered (issue 26, item 8): a decision the bridge dead-letters (here:
// a pending request whose input_sha256 is a short placeholder, as a hand-written
// example has it) used to be reported as published and nothing more. approve and deny
// now wait for the decision's effect, print the bridge's reason, which says it is an
// invalid decision, and exit 1.
func TestDecisionDeadLettered(t *testing.T) {
	fake := hermestest.NewServer()
	defer fake.Close()
	r := startRunInProcess(t, map[string]string{"HERMES_URL": fake.URL})
	nc, err := nats.Connect(r.url)
	noErr(t, err)
	defer nc.Close()
	for _, cmd := range []string{"approve", "deny"} {
		id := "dlq-" + cmd
		res := &events.Result{ActionID: id, CapabilityID: "cap:hermes_agent:primary:session_delete", Status: events.StatusPendingApproval,
			Output: json.RawMessage(`{"capability_id":"cap:hermes_agent:primary:session_delete","input":{"session_id":"s"},"input_sha256":"<hash>","expires_at":"2099-01-01T00:00:00Z"}`)}
		h, body, err := events.EncodeResult("test", res, events.TraceContext{})
		noErr(t, err)
		noErr(t, nc.PublishMsg(&nats.Msg{Subject: "hermes.out.results." + id, Header: h, Data: body}))
		noErr(t, nc.Flush())
		cli := map[string]string{"NATS_URL": r.url}
		var code int
		var out, errOut string
		waitFor(t, 10*time.Second, "the pending result", func() bool {
			code, out, errOut = runMain(context.Background(), cli, "", cmd, id, "--yes", "--reason", "test", "--timeout", "20s")
			return !strings.Contains(errOut, "no pending approval")
		})
		if code != exitFailed || !strings.Contains(errOut, "hermes-bridge "+cmd+": the bridge dead-lettered the decision (stream HERMES_ACTIONS, message ") ||
			!strings.Contains(errOut, "invalid decision: input_sha256: must be 64 lowercase hexadecimal digits; it had no effect on action "+id) {
			t.Errorf("%s: exit %d\nstdout %s\nstderr %s", cmd, code, out, errOut)
		}
	}
}

// TestCallReplayNote (issue 26, item 10): a duplicate of an earlier action (the same
// idempotency key) is answered with the earlier one's result; call and watch say so on
// stderr, naming the earlier action, where they said nothing.
func TestCallReplayNote(t *testing.T) {
	fake := hermestest.NewServer()
	defer fake.Close()
	r := startRunInProcess(t, map[string]string{"HERMES_URL": fake.URL, "HERMES_API_KEY": hermestest.DefaultAPIKey})
	cli := map[string]string{"NATS_URL": r.url}
	args := []string{"call", "--op", "session_create", "--input", `{"body":{"id":"s-replay"}}`, "--key", "replay-key", "--json"}
	code, out0, errOut := runMain(context.Background(), cli, "", append(args, "--action-id", "first-1")...)
	if code != exitOK || strings.Contains(errOut, "replay") {
		t.Fatalf("first call: exit %d\n%s\n%s", code, out0, errOut)
	}
	for _, cmd := range [][]string{append(args, "--action-id", "second-1"), {"watch", "second-1"}} {
		code, out, errOut := runMain(context.Background(), cli, "", cmd...)
		if code != exitOK || !strings.Contains(out, `"replay_of": "first-1"`) ||
			!strings.Contains(errOut, "action second-1 is a replay of action first-1 (same idempotency key): the bridge did not call Hermes again") {
			t.Errorf("%v: exit %d\n%s\n%s", cmd, code, out, errOut)
		}
	}
	if n := fake.Calls("session_create"); n != 1 {
		t.Errorf("Hermes was called %d times, want 1", n)
	}
}
