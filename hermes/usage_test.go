package hermes_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestUsageEveryAgentOperation: each operation that runs an agent turn reports Hermes's usage
// in Result.Usage, in one shape whatever Hermes called the members (prompt_tokens /
// input_tokens), read from the body or the stream's final event; a run's events also sum
// the subagents' cost_usd (v0.21). Reads carry none.
func TestUsageEveryAgentOperation(t *testing.T) {
	agent := func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		rep := hermestest.Reply{Text: "ok then", Usage: hermestest.Usage{Input: 812, Output: 40}}
		if turn.Route == "run_start" {
			rep.Subagents = []hermestest.Subagent{{InputTokens: 10, OutputTokens: 2, CostUSD: 0.25},
				{InputTokens: 5, OutputTokens: 1, CostUSD: 0.5}}
		}
		return rep
	}
	s, c := fakeServer(t, hermestest.WithVersion(hermestest.Version021), hermestest.WithAgent(agent))
	ctx := context.Background()
	call := func(op, in, key string) *hermes.Result {
		t.Helper()
		res, err := c.Call(ctx, hermes.Request{Operation: op, Input: hermes.DecodedInput(in), IdempotencyKey: key}, nil)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return res
	}
	want := hermes.Usage{InputTokens: 812, OutputTokens: 40, TotalTokens: 852}
	check := func(op string, got *hermes.Usage, want hermes.Usage) {
		t.Helper()
		if got == nil {
			t.Fatalf("%s: no usage", op)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Fatalf("%s: usage %s, want %s", op, gj, wj)
		}
	}
	for _, op := range []string{"chat", "chat_stream"} {
		check(op, call(op, `{"prompt":"hi"}`, "").Usage, want)
	}
	for _, op := range []string{"responses", "responses_stream"} {
		check(op, call(op, `{"input":"hi"}`, "").Usage, want)
	}
	sess := call("session_create", `{}`, "k-create")
	var sc struct {
		Session struct{ ID string } `json:"session"`
	}
	noErr(t, json.Unmarshal(sess.Output, &sc))
	for _, op := range []string{"session_chat", "session_chat_stream"} {
		check(op, call(op, `{"session_id":"`+sc.Session.ID+`","message":"hi"}`, "").Usage, want)
	}
	if u := call("session_get", `{"session_id":"`+sc.Session.ID+`"}`, "").Usage; u != nil {
		t.Fatalf("session_get: a read carries no usage, got %+v", u)
	}

	st, err := c.RunStart(ctx, hermes.Request{Operation: "run_start", Input: hermes.DecodedInput(`{"input":"hi"}`), IdempotencyKey: "k-run-1"})
	noErr(t, err)
	cost := 0.75
	withCost := want
	withCost.CostUSD = &cost
	check("run_events", call("run_events", `{"run_id":"`+st.RunID+`"}`, "").Usage, withCost)
	if u := call("run_status", `{"run_id":"`+st.RunID+`"}`, "").Usage; u != nil {
		t.Fatalf("run_status: a read carries no usage, got %+v", u)
	}

	// The typed reader: run.completed's usage, and each subagent.complete's cost.
	st, err = c.RunStart(ctx, hermes.Request{Operation: "run_start", Input: hermes.DecodedInput(`{"input":"hi"}`), IdempotencyKey: "k-run-2"})
	noErr(t, err)
	es, err := c.RunEvents(ctx, st.RunID)
	noErr(t, err)
	defer es.Close()
	var sum float64
	var costs int
	for {
		ev, err := es.Next()
		if err != nil {
			break
		}
		if ev.CostUSD != nil {
			if ev.Name != "subagent.complete" {
				t.Fatalf("cost on %s", ev.Name)
			}
			sum += *ev.CostUSD
			costs++
		}
		if ev.Name == "run.completed" && (ev.Usage == nil || ev.Usage.TotalTokens != 852) {
			t.Fatalf("run.completed usage %+v", ev.Usage)
		}
	}
	if costs != 2 || sum != 0.75 {
		t.Fatalf("subagent costs: %d summing %v", costs, sum)
	}
	_ = s
}

// TestParseUsage: the two member spellings, total derived only when Hermes omits it, and no
// usage (nil) for anything else: never invented zeros.
func TestParseUsage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"prompt_tokens": 580, "completion_tokens": 7, "total_tokens": 587}`, `{"input_tokens":580,"output_tokens":7,"total_tokens":587}`},
		{`{"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}`, `{"input_tokens":0,"output_tokens":0,"total_tokens":0}`},
		{`{"input_tokens": 3, "output_tokens": 4}`, `{"input_tokens":3,"output_tokens":4,"total_tokens":7}`},
		{`{"input_tokens": 3, "output_tokens": 4, "total_tokens": 9, "cost_usd": 0.5}`, `{"input_tokens":3,"output_tokens":4,"total_tokens":9,"cost_usd":0.5}`},
		{`{"input_tokens": 3, "output_tokens": 4, "cost_usd": "x"}`, `{"input_tokens":3,"output_tokens":4,"total_tokens":7}`},
		{`{"input_tokens": 3}`, `null`},
		{`{"input_tokens": -1, "output_tokens": 4}`, `null`},
		{`{"input_tokens": 1.5, "output_tokens": 4}`, `null`},
		{`{}`, `null`},
		{`null`, `null`},
		{`[1,2]`, `null`},
	} {
		got, _ := json.Marshal(hermes.ParseUsage([]byte(tc.in)))
		if string(got) != tc.want {
			t.Errorf("ParseUsage(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestUsageRecordedTranscripts: the streams recorded from real Hermes v0.16 and v0.19 give the
// usage of their final event (the chat finish chunk, response.completed's response, the
// session's and the run's run.completed).
func TestUsageRecordedTranscripts(t *testing.T) {
	want := map[string][3]int64{
		"v0.16_11": {455, 6, 461}, "v0.16_22": {457, 8, 465}, "v0.16_32": {469, 8, 477}, "v0.16_41": {454, 5, 459},
		"v0.19_11": {579, 6, 585}, "v0.19_22": {582, 8, 590}, "v0.19_32": {593, 8, 601}, "v0.19_41": {578, 5, 583},
	}
	ops := map[string]struct{ op, in string }{
		"11": {"chat_stream", `{"prompt":"x"}`},
		"22": {"responses_stream", `{"input":"x"}`},
		"32": {"session_chat_stream", `{"session_id":"s","message":"x"}`},
		"41": {"run_events", `{"run_id":"r"}`},
	}
	for name, w := range want {
		body, err := os.ReadFile(filepath.Join("testdata", name+"_"+map[string]string{"11": "chat_completions_stream",
			"22": "responses_stream", "32": "sessions_chat_stream", "41": "runs_events"}[name[6:]]+".sse"))
		noErr(t, err)
		spec := ops[name[6:]]
		res, _, err := streamCall(t, newClient(t, sseServer(t, string(body)).URL), spec.op, spec.in)
		noErr(t, err)
		if u := res.Usage; u == nil || u.InputTokens != w[0] || u.OutputTokens != w[1] || u.TotalTokens != w[2] || u.CostUSD != nil {
			t.Errorf("%s: usage %+v, want %v", name, u, w)
		}
	}
}
