package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// role is one client connection authenticated as a user of deploy/nats-server*.conf.
type role struct {
	name   string
	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client
	errs   chan error // asynchronous errors from the server (permission violations)
}

// connectAs connects to ns as user with the password in env var pwVar, using inbox as
// its inbox prefix ("" keeps _INBOX).
func connectAs(t *testing.T, ns *natsembed.Server, user, pwVar, inbox string) *role {
	t.Helper()
	r, opts := newRole(t, user, pwVar, inbox)
	r.nc, r.js = natsembed.Connect(t, ns, append(opts, nats.Name(user))...)
	r.client = client.New(r.js, client.WithSource("urn:test:"+user))
	return r
}

// newRole returns a role not yet connected and the options that authenticate it as
// user (password in env var pwVar) with inbox prefix inbox ("" keeps _INBOX) and
// collect the server's asynchronous errors in r.errs.
func newRole(t *testing.T, user, pwVar, inbox string) (*role, []nats.Option) {
	t.Helper()
	r := &role{name: user, errs: make(chan error, 64)}
	opts := []nats.Option{
		nats.UserInfo(user, envPassword(t, pwVar)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case r.errs <- err:
			default:
			}
		}),
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	return r, opts
}

// deployHarness runs the bridge against deploy/nats-server.conf (or, with teams,
// deploy/nats-server-teams.conf) with fresh passwords: the test's own connection is the
// ops user (team A's with teams), every bridge replica the bridge user (team A's). It
// returns the server's log; when the test fails, the log's permission violations are
// logged, and any of users is an error of the test.
func deployHarness(t *testing.T, teams bool, users []string, opts ...harnessOption) (*harness, *syncBuffer) {
	t.Helper()
	srvLog := &syncBuffer{}
	conf, ops, opsPw, bridgeUser, bridgePw := "../deploy/nats-server.conf", "ops", "OPS_PASSWORD", "bridge", "BRIDGE_PASSWORD"
	if teams {
		setPasswords(t, "TEAM_A_BRIDGE_PASSWORD", "TEAM_A_AGENT_PASSWORD", "TEAM_A_OPS_PASSWORD",
			"TEAM_B_BRIDGE_PASSWORD", "TEAM_B_AGENT_PASSWORD", "TEAM_B_OPS_PASSWORD",
			"OBSERVER_PASSWORD", "SYS_PASSWORD")
		conf, ops, opsPw, bridgeUser, bridgePw = "../deploy/nats-server-teams.conf", "ops-a", "TEAM_A_OPS_PASSWORD", "bridge-a", "TEAM_A_BRIDGE_PASSWORD"
	} else {
		setPasswords(t, "BRIDGE_PASSWORD", "AGENT_CHAT_PASSWORD", "DASHBOARD_PASSWORD", "APPROVER_PASSWORD",
			"OPS_PASSWORD", "SYS_PASSWORD")
	}
	h := newHarness(t, append([]harnessOption{
		withNATS(func(o *natsembed.Options) {
			o.ConfigFile = conf
			o.Logger = zerolog.New(srvLog)
		}),
		withClientNATS(nats.UserInfo(ops, envPassword(t, opsPw))),
		withBridgeNATS(nats.Name(bridgeUser), nats.UserInfo(bridgeUser, envPassword(t, bridgePw))),
	}, opts...)...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server violations:\n%s", strings.Join(serverViolations(srvLog, ""), "\n"))
		}
		for _, u := range users {
			if v := serverViolations(srvLog, u); len(v) > 0 {
				t.Errorf("%s hit %d permission violations:\n%s", u, len(v), strings.Join(v, "\n"))
			}
		}
	})
	return h, srvLog
}

var testPasswords = map[string]string{}

func envPassword(t *testing.T, v string) string {
	t.Helper()
	pw, ok := testPasswords[v]
	if !ok {
		t.Fatalf("no password for %s", v)
	}
	return pw
}

// setPasswords puts a fresh random password in each environment variable the
// configuration file references. It must run before the server reads the file.
func setPasswords(t *testing.T, vars ...string) {
	t.Helper()
	for _, v := range vars {
		pw := nuid.Next()
		testPasswords[v] = pw
		t.Setenv(v, pw)
	}
}

// violation waits for the server's permission-violation error naming subject.
func (r *role) violation(t *testing.T, subject string) {
	t.Helper()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case err := <-r.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
			t.Logf("%s: other async error: %v", r.name, err)
		case <-deadline:
			t.Fatalf("%s: no permission violation for %q", r.name, subject)
		}
	}
}

