package e2e_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestErrorClasses drives every error class end to end: a wrong endpoint key, a remote
// rejection, an incomplete agent, 5xx on safe and unsafe operations, the 429 gate,
// draining, refused connections and deadlines. Subtests share one harness and run in
// order; call counts are compared as differences. Subtests that fail an endpoint
// repeatedly use an endpoint of their own.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	dead := closedPortURL(t)
	h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent)), withConfig(func(c *bridge.Config) {
		c.Endpoints = append(c.Endpoints,
			bridge.Endpoint{ID: "badkey", BaseURL: c.Endpoints[0].BaseURL, Key: func() string { return "wrong-key-0123456789" }, MaxConcurrency: 2},
			bridge.Endpoint{ID: "flaky", BaseURL: c.Endpoints[0].BaseURL, Key: c.Endpoints[0].Key, MaxConcurrency: 2},
			bridge.Endpoint{ID: "dead-chat", BaseURL: dead, Key: c.Endpoints[0].Key, MaxConcurrency: 2},
			bridge.Endpoint{ID: "dead-models", BaseURL: dead, Key: c.Endpoints[0].Key, MaxConcurrency: 2})
	}))

	t.Run("authentication", func(t *testing.T) {
		h := h.at(t)
		for _, op := range []string{"models", "chat"} {
			before := h.fake.Calls(op)
			in := `{}`
			if op == "chat" {
				in = `{"prompt":"with the wrong key"}`
			}
			res, _ := h.callOn("badkey", op, in)
			e := requireFailed(t, res, "authentication")
			if e.HTTPStatus != 401 || e.Category != "auth" || e.Retryable || e.UncertainOutcome {
				t.Errorf("%s: error %s, want 401 auth, not retryable, certain", op, errString(e))
			}
			if c := h.fake.Calls(op) - before; c != 1 {
				t.Errorf("%s: %d calls, want 1 (authentication failures are not retried)", op, c)
			}
			if r := h.requests(op); r[len(r)-1].AuthValid {
				t.Errorf("%s: the fake saw a valid key", op)
			}
		}
		// health needs no key and still works on that endpoint.
		h.callOnOK("badkey", "health", `{}`)
	})

	t.Run("session_not_found", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("session_get")
		res, _ := h.call("session_get", `{"session_id":"no-such-session"}`)
		e := requireFailed(t, res, "remote_rejected")
		if e.HTTPStatus != 404 || detail(e, "remote_code") != "session_not_found" || e.Retryable {
			t.Errorf("error %s, want 404 session_not_found, not retryable", errString(e))
		}
		wantEq(t, h.fake.Calls("session_get")-before, 1, "%d calls, want 1 (a 404 is not retried even on a safe read)")
		if e.Message == "" || strings.Contains(e.Message, "no-such-session") {
			t.Errorf("message %q is empty or quotes the session id", e.Message)
		}
	})

	t.Run("agent_incomplete", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("chat")
		res, _ := h.call("chat", `{"prompt":"fail: no usable text"}`)
		e := requireFailed(t, res, "agent_incomplete")
		if e.HTTPStatus != 502 || !e.UncertainOutcome || e.Retryable {
			t.Errorf("error %s, want 502, uncertain, not retryable", errString(e))
		}
		wantEq(t, h.fake.Calls("chat")-before, 1, "%d calls, want 1")
	})

	t.Run("safe_500_retried", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("models")
		h.fake.InjectFault(hermestest.Fault{Route: "models", Status: 500, Times: 1})
		res := h.callOK("models", `{}`)
		wantEq(t, h.fake.Calls("models")-before, 2, "%d calls, want 2")
		h.requireResults(1, 10*time.Second, res.ActionID)
	})

	t.Run("safe_500_exhausted", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("session_messages")
		h.fake.InjectFault(hermestest.Fault{Route: "session_messages", Status: 503, Body: `{"error":{"code":"session_db_unavailable"}}`, Times: 1000})
		// On its own endpoint: a circuit breaker may pause an endpoint that keeps failing.
		res, _ := h.callOn("flaky", "session_messages", `{"session_id":"x"}`, withTimeoutMS(600))
		h.fake.ClearFaults()
		e := res.Error
		if res.Status != "failed" || e == nil || (e.Code != "remote_unavailable" && e.Code != "deadline_exceeded") {
			t.Fatalf("status %q error %s, want failed remote_unavailable (or deadline_exceeded)", res.Status, errString(e))
		}
		if e.UncertainOutcome {
			t.Errorf("a safe read reported an uncertain outcome")
		}
		if c := h.fake.Calls("session_messages") - before; c < 2 {
			t.Errorf("%d calls, want several retries", c)
		}
	})

	t.Run("unsafe_500_not_retried", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("chat")
		h.fake.InjectFault(hermestest.Fault{Route: "chat", Status: 500, Times: 1})
		res, _ := h.call("chat", `{"prompt":"server error"}`)
		e := requireFailed(t, res, "remote_unavailable")
		if !e.UncertainOutcome || e.Retryable || e.HTTPStatus != 500 {
			t.Errorf("error %s, want 500, uncertain, not retryable", errString(e))
		}
		wantEq(t, h.fake.Calls("chat")-before, 1, "%d calls, want exactly 1")
	})

	t.Run("gate_429_then_success", func(t *testing.T) {
		h := h.at(t)
		before := len(h.requests("chat"))
		h.fake.InjectFault(hermestest.Fault{Route: "chat", Status: 429, Times: 1})
		res := h.callOK("chat", `{"prompt":"after the gate"}`)
		rs := h.requests("chat")[before:]
		requireEq(t, len(rs), 2, "%d calls, want 2")
		if gap := rs[1].Time.Sub(rs[0].Time); gap < 900*time.Millisecond {
			t.Errorf("retried after %s; Retry-After: 1 was not honoured", gap)
		}
		h.requireResults(1, 10*time.Second, res.ActionID)
		lines := h.actionLogs(res.ActionID)
		retried := false
		for _, l := range lines {
			retried = retried || l.str("status") == "retrying" && l.str("code") == "remote_unavailable"
		}
		// The retry is a JetStream redelivery (delivery 2), but a gate 429 spends no
		// attempt: the action completes at attempt 1.
		if last := lines[len(lines)-1]; !retried || last.str("decision") != "ack" || last["delivery"] != 2.0 || last["attempt"] != 1.0 {
			t.Errorf("action log lines %v, want a retry then delivery 2 acknowledged at attempt 1 (a gate 429 is no attempt)", lines)
		}
	})

	t.Run("draining_503_then_success", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("responses")
		h.fake.InjectFault(hermestest.Fault{Route: "responses", Status: 503, Times: 1,
			Header: http.Header{"Retry-After": {"0"}}})
		h.callOK("responses", `{"input":"after draining"}`)
		wantEq(t, h.fake.Calls("responses")-before, 2, "%d calls, want 2")
	})

	t.Run("connection_refused", func(t *testing.T) {
		h := h.at(t)
		for _, op := range []string{"chat", "models"} {
			in := `{}`
			if op == "chat" {
				in = `{"prompt":"nobody listens"}`
			}
			// One endpoint per operation: a circuit breaker may pause an endpoint that
			// keeps failing, which is not what this checks.
			res, _ := h.callOn("dead-"+op, op, in, withTimeoutMS(10000))
			e := requireFailed(t, res, "transport")
			if !e.Retryable || e.UncertainOutcome {
				t.Errorf("%s: error %s, want retryable and certain", op, errString(e))
			}
			retries := 0
			for _, l := range h.actionLogs(res.ActionID) {
				if l.str("status") == "retrying" {
					retries++
				}
			}
			if retries < 1 {
				t.Errorf("%s: %d retries logged, want the refused connection retried", op, retries)
			}
		}
	})

	t.Run("deadline_exceeded", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("chat")
		start := time.Now()
		res, _ := h.call("chat", `{"prompt":"slow: past the deadline"}`, withTimeoutMS(300))
		e := requireFailed(t, res, "deadline_exceeded")
		if !e.UncertainOutcome {
			t.Errorf("uncertain_outcome false although Hermes had started")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("settled after %s for a 300ms deadline", d)
		}
		wantEq(t, h.fake.Calls("chat")-before, 1, "%d calls, want 1")
	})

	t.Run("still_serving", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("chat_stream", `{"prompt":"after every error"}`)
		checkStream(t, res, evs, "chat_stream", "stub reply: after every error")
	})
}

// TestConcurrencyGateRetried: the fake's real concurrency gate (one run at a time) answers
// 429 to concurrent chats; the bridge waits and retries them (no work started), and every
// action completes with its own single successful run.
func TestConcurrencyGateRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent), hermestest.WithMaxConcurrentRuns(1)))
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"slow: gated `+string(rune('a'+i))+`"}`)}))
	}
	for i, id := range ids {
		res := h.followOK(id)
		if got, want := jstr(output(t, res), "choices", 0, "message", "content"), "stub reply: slow: gated "+string(rune('a'+i)); got != want {
			t.Errorf("%s: content %q, want %q", id, got, want)
		}
	}
	total, gated := 0, 0
	for _, r := range h.requests("chat") {
		if jstr(body(t, r), "messages", 0, "content") == "" {
			t.Errorf("request without messages")
		}
		total++
	}
	for _, l := range h.logLines() {
		if l.str("message") == "action" && l.str("status") == "retrying" {
			gated++
		}
	}
	if total < 4 || gated < 1 {
		t.Errorf("%d chat requests and %d retries; want the gate to have refused some and the bridge to retry", total, gated)
	}
}
