package hermes_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

func fakeServer(t *testing.T, opts ...hermestest.Option) (*hermestest.Server, *hermes.Client) {
	t.Helper()
	s := hermestest.NewServer(opts...)
	t.Cleanup(s.Close)
	c, err := hermes.New(s.URL, hermes.WithAPIKey(s.APIKey()), hermes.WithEndpointID("fake"))
	noErr(t, err)
	return s, c
}

func field(t *testing.T, raw json.RawMessage, path ...string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("output not JSON: %s", raw)
	}
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			if len(x) == 0 {
				return nil
			}
			v = x[0]
		default:
			return nil
		}
	}
	return v
}

// TestFakeAllOperations drives every one of the 21 operations against the fake Hermes.
func TestFakeAllOperations(t *testing.T) {
	for _, version := range []string{hermestest.Version019, hermestest.Version016} {
		t.Run(version, func(t *testing.T) {
			s, c := fakeServer(t, hermestest.WithVersion(version))
			ctx := context.Background()
			do := func(op, in, key string) (*hermes.Result, []hermes.Event) {
				t.Helper()
				var evs []hermes.Event
				res, err := c.Call(ctx, hermes.Request{Operation: op, Input: hermes.DecodedInput(in), IdempotencyKey: key},
					func(ev hermes.Event) error { evs = append(evs, ev); return nil })
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				if res.Status != "completed" || res.Operation != op {
					t.Fatalf("%s: %+v", op, res)
				}
				return res, evs
			}

			res, _ := do("health", `{}`, "")
			if field(t, res.Output, "status") != "ok" || field(t, res.Output, "endpoint_id") != "fake" {
				t.Fatalf("health %s", res.Output)
			}
			for _, op := range []string{"health_detailed", "models", "capabilities", "skills", "toolsets"} {
				do(op, `{}`, "")
			}
			if res, _ := do("models", ``, ""); field(t, res.Output, "data", "0", "id") != "hermes-agent" {
				t.Fatalf("models %s", res.Output)
			}

			res, _ = do("chat", `{"prompt":"Hello","session_id":"chat-sess-1","session_key":"mem:1"}`, "idem-chat")
			if got := field(t, res.Output, "choices", "0", "message", "content"); got != "stub reply: Hello" {
				t.Fatalf("chat content %v", got)
			}
			res, evs := do("chat_stream", `{"messages":[{"role":"user","content":"Hello stream"}]}`, "")
			if res.Stream.Text != "stub reply: Hello stream" || !res.Stream.Terminal || evs[len(evs)-1].Kind != hermes.KindDone {
				t.Fatalf("chat_stream %+v", res.Stream)
			}

			res, _ = do("responses", `{"body":{"input":"Hi","store":true},"session_key":"mem:1"}`, "idem-resp")
			respID, _ := field(t, res.Output, "id").(string)
			if !strings.HasPrefix(respID, "resp_") {
				t.Fatalf("responses %s", res.Output)
			}
			res, _ = do("responses_stream", `{"input":"Hello responses stream"}`, "")
			if res.Stream.Text != "stub reply: Hello responses stream" || res.Stream.LastName != "response.completed" {
				t.Fatalf("responses_stream %+v", res.Stream)
			}
			if res, _ := do("response_get", `{"response_id":"`+respID+`"}`, ""); field(t, res.Output, "id") != respID {
				t.Fatalf("response_get %s", res.Output)
			}
			if res, _ := do("response_delete", `{"response_id":"`+respID+`"}`, "idem-del"); field(t, res.Output, "deleted") != true {
				t.Fatalf("response_delete %s", res.Output)
			}
			_, err := c.Call(ctx, hermes.Request{Operation: "response_get", Input: hermes.DecodedInput(`{"response_id":"` + respID + `"}`)}, nil)
			if e := asError(t, err); e.Code != hermes.CodeRemoteRejected || e.HTTPStatus != 404 || !e.NotStarted || strings.Contains(e.Error(), respID) {
				t.Fatalf("get after delete %+v", e)
			}

			const sid = "bridge-test-1"
			if res, _ := do("session_create", `{"body":{"id":"`+sid+`","title":"Bridge test"}}`, "idem-create"); res.HTTPStatus != 201 {
				t.Fatalf("create %d", res.HTTPStatus)
			}
			if res, _ := do("session_get", `{"session_id":"`+sid+`"}`, ""); field(t, res.Output, "session", "id") != sid {
				t.Fatalf("get %s", res.Output)
			}
			if res, _ := do("session_patch", `{"session_id":"`+sid+`","body":{"title":"Renamed"}}`, "idem-patch"); field(t, res.Output, "session", "title") != "Renamed" {
				t.Fatalf("patch %s", res.Output)
			}
			if res, _ := do("session_chat", `{"session_id":"`+sid+`","prompt":"hi there","session_key":"mem:2"}`, ""); field(t, res.Output, "message", "content") != "stub reply: hi there" {
				t.Fatalf("session_chat %s", res.Output)
			}
			res, evs = do("session_chat_stream", `{"session_id":"`+sid+`","message":"Hello session stream"}`, "")
			if res.Stream.Text != "stub reply: Hello session stream" || res.Stream.LastName != "run.completed" {
				t.Fatalf("session_chat_stream %+v", res.Stream)
			}
			kinds := map[string]int{}
			for _, ev := range evs {
				kinds[ev.Kind]++
			}
			if kinds[hermes.KindProgress] < 2 || kinds[hermes.KindDone] != 1 {
				t.Fatalf("kinds %v", kinds)
			}
			if res, _ := do("session_messages", `{"session_id":"`+sid+`"}`, ""); len(field(t, res.Output, "data").([]any)) != 4 {
				t.Fatalf("messages %s", res.Output)
			}
			res, _ = do("sessions_list", `{"source":"api_server","limit":200}`, "")
			if !strings.Contains(string(res.Output), `"`+sid+`"`) {
				t.Fatalf("list %s", res.Output)
			}
			if res, _ := do("session_fork", `{"session_id":"`+sid+`","body":{"id":"`+sid+`-fork"}}`, "idem-fork"); res.HTTPStatus != 201 || field(t, res.Output, "session", "parent_session_id") != sid {
				t.Fatalf("fork %s", res.Output)
			}
			if res, _ := do("session_delete", `{"session_id":"`+sid+`"}`, "idem-sdel"); field(t, res.Output, "deleted") != true {
				t.Fatalf("delete %s", res.Output)
			}

			for _, spec := range hermes.Operations() {
				if s.Calls(spec.Name) < 1 {
					t.Errorf("operation %s never reached the fake", spec.Name)
				}
			}
			for _, r := range s.Requests() {
				switch r.Route {
				case "chat":
					if r.IdempotencyKey != "idem-chat" || r.SessionID != "chat-sess-1" || r.SessionKey != "mem:1" {
						t.Errorf("chat headers %+v", r)
					}
				case "responses":
					if r.IdempotencyKey != "idem-resp" || r.SessionKey != "mem:1" {
						t.Errorf("responses headers %+v", r)
					}
				case "session_chat":
					if r.SessionKey != "mem:2" || strings.Contains(string(r.Body), "session_key") {
						t.Errorf("session_chat %+v %s", r, r.Body)
					}
				case "health":
					if r.Header.Get("Authorization") != "" {
						t.Errorf("health sent a token")
					}
				default:
					if r.Route != "" && !r.AuthValid {
						t.Errorf("%s not authenticated", r.Route)
					}
				}
			}
		})
	}
}