// noViolation checks that the server reported no error to r.
func (r *role) noViolation(t *testing.T) {
	t.Helper()
	if err := r.nc.FlushTimeout(2 * time.Second); err != nil {
		t.Fatalf("%s: flush: %v", r.name, err)
	}
	select {
	case err := <-r.errs:
		t.Fatalf("%s: unexpected async error: %v", r.name, err)
	default:
	}
}

// refusedPublish checks that a JetStream publish by r on subject is refused by the
// server: the publish gets no ack (the message is dropped before any stream sees it)
// and r is told it violated its permissions.
func refusedPublish(t *testing.T, r *role, subject string, publish func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := publish(ctx)
	if err == nil {
		t.Fatalf("%s: publish on %s succeeded", r.name, subject)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: publish on %s: %v, want a timeout (no ack)", r.name, subject, err)
	}
	r.violation(t, subject)
}

// refusedSubscribe checks that the server refuses r a subscription on subject.
func refusedSubscribe(t *testing.T, r *role, subject string) {
	t.Helper()
	sub, err := r.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatalf("%s: subscribe %s: %v", r.name, subject, err)
	}
	defer sub.Unsubscribe()
	r.violation(t, subject)
}

// storedOn counts the messages stream holds on subject (as ops).
func storedOn(t *testing.T, js jetstream.JetStream, stream, subject string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	requireOK(t, err, "stream info: %v")
	return info.State.Subjects[subject]
}

func followAs(t *testing.T, r *role, id string) (*events.Result, []*events.EventData) {
	t.Helper()
	// 45 s: one of the followed actions has a 2.7 MB output (through the object store), which
	// takes 2–13 s under -race on a loaded 2-core machine (6 copies of this test in parallel).
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var evs []*events.EventData
	res, err := r.client.Follow(ctx, id, func(e *events.EventData) error { evs = append(evs, e); return nil }, nil)
	if err != nil {
		t.Fatalf("%s: follow %s: %v", r.name, id, err)
	}
	return res, evs
}

func publishAs(t *testing.T, r *role, op string, a events.Action) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, err := r.client.Publish(ctx, "primary", op, a)
	if err != nil {
		t.Fatalf("%s: publish %s: %v", r.name, op, err)
	}
	return id
}

// serverViolations returns the server's permission-violation log lines of user.
func serverViolations(log *syncBuffer, user string) []string {
	var out []string
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "Violation") && (user == "" || strings.Contains(line, "/user:"+user+`\"`)) {
			out = append(out, line)
		}
	}
	return out
}

