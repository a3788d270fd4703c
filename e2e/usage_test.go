package e2e_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestUsage drives every operation family that runs an agent turn (chat and Responses, each
// stream and not, session chat stream and not, run_events and the governed run) against a
// v0.21 fake that scripts distinct usage per route, on an endpoint bound to a tenant. Each
// result carries Hermes's usage in the one documented shape (a run's cost is the sum of its
// subagents' cost_usd), reads carry none, and the Prometheus counters per endpoint, tenant
// and operation grow by exactly the usage of each settled action: not again for a
// duplicate whose stored result is replayed.
func TestUsage(t *testing.T) {
	t.Parallel()
	tokens := map[string][2]int64{
		"chat": {101, 11}, "chat_stream": {102, 12}, "responses": {103, 13}, "responses_stream": {104, 14},
		"session_chat": {105, 15}, "session_chat_stream": {106, 16}, "run_start": {107, 17},
	}
	agent := func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		u := tokens[turn.Route]
		rep := hermestest.Reply{Text: "done", Usage: hermestest.Usage{Input: int(u[0]), Output: int(u[1])}}
		if turn.Route == "run_start" {
			rep.Subagents = []hermestest.Subagent{{InputTokens: 9, OutputTokens: 1, CostUSD: 0.25},
				{InputTokens: 9, OutputTokens: 1, CostUSD: 0.5}}
		}
		return rep
	}
	reg := opshttp.NewRegistry()
	h := newHarness(t, withFake(hermestest.WithVersion(hermestest.Version021), hermestest.WithAgent(agent)),
		withConfig(func(c *bridge.Config) {
			c.Metrics = reg
			c.Endpoints[0].TenantID = "acme"
		}))
	h.state.mu.Lock()
	rb := h.state.bridges[0]
	h.state.mu.Unlock()
	base := serveOps(t, reg, rb.b.Health)
	tenant := func(a *events.Action) { a.TenantID = "acme" }

	check := func(op string, r *events.Result, route string, cost *float64) {
		t.Helper()
		requireCompleted(t, r)
		u := tokens[route]
		want := events.Usage{InputTokens: u[0], OutputTokens: u[1], TotalTokens: u[0] + u[1], CostUSD: cost}
		got, _ := json.Marshal(r.Usage)
		w, _ := json.Marshal(want)
		if string(got) != string(w) {
			t.Fatalf("%s: usage %s, want %s", op, got, w)
		}
	}
	chat := h.callOK("chat", map[string]any{"prompt": "hi"}, tenant, withKey("usage-chat"))
	check("chat", chat, "chat", nil)
	r, _ := h.call("chat_stream", map[string]any{"prompt": "hi"}, tenant)
	check("chat_stream", r, "chat_stream", nil)
	check("responses", h.callOK("responses", map[string]any{"input": "hi"}, tenant), "responses", nil)
	r, _ = h.call("responses_stream", map[string]any{"input": "hi"}, tenant)
	check("responses_stream", r, "responses_stream", nil)
	sess := h.callOK("session_create", map[string]any{}, tenant, withKey("usage-session"))
	sid := jstr(output(t, sess), "session", "id")
	if sess.Usage != nil || sid == "" {
		t.Fatalf("session_create: usage %+v, output %s", sess.Usage, sess.Output)
	}
	check("session_chat", h.callOK("session_chat", map[string]any{"session_id": sid, "message": "hi"}, tenant), "session_chat", nil)
	r, _ = h.call("session_chat_stream", map[string]any{"session_id": sid, "message": "hi"}, tenant)
	check("session_chat_stream", r, "session_chat_stream", nil)

	cost := 0.75
	check("run", h.callOK("run", map[string]any{"input": "go"}, tenant, withKey("usage-run")), "run_start", &cost)
	started := h.callOK("run_start", map[string]any{"input": "go"}, tenant, withKey("usage-run-start"))
	runID := jstr(output(t, started), "run_id")
	if started.Usage != nil {
		t.Fatalf("run_start carries usage %+v", started.Usage)
	}
	r, _ = h.call("run_events", map[string]any{"run_id": runID}, tenant)
	check("run_events", r, "run_start", &cost)
	if st := h.callOK("run_status", map[string]any{"run_id": runID}, tenant); st.Usage != nil || jpath(output(t, st), "usage") == nil {
		t.Fatalf("run_status: a read carries no usage (Hermes's stays in the output): %+v %s", st.Usage, st.Output)
	}

	// A duplicate: the stored result is replayed with its usage, and counted once.
	replay := h.callOK("chat", map[string]any{"prompt": "hi"}, tenant, withKey("usage-chat"))
	if replay.ReplayOf == nil || replay.Usage == nil || *replay.Usage != *chat.Usage {
		t.Fatalf("replay: replay_of %v usage %+v", replay.ReplayOf, replay.Usage)
	}
	h.waitIdle(10 * time.Second)

	s := scrape(t, base)
	for op, route := range map[string]string{"chat": "chat", "chat_stream": "chat_stream", "responses": "responses",
		"responses_stream": "responses_stream", "session_chat": "session_chat", "session_chat_stream": "session_chat_stream",
		"run": "run_start", "run_events": "run_start"} {
		for i, dir := range []string{"input", "output"} {
			got := s.value(bridge.MetricTokens, "endpoint", "primary", "tenant", "acme", "operation", op, "direction", dir)
			if want := float64(tokens[route][i]); got != want {
				t.Errorf("%s{operation=%s,direction=%s} = %v, want %v", bridge.MetricTokens, op, dir, got, want)
			}
		}
	}
	for _, op := range []string{"run", "run_events"} {
		if got := s.value(bridge.MetricCostUSD, "endpoint", "primary", "tenant", "acme", "operation", op); got != 0.75 {
			t.Errorf("%s{operation=%s} = %v, want 0.75", bridge.MetricCostUSD, op, got)
		}
	}
	if got := s.value(bridge.MetricCostUSD, "endpoint", "primary", "tenant", "acme", "operation", "chat"); got > 0 {
		t.Errorf("chat reported no cost, counted %v", got)
	}
	var sum float64
	for _, v := range tokens {
		sum += float64(v[0] + v[1])
	}
	sum += float64(tokens["run_start"][0] + tokens["run_start"][1]) // run and run_events
	if got := s.sum(bridge.MetricTokens); got != sum {
		t.Errorf("tokens over every series %v, want %v (the replay must not count)", got, sum)
	}
}
