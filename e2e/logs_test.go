package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestActionLogs: one "action" log line per settled action with its id, capability,
// status, duration and attempt; and no prompt, output, session id, session key or bearer
// key ever reaches the log.
func TestActionLogs(t *testing.T) {
	t.Parallel()
	const bearer = "SECRET-BEARER-KEY-0123456789abcdef"
	h := newHarness(t, withFake(hermestest.WithAPIKey(bearer)))
	secrets := []string{bearer, "SECRET-PROMPT", "SECRET-SESSION-ID", "SECRET-SESSION-KEY", "SECRET-ROW",
		"SECRET-MESSAGE", "SECRET-MISSING", "SECRET-DLQ", "SECRET-INVALID", "SECRET-RESPONSE"}

	type action struct {
		id, capability, status string
	}
	var acts []action
	run := func(op, in string, mod ...func(*events.Action)) *events.Result {
		t.Helper()
		res, _ := h.call(op, in, mod...)
		acts = append(acts, action{res.ActionID, events.CapabilityID("primary", op), res.Status})
		return res
	}
	requireCompleted(t, run("chat", `{"prompt":"SECRET-PROMPT one","session_id":"SECRET-SESSION-ID-1","session_key":"SECRET-SESSION-KEY-1"}`, withKey("log-key")))
	replay := run("chat", `{"prompt":"SECRET-PROMPT one","session_id":"SECRET-SESSION-ID-1","session_key":"SECRET-SESSION-KEY-1"}`, withKey("log-key"))
	if replay.ReplayOf == nil {
		t.Errorf("second chat is not a replay")
	}
	requireCompleted(t, run("chat_stream", `{"prompt":"SECRET-PROMPT two","session_key":"SECRET-SESSION-KEY-2"}`))
	requireCompleted(t, run("responses", `{"input":"SECRET-PROMPT three","session_key":"SECRET-SESSION-KEY-3"}`))
	requireCompleted(t, run("session_create", `{"body":{"id":"SECRET-ROW-1","system_prompt":"SECRET-PROMPT four"}}`, withKey("log-create")))
	requireCompleted(t, run("session_chat_stream", `{"session_id":"SECRET-ROW-1","message":"SECRET-MESSAGE five","session_key":"SECRET-SESSION-KEY-5"}`))
	requireFailed(t, run("session_get", `{"session_id":"SECRET-MISSING-1"}`), "remote_rejected")
	requireFailed(t, run("response_get", `{"response_id":"SECRET-RESPONSE-1"}`), "remote_rejected")
	requireFailed(t, run("chat", `{"prompt":"SECRET-INVALID","messages":[{"role":"user","content":"SECRET-INVALID"}]}`), "invalid_action")
	requireFailed(t, run("session_get", `{"session_id":"SECRET-INVALID\n"}`), "invalid_action")
	h.publishRaw(chatSubject, nil, []byte(`{"prompt":"SECRET-DLQ content"}`))
	h.dlq(1, 10*time.Second)
	h.waitIdle(10 * time.Second)

	for _, a := range acts {
		var lines []logLine
		h.until(5*time.Second, "an action log line", func() bool { lines = h.actionLogs(a.id); return len(lines) > 0 })
		if len(lines) != 1 {
			t.Errorf("%s (%s): %d action log lines, want 1", a.id, a.capability, len(lines))
			continue
		}
		l := lines[0]
		if l.str("capability") != a.capability {
			t.Errorf("%s: capability %q, want %q", a.id, l.str("capability"), a.capability)
		}
		if st := l.str("status"); st == "" || !strings.Contains(st, a.status) && st != "duplicate" {
			t.Errorf("%s: status %q, result status %q", a.id, st, a.status)
		}
		if _, ok := l["duration_ms"].(float64); !ok {
			t.Errorf("%s: duration_ms %v is not a number", a.id, l["duration_ms"])
		}
		if at, _ := l["attempt"].(float64); at != 1 {
			t.Errorf("%s: attempt %v, want 1", a.id, l["attempt"])
		}
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "dead-lettered") && !strings.Contains(logs, "dlq") {
		t.Errorf("the dead-lettered message was not logged")
	}
	for _, s := range secrets {
		if i := strings.Index(logs, s); i >= 0 {
			lo := max(0, i-120)
			t.Errorf("log contains %q: ...%s...", s, logs[lo:min(len(logs), i+len(s)+40)])
		}
	}
	// The fake saw the key the bridge must not log: the test would be vacuous otherwise.
	if rs := h.requests("chat"); len(rs) == 0 || !rs[0].AuthValid || rs[0].SessionKey != "SECRET-SESSION-KEY-1" {
		t.Errorf("the secrets did not reach Hermes")
	}
}