// accessAgent answers like the stub: slowly for "slow" prompts, after 10 s (or never,
// if cancelled) for "hang", and with 2.7 MB for "big".
func accessAgent(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
	switch {
	case strings.Contains(turn.UserText, "big"):
		return hermestest.Reply{Text: strings.Repeat("findings ", 300_000), Deltas: 1}
	case strings.Contains(turn.UserText, "hang"):
		select {
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
		}
	case strings.Contains(turn.UserText, "slow"):
		select {
		case <-time.After(400 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return hermestest.StubAgent(ctx, turn)
}

// TestAccessControl runs the bridge against deploy/nats-server.conf, connected as the
// least-privilege bridge user, and shows each role can do what it should and nothing else.
func TestAccessControl(t *testing.T) {
	h, srvLog := deployHarness(t, false, []string{"bridge"},
		withFake(hermestest.WithAgent(accessAgent)),
		// A short ack wait: the action cancelled below sends in-progress heartbeats.
		withConfig(func(c *bridge.Config) { c.AckWait = 2 * time.Second }),
	)
	agent := connectAs(t, h.ns, "agent-chat", "AGENT_CHAT_PASSWORD", "_INBOX_agent_chat")
	dash := connectAs(t, h.ns, "dashboard", "DASHBOARD_PASSWORD", "_INBOX_dashboard")
	appr := connectAs(t, h.ns, "approver", "APPROVER_PASSWORD", "_INBOX_approver")

	var streamID string
	t.Run("agent invokes chat and chat_stream", func(t *testing.T) {
		id := publishAs(t, agent, "chat", events.Action{Input: mustJSON(t, `{"prompt":"hello"}`)})
		res, _ := followAs(t, agent, id)
		requireCompleted(t, res)
		streamID = publishAs(t, agent, "chat_stream", events.Action{Input: mustJSON(t, `{"prompt":"stream please"}`)})
		res, evs := followAs(t, agent, streamID)
		checkStream(t, res, evs, "chat_stream", "stub reply: stream please")
		agent.noViolation(t)
	})

	t.Run("agent cannot invoke anything else", func(t *testing.T) {
		for _, op := range []string{"session_delete", "session_create", "models"} {
			subj := "hermes.actions.primary." + op
			refusedPublish(t, agent, subj, func(ctx context.Context) error {
				_, err := agent.client.Publish(ctx, "primary", op, events.Action{
					Input: mustJSON(t, `{"session_id":"s-1"}`), IdempotencyKey: "k-" + op})
				return err
			})
			if n := storedOn(t, h.js, "HERMES_ACTIONS", subj); n != 0 {
				t.Errorf("actions stream holds %d messages on %s", n, subj)
			}
		}
		// Nor approve, steer, forge outputs, or read the actions stream or other inboxes.
		refusedPublish(t, agent, "hermes.approvals.x1", func(ctx context.Context) error {
			return agent.client.Decide(ctx, "x1", events.Approval{Decision: "approve"})
		})
		refusedPublish(t, agent, "hermes.steer.x1", func(ctx context.Context) error {
			_, err := agent.client.Steer(ctx, "x1", "focus")
			return err
		})
		requireOK(t, agent.nc.Publish("hermes.results.x1", []byte(`{}`)))
		agent.violation(t, "hermes.results.x1")
		refusedSubscribe(t, agent, "hermes.actions.>")
		refusedSubscribe(t, agent, "_INBOX.>")
		refusedSubscribe(t, agent, "_INBOX_dashboard.>")
		refusedPublish(t, agent, "$JS.API.STREAM.INFO.HERMES_ACTIONS", func(ctx context.Context) error {
			_, err := agent.js.Stream(ctx, "HERMES_ACTIONS")
			return err
		})
		wantEq(t, h.fake.Calls("session_delete")+h.fake.Calls("session_create")+h.fake.Calls("models"), 0, "Hermes was called %d times for capabilities the agent may not invoke")
	})

	t.Run("dashboard replays and follows", func(t *testing.T) {
		// Replay of an action that finished before the dashboard looked.
		res, evs := followAs(t, dash, streamID)
		checkStream(t, res, evs, "chat_stream", "stub reply: stream please")
		// Live: every result as it is published.
		sub, err := dash.nc.SubscribeSync("hermes.results.>")
		requireOK(t, err)
		defer sub.Unsubscribe()
		requireOK(t, dash.nc.Flush())
		id := publishAs(t, agent, "chat", events.Action{Input: mustJSON(t, `{"prompt":"live"}`)})
		m, err := sub.NextMsg(10 * time.Second)
		requireOK(t, err, "live result: %v")
		if m.Subject != "hermes.results."+id {
			t.Errorf("live result on %s, want hermes.results.%s", m.Subject, id)
		}
		// An output too large for one message: the dashboard reads it from the object store.
		big := publishAs(t, agent, "chat", events.Action{Input: mustJSON(t, `{"prompt":"big report"}`)})
		res, _ = followAs(t, dash, big)
		requireCompleted(t, res)
		if got := jstr(output(t, res), "choices", 0, "message", "content"); len(got) != len("findings ")*300_000 {
			t.Errorf("large output resolved to %d bytes", len(got))
		}
		dash.noViolation(t)
	})

	t.Run("dashboard reads dead letters", func(t *testing.T) {
		// The agent may publish on its subject; a message that is not a CloudEvent goes to the DLQ.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		junkID := "junk-" + nuid.Next()
		if _, err := agent.js.PublishMsg(ctx, &nats.Msg{Subject: "hermes.actions.primary.chat",
			Header: nats.Header{"Nats-Msg-Id": {junkID}}, Data: []byte("not json " + junkID)}); err != nil {
			t.Fatalf("agent publish: %v", err)
		}
		cons, err := dash.js.OrderedConsumer(ctx, "HERMES_DLQ", jetstream.OrderedConsumerConfig{})
		requireOK(t, err, "dashboard: DLQ consumer: %v")
		for {
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			requireOK(t, err, "dashboard: no dead letter: %v")
			if strings.Contains(string(m.Data()), junkID) {
				break
			}
		}
		dash.noViolation(t)
	})

	t.Run("dashboard publishes nothing", func(t *testing.T) {
		refusedPublish(t, dash, "hermes.actions.primary.chat", func(ctx context.Context) error {
			_, err := dash.client.Publish(ctx, "primary", "chat", events.Action{Input: mustJSON(t, `{"prompt":"x"}`)})
			return err
		})
		refusedPublish(t, dash, "hermes.approvals."+streamID, func(ctx context.Context) error {
			return dash.client.Decide(ctx, streamID, events.Approval{Decision: "approve"})
		})
		refusedPublish(t, dash, "hermes.cancel."+streamID, func(ctx context.Context) error {
			_, err := dash.client.Cancel(ctx, streamID)
			return err
		})
		refusedPublish(t, dash, "hermes.steer."+streamID, func(ctx context.Context) error {
			_, err := dash.client.Steer(ctx, streamID, "focus")
			return err
		})
		refusedPublish(t, dash, "$JS.API.STREAM.DELETE.HERMES_OUTPUT", func(ctx context.Context) error {
			return dash.js.DeleteStream(ctx, "HERMES_OUTPUT")
		})
		refusedPublish(t, dash, "$JS.API.STREAM.PURGE.HERMES_OUTPUT", func(ctx context.Context) error {
			_, err := dash.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE.HERMES_OUTPUT", nil)
			return err
		})
		requireOK(t, dash.nc.Publish("hermes.results."+streamID, []byte(`{}`)))
		dash.violation(t, "hermes.results."+streamID)
		if n := storedOn(t, h.js, "HERMES_OUTPUT", "hermes.results."+streamID); n != 1 {
			t.Errorf("%d results stored for %s, want 1", n, streamID)
		}
	})

	t.Run("approver decides and cancels", func(t *testing.T) {
		// ops (the only role here allowed to) asks for a session to be deleted: the bridge
		// parks it; the approver sees the pending_approval result and approves it.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		created, _ := h.call("session_create", `{"body":{"id":"s-approved"}}`, withKey("create-s-approved"))
		requireCompleted(t, created)
		del := h.publish("session_delete", events.Action{Input: mustJSON(t, `{"session_id":"s-approved"}`), IdempotencyKey: "del-1"})
		var pending *events.Result
		res, err := appr.client.Follow(ctx, del, nil, func(r *events.Result) {
			if pending == nil {
				pending = r
				hash := jstr(jsonValue(t, r.Output), "input_sha256")
				if err := appr.client.Decide(ctx, del, events.Approval{Decision: events.DecisionApprove,
					Approver: "alice", Reason: "requested by ops", InputSHA256: hash}); err != nil {
					t.Errorf("approver: decide: %v", err)
				}
			}
		})
		if err != nil {
			t.Fatalf("approver: follow %s: %v", del, err)
		}
		if pending == nil {
			t.Fatalf("the approver saw no pending_approval result")
		}
		requireCompleted(t, res)
		wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1 (the approved one)")
		// A running action: the approver cancels it.
		before := h.fake.Calls("chat")
		started := time.Now()
		id := publishAs(t, agent, "chat", events.Action{Input: mustJSON(t, `{"prompt":"hang until cancelled"}`)})
		h.until(5*time.Second, "the chat reached Hermes", func() bool { return h.fake.Calls("chat") != before })
		// A reader may create consumers on the output stream, and JetStream does not check
		// a push consumer's deliver subject against its creator's publish permissions. The
		// server delivers only where a subscription names the subject literally, and the
		// bridge listens with wildcards, so pushing outputs at hermes.cancel.<id> or at an
		// actions subject neither cancels nor invokes anything.
		for i, subj := range []string{"hermes.cancel." + id, "hermes.steer." + id, "hermes.actions.primary.session_delete"} {
			if _, err := dash.js.CreateOrUpdateConsumer(ctx, "HERMES_OUTPUT", jetstream.ConsumerConfig{
				Name: fmt.Sprintf("push-%d", i), DeliverSubject: subj, AckPolicy: jetstream.AckNonePolicy,
			}); err != nil {
				t.Fatalf("dashboard: push consumer: %v", err)
			}
		}
		time.Sleep(300 * time.Millisecond)
		wantEq(t, storedOn(t, h.js, "HERMES_ACTIONS", "hermes.actions.primary.session_delete"), 1, "%d session_delete actions stored, want 1 (the approved one)")
		dash.noViolation(t)
		time.Sleep(time.Until(started.Add(1500 * time.Millisecond))) // two heartbeats at least
		reply, err := appr.client.Cancel(ctx, id)                    // still running: the push did not cancel it
		requireOK(t, err, "approver: cancel: %v")
		if reply.State != events.CancelCancelled {
			t.Errorf("cancel reply %+v, want cancelled", reply)
		}
		res, _ = followAs(t, appr, id)
		wantEq(t, res.Status, "cancelled", "cancelled action ended %s")
		// The approver may steer (the bridge answers on its inbox): a chat is not a run.
		steer, err := appr.client.Steer(ctx, id, "focus")
		requireOK(t, err, "approver: steer: %v")
		if steer.State != events.SteerRefused || steer.Code != events.SteerNotARun {
			t.Errorf("steer reply %+v, want refused not_a_run", steer)
		}
		// It may watch the dead letters, for those of its decisions (approve and deny).
		sub, err := appr.nc.SubscribeSync("hermes.dlq")
		requireOK(t, err, "approver: subscribe hermes.dlq: %v")
		requireOK(t, sub.Unsubscribe(), "approver: unsubscribe: %v")
		appr.noViolation(t)
		// ... and invokes nothing.
		refusedPublish(t, appr, "hermes.actions.primary.session_delete", func(ctx context.Context) error {
			_, err := appr.client.Publish(ctx, "primary", "session_delete", events.Action{
				Input: mustJSON(t, `{"session_id":"s-1"}`), IdempotencyKey: "k-appr"})
			return err
		})
	})

	t.Run("agent cancels its action", func(t *testing.T) {
		// issue 26, item 16: agent-chat may cancel the chats it started.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		before := h.fake.Calls("chat")
		id := publishAs(t, agent, "chat", events.Action{Input: mustJSON(t, `{"prompt":"hang until cancelled"}`)})
		h.until(5*time.Second, "the chat reached Hermes", func() bool { return h.fake.Calls("chat") != before })
		reply, err := agent.client.Cancel(ctx, id)
		requireOK(t, err, "agent: cancel: %v")
		wantEq(t, reply.State, events.CancelCancelled, "agent's cancel: %s")
		res, _ := followAs(t, agent, id)
		wantEq(t, res.Status, "cancelled", "cancelled action ended %s")
		agent.noViolation(t)
	})

	t.Run("bridge needs nothing more", func(t *testing.T) {
		// The same idempotency key twice while the first is in flight: the duplicate waits
		// for the first (a KV watch) and replays its result.
		a := events.Action{Input: mustJSON(t, `{"prompt":"slow one"}`), IdempotencyKey: "slow-key"}
		calls := h.fake.Calls("chat")
		first := publishAs(t, agent, "chat", a)
		second := publishAs(t, agent, "chat", a)
		r1, _ := followAs(t, agent, first)
		r2, _ := followAs(t, agent, second)
		requireCompleted(t, r1)
		requireCompleted(t, r2)
		// Either may win the claim (two workers); the other replays it.
		if !(r2.ReplayOf != nil && *r2.ReplayOf == first && r1.ReplayOf == nil) &&
			!(r1.ReplayOf != nil && *r1.ReplayOf == second && r2.ReplayOf == nil) {
			t.Errorf("duplicates: replay_of %v and %v, want one to replay the other", r1.ReplayOf, r2.ReplayOf)
		}
		wantEq(t, h.fake.Calls("chat")-calls, 1, "chat calls for two copies of one key: %d, want 1")
		if v := serverViolations(srvLog, "bridge"); len(v) > 0 {
			t.Fatalf("the bridge hit permission violations:\n%s", strings.Join(v, "\n"))
		}
		if len(serverViolations(srvLog, "agent-chat")) == 0 {
			t.Fatalf("no violation of agent-chat found in the server log; is the log matched correctly?")
		}
	})

	t.Run("ops discovers the bridge and asks its status", func(t *testing.T) {
		// The bridge user may register the micro service and answer on hermes.status.
		wantEq(t, len(collect(t, h.nc, "$SRV.PING.hermes-bridge", time.Second)), 1, "%d PING replies, want 1")
		wantEq(t, len(collect(t, h.nc, "$SRV.INFO", time.Second)), 1, "%d INFO replies, want 1")
		id := publishAs(t, agent, "chat", events.Action{Input: mustJSON(t, `{"prompt":"status please"}`)})
		requireCompleted(t, func() *events.Result { r, _ := followAs(t, agent, id); return r }())
		if r := statusOf(t, h.nc, id); r.State != "settled" || r.Result == nil || r.Result.Status != events.StatusCompleted {
			t.Errorf("status: %+v", r)
		}
		// The agent and the approver may ask the status of an action (issue 26, item 16);
		// the dashboard may not, and only ops may discover the service.
		for _, c := range []*role{agent, appr} {
			if r := statusOf(t, c.nc, id); r.State != "settled" {
				t.Errorf("status as %s: %+v", c.name, r)
			}
			c.noViolation(t)
		}
		requireOK(t, dash.nc.PublishRequest("hermes.status", dash.nc.NewRespInbox(), []byte(`{"action_id":"`+id+`"}`)))
		dash.violation(t, "hermes.status")
		requireOK(t, agent.nc.PublishRequest("$SRV.PING", agent.nc.NewRespInbox(), nil))
		agent.violation(t, "$SRV.PING")
		if v := serverViolations(srvLog, "bridge"); len(v) > 0 {
			t.Fatalf("the bridge hit permission violations:\n%s", strings.Join(v, "\n"))
		}
	})
}

// TestAccessControlTeams runs deploy/nats-server-teams.conf: one account per team, each
// with its own bridge. Team A's agent reads its own results and cannot see team B's;
// the observer account sees both, read-only, through its imports.
func TestAccessControlTeams(t *testing.T) {
	h, _ := deployHarness(t, true, []string{"bridge-a", "bridge-b"})
	// Team B's bridge: same configuration, same Hermes, its own account and credentials.
	hb := h.at(t)
	hb.bridgeNATS = []nats.Option{nats.UserInfo("bridge-b", envPassword(t, "TEAM_B_BRIDGE_PASSWORD"))}
	hb.startBridge()

	agentA := connectAs(t, h.ns, "agent-a", "TEAM_A_AGENT_PASSWORD", "_INBOX_agent_chat")
	agentB := connectAs(t, h.ns, "agent-b", "TEAM_B_AGENT_PASSWORD", "_INBOX_agent_chat")
	observer := connectAs(t, h.ns, "observer", "OBSERVER_PASSWORD", "")

	// Live subscriptions opened before anything runs: team A's agent on every result
	// its account can see, the observer on both teams'.
	liveA, err := agentA.nc.SubscribeSync("hermes.results.>")
	requireOK(t, err)
	liveObs := make(chan *nats.Msg, 16)
	for _, subj := range []string{"team_a.hermes.results.>", "team_b.hermes.results.>"} {
		if _, err := observer.nc.ChanSubscribe(subj, liveObs); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*role{agentA, observer} {
		requireOK(t, r.nc.Flush())
	}

	idB := publishAs(t, agentB, "chat", events.Action{Input: mustJSON(t, `{"prompt":"team b secret"}`)})
	resB, _ := followAs(t, agentB, idB)
	requireCompleted(t, resB)
	idA := publishAs(t, agentA, "chat", events.Action{Input: mustJSON(t, `{"prompt":"team a question"}`)})
	resA, _ := followAs(t, agentA, idA)
	requireCompleted(t, resA)
	wantEq(t, h.fake.Calls("chat"), 2, "chat calls %d, want 2 (one per team)")

	t.Run("team A sees only its own results", func(t *testing.T) {
		// Live: the only result team A's subscription ever sees is its own.
		m, err := liveA.NextMsg(5 * time.Second)
		requireOK(t, err, "team A's own live result: %v")
		if m.Subject != "hermes.results."+idA {
			t.Fatalf("team A received %s, want only hermes.results.%s", m.Subject, idA)
		}
		if m, err := liveA.NextMsg(200 * time.Millisecond); err == nil {
			t.Fatalf("team A received another result: %s", m.Subject)
		}
		// Replay: team A's output stream has no trace of team B's action.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if _, err := agentA.client.Follow(ctx, idB, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("team A following team B's action: %v, want nothing until the deadline", err)
		}
		wantEq(t, storedOn(t, h.js, "HERMES_OUTPUT", "hermes.results."+idB), 0, "team A's output stream holds %d results of team B's action")
		// Team A's own action replays.
		res, _ := followAs(t, agentA, idA)
		requireCompleted(t, res)
		agentA.noViolation(t)
	})

	t.Run("observer sees both teams read-only", func(t *testing.T) {
		got := map[string]bool{}
		for len(got) < 2 {
			select {
			case m := <-liveObs:
				got[m.Subject] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("observer: no result (got %v)", got)
			}
		}
		observer.noViolation(t)
		for _, s := range []string{"team_a.hermes.results." + idA, "team_b.hermes.results." + idB} {
			if !got[s] {
				t.Errorf("observer did not see %s (got %v)", s, got)
			}
		}
		requireOK(t, observer.nc.Publish("hermes.actions.primary.chat", []byte(`{}`)))
		observer.violation(t, "hermes.actions.primary.chat")
	})
}
