package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// Redaction (issue 6): the bridge never logs prompts, outputs, tool data, bearer keys,
// Hermes session ids, session keys or response ids, at any level. Every value the tests
// below put in those places carries the word MARKER; every id Hermes generates has a
// recognisable shape. A log line showing either fails the test.

const (
	redactKey      = "MARKERKEY-0f9e8d7c6b5a4f3e2d1c"
	redactWrongKey = "MARKERWRONGKEY-1a2b3c4d5e6f7a8b"
	// Idempotency keys are not secret (the guide lists them nowhere); they carry no
	// MARKER so that logging them is reported, not failed.
	redactIdem = "IDEMKEY-redaction"
)

// leakRE matches the markers (in any case) and the ids Hermes generates: response ids,
// chat completion ids, derived and generated session ids, tool call ids, message ids.
var leakRE = regexp.MustCompile(`(?i:marker)|resp_[0-9a-f]{28}|chatcmpl-[0-9a-f]{29}|api-[0-9a-f]{16}|api_[0-9]+_[0-9a-f]{8}|call_[0-9a-f]{24}|msg_[0-9a-f]{24,32}`)

// redactionAgent answers every turn with output and tool markers; "fail:" fails the
// turn with a marker in the error, "slow:" answers after 2s.
func redactionAgent(_ context.Context, t hermestest.Turn) hermestest.Reply {
	r := hermestest.Reply{
		Text: "MARKEROUT-reply to the turn",
		Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command":"MARKERTOOLARG ls"}`, Output: "MARKERTOOLOUT listing",
			Text: "MARKERTHOUGHT let me look"}},
	}
	switch {
	case strings.HasPrefix(t.UserText, "fail:"):
		return hermestest.Reply{Fail: "MARKERFAIL the agent broke"}
	case strings.HasPrefix(t.UserText, "slow:"):
		r.Delay = 2 * time.Second
	}
	return r
}

// leaks returns a description of every line that shows a marker, a generated id or
// one of the exact strings.
func leaks(lines []string, exact []string) []string {
	var out []string
	for i, ln := range lines {
		if m := leakRE.FindString(ln); m != "" {
			out = append(out, fmt.Sprintf("line %d shows %q: %s", i+1, m, truncate(ln, 600)))
			continue
		}
		for _, s := range exact {
			if s != "" && strings.Contains(ln, s) {
				out = append(out, fmt.Sprintf("line %d shows %q: %s", i+1, s, truncate(ln, 600)))
				break
			}
		}
	}
	return out
}

func splitLines(s string) []string {
	var out []string
	for _, ln := range strings.Split(s, "\n") {
		if strings.TrimSpace(ln) != "" {
			out = append(out, ln)
		}
	}
	return out
}

// generatedIDs collects the Hermes-generated ids found in raw (outputs, events).
func generatedIDs(raw string) []string {
	var out []string
	for _, m := range leakRE.FindAllString(raw, -1) {
		if !strings.EqualFold(m, "marker") {
			out = append(out, m)
		}
	}
	return out
}

