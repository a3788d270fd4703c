package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

var dashboardLine = regexp.MustCompile(`dashboard on (http://\S+/ui/)`)

// TestDashboardBrowser runs the hermes-bridge binary's `run` on its embedded server (with
// the WebSocket listener) against the fake Hermes, opens /ui in headless Chromium and checks, in the
// DOM: a streaming action's events arrive in order with the text assembled as the fake
// sent it, then its result; a finished action replays from its first event; a parked
// deletion shows under approvals with its input hash and expiry, and leaves once the
// test (not the page) decides it.
func TestDashboardBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	chromiumPath(t)
	bridgeBinary(t)
	began := time.Now()
	const finalText = "Three findings are ready for review."
	const key = "ui-key-0123456789abcdef"
	fake := hermestest.NewServer(hermestest.WithAPIKey(key), hermestest.WithAgent(func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		if strings.Contains(turn.UserText, "broken") {
			return hermestest.Reply{Fail: "the model gave up"}
		}
		// Every answered turn reports the same usage: the endpoint table sums it.
		if strings.Contains(turn.UserText, "slow") {
			return hermestest.Reply{Text: finalText, DeltaDelay: 250 * time.Millisecond, Usage: turnUsage,
				Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command": "cat notes.md"}`, Output: "notes", Text: "Reading the notes. "}}}
		}
		return hermestest.Reply{Text: "stub reply: " + turn.UserText, Usage: turnUsage}
	}))
	defer fake.Close()
	environ := map[string]string{
		"HERMES_URL":                   fake.URL,
		"HERMES_API_KEY":               key,
		"HERMES_BRIDGE_DATA_DIR":       t.TempDir(),
		"HERMES_BRIDGE_NATS_PORT":      "-1",
		"HERMES_BRIDGE_HTTP_ADDR":      "127.0.0.1:0",
		"HERMES_BRIDGE_SHUTDOWN_GRACE": "2s",
		"NATS_INBOX_PREFIX":            "_INBOX_bridge",
	}
	natsURL, logs := startBridge(t, environ)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := dashboardLine.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no dashboard line:\n%s", logs.String())
	}
	page := m[1]

	nc, err := nats.Connect(natsURL, nats.CustomInboxPrefix("_INBOX_test"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(js)

	// A finished action before the page opens: it must replay.
	pubCtx, pubCancel := context.WithTimeout(ctx, 30*time.Second)
	defer pubCancel()
	doneID, err := cl.Publish(pubCtx, "primary", "chat_stream", events.Action{Input: json.RawMessage(`{"prompt":"earlier question"}`)},
		client.WithActionID("ui-earlier"))
	if err != nil {
		t.Fatal(err)
	}
	var earlierEvents []*events.EventData
	earlier, err := cl.Follow(pubCtx, doneID, func(e *events.EventData) error { earlierEvents = append(earlierEvents, e); return nil }, nil)
	if err != nil || earlier.Status != events.StatusCompleted || len(earlierEvents) < 3 {
		t.Fatalf("earlier action: %+v %+v, %d events, %v", earlier, earlier.Error, len(earlierEvents), err)
	}

	// Some traffic for the list, the filters and the endpoint table: quick chats, two of
	// which fail.
	const quick, broken = 8, 2
	for i := range quick + broken {
		prompt := fmt.Sprintf("question %d", i)
		if i >= quick {
			prompt = "broken " + prompt
		}
		if _, err := cl.Publish(pubCtx, "primary", "chat", events.Action{Input: mustJSONRaw(t, map[string]string{"prompt": prompt})},
			client.WithActionID(fmt.Sprintf("ui-chat-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	last, err := cl.Follow(pubCtx, fmt.Sprintf("ui-chat-%02d", quick+broken-1), func(*events.EventData) error { return nil }, nil)
	if err != nil || last.Status != events.StatusFailed {
		t.Fatalf("a broken chat: %+v %v", last, err)
	}

	b := newBrowser(t, ctx, logs)
	bctx, poll, str, shot := b.ctx, b.poll, b.str, b.shot
	defer b.close()

	// Record what the list says while the page loads (the loading state is brief).
	if err := chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: listStates})
		return err
	}), chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	poll("the page to connect", `document.getElementById("conn").dataset.state === "connected"`)
	poll("the history loaded", `document.getElementById("list-state").dataset.state === "idle"`)
	if states := str(`window.__listStates.join(" | ")`); !strings.Contains(states, "loading the results of the last 60 min") {
		t.Errorf("the list never said it was loading; it said: %s", states)
	}
	poll("the earlier action in the list", `!!document.querySelector('#actions .row[data-id="ui-earlier"][data-status="completed"]')`)
	// Its duration is the bridge's (Hermes-Bridge-Duration-Ms), not the page's estimate.
	if d := str(`document.querySelector('#actions .row[data-id="ui-earlier"] .c-dur').textContent`); !regexp.MustCompile(`^\d+(\.\d)? (ms|s)$`).MatchString(d) {
		t.Fatalf("duration of the earlier action %q, want the bridge's exact one", d)
	}

	// A streaming action, slow enough to watch: open it while it runs.
	liveID, err := cl.Publish(pubCtx, "primary", "chat_stream", events.Action{Input: json.RawMessage(`{"prompt":"slow one please"}`)},
		client.WithActionID("ui-live"))
	if err != nil {
		t.Fatal(err)
	}
	poll("the live action in the list", `!!document.querySelector('#actions .row[data-id="ui-live"]')`)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#actions .row[data-id="ui-live"]`))); err != nil {
		t.Fatal(err)
	}
	poll("its first events", `document.querySelectorAll("#detail-events li").length >= 2 && document.getElementById("detail-status").dataset.status === "running"`)
	// Running, it already shows what it is: its events name the capability.
	poll("the running row's capability", `(() => { const r = document.querySelector('#actions .row[data-id="ui-live"]');
		return !!r && r.dataset.status === "running" && r.querySelector(".c-cap").textContent === "primary · chat_stream" })()`)
	shot("dashboard-streaming.png")
	poll("its result", `document.getElementById("detail-status").dataset.status === "completed"`)
	live, err := cl.Follow(pubCtx, liveID, func(*events.EventData) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Text       string `json:"text"`
		EventCount int    `json:"event_count"`
	}
	if err := json.Unmarshal(live.Output, &out); err != nil {
		t.Fatal(err)
	}
	if want := "Reading the notes. " + finalText; out.Text != want {
		t.Fatalf("the fake's text is %q, want %q", out.Text, want)
	}
	checkDetail := func(label string, wantText string, wantEvents int) {
		t.Helper()
		poll(label+": every event", fmt.Sprintf(`document.querySelectorAll("#detail-events li").length === %d`, wantEvents))
		poll(label+": the assembled text", fmt.Sprintf(`document.getElementById("detail-text").textContent === %q`, wantText))
		seqs := str(`[...document.querySelectorAll("#detail-events li")].map(li => li.dataset.seq).join(",")`)
		want := make([]string, wantEvents)
		for i := range want {
			want[i] = fmt.Sprint(i)
		}
		if seqs != strings.Join(want, ",") {
			t.Fatalf("%s: sequences %s, want %s", label, seqs, strings.Join(want, ","))
		}
		var res events.Result
		if err := json.Unmarshal([]byte(str(`document.getElementById("detail-result").textContent`)), &res); err != nil || res.Status != events.StatusCompleted {
			t.Fatalf("%s: result in the page %+v (%v)", label, res, err)
		}
	}
	checkDetail("live action", out.Text, out.EventCount)
	if n := str(`String(document.querySelectorAll('#detail-events li[data-kind="tool"]').length)`); n == "0" {
		t.Fatalf("no tool event shown distinctly; kinds: %s", str(`[...document.querySelectorAll("#detail-events li")].map(li => li.dataset.kind).join(",")`))
	}
	poll("the live action completed in the list, with a duration", `(() => { const r = document.querySelector('#actions .row[data-id="ui-live"]');
		return r && r.dataset.status === "completed" && /\d/.test(r.querySelector(".c-dur").textContent) })()`)

	// The earlier action: replayed from its first event, then its result.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.hash = "#ui-earlier"`)); err != nil {
		t.Fatal(err)
	}
	poll("the replay to open", `document.getElementById("detail-id").textContent === "ui-earlier"`)
	var earlierText strings.Builder
	for _, e := range earlierEvents {
		earlierText.WriteString(e.Text)
	}
	checkDetail("replay", earlierText.String(), len(earlierEvents))
	shot("dashboard-replay.png")

	// A parked deletion: under approvals with its hash and expiry, gone once decided.
	input := json.RawMessage(`{"session_id":"sess-ui-1"}`)
	hash, err := events.InputSHA256(input)
	if err != nil {
		t.Fatal(err)
	}
	delID, err := cl.Publish(pubCtx, "primary", "session_delete", events.Action{Input: input, IdempotencyKey: "ui-del-1"},
		client.WithActionID("ui-delete"))
	if err != nil {
		t.Fatal(err)
	}
	poll("the parked deletion under approvals", fmt.Sprintf(`(() => { const li = document.querySelector('#approvals li[data-id="ui-delete"]');
		return !!li && li.querySelector(".hash").dataset.hash === %q && /^\d{4}-\d\d-\d\dT/.test(li.querySelector(".expires").dataset.expires) })()`, hash))
	if c := str(`document.getElementById("approvals-count").textContent`); c != "1" {
		t.Fatalf("approvals count %s", c)
	}
	// For the README: a stream running and a deletion waiting, side by side.
	if _, err := cl.Publish(pubCtx, "primary", "chat_stream", events.Action{Input: json.RawMessage(`{"prompt":"slow again"}`)},
		client.WithActionID("ui-live-2")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.hash = "#ui-live-2"`)); err != nil {
		t.Fatal(err)
	}
	poll("the second stream under way", `document.getElementById("detail-id").textContent === "ui-live-2" &&
		document.querySelectorAll('#detail-events li[data-kind="tool"]').length >= 1 && document.getElementById("detail-status").dataset.status === "running"`)
	shot("dashboard-approval.png")
	poll("the second stream's result", `document.getElementById("detail-status").dataset.status === "completed"`)
	if err := cl.Decide(pubCtx, delID, events.Approval{Decision: events.DecisionDeny, Approver: "ui-test", Reason: "test", InputSHA256: hash}); err != nil {
		t.Fatal(err)
	}
	poll("the decided deletion to leave the approvals", `!document.querySelector('#approvals li[data-id="ui-delete"]') &&
		document.querySelector('#actions .row[data-id="ui-delete"]').dataset.status === "failed"`)
	if code := str(`document.querySelector('#actions .row[data-id="ui-delete"] .c-code').textContent`); code != "approval_denied" {
		t.Fatalf("error code in the list %q", code)
	}
	// Filters and the per-endpoint table.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => { const s = document.getElementById("f-status");
		s.value = "failed"; return s.dispatchEvent(new Event("input")) })()`)); err != nil {
		t.Fatal(err)
	}
	poll("the status filter", fmt.Sprintf(`document.querySelectorAll("#actions .row").length === %d && !!document.querySelector('#actions .row[data-id="ui-delete"]')`, broken+1))
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => { const s = document.getElementById("f-capability");
		s.value = "cap:hermes_agent:primary:chat"; return s.dispatchEvent(new Event("input")) })()`)); err != nil {
		t.Fatal(err)
	}
	poll("the status and capability filters", fmt.Sprintf(`document.querySelectorAll("#actions .row").length === %d && !document.querySelector('#actions .row[data-id="ui-delete"]')`, broken))
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => { const s = document.getElementById("f-capability");
		s.value = ""; return s.dispatchEvent(new Event("input")) })()`)); err != nil {
		t.Fatal(err)
	}
	// Every terminal result of the last hour, and the failed ones (the broken chats and
	// the denied deletion); the tokens of the answered turns (the quick chats and the three
	// streams: a broken chat is a 502 without usage, the deletion runs no turn) and no cost
	// (Hermes reported none).
	turns := int64(quick + 3)
	poll("the endpoint table", fmt.Sprintf(`(() => { const tr = document.querySelector('#endpoints tr[data-endpoint="primary"]');
		return !!tr && tr.cells[3].textContent === "%d" && tr.cells[4].textContent === "%d" &&
			tr.cells[5].textContent === "%d" && tr.cells[6].textContent === "%d" && tr.cells[7].textContent === "—" })()`,
		quick+broken+4, broken+1, turns*int64(turnUsage.Input), turns*int64(turnUsage.Output)))
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(() => { const s = document.getElementById("f-status");
		s.value = ""; s.dispatchEvent(new Event("input")); return location.hash = "#ui-live" })()`)); err != nil {
		t.Fatal(err)
	}
	poll("the live action again", `document.getElementById("detail-status").dataset.status === "completed"`)
	shot("dashboard.png")

	// A mistyped endpoint fails its action, which the list shows, but makes no row of
	// the endpoint table and no filter option; a message that is no action at all is a
	// dead letter, which the page shows with its subject and reason; a parked action's
	// status and a long error code are shown whole.
	if _, err := cl.Publish(pubCtx, "primray", "chat", events.Action{Input: json.RawMessage(`{"prompt":"typo"}`)}, client.WithActionID("ui-typo")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Publish(pubCtx, "primary", "session_delete", events.Action{Input: json.RawMessage(`{"session_id":"sess-ui-2"}`)},
		client.WithActionID("ui-nokey")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Publish(pubCtx, "primary", "session_delete", events.Action{Input: json.RawMessage(`{"session_id":"sess-ui-3"}`), IdempotencyKey: "ui-del-3"},
		client.WithActionID("ui-parked")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(pubCtx, "hermes.actions.primary.chat", []byte("not a CloudEvent")); err != nil {
		t.Fatal(err)
	}
	poll("the mistyped endpoint's action failed in the list", `(() => { const r = document.querySelector('#actions .row[data-id="ui-typo"]');
		return !!r && r.dataset.status === "failed" && r.querySelector(".c-code").textContent === "invalid_action" })()`)
	if n := str(`String(document.querySelectorAll('#endpoints tr[data-endpoint="primray"], #f-endpoint option[value="primray"]').length)`); n != "0" {
		t.Errorf("the mistyped endpoint made %s endpoint rows or filter options", n)
	}
	poll("the dead letter", `(() => { const li = document.querySelector("#dlq li");
		return !!li && li.querySelector(".subject").textContent === "hermes.actions.primary.chat" && /CloudEvent/.test(li.querySelector(".reason").textContent) &&
			document.getElementById("dlq-count").textContent === "1" })()`)
	whole := func(id, cell, want string) string {
		return fmt.Sprintf(`(() => { const c = document.querySelector('#actions .row[data-id="%s"] .%s');
			return !!c && c.textContent === %q && c.scrollWidth <= c.clientWidth })()`, id, cell, want)
	}
	poll("pending_approval whole", whole("ui-parked", "c-status", "pending_approval"))
	poll("idempotency_key_required whole", whole("ui-nokey", "c-code", "idempotency_key_required"))
	shot("dashboard-dead-letter.png")

	// The page deletes the consumer of each action it stops showing: the output stream
	// holds its two feeds and the open action's (the test's own Follow calls delete theirs).
	out2, err := js.Stream(pubCtx, "HERMES_OUTPUT")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the page's consumers of closed actions to be deleted", func() bool {
		info, err := out2.Info(pubCtx)
		return err == nil && info.State.Consumers <= 3
	})

	// Narrow screen: still usable (no horizontal scrolling of the page).
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	poll("the narrow layout", `document.documentElement.scrollWidth <= window.innerWidth + 1`)
	poll("pending_approval whole on a narrow screen", whole("ui-parked", "c-status", "pending_approval"))
	shot("dashboard-narrow.png")
	t.Logf("browser test took %s", time.Since(began).Round(100*time.Millisecond))
}

// listStates, run in the page before its scripts, records each text the actions list's
// state line shows (window.__listStates).
const listStates = `window.__listStates = [];
new MutationObserver(() => {
	const e = document.getElementById("list-state");
	const t = e && !e.hidden ? e.textContent : "";
	if (e && window.__listStates[window.__listStates.length - 1] !== t) window.__listStates.push(t);
}).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });`

// turnUsage is the usage the dashboard test's fake reports for every answered turn.
var turnUsage = hermestest.Usage{Input: 100, Output: 10}

func mustJSONRaw(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDashboardBrowserAsDashboardUser runs the page the production way: NATS with the
// users of deploy/nats-server.conf (plus a WebSocket listener), the bridge connected as
// its least-privilege user, and the page given the dashboard user through
// HERMES_BRIDGE_UI_NATS_USER / _PASSWORD_FILE. The page works within that role (no
// permission violation of the dashboard user while it replays and follows), and the
// same credential, taken from config.json by a script in the page's origin with the
// vendored client, cannot publish actions or approval decisions.
func TestDashboardBrowserAsDashboardUser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	chromiumPath(t)
	bridgeBinary(t)
	pw := map[string]string{}
	for _, v := range []string{"BRIDGE_PASSWORD", "AGENT_CHAT_PASSWORD", "DASHBOARD_PASSWORD", "APPROVER_PASSWORD", "OPS_PASSWORD", "SYS_PASSWORD"} {
		pw[v] = nuid.Next()
		t.Setenv(v, pw[v])
	}
	srvLog := &syncBuffer{}
	natsURL, wsURL := startNATS(t, filepath.Join("..", "..", "deploy", "nats-server.conf"), srvLog)
	const key = "ui-key-0123456789abcdef"
	fake := hermestest.NewServer(hermestest.WithAPIKey(key))
	defer fake.Close()
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "dashboard.pw")
	if err := os.WriteFile(pwFile, []byte(pw["DASHBOARD_PASSWORD"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := map[string]string{
		"NATS_URL": natsURL, "NATS_USER": "bridge", "NATS_PASSWORD": pw["BRIDGE_PASSWORD"],
		"HERMES_URL": fake.URL, "HERMES_API_KEY": key,
		"HERMES_BRIDGE_HTTP_ADDR":             "127.0.0.1:0",
		"HERMES_BRIDGE_SHUTDOWN_GRACE":        "2s",
		"HERMES_BRIDGE_UI_NATS_URL":           wsURL,
		"HERMES_BRIDGE_UI_NATS_USER":          "dashboard",
		"HERMES_BRIDGE_UI_NATS_PASSWORD_FILE": pwFile,
	}
	_, logs := startBridge(t, environ)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := dashboardLine.FindStringSubmatch(logs.String())
	if m == nil || !strings.Contains(logs.String(), ", as user dashboard)") {
		t.Fatalf("no dashboard line naming the user:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), pw["DASHBOARD_PASSWORD"]) || strings.Contains(logs.String(), pw["BRIDGE_PASSWORD"]) {
		t.Fatalf("a password is in the logs:\n%s", logs.String())
	}

	// A publisher (the ops user here) runs a stream and parks a deletion.
	nc, err := nats.Connect(natsURL, nats.UserInfo("ops", pw["OPS_PASSWORD"]), nats.CustomInboxPrefix("_INBOX_ops"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(js)
	pubCtx, pubCancel := context.WithTimeout(ctx, 30*time.Second)
	defer pubCancel()
	id, err := cl.Publish(pubCtx, "primary", "chat_stream", events.Action{Input: json.RawMessage(`{"prompt":"as the dashboard"}`)}, client.WithActionID("ui-role-1"))
	if err != nil {
		t.Fatal(err)
	}
	var evs []*events.EventData
	if res, err := cl.Follow(pubCtx, id, func(e *events.EventData) error { evs = append(evs, e); return nil }, nil); err != nil || res.Status != events.StatusCompleted {
		t.Fatalf("stream: %+v %v", res, err)
	}
	input := json.RawMessage(`{"session_id":"sess-role"}`)
	hash, _ := events.InputSHA256(input)
	if _, err := cl.Publish(pubCtx, "primary", "session_delete", events.Action{Input: input, IdempotencyKey: "ui-role-del"}, client.WithActionID("ui-role-del")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(pubCtx, "hermes.actions.primary.health", []byte("not a CloudEvent")); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, ctx, logs)
	defer b.close()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(m[1]+"#ui-role-1")); err != nil {
		t.Fatal(err)
	}
	b.poll("the page to connect as dashboard", `document.getElementById("conn").dataset.state === "connected"`)
	b.poll("the stream replayed", fmt.Sprintf(`document.querySelectorAll("#detail-events li").length === %d &&
		document.getElementById("detail-status").dataset.status === "completed"`, len(evs)))
	b.poll("the parked deletion", fmt.Sprintf(`(() => { const li = document.querySelector('#approvals li[data-id="ui-role-del"]');
		return !!li && li.querySelector(".hash").dataset.hash === %q })()`, hash))
	b.poll("the list", `!!document.querySelector('#actions .row[data-id="ui-role-1"][data-status="completed"]')`)
	b.poll("the dead letter, read as the dashboard user", `(() => { const li = document.querySelector("#dlq li");
		return !!li && li.querySelector(".subject").textContent === "hermes.actions.primary.health" })()`)
	b.shot("dashboard-role.png")
	if v := serverViolations(srvLog, "dashboard"); len(v) > 0 {
		t.Fatalf("the page hit permission violations as the dashboard user:\n%s", strings.Join(v, "\n"))
	}

	// The page's own credential, used by a script in its origin: every publish on the
	// actions and approvals subjects is refused by the server, and nothing is stored.
	got := b.str(`(async () => {
		const { wsconnect } = await import("./nats.js");
		const cfg = await (await fetch("config.json")).json();
		const nc = await wsconnect({ servers: cfg.servers, user: cfg.user, pass: cfg.password, inboxPrefix: cfg.inboxPrefix });
		const errs = [];
		(async () => { for await (const s of nc.status()) if (s.type === "error") errs.push(String(s.error && s.error.message)); })();
		nc.publish("hermes.actions.primary.chat", '{"capability_id":"cap:hermes_agent:primary:chat"}');
		nc.publish("hermes.approvals.ui-role-del", '{"decision":"approve"}');
		await nc.flush();
		for (let i = 0; i < 100 && errs.length < 2; i++) await new Promise((r) => setTimeout(r, 50));
		await nc.close();
		return errs.join("\n");
	})()`)
	for _, subj := range []string{"hermes.actions.primary.chat", "hermes.approvals.ui-role-del"} {
		if !strings.Contains(strings.ToLower(got), "permissions violation for publish to \""+subj+"\"") {
			t.Errorf("publish on %s from the page's credential: errors %q, want a permissions violation", subj, got)
		}
	}
	// The server logged those two as violations of the dashboard user: the check above
	// that found none while the page replayed and followed would have seen one.
	waitFor(t, 10*time.Second, "the refused publishes in the server's log", func() bool {
		v := strings.Join(serverViolations(srvLog, "dashboard"), "\n")
		return strings.Contains(v, "hermes.actions.primary.chat") && strings.Contains(v, "hermes.approvals.ui-role-del")
	})
	st, err := js.Stream(pubCtx, "HERMES_ACTIONS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(pubCtx, jetstream.WithSubjectFilter("hermes.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["hermes.approvals.ui-role-del"] + info.State.Subjects["hermes.actions.primary.chat"]; n != 0 {
		t.Fatalf("%d refused messages stored: %v", n, info.State.Subjects)
	}
	b.poll("the deletion still waiting", `!!document.querySelector('#approvals li[data-id="ui-role-del"]')`)
}

// serverViolations lists the permission-violation lines nats-server logged for user.
func serverViolations(log *syncBuffer, user string) []string {
	var out []string
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "Violation") && strings.Contains(line, "/user:"+user+`"`) {
			out = append(out, line)
		}
	}
	return out
}
