package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// hintEnv is a NATS server with the bridge's actions and output streams and no bridge.
type hintEnv struct {
	t   *testing.T
	js  jetstream.JetStream
	env map[string]string
}

func newHintEnv(t *testing.T, after time.Duration, opts ...func(*natsembed.Options)) *hintEnv {
	t.Helper()
	setHintAfter(t, after)
	s := natsembed.RunTest(t, opts...)
	_, js := natsembed.Connect(t, s, nats.UserInfo("ops", "ops-pw"))
	ctx := context.Background()
	for _, sc := range []jetstream.StreamConfig{
		{Name: "HERMES_ACTIONS", Subjects: []string{"hermes.actions.>", "hermes.approvals.>"}},
		{Name: client.DefaultOutputStream, Subjects: []string{"hermes.events.>", "hermes.results.>"}},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	return &hintEnv{t: t, js: js, env: map[string]string{"NATS_URL": s.ClientURL(), "NATS_USER": "ops", "NATS_PASSWORD": "ops-pw"}}
}

// setHintAfter sets waitHintAfter to d until the test ends.
func setHintAfter(t *testing.T, d time.Duration) {
	old := waitHintAfter
	waitHintAfter = d
	t.Cleanup(func() { waitHintAfter = old })
}

// bridgeConsumer creates the shared consumer as a bridge would.
func (e *hintEnv) bridgeConsumer() jetstream.Consumer {
	e.t.Helper()
	c, err := e.js.CreateOrUpdateConsumer(context.Background(), "HERMES_ACTIONS", jetstream.ConsumerConfig{
		Durable: "hermes-bridge", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
	})
	noErr(e.t, err)
	return c
}

// publish stores an action as another publisher would.
func (e *hintEnv) publish(id string) {
	e.t.Helper()
	c := client.New(e.js)
	if _, err := c.Publish(context.Background(), "primary", "chat", events.Action{Input: json.RawMessage(`{"prompt":"x"}`)}, client.WithActionID(id)); err != nil {
		e.t.Fatal(err)
	}
}

// untilStderr runs a command until its stderr holds want (or it ends), then interrupts
// it, and returns its exit status and stderr.
func (e *hintEnv) untilStderr(environ map[string]string, want string, args ...string) (int, string) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errb := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- Main(ctx, args, environ, stdio{in: strings.NewReader(""), out: out, err: errb}) }()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(errb.String(), want) {
		select {
		case code := <-done:
			e.t.Fatalf("%v ended (exit %d) before saying %q:\nstdout:\n%s\nstderr:\n%s", args, code, want, out.String(), errb.String())
		case <-deadline:
			e.t.Fatalf("%v did not say %q within 30s:\n%s", args, want, errb.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		return code, errb.String()
	case <-time.After(30 * time.Second):
		e.t.Fatalf("%v did not stop after the interrupt", args)
		return 0, ""
	}
}

// requireHint checks the command kept waiting after its hint (it ended on the
// interrupt) and that the hint says each wanted text.
func requireHint(t *testing.T, code int, stderr string, want ...string) {
	t.Helper()
	if code != exitInterrupted {
		t.Errorf("exit %d, want %d (still waiting after the hint)", code, exitInterrupted)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
}

// call with no bridge ever started: the action is stored, and no consumer exists.
func TestCallHintNoConsumer(t *testing.T) {
	e := newHintEnv(t, 50*time.Millisecond)
	code, errOut := e.untilStderr(e.env, "bridges:", "call", "--op", "chat", "--prompt", "x", "--action-id", "h1")
	requireHint(t, code, errOut,
		"action h1: no event or result after 50ms; still waiting (Ctrl-C stops following; the action goes on)\n",
		"  stored:  stream HERMES_ACTIONS, message 1\n",
		"  bridges: none is consuming: stream HERMES_ACTIONS has no consumer hermes-bridge, so no 'hermes-bridge run' has started on it (with this HERMES_BRIDGE_CONSUMER); one that starts picks the action up\n",
		"stopped following action h1")
}

// call with a consumer that no bridge pulls from.
func TestCallHintNobodyPulling(t *testing.T) {
	e := newHintEnv(t, 50*time.Millisecond)
	e.bridgeConsumer()
	code, errOut := e.untilStderr(e.env, "bridges:", "call", "--op", "chat", "--prompt", "x", "--action-id", "h2", "--wait", "1h")
	requireHint(t, code, errOut,
		"action h2: no event or result after 50ms; still waiting (until --wait 1h0m0s)\n",
		"  stored:  stream HERMES_ACTIONS, message 1\n",
		"  bridges: none is pulling: consumer hermes-bridge has no pull request waiting, so no bridge is running, or every one is busy (0 actions in progress, 1 waiting to be delivered, this one among them)")
}

// call of an action id a bridge already holds (delivered, not acknowledged): the publish
// is a duplicate, and the hint says a bridge has it.
func TestCallHintDelivered(t *testing.T) {
	e := newHintEnv(t, 50*time.Millisecond)
	c := e.bridgeConsumer()
	e.publish("h3")
	if _, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	code, errOut := e.untilStderr(e.env, "bridges:", "call", "--op", "chat", "--prompt", "x", "--action-id", "h3")
	requireHint(t, code, errOut,
		"  stored:  stream HERMES_ACTIONS already held an action with this id (message 1): this publish was a duplicate, and the output followed is that action's\n",
		"  bridges: a bridge has it (delivered, not yet acknowledged; 1 action in progress on consumer hermes-bridge), and no event has come yet: Hermes may be slow to answer")
}

// call of an action a bridge has acknowledged, whose result is not where call looks.
func TestCallHintAcknowledged(t *testing.T) {
	e := newHintEnv(t, 50*time.Millisecond)
	c := e.bridgeConsumer()
	e.publish("h4")
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	noErr(t, err)
	for m := range batch.Messages() {
		noErr(t, m.DoubleAck(context.Background()))
	}
	code, errOut := e.untilStderr(e.env, "bridges:", "call", "--op", "chat", "--prompt", "x", "--action-id", "h4")
	requireHint(t, code, errOut,
		"  bridges: a bridge has finished with it (consumer hermes-bridge acknowledged message 1), but no result arrived on hermes.results.h4 in stream HERMES_OUTPUT: does this command use the bridge's HERMES_BRIDGE_PREFIX and HERMES_BRIDGE_OUTPUT_STREAM?")
}

// A user who may publish but not read the consumer's info gets the rest of the hint,
// and call keeps waiting: the refusal of the hint's own lookup does not end it.
func TestCallHintConsumerInfoRefused(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte(`
accounts { A { jetstream: enabled, users: [
  { user: ops, password: ops-pw }
  { user: agent, password: agent-pw, permissions: {
      publish: { allow: ["hermes.actions.>", "$JS.API.STREAM.INFO.HERMES_OUTPUT", "$JS.API.CONSUMER.CREATE.HERMES_OUTPUT.>",
                         "$JS.API.CONSUMER.MSG.NEXT.HERMES_OUTPUT.*", "$JS.API.CONSUMER.DELETE.HERMES_OUTPUT.*",
                         "$JS.API.CONSUMER.INFO.HERMES_OUTPUT.*"] }
      subscribe: { allow: ["_INBOX_agent.>"] } } }
] } }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newHintEnv(t, 50*time.Millisecond, func(o *natsembed.Options) { o.ConfigFile = conf })
	e.bridgeConsumer()
	agent := map[string]string{"NATS_URL": e.env["NATS_URL"], "NATS_USER": "agent", "NATS_PASSWORD": "agent-pw", "NATS_INBOX_PREFIX": "_INBOX_agent"}
	code, errOut := e.untilStderr(agent, "bridges:", "call", "--op", "chat", "--prompt", "x", "--action-id", "h5")
	requireHint(t, code, errOut,
		"  stored:  stream HERMES_ACTIONS, message 1\n",
		`  bridges: cannot tell: NATS user "agent" may not read the consumer's info (publish to $JS.API.CONSUMER.INFO.HERMES_ACTIONS.hermes-bridge)`)
	if strings.Contains(errOut, "permission denied") {
		t.Errorf("the refused lookup of the hint failed the command:\n%s", errOut)
	}
}

// watch of an id nothing is stored for.
func TestWatchHintUnknownID(t *testing.T) {
	e := newHintEnv(t, 50*time.Millisecond)
	code, errOut := e.untilStderr(e.env, "nothing is stored", "watch", "no-such-action")
	requireHint(t, code, errOut,
		"action no-such-action: no event or result after 50ms; still waiting (Ctrl-C stops following; the action goes on)\n",
		"  nothing is stored for it on hermes.events.no-such-action or hermes.results.no-such-action in stream HERMES_OUTPUT: the id may be unknown (mistyped, or older than the stream keeps outputs), or the action is not published yet, or it waits for a bridge\n")
}

// watch of a parked action prints the approval note and no hint; watch of one decided
// since prints neither (issue 13, item 9: the note was printed from the replay).
func TestWatchPendingNote(t *testing.T) {
	e := newApprovalsEnv(t)
	setHintAfter(t, time.Hour)
	pend := &events.Result{ActionID: "p1", CapabilityID: "cap:hermes_agent:primary:session_delete", Status: events.StatusPendingApproval,
		Output: json.RawMessage(`{"capability_id":"cap:hermes_agent:primary:session_delete","input":{"session_id":"s"},"input_sha256":"abc","expires_at":"2026-01-01T00:15:00Z"}`)}
	e.publishResult(pend)
	he := &hintEnv{t: t, js: e.js, env: e.env}
	code, errOut := he.untilStderr(e.env, "is waiting for approval", "watch", "p1")
	requireHint(t, code, errOut, "action p1 is waiting for approval (input_sha256 abc, expires 2026-01-01T00:15:00Z); review and decide it with:\n  hermes-bridge approve p1\n")

	e.publishResult(&events.Result{ActionID: "p1", CapabilityID: pend.CapabilityID, Status: events.StatusFailed, Output: json.RawMessage(`null`),
		Error: &events.ErrorInfo{Code: "approval_denied", Message: "denied by alice", Category: "permanent"}})
	code, out, errOut := runMain(context.Background(), e.env, "", "watch", "p1")
	if code != exitFailed || !strings.Contains(out, `"status": "failed"`) {
		t.Fatalf("watch of a denied action: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(errOut, "waiting for approval") {
		t.Errorf("watch of a decided action printed a stale approval note:\n%s", errOut)
	}
}

// The agent-chat role of deploy/nats-server.conf may read the shared consumer's info,
// so its call says whether a bridge consumes its action.
func TestCallHintAgentChatRole(t *testing.T) {
	for _, v := range []string{"BRIDGE_PASSWORD", "AGENT_CHAT_PASSWORD", "DASHBOARD_PASSWORD", "APPROVER_PASSWORD", "SYS_PASSWORD"} {
		t.Setenv(v, "pw-"+v)
	}
	t.Setenv("OPS_PASSWORD", "ops-pw")
	e := newHintEnv(t, 50*time.Millisecond, func(o *natsembed.Options) { o.ConfigFile = "../../deploy/nats-server.conf" })
	agent := map[string]string{"NATS_URL": e.env["NATS_URL"], "NATS_USER": "agent-chat", "NATS_PASSWORD": "pw-AGENT_CHAT_PASSWORD",
		"NATS_INBOX_PREFIX": "_INBOX_agent_chat"}
	code, errOut := e.untilStderr(agent, "bridges:", "call", "--op", "chat", "--prompt", "x", "--action-id", "h6")
	requireHint(t, code, errOut, "  bridges: none is consuming: stream HERMES_ACTIONS has no consumer hermes-bridge")
}