// TestRedactionInProcess drives all 21 operations, their failure paths, an unreadable
// message and a wrong key with markers everywhere, and checks that no log line of the
// bridge shows any of them.
func TestRedactionInProcess(t *testing.T) {
	t.Parallel()
	// The harness logger is zerolog.New(w): TraceLevel, so debug and trace lines are
	// captured too, unless the global level filters them.
	if zerolog.GlobalLevel() > zerolog.DebugLevel {
		t.Fatalf("zerolog global level %s hides debug lines", zerolog.GlobalLevel())
	}
	h := newHarness(t, withFake(hermestest.WithAPIKey(redactKey), hermestest.WithAgent(redactionAgent)),
		withConfig(func(c *bridge.Config) {
			c.Endpoints = append(c.Endpoints, bridge.Endpoint{ID: "wrongkey", BaseURL: c.Endpoints[0].BaseURL,
				Key: func() string { return redactWrongKey }, MaxConcurrency: 2})
		}))

	var seen strings.Builder // every output, event and error the bridge published
	ops := map[string]bool{}
	run := func(ep, op string, in any, mod ...func(*events.Action)) *events.Result {
		t.Helper()
		res, evs := h.callOn(ep, op, in, mod...)
		if ep == "primary" {
			ops[op] = true
		}
		b, _ := json.Marshal(res)
		seen.Write(b)
		for _, e := range evs {
			b, _ := json.Marshal(e)
			seen.Write(b)
		}
		return res
	}
	ok := func(op string, in any, mod ...func(*events.Action)) *events.Result {
		t.Helper()
		res := run("primary", op, in, mod...)
		requireCompleted(t, res)
		return res
	}
	fail := func(op, code string, in any, mod ...func(*events.Action)) {
		t.Helper()
		requireFailed(t, run("primary", op, in, mod...), code)
	}
	idem := func(s string) func(*events.Action) { return withKey(redactIdem + "-" + s) }

	// Discovery. health_detailed first meets a 503 whose body carries a marker (retried).
	h.fake.InjectFault(hermestest.Fault{Route: "health_detailed", Status: 503,
		Body: `{"error":{"message":"MARKERFAULT upstream detail","type":"server_error"}}`})
	for _, op := range []string{"health", "health_detailed", "models", "capabilities", "skills", "toolsets"} {
		ok(op, `{}`)
	}
	wantEq(t, h.fake.Calls("health_detailed"), 2, "health_detailed reached Hermes %d times, want 2 (the 503 retried)")

	// Sessions.
	ok("session_create", map[string]any{"body": map[string]any{"id": "MARKERSESSION-1", "title": "MARKERTITLE-1",
		"system_prompt": "MARKERSYSTEM be brief"}}, idem("create"))
	fail("session_create", "remote_rejected", map[string]any{"body": map[string]any{"id": "MARKERSESSION-1"}}, idem("create-again"))                       // 409 echoes the id
	fail("session_create", "remote_rejected", map[string]any{"body": map[string]any{"id": "MARKERSESSION-2", "title": "MARKERTITLE-1"}}, idem("create-2")) // 400 echoes title and id
	res := ok("session_create", map[string]any{"title": "MARKERTITLE-generated"}, idem("create-generated"))                                                // the fake generates api_<ts>_<hex>
	genSID := jstr(output(t, res), "session", "id")
	ok("session_get", map[string]any{"session_id": "MARKERSESSION-1"})
	ok("session_get", map[string]any{"session_id": genSID})
	fail("session_get", "remote_rejected", map[string]any{"session_id": "MARKERSESSION-missing"}) // 404 "Session not found: <id>"
	requireFailed(t, run("primary", "session_get", map[string]any{"session_id": "MARKERSESSION\n-bad"}), "invalid_action")
	ok("session_patch", map[string]any{"session_id": "MARKERSESSION-1", "body": map[string]any{"title": "MARKERTITLE-2"}}, idem("patch"))
	fail("session_patch", "invalid_action", map[string]any{"session_id": "MARKERSESSION-1", "body": map[string]any{"MARKERFIELD": "MARKERVALUE"}}, idem("patch-bad"))
	ok("session_chat", map[string]any{"session_id": "MARKERSESSION-1", "prompt": "MARKERPROMPT session chat",
		"session_key": "MARKERSKEY-session-chat"}, idem("schat"))
	ok("session_chat_stream", map[string]any{"session_id": "MARKERSESSION-1", "message": "MARKERPROMPT session stream",
		"session_key": "MARKERSKEY-session-stream"})
	fail("session_chat_stream", "stream_failed", map[string]any{"session_id": "MARKERSESSION-1", "message": "fail: MARKERPROMPT"})
	ok("session_messages", map[string]any{"session_id": "MARKERSESSION-1"})
	ok("session_fork", map[string]any{"session_id": "MARKERSESSION-1", "body": map[string]any{"id": "MARKERSESSION-child",
		"title": "MARKERTITLE-child"}}, idem("fork"))
	fail("session_fork", "remote_rejected", map[string]any{"session_id": "MARKERSESSION-missing", "body": map[string]any{"id": "MARKERSESSION-orphan"}}, idem("fork-orphan"))
	ok("session_delete", map[string]any{"session_id": "MARKERSESSION-child"}, idem("sdel"), preApproved)
	fail("session_delete", "remote_rejected", map[string]any{"session_id": "MARKERSESSION-child"}, idem("sdel-again"), preApproved) // 404 now

	// Chat.
	ok("chat", map[string]any{"prompt": "MARKERPROMPT chat", "session_id": "MARKERSESSION-chat",
		"session_key": "MARKERSKEY-chat"}, idem("chat"))
	ok("chat", map[string]any{"messages": []map[string]string{{"role": "system", "content": "MARKERSYSTEM chat"},
		{"role": "user", "content": "MARKERPROMPT messages"}}}) // derived session id api-<hex>
	requireFailed(t, run("primary", "chat", map[string]any{"prompt": "MARKERPROMPT both",
		"messages": []map[string]string{{"role": "user", "content": "MARKERPROMPT both"}}}), "invalid_action")
	fail("chat", "agent_incomplete", map[string]any{"prompt": "fail: MARKERPROMPT", "session_key": "MARKERSKEY-fail"}) // 502 agent_incomplete
	requireFailed(t, run("primary", "chat", map[string]any{"prompt": "slow: MARKERPROMPT", "session_key": "MARKERSKEY-slow"},
		withTimeoutMS(300)), "deadline_exceeded")
	h.fake.InjectFault(hermestest.Fault{Route: "chat", Status: 500, Body: "MARKERFAULT500 internal error for MARKERSKEY-500"})
	fail("chat", "remote_unavailable", map[string]any{"prompt": "MARKERPROMPT five hundred", "session_key": "MARKERSKEY-500"})
	ok("chat_stream", map[string]any{"query": "MARKERPROMPT stream", "session_id": "MARKERSESSION-chatstream",
		"session_key": "MARKERSKEY-stream"})
	fail("chat_stream", "stream_failed", map[string]any{"prompt": "fail: MARKERPROMPT stream"})

	// Responses.
	res = ok("responses", map[string]any{"body": map[string]any{"input": "MARKERPROMPT responses",
		"instructions": "MARKERSYSTEM responses", "store": true}, "session_key": "MARKERSKEY-responses"}, idem("resp"))
	respID := jstr(output(t, res), "id")
	if !strings.HasPrefix(respID, "resp_") {
		t.Fatalf("responses output %s", truncate(string(res.Output), 300))
	}
	res = ok("responses", map[string]any{"input": "MARKERPROMPT chained", "previous_response_id": respID,
		"session_key": "MARKERSKEY-chained"})
	chainedID := jstr(output(t, res), "id")
	fail("responses", "remote_rejected", map[string]any{"input": "MARKERPROMPT orphan", "previous_response_id": "resp_MARKERMISSING"}) // 404 echoes the id
	ok("responses_stream", map[string]any{"input": "MARKERPROMPT rstream", "session_key": "MARKERSKEY-rstream"})
	ok("response_get", map[string]any{"response_id": respID})
	fail("response_get", "remote_rejected", map[string]any{"response_id": "resp_MARKERMISSING"}) // 404 "Response not found: <id>"
	ok("response_delete", map[string]any{"response_id": chainedID}, idem("rdel"), preApproved)
	fail("response_delete", "remote_rejected", map[string]any{"response_id": chainedID}, idem("rdel-again"), preApproved) // 404 now

	// The wrong key: 401 on an authenticated read and on a chat.
	requireFailed(t, run("wrongkey", "models", `{}`), "authentication")
	requireFailed(t, run("wrongkey", "chat", map[string]any{"prompt": "MARKERPROMPT wrong key",
		"session_id": "MARKERSESSION-wrong", "session_key": "MARKERSKEY-wrong"}), "authentication")

	// Unreadable messages (DLQ) and readable ids with unusable contents (invalid_action).
	h.publishRaw(chatSubject, nil, []byte(`{"prompt":"MARKERPROMPT dlq","session_key":"MARKERSKEY-dlq"}`))
	h.publishRaw(chatSubject, nats.Header{"content-type": []string{"application/cloudevents+json"}},
		[]byte(`{"specversion":"1.0","id":"bad id","source":"e2e","type":"hermes.bridge.action.v1","data":{"input":{"prompt":"MARKERPROMPT dlq2"}}}`))
	for i, c := range []struct{ typ, data string }{
		{"MARKERTYPE.not.an.action", `{"input":{"prompt":"MARKERPROMPT bad type","session_key":"MARKERSKEY-type"}}`},
		{events.TypeAction, `MARKERPROMPT this is not JSON`},
		{events.TypeAction, `{"input":{"prompt":"MARKERPROMPT","session_id":"MARKERSESSION-x"},"MARKERFIELD":1}`},
	} {
		id := fmt.Sprintf("redactionRawAction%d", i)
		h.publishRaw(chatSubject, binaryHeader(id, c.typ, ""), []byte(c.data))
		r, _ := h.follow(id)
		if r.Status != events.StatusFailed {
			t.Errorf("raw action %d: status %q, want failed", i, r.Status)
		}
		b, _ := json.Marshal(r)
		seen.Write(b)
	}
	h.dlq(2, 10*time.Second)

	// Last, so that it lists every session created above.
	ok("sessions_list", map[string]any{"limit": 200, "include_children": true})
	h.waitIdle(10 * time.Second)

	// The test exercised what it claims.
	if len(ops) != 21 {
		t.Errorf("%d operations driven, want 21: %v", len(ops), ops)
	}
	h.eventually(5*time.Second, func() error {
		logged := map[string]bool{}
		for _, l := range h.logLines() {
			if l.str("message") == "action" {
				logged[strings.TrimPrefix(l.str("capability"), "cap:hermes_agent:primary:")] = true
			}
		}
		for op := range ops {
			if !logged[op] {
				return fmt.Errorf("no action log line for %s", op)
			}
		}
		return nil
	})
	published := seen.String()
	for _, m := range []string{"MARKEROUT", "MARKERTOOLARG", "MARKERTOOLOUT", "MARKERSESSION-1", respID} {
		if !strings.Contains(published, m) {
			t.Errorf("no result or event shows %q: the agent's data never came back", m)
		}
	}
	var sawKey, sawWrong, sawSKey, sawSID, sawPathSID, sawPathResp bool
	var bodies strings.Builder
	for _, r := range h.fake.Requests() {
		sawKey = sawKey || r.AuthValid
		sawWrong = sawWrong || (!r.AuthValid && r.Header.Get("Authorization") != "")
		sawSKey = sawSKey || strings.HasPrefix(r.SessionKey, "MARKERSKEY")
		sawSID = sawSID || strings.HasPrefix(r.SessionID, "MARKERSESSION")
		sawPathSID = sawPathSID || strings.Contains(r.Path, "MARKERSESSION-1")
		sawPathResp = sawPathResp || strings.Contains(r.Path, respID)
		bodies.Write(r.Body)
	}
	if !sawKey || !sawWrong || !sawSKey || !sawSID || !sawPathSID || !sawPathResp {
		t.Errorf("markers did not reach Hermes: key %v, wrong key %v, session key %v, session id header %v, session id path %v, response id path %v",
			sawKey, sawWrong, sawSKey, sawSID, sawPathSID, sawPathResp)
	}
	for _, m := range []string{"MARKERPROMPT", "MARKERSYSTEM", "MARKERTITLE-1", "MARKERTITLE-2", "MARKERSESSION-child"} {
		if !strings.Contains(bodies.String(), m) {
			t.Errorf("no request body carried %q", m)
		}
	}
	ids := generatedIDs(published)
	for _, want := range []string{"resp_", "api-", "api_"} {
		found := false
		for _, id := range ids {
			found = found || strings.HasPrefix(id, want)
		}
		if !found {
			t.Errorf("no generated id %s... came back in an output: the id check would be vacuous", want)
		}
	}

	// The check.
	lines := splitLines(h.logs.String())
	exact := append([]string{redactKey, redactWrongKey, respID, chainedID, genSID}, ids...)
	for _, l := range leaks(lines, exact) {
		t.Errorf("bridge log leaks: %s", l)
	}
	if strings.Contains(h.logs.String(), redactIdem) {
		t.Logf("note: idempotency keys appear in the log (not a secret per the guide)")
	}
	t.Logf("%d log lines checked, %d generated ids, %d requests reached Hermes", len(lines), len(ids), len(h.fake.Requests()))
}

