package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// cliRole is a user of a deploy/ configuration running the bridge's CLI.
type cliRole struct {
	h                 *harness
	srvLog            *syncBuffer
	user, pwVar, inbx string
}

// env is the role's CLI environment: the server, its credentials and, unless inbox is
// "", its inbox prefix.
func (r cliRole) env(inbox string) []string {
	env := []string{"NATS_URL=" + r.h.ns.ClientURL(), "NATS_USER=" + r.user, "NATS_PASSWORD=" + envPassword(r.h.t, r.pwVar)}
	if inbox != "" {
		env = append(env, "NATS_INBOX_PREFIX="+inbox)
	}
	return env
}

// run runs one CLI command as the role with its inbox prefix and checks that the
// server logged no permission violation of the role meanwhile.
func (r cliRole) run(args ...string) (string, string, int) {
	r.h.t.Helper()
	before := len(serverViolations(r.srvLog, r.user))
	out, errOut, code := r.h.cliEnv(r.env(r.inbx), args...)
	// The server logs a violation as it refuses the message, before the CLI hears of it.
	if v := serverViolations(r.srvLog, r.user); len(v) > before {
		r.h.t.Errorf("%s %v: permission violations:\n%s\nstdout:\n%s\nstderr:\n%s", r.user, args, strings.Join(v[before:], "\n"), out, errOut)
	}
	return out, errOut, code
}

// refused runs a command the role may not use and checks it fails fast (exit 2) with
// a message naming the refused subject and what the role lacks.
func (r cliRole) refused(env []string, args []string, want ...string) {
	r.h.t.Helper()
	start := time.Now()
	out, errOut, code := r.h.cliEnv(env, args...)
	r.h.t.Logf("%s %v: exit %d after %s:\n%s", r.user, args, code, time.Since(start).Round(time.Millisecond), errOut)
	if code != 2 {
		r.h.t.Errorf("%s %v: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", r.user, args, code, out, errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			r.h.t.Errorf("%s %v: stderr lacks %q:\n%s", r.user, args, w, errOut)
		}
	}
	// Fast: well before any of the commands' own timeouts (5 s for cancel, 15 s to publish).
	if d := time.Since(start); d > 4*time.Second {
		r.h.t.Errorf("%s %v: took %s to fail; want a fast permission error", r.user, args, d)
	}
}

