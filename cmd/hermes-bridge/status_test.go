package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
)

func TestStatusCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	s := natsembed.RunTest(t)
	nc, _ := natsembed.Connect(t, s)
	env := map[string]string{"NATS_URL": s.ClientURL()}
	ctx := context.Background()

	code, out, errOut := runMain(ctx, env, "", "status", "act-1")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "no bridge answered on hermes.status (no responders)") {
		t.Fatalf("no responders: exit %d\n%s\n%s", code, out, errOut)
	}

	replay := "act-orig"
	replies := map[string]events.StatusReply{
		"act-run": {ActionID: "act-run", State: "dispatched", CapabilityID: "cap:hermes_agent:primary:chat", Owner: "r1",
			Attempt: 2, CreatedAt: "2026-12-01T10:00:00Z", AgeMS: 61_400, AnsweredBy: "r2"},
		"act-done": {ActionID: "act-done", State: "settled", Owner: "r1", Attempt: 1, CancelRequested: true,
			Result: &events.StatusResult{Status: "failed", ErrorCode: "hermes_unavailable", ReplayOf: &replay, Seq: 7}, AnsweredBy: "r1"},
		"act-unknown": {ActionID: "act-unknown", State: events.StateUnknown, AnsweredBy: "r1"},
		"act-wrong":   {ActionID: "someone-else", State: "settled"},
	}
	sub, err := nc.Subscribe("hermes.status", func(m *nats.Msg) {
		var req events.StatusRequest
		_ = json.Unmarshal(m.Data, &req)
		if req.ActionID == "act-err" {
			h := nats.Header{}
			h.Set(micro.ErrorHeader, "the records could not be read in time")
			h.Set(micro.ErrorCodeHeader, events.StatusErrUnavailable)
			_ = m.RespondMsg(&nats.Msg{Header: h})
			return
		}
		b, _ := json.Marshal(replies[req.ActionID])
		_ = m.Respond(b)
	})
	noErr(t, err)
	defer sub.Unsubscribe()
	noErr(t, nc.Flush())

	code, out, errOut = runMain(ctx, env, "", "status", "act-run")
	for _, w := range []string{"action       act-run\n", "state        dispatched\n", "owner        r1\n", "attempts     2\n",
		"age          1m1s (created 2026-12-01T10:00:00Z)\n", "answered by  r2 (a possibly-stale read)\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("status act-run lacks %q:\n%s", w, out)
		}
	}
	if code != exitOK || strings.Contains(out, "cancel") || strings.Contains(out, "result") {
		t.Errorf("status act-run: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runMain(ctx, env, "", "status", "act-done")
	if code != exitOK || !strings.Contains(out, "result       failed (hermes_unavailable), replay of act-orig\n") ||
		!strings.Contains(out, "cancel       requested\n") {
		t.Errorf("status act-done: exit %d\n%s", code, out)
	}
	code, out, _ = runMain(ctx, env, "", "status", "--json", "act-done")
	var got events.StatusReply
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got.Result == nil || got.Result.Seq != 7 || got.State != "settled" {
		t.Errorf("status --json act-done: exit %d\n%s", code, out)
	}
	code, out, _ = runMain(ctx, env, "", "status", "act-unknown")
	if code != exitFailed || !strings.Contains(out, "state   unknown\n") {
		t.Errorf("status act-unknown: exit %d\n%q", code, out)
	}
	code, _, errOut = runMain(ctx, env, "", "status", "act-err")
	if code != exitUsage || !strings.Contains(errOut, "the bridge answered with an error (503): the records could not be read in time") {
		t.Errorf("status act-err: exit %d\n%s", code, errOut)
	}
	code, _, errOut = runMain(ctx, env, "", "status", "act-wrong")
	if code != exitUsage || !strings.Contains(errOut, "unexpected reply") {
		t.Errorf("status act-wrong: exit %d\n%s", code, errOut)
	}
}