// TestRedactionProcess runs the real `hermes-bridge run` at debug level with the key in
// a file and NATS credentials in the URL and a file, drives a few operations with
// markers, and checks its whole stderr (startup config dump and shutdown included).
func TestRedactionProcess(t *testing.T) {
	t.Parallel()
	const key = "MARKERKEY-proc-77aa88bb99cc00dd"
	h := newHarness(t, withoutBridge(), withFake(hermestest.WithAPIKey(key), hermestest.WithAgent(redactionAgent)))
	dir := t.TempDir()
	keyFile := writeSecret(t, dir, "hermes.key", key+"\n")
	pwFile := writeSecret(t, dir, "nats.pw", "MARKERNATSPW-file\n")
	// The embedded test server has no authentication: it accepts any credentials.
	natsURL := strings.Replace(h.ns.ClientURL(), "nats://", "nats://bridge:MARKERNATSURLPW@", 1)
	p := h.startProc(withoutEnv("HERMES_API_KEY"), withEnv("HERMES_API_KEY_FILE", keyFile),
		withEnv("NATS_URL", natsURL), withEnv("NATS_USER", "bridge"), withEnv("NATS_PASSWORD_FILE", pwFile))

	var ids []string
	var published strings.Builder
	call := func(op string, in any, want string, mod ...func(*events.Action)) *events.Result {
		t.Helper()
		res, evs := h.call(op, in, mod...)
		if res.Status != want {
			t.Fatalf("%s: status %q error %s, want %s", op, res.Status, errString(res.Error), want)
		}
		ids = append(ids, res.ActionID)
		b, _ := json.Marshal(res)
		published.Write(b)
		for _, e := range evs {
			b, _ := json.Marshal(e)
			published.Write(b)
		}
		return res
	}
	done, failed := events.StatusCompleted, events.StatusFailed
	call("chat", map[string]any{"prompt": "MARKERPROMPT proc chat", "session_id": "MARKERSESSION-proc-chat",
		"session_key": "MARKERSKEY-proc-chat"}, done)
	call("chat_stream", map[string]any{"prompt": "MARKERPROMPT proc stream", "session_key": "MARKERSKEY-proc-stream"}, done)
	call("chat", map[string]any{"prompt": "MARKERPROMPT both", "messages": []map[string]string{{"role": "user", "content": "MARKERPROMPT"}}}, failed)
	call("chat", map[string]any{"prompt": "fail: MARKERPROMPT proc"}, failed)
	call("session_create", map[string]any{"body": map[string]any{"id": "MARKERSESSION-proc", "title": "MARKERTITLE-proc"}}, done,
		withKey(redactIdem+"-proc-create"))
	call("session_chat", map[string]any{"session_id": "MARKERSESSION-proc", "prompt": "MARKERPROMPT proc session",
		"session_key": "MARKERSKEY-proc-session"}, done)
	call("session_get", map[string]any{"session_id": "MARKERSESSION-proc-missing"}, failed)
	res := call("responses", map[string]any{"input": "MARKERPROMPT proc responses", "session_key": "MARKERSKEY-proc-resp"}, done)
	respID := jstr(output(t, res), "id")
	call("response_get", map[string]any{"response_id": respID}, done)
	call("response_get", map[string]any{"response_id": "resp_MARKERMISSING"}, failed)
	h.publishRaw(chatSubject, nil, []byte(`{"prompt":"MARKERPROMPT proc dlq","session_key":"MARKERSKEY-proc-dlq"}`))
	h.dlq(1, 10*time.Second)
	p.waitLog(10*time.Second, "dead-lettered")
	h.eventually(10*time.Second, func() error {
		for _, id := range ids {
			if len(p.actionLines(id)) == 0 {
				return fmt.Errorf("no action log line for %s", id)
			}
		}
		return nil
	})
	if code := p.terminate(30 * time.Second); code != 0 {
		t.Errorf("hermes-bridge exited %d after SIGTERM", code)
	}

	lines := p.log()
	dump := ""
	for _, ln := range lines {
		if strings.Contains(ln, `"message":"starting hermes-bridge"`) {
			dump = ln
		}
	}
	if !strings.Contains(dump, `"HERMES_BRIDGE_LOG_LEVEL":"debug"`) || !strings.Contains(dump, `"HERMES_API_KEY_FILE"`) ||
		!strings.Contains(dump, `"NATS_PASSWORD_FILE"`) || !strings.Contains(dump, "nats://redacted@") {
		t.Errorf("startup config dump is not the expected one: %s", dump)
	}
	var sawKey, sawSKey bool
	for _, r := range h.fake.Requests() {
		sawKey = sawKey || r.AuthValid
		sawSKey = sawSKey || strings.HasPrefix(r.SessionKey, "MARKERSKEY-proc")
	}
	if !sawKey || !sawSKey || !strings.Contains(published.String(), "MARKEROUT") || !strings.HasPrefix(respID, "resp_") {
		t.Errorf("markers did not make the round trip: key %v, session key %v, response id %q", sawKey, sawSKey, respID)
	}
	exact := append([]string{key, respID}, generatedIDs(published.String())...)
	for _, l := range leaks(lines, exact) {
		t.Errorf("hermes-bridge run stderr leaks: %s", l)
	}
	t.Logf("%d stderr lines checked", len(lines))
}