// TestCLIRoles runs the bridge's own CLI as each role of deploy/nats-server.conf against
// a bridge connected as its least-privilege user (issue 13, item 2): each role's commands
// work without a single permission violation (issue 26, item 16: agent-chat's watch,
// status and cancel; the approver's status, and approve and deny waiting for their
// effect), and a command the role may not use fails at once, naming the subject and the
// missing permission.
func TestCLIRoles(t *testing.T) {
	h, srvLog := deployHarness(t, false, []string{"bridge"}, withFake(hermestest.WithAgent(accessAgent)),
		withConfig(func(c *bridge.Config) { c.AckWait = 2 * time.Second }))
	bridgeBinary(t)
	agent := cliRole{h, srvLog, "agent-chat", "AGENT_CHAT_PASSWORD", "_INBOX_agent_chat"}
	dash := cliRole{h, srvLog, "dashboard", "DASHBOARD_PASSWORD", "_INBOX_dashboard"}
	appr := cliRole{h, srvLog, "approver", "APPROVER_PASSWORD", "_INBOX_approver"}

	var streamID string
	t.Run("agent-chat: call", func(t *testing.T) {
		out, errOut, code := agent.run("call", "--op", "chat", "--prompt", "hello", "--json")
		if code != 0 || !strings.Contains(out, `"status": "completed"`) {
			t.Fatalf("call chat: exit %d\n%s\n%s", code, out, errOut)
		}
		streamID = "roles-stream-1"
		out, errOut, code = agent.run("call", "--prompt", "stream please", "--action-id", streamID)
		if code != 0 || !strings.HasPrefix(out, "stub reply: stream please\n") {
			t.Fatalf("call chat_stream: exit %d\n%s\n%s", code, out, errOut)
		}
		// What the agent may not invoke is refused at once, naming the subject.
		agent.refused(agent.env(agent.inbx),
			[]string{"call", "--op", "session_delete", "--input", `{"session_id":"s-1"}`, "--key", "k-1"},
			"hermes-bridge call: permission denied on hermes.actions.primary.session_delete:",
			`NATS user "agent-chat" may not publish to "hermes.actions.primary.session_delete"`)
		agent.refused(agent.env(agent.inbx), []string{"steer", streamID, "focus"},
			"hermes-bridge steer: permission denied on hermes.steer."+streamID+":",
			`NATS user "agent-chat" may not publish to "hermes.steer.`+streamID+`"`)
		wantEq(t, h.fake.Calls("session_delete"), 0, "Hermes was called %d times for session_delete")
	})

	// issue 26, item 16: the agent may follow, ask the status of and cancel its actions.
	t.Run("agent-chat: watch, status, cancel", func(t *testing.T) {
		out, errOut, code := agent.run("watch", "--json", streamID)
		if code != 0 || !strings.Contains(out, `"status": "completed"`) {
			t.Fatalf("watch: exit %d\n%s\n%s", code, out, errOut)
		}
		out, errOut, code = agent.run("status", streamID)
		if code != 0 || !strings.Contains(out, "state        settled\n") {
			t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
		}
		out, errOut, code = agent.run("cancel", streamID)
		if code != 0 || strings.TrimSpace(out) != "already settled" {
			t.Fatalf("cancel of a settled action: exit %d\n%s\n%s", code, out, errOut)
		}
		// A chat still running: cancelled.
		id := "roles-running-1"
		before := h.fake.Calls("chat")
		out, errOut, code = agent.run("call", "--op", "chat", "--prompt", "hang until cancelled", "--action-id", id, "--no-follow")
		if code != 0 {
			t.Fatalf("call: exit %d\n%s\n%s", code, out, errOut)
		}
		h.until(10*time.Second, "the chat reached Hermes", func() bool { return h.fake.Calls("chat") != before })
		out, errOut, code = agent.run("cancel", id)
		if code != 0 || strings.TrimSpace(out) != "cancelled" {
			t.Fatalf("cancel of a running action: exit %d\n%s\n%s", code, out, errOut)
		}
		if _, _, code = agent.run("watch", "--json", id); code != 3 {
			t.Errorf("watch of the cancelled chat: exit %d, want 3", code)
		}
	})

	t.Run("dashboard: watch", func(t *testing.T) {
		out, errOut, code := dash.run("watch", streamID)
		if code != 0 || !strings.HasPrefix(out, "stub reply: stream please\n") || !strings.Contains(out, `"status": "completed"`) {
			t.Fatalf("watch: exit %d\n%s\n%s", code, out, errOut)
		}
		out, errOut, code = dash.run("watch", "--events", streamID)
		if code != 0 || !strings.Contains(out, `"status":"completed"`) {
			t.Fatalf("watch --events: exit %d\n%s\n%s", code, out, errOut)
		}
		// The flag works as well as the variable.
		out, errOut, code = h.cliEnv(dash.env(""), "watch", "--json", "--inbox-prefix", dash.inbx, streamID)
		if code != 0 || !strings.Contains(out, `"status": "completed"`) {
			t.Fatalf("watch --inbox-prefix: exit %d\n%s\n%s", code, out, errOut)
		}
		// Without its inbox prefix: refused at once, saying which prefix setting to use.
		dash.refused(dash.env(""), []string{"watch", streamID},
			"hermes-bridge watch: permission denied on _INBOX.",
			`NATS user "dashboard" may not subscribe to "_INBOX.`,
			"set NATS_INBOX_PREFIX (or --inbox-prefix) to the user's inbox prefix")
		// It publishes nothing.
		dash.refused(dash.env(dash.inbx), []string{"call", "--prompt", "x"},
			"hermes-bridge call: permission denied on hermes.actions.primary.chat_stream:")
		dash.refused(dash.env(dash.inbx), []string{"cancel", streamID},
			"hermes-bridge cancel: permission denied on hermes.cancel."+streamID+":")
		dash.refused(dash.env(dash.inbx), []string{"steer", streamID, "focus"},
			"hermes-bridge steer: permission denied on hermes.steer."+streamID+":")
		dash.refused(dash.env(dash.inbx), []string{"status", streamID},
			"hermes-bridge status: permission denied on hermes.status:")
	})

	t.Run("ops: status", func(t *testing.T) {
		ops := cliRole{h, srvLog, "ops", "OPS_PASSWORD", ""}
		out, errOut, code := ops.run("status", streamID)
		if code != 0 || !strings.Contains(out, "state        settled\n") || !strings.Contains(out, "result       completed\n") {
			t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("approver: pending, approve, deny, cancel, steer, status, watch", func(t *testing.T) {
		park := func(sid string) string {
			res, _ := h.call("session_create", map[string]any{"body": map[string]any{"id": sid}}, withKey("create-"+sid))
			requireCompleted(t, res)
			id := h.publish("session_delete", events.Action{Input: mustJSON(t, map[string]any{"session_id": sid}), IdempotencyKey: "del-" + sid})
			h.pendingOf(id)
			return id
		}
		approved, denied, cancelled := park("roles-1"), park("roles-2"), park("roles-3")
		out, errOut, code := appr.run("pending")
		if code != 0 {
			t.Fatalf("pending: exit %d\n%s\n%s", code, out, errOut)
		}
		for _, id := range []string{approved, denied, cancelled} {
			if !strings.Contains(out, id) {
				t.Errorf("pending does not list %s:\n%s", id, out)
			}
		}
		out, errOut, code = appr.run("pending", "--json")
		if code != 0 || !strings.Contains(out, approved) {
			t.Fatalf("pending --json: exit %d\n%s\n%s", code, out, errOut)
		}
		out, errOut, code = appr.run("approve", approved, "--yes", "--reason", "ticket OPS-42")
		if code != 0 || !strings.Contains(out, `"status": "completed"`) || !strings.Contains(errOut, "approved: the decision took effect") {
			t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
		}
		// deny waits for the effect and reports it (issue 26, item 8).
		out, errOut, code = appr.run("deny", denied, "--yes", "--reason", "wrong session", "--json")
		if code != 0 || !strings.Contains(out, `"code": "approval_denied"`) ||
			!strings.Contains(errOut, "denied: action "+denied+" settled failed (approval_denied") {
			t.Fatalf("deny: exit %d\n%s\n%s", code, out, errOut)
		}
		res, _ := h.follow(denied)
		requireFailed(t, res, "approval_denied")
		out, errOut, code = appr.run("status", denied)
		if code != 0 || !strings.Contains(out, "decision     deny\n") {
			t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
		}
		out, errOut, code = appr.run("watch", "--json", approved)
		if code != 0 || !strings.Contains(out, `"status": "completed"`) {
			t.Fatalf("watch: exit %d\n%s\n%s", code, out, errOut)
		}
		out, errOut, code = appr.run("cancel", cancelled)
		if code != 0 || strings.TrimSpace(out) != "cancelled" {
			t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
		}
		if res, _ := h.follow(cancelled); res.Status != events.StatusCancelled {
			t.Errorf("cancelled parked action: %s", res.Status)
		}
		// steer reaches the bridge and its answer the approver: a session_delete is not a run.
		out, errOut, code = appr.run("steer", cancelled, "focus")
		if code != 1 || !strings.Contains(errOut, "refused: not_a_run:") {
			t.Fatalf("steer: exit %d\n%s\n%s", code, out, errOut)
		}
		wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1 (the approved one)")
		out, errOut, code = appr.run("pending")
		if code != 0 || strings.TrimSpace(out) != "no parked actions" {
			t.Errorf("pending after the decisions: exit %d\n%s\n%s", code, out, errOut)
		}
		// Without its inbox prefix, pending fails at once instead of hanging.
		appr.refused(appr.env(""), []string{"pending"},
			"hermes-bridge pending: permission denied on _INBOX.", "NATS_INBOX_PREFIX")
		// It invokes nothing.
		appr.refused(appr.env(appr.inbx), []string{"call", "--op", "chat", "--prompt", "x"},
			"hermes-bridge call: permission denied on hermes.actions.primary.chat:",
			`NATS user "approver" may not publish to "hermes.actions.primary.chat"`)
	})
}

// TestCLIRolesTeams: in deploy/nats-server-teams.conf a team's agent uses `call` in its
// own account, and the observer account (core NATS only) is refused `watch` clearly.
func TestCLIRolesTeams(t *testing.T) {
	h, srvLog := deployHarness(t, true, nil)
	bridgeBinary(t)
	agent := cliRole{h, srvLog, "agent-a", "TEAM_A_AGENT_PASSWORD", "_INBOX_agent_chat"}
	observer := cliRole{h, srvLog, "observer", "OBSERVER_PASSWORD", ""}
	out, errOut, code := agent.run("call", "--op", "chat", "--prompt", "team a question", "--action-id", "team-a-1", "--json")
	if code != 0 || !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("agent-a call: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = agent.run("watch", "--json", "team-a-1")
	if code != 0 || !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("agent-a watch: exit %d\n%s\n%s", code, out, errOut)
	}
	agent.refused(agent.env(agent.inbx), []string{"call", "--op", "models"},
		"hermes-bridge call: permission denied on hermes.actions.primary.models:")
	observer.refused(observer.env(""), []string{"watch", "team-a-1"},
		"hermes-bridge watch: permission denied on ", `NATS user "observer" may not`)
}