func TestFakeErrorClasses(t *testing.T) {
	failing := hermestest.WithAgent(func(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
		switch turn.UserText {
		case "fail-empty":
			return hermestest.Reply{Fail: "provider returned 401"}
		case "fail-partial":
			return hermestest.Reply{Text: "partial", Fail: "provider returned 401"}
		}
		return hermestest.StubAgent(ctx, turn)
	})
	s, c := fakeServer(t, failing)
	ctx := context.Background()
	run := func(op, in string) (*hermes.Result, int, error) {
		n := 0
		res, err := c.Call(ctx, hermes.Request{Operation: op, Input: hermes.DecodedInput(in)}, func(hermes.Event) error { n++; return nil })
		return res, n, err
	}
	type want struct {
		code, remote string
		status       int
		notStarted   bool
	}
	check := func(name string, err error, w want) *hermes.Error {
		t.Helper()
		e := asError(t, err)
		if e.Code != w.code || e.RemoteCode != w.remote || e.HTTPStatus != w.status || e.NotStarted != w.notStarted {
			t.Fatalf("%s: got %+v, want %+v", name, e, w)
		}
		return e
	}

	// 401 with the v0.19 and v0.16 bodies.
	for _, v := range []struct{ version, code string }{{hermestest.Version019, "gateway_auth_failed"}, {hermestest.Version016, "invalid_api_key"}} {
		fs := hermestest.NewServer(hermestest.WithVersion(v.version))
		wrong, _ := hermes.New(fs.URL, hermes.WithAPIKey("wrong-key"))
		_, err := wrong.Call(ctx, hermes.Request{Operation: "models"}, nil)
		fs.Close()
		check("401 "+v.version, err, want{hermes.CodeAuthentication, v.code, 401, true})
	}

	s.InjectFault(hermestest.Fault{Route: "chat", Status: 429})
	_, _, err := run("chat", `{"prompt":"x"}`)
	if e := check("429", err, want{hermes.CodeRemoteUnavailable, "rate_limit_exceeded", 429, true}); e.RetryAfter != time.Second || !e.Retryable(false) {
		t.Fatalf("429 %+v", e)
	}

	s.SetDraining(true)
	_, _, err = run("chat_stream", `{"prompt":"x"}`)
	check("503", err, want{hermes.CodeRemoteUnavailable, "gateway_draining", 503, true})
	s.SetDraining(false)

	s.InjectFault(hermestest.Fault{Route: "session_get", Status: 500, Body: "boom"})
	_, _, err = run("session_get", `{"session_id":"x"}`)
	if e := check("500", err, want{hermes.CodeRemoteUnavailable, "", 500, false}); !e.Retryable(true) || e.Retryable(false) {
		t.Fatalf("500 retryable %+v", e)
	}

	_, _, err = run("chat", `{"prompt":"fail-empty"}`)
	check("502", err, want{hermes.CodeAgentIncomplete, "agent_incomplete", 502, false})

	if _, _, err := run("session_create", `{"id":"dup-1"}`); err != nil {
		t.Fatal(err)
	}
	_, _, err = run("session_create", `{"id":"dup-1"}`)
	check("409", err, want{hermes.CodeRemoteRejected, "session_exists", 409, true})

	_, _, err = run("session_patch", `{"session_id":"dup-1","body":{"title":"a"}}`)
	noErr(t, err)

	s.InjectFault(hermestest.Fault{Route: "session_chat", Reset: true})
	_, _, err = run("session_chat", `{"session_id":"dup-1","message":"m"}`)
	check("reset", err, want{hermes.CodeTransport, "", 0, false})

	s.InjectFault(hermestest.Fault{Route: "chat_stream", AfterEvents: 2, Drop: true})
	_, n, err := run("chat_stream", `{"prompt":"one two three four"}`)
	if check("drop", err, want{hermes.CodeStreamIncomplete, "", 200, false}); n != 2 {
		t.Fatalf("drop: %d events before the reset", n)
	}

	s.InjectFault(hermestest.Fault{Route: "session_chat_stream", AfterEvents: 1, Malformed: true})
	_, _, err = run("session_chat_stream", `{"session_id":"dup-1","message":"m"}`)
	if e := check("malformed", err, want{hermes.CodeInvalidResponse, "", 200, false}); e.Details["reason"] != "invalid_utf8" {
		t.Fatalf("malformed %+v", e)
	}

	s.InjectFault(hermestest.Fault{Route: "responses_stream", AfterEvents: 1, Oversized: 2 << 20})
	_, _, err = run("responses_stream", `{"input":"x"}`)
	if e := check("oversized", err, want{hermes.CodeInvalidResponse, "", 200, false}); e.Details["reason"] != "frame_too_large" {
		t.Fatalf("oversized %+v", e)
	}

	// Stream outcomes.
	res, _, err := run("chat_stream", `{"prompt":"fail-partial"}`)
	if check("finish error", err, want{hermes.CodeStreamFailed, "", 200, false}); res == nil || res.Status != "failed" || res.Stream.Text != "partial" {
		t.Fatalf("finish error %+v", res)
	}
	res, _, err = run("session_chat_stream", `{"session_id":"dup-1","message":"fail-empty"}`)
	if e := check("session error", err, want{hermes.CodeStreamFailed, "", 200, false}); res == nil || e.Details["last_event"] != "error" {
		t.Fatalf("session error %+v %+v", res, e)
	}
	res, _, err = run("responses_stream", `{"input":"fail-empty"}`)
	if e := check("response.failed", err, want{hermes.CodeStreamFailed, "", 200, false}); res == nil || e.Details["last_event"] != "response.failed" {
		t.Fatalf("response.failed %+v %+v", res, e)
	}
	res, n, err = run("chat_stream", `{"prompt":"a b c d e","max_events":2}`)
	if check("truncated", err, want{hermes.CodeStreamTruncated, "", 200, false}); res == nil || !res.Stream.Truncated || n != 2 {
		t.Fatalf("truncated %+v n=%d", res, n)
	}
	s.InjectFault(hermestest.Fault{Route: "chat_stream", AfterEvents: 3, Stall: true})
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Call(sctx, hermes.Request{Operation: "chat_stream", Input: hermes.DecodedInput(`{"prompt":"a b c d"}`)}, nil)
	cancel()
	check("stall deadline", err, want{hermes.CodeDeadlineExceeded, "", 200, false})
}

// TestFakeConcurrencyGate checks that the 429 from the gate is certain non-execution.
func TestFakeConcurrencyGate(t *testing.T) {
	release := make(chan struct{})
	s, c := fakeServer(t, hermestest.WithMaxConcurrentRuns(1), hermestest.WithAgent(func(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
		if turn.UserText == "block" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return hermestest.StubAgent(ctx, turn)
	}))
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), hermes.Request{Operation: "chat", Input: hermes.DecodedInput(`{"prompt":"block"}`)}, nil)
		done <- err
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	noErr(t, s.WaitInFlight(wctx, 1))
	_, err := c.Call(context.Background(), hermes.Request{Operation: "responses", Input: hermes.DecodedInput(`{"input":"x"}`)}, nil)
	e := asError(t, err)
	if e.Code != hermes.CodeRemoteUnavailable || e.RemoteCode != "rate_limit_exceeded" || !e.NotStarted || !e.Retryable(false) || e.RetryAfter != time.Second {
		t.Fatalf("%+v", e)
	}
	close(release)
	noErr(t, <-done)
}