// TestRedactionNATSURLToken: a token in NATS_URL (nats://TOKEN@host, the nats.go form)
// is a secret from the environment; neither the config dump nor the connection log may
// show it.
func TestRedactionNATSURLToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutBridge())
	natsURL := strings.Replace(h.ns.ClientURL(), "nats://", "nats://MARKERNATSTOKEN-4d5e6f@", 1)
	p := h.startProc(withEnv("NATS_URL", natsURL))
	res := h.callOK("health", `{}`)
	p.waitLog(10*time.Second, res.ActionID)
	for _, l := range leaks(p.log(), nil) {
		t.Errorf("hermes-bridge run stderr leaks: %s", l)
	}
}

// TestRedactionCLIOutputs: help and configuration or connection errors never show a
// secret, whatever the environment holds.
func TestRedactionCLIOutputs(t *testing.T) {
	t.Parallel()
	bin := bridgeBinary(t)
	dir := t.TempDir()
	badKeyFile := writeSecret(t, dir, "bad.key", "MARKERFILEKEY has a space\n")
	badPwFile := writeSecret(t, dir, "bad.pw", "MARKERNATSPWFILE has a space\n")
	closed := strings.Replace(closedPortURL(t), "http://", "", 1)
	// Keys written inline (rejected) and a key variable that is invalid.
	yamlFile := writeSecret(t, dir, "endpoints.yaml", "endpoints:\n  - id: a\n    base_url: http://u:MARKERPW-yaml@127.0.0.1:1\n"+
		"    api_key: MARKERINLINEKEY-yaml\n  - id: b\n    base_url: http://127.0.0.1:1\n    api_key_env: B_KEY\n")
	jsonFile := writeSecret(t, dir, "endpoints.json", `{"endpoints":[{"id":"a","base_url":"http://127.0.0.1:1","api_key_env":"A_KEY"},`+
		`{"id":"b","base_url":"http://u:MARKERPW-json@127.0.0.1:1","api_key_env":"B_KEY"}]}`)
	badYAML := writeSecret(t, dir, "broken.yaml", "endpoints:\n  - id: a\n    api_key: \"MARKERINLINEKEY-broken\n  base_url: [\n")
	secrets := map[string]string{
		"HERMES_API_KEY": "MARKERENVKEY-0123456789", "NATS_PASSWORD": "MARKERNATSPW-env", "NATS_TOKEN": "MARKERNATSTOKEN-env",
	}
	cases := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantOut  string // proves the path ran
	}{
		{"run_help", []string{"run", "--help"}, secrets, 0, "HERMES_API_KEY_FILE"},
		{"help", []string{"--help"}, secrets, 0, "run"},
		{"invalid_config", []string{"run"}, map[string]string{
			"HERMES_URL": "http://user:MARKERPW@127.0.0.1:1", "HERMES_API_KEY": "MARKERENVKEY has a space",
			"NATS_PASSWORD": "MARKERNATSPW-env", "NATS_TOKEN": "MARKERNATSTOKEN-env", "HERMES_BRIDGE_LOG_LEVEL": "bogus",
			"NATS_URL": "nats://user:MARKERNATSPW bad@127.0.0.1:1,nats://user:MARKERNATSPW2@",
		}, 2, "HERMES_URL"},
		{"endpoints_yaml_inline_key", []string{"run"}, map[string]string{
			"HERMES_ENDPOINTS_FILE": yamlFile, "B_KEY": "MARKERENVKEY-b",
		}, 2, "api_key"},
		{"endpoints_json_bad_keys", []string{"run"}, map[string]string{
			"HERMES_ENDPOINTS_FILE": jsonFile, "A_KEY": "MARKERENVKEY has a space", "B_KEY": "MARKERENVKEY-b",
		}, 2, "A_KEY"},
		{"endpoints_broken_yaml", []string{"run"}, map[string]string{"HERMES_ENDPOINTS_FILE": badYAML}, 2, "YAML"},
		{"bad_key_file", []string{"run"}, map[string]string{
			"HERMES_URL": "http://127.0.0.1:1", "HERMES_API_KEY_FILE": badKeyFile,
		}, 2, "bad.key"},
		{"bad_nats_password_file", []string{"run"}, map[string]string{
			"HERMES_URL": "http://127.0.0.1:1", "HERMES_API_KEY": "MARKERENVKEY-0123456789",
			"NATS_URL": "nats://" + closed, "NATS_USER": "bridge", "NATS_PASSWORD_FILE": badPwFile,
		}, 1, "bad.pw"},
		{"nats_unreachable", []string{"run"}, map[string]string{
			"HERMES_URL": "http://127.0.0.1:1", "HERMES_API_KEY": "MARKERENVKEY-0123456789",
			"NATS_URL": "nats://user:MARKERNATSPW@" + closed, "HERMES_BRIDGE_LOG_LEVEL": "debug",
		}, 1, "connect to NATS"},
		{"nats_url_token_unreachable", []string{"run"}, map[string]string{
			"HERMES_URL": "http://127.0.0.1:1", "HERMES_API_KEY": "MARKERENVKEY-0123456789",
			"NATS_URL": "nats://MARKERNATSTOKEN-url@" + closed,
		}, 1, "connect to NATS"},
		{"nats_url_token_bad_scheme", []string{"run"}, map[string]string{
			"HERMES_URL": "http://127.0.0.1:1", "NATS_URL": "http://MARKERNATSTOKEN-url@" + closed,
		}, 2, "NATS_URL"},
		{"nats_unreachable_token", []string{"run"}, map[string]string{
			"HERMES_URL": "http://127.0.0.1:1", "HERMES_API_KEY": "MARKERENVKEY-0123456789",
			"NATS_URL": "nats://" + closed, "NATS_TOKEN": "MARKERNATSTOKEN-env", "HERMES_BRIDGE_LOG_LEVEL": "debug",
		}, 1, "connect to NATS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, c.args...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
			for k, v := range c.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != c.wantCode {
				t.Errorf("exit %d, want %d:\n%s", code, c.wantCode, out)
			}
			if !strings.Contains(string(out), c.wantOut) {
				t.Errorf("output does not mention %q:\n%s", c.wantOut, out)
			}
			for _, l := range leaks(splitLines(string(out)), nil) {
				t.Errorf("hermes-bridge %s output leaks: %s", strings.Join(c.args, " "), l)
			}
		})
	}
}

func writeSecret(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	requireOK(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}
