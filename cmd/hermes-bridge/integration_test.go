package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunCallWatch runs the `run` logic in-process (embedded NATS on a free port, a
// temporary store, the hermestest fake) and drives it with `call` and `watch`.
func TestRunCallWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	const key = "it-key-0123456789abcdef"
	fake := hermestest.NewServer(hermestest.WithAPIKey(key))
	defer fake.Close()

	r := startRunInProcess(t, map[string]string{
		"HERMES_URL": fake.URL, "HERMES_API_KEY": key, "HERMES_BRIDGE_LOG_LEVEL": "debug",
		// The bridge and the CLI work with an inbox prefix of their own.
		"NATS_INBOX_PREFIX": "_INBOX_bridge",
	})
	url, logs, p, ctx := r.url, r.logs, r.p, context.Background()
	if !strings.Contains(logs.String(), "embedded NATS server listening on "+url) {
		t.Fatalf("no listening line for %s:\n%s", url, logs.String())
	}
	cli := map[string]string{"NATS_URL": url, "NATS_INBOX_PREFIX": "_INBOX_cli"}

	// call: streamed text, then the pretty result; exit 0.
	code, out, errOut := runMain(ctx, cli, "", "call", "--prompt", "hello streaming world", "--action-id", "it-call-1")
	if code != exitOK {
		t.Fatalf("call exit %d\nstdout %s\nstderr %s\nlogs %s", code, out, errOut, logs.String())
	}
	text, resJSON, ok := strings.Cut(out, "\n{")
	if !ok || text != "stub reply: hello streaming world" {
		t.Fatalf("streamed text %q, stdout:\n%s", text, out)
	}
	var res events.Result
	if err := json.Unmarshal([]byte("{"+resJSON), &res); err != nil || res.Status != events.StatusCompleted || res.ActionID != "it-call-1" {
		t.Fatalf("result %+v err %v:\n%s", res, err, out)
	}
	if !strings.Contains(errOut, "action it-call-1 published on hermes.actions.primary.chat_stream") {
		t.Fatalf("stderr %s", errOut)
	}

	// watch after the fact: same output, replayed from the start.
	code, out2, _ := runMain(ctx, cli, "", "watch", "it-call-1")
	if code != exitOK || out2 != out {
		t.Fatalf("watch exit %d:\n%s\nwant\n%s", code, out2, out)
	}
	code, out, _ = runMain(ctx, cli, "", "watch", "--json", "it-call-1")
	if code != exitOK || !strings.HasPrefix(out, "{\n") || strings.Contains(out, "\nstub reply") {
		t.Fatalf("watch --json exit %d:\n%s", code, out)
	}
	code, out, _ = runMain(ctx, cli, "", "watch", "it-call-1", "--events")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) < 3 || !strings.Contains(lines[0], `"sequence":0`) || !strings.Contains(lines[len(lines)-1], `"status":"completed"`) {
		t.Fatalf("watch --events exit %d:\n%s", code, out)
	}

	// status: what the records say of it, from the run's micro service, which announces
	// this binary's version.
	code, out, errOut = runMain(ctx, cli, "", "status", "--json", "it-call-1")
	var st events.StatusReply
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.State != "settled" || st.AnsweredBy != p.replicaID ||
		st.Owner != p.replicaID || st.Result == nil || st.Result.Status != events.StatusCompleted {
		t.Fatalf("status exit %d:\n%s\n%s", code, out, errOut)
	}
	nc, err := nats.Connect(url, nats.CustomInboxPrefix("_INBOX_cli"))
	noErr(t, err)
	ping, err := nc.Request("$SRV.PING.hermes-bridge", nil, 5*time.Second)
	nc.Close()
	var pong micro.Ping
	if err != nil || json.Unmarshal(ping.Data, &pong) != nil || pong.Metadata["version"] != versionString() ||
		pong.Metadata["replica_id"] != p.replicaID {
		t.Fatalf("micro ping: %v %+v", err, pong)
	}

	// A JSON operation with --json, structured mode.
	code, out, errOut = runMain(ctx, cli, "", "call", "--op", "health", "--json", "--structured")
	if code != exitOK || !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("health exit %d:\n%s\n%s", code, out, errOut)
	}

	// A failed action: exit 1 and the error on stderr.
	code, out, errOut = runMain(ctx, cli, "", "call", "--op", "session_get", "--input", `{"session_id":"no-such-session"}`)
	if code != exitFailed || !strings.Contains(out, `"status": "failed"`) || !strings.Contains(errOut, "failed:") {
		t.Fatalf("failed action exit %d:\n%s\n%s", code, out, errOut)
	}

	// --no-follow prints the id; watch (started later) follows it to the end.
	code, out, _ = runMain(ctx, cli, "", "call", "--prompt", "later", "--no-follow")
	id := strings.TrimSpace(out)
	if code != exitOK || !events.ValidActionID(id) {
		t.Fatalf("no-follow exit %d out %q", code, out)
	}
	code, out, _ = runMain(ctx, cli, "", "watch", id)
	if code != exitOK || !strings.HasPrefix(out, "stub reply: later\n") {
		t.Fatalf("watch %s exit %d:\n%s", id, code, out)
	}

	// Interrupting a watch of an action that never settles: exit 130, the hint on stderr.
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	code, _, errOut = runMain(wctx, cli, "", "watch", "never-published")
	wcancel()
	if code != exitInterrupted || !strings.Contains(errOut, "hermes-bridge watch never-published") {
		t.Fatalf("interrupted watch exit %d: %s", code, errOut)
	}
	code, _, errOut = runMain(ctx, cli, "", "watch", "--wait", "200ms", "never-published")
	if code != exitUsage || !strings.Contains(errOut, "within --wait") {
		t.Fatalf("watch --wait exit %d: %s", code, errOut)
	}

	// Graceful shutdown: Run returns, the connection drains, the server stops last.
	if err := r.stop(t, nil); err != nil {
		t.Fatalf("run: %v", err)
	}
	all := logs.String()
	iStopped, iServer := strings.Index(all, `"bridge stopped"`), strings.Index(all, `"embedded NATS server stopped"`)
	if iStopped < 0 || iServer < 0 || iServer < iStopped {
		t.Fatalf("shutdown order wrong:\n%s", all)
	}
	if strings.Contains(all, key) {
		t.Fatal("the API key appears in the logs")
	}
	if strings.Contains(all, "NATS disconnected") {
		t.Fatalf("own shutdown logged as a disconnect:\n%s", all)
	}
}
