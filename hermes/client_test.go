package hermes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes"
)

const testKey = "test-key-0123456789"

func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func newClient(t *testing.T, url string, opts ...hermes.Option) *hermes.Client {
	t.Helper()
	c, err := hermes.New(url, append([]hermes.Option{hermes.WithAPIKey(testKey), hermes.WithEndpointID("primary")}, opts...)...)
	noErr(t, err)
	return c
}

func call(c *hermes.Client, op, in string) (*hermes.Result, error) {
	return c.Call(context.Background(), hermes.Request{Operation: op, Input: hermes.DecodedInput(in)}, nil)
}

// noErr fails the test at once on an error.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func asError(t *testing.T, err error) *hermes.Error {
	t.Helper()
	var e *hermes.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *hermes.Error, got %T %v", err, err)
	}
	return e
}

type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
	body [][]byte
}

func (s *seen) add(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.body = append(s.body, b)
	s.mu.Unlock()
}

func (s *seen) last(t *testing.T) (*http.Request, []byte) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("no request seen")
	}
	return s.reqs[len(s.reqs)-1], s.body[len(s.body)-1]
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

func TestNewValidation(t *testing.T) {
	for _, u := range []string{"", "ftp://h", "http://", "http://u:p@h", "http://h/?q=1", "http://h/#f", "h:80", "http://h?"} {
		if _, err := hermes.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	for _, o := range []hermes.Option{hermes.WithAPIKey(""), hermes.WithAPIKey("a b"), hermes.WithAPIKey("a\nb"),
		hermes.WithKeyFunc(nil), hermes.WithHTTPClient(nil), hermes.WithFrameLimit(0), hermes.WithStreamLimit(-1), hermes.WithBodyLimit(0)} {
		if _, err := hermes.New("http://127.0.0.1:1", o); err == nil {
			t.Errorf("option accepted")
		}
	}
	if _, err := hermes.New("https://hermes.example:8443/prefix/"); err != nil {
		t.Fatal(err)
	}
}

func TestRequestShape(t *testing.T) {
	var s seen
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		s.add(r)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok": true}`)
	})
	c := newClient(t, srv.URL+"/prefix/")
	h := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	res, err := c.Call(context.Background(), hermes.Request{Operation: "chat",
		Input:          hermes.DecodedInput(`{"prompt":"hello","session_id":"sess-1","session_key":"k1"}`),
		IdempotencyKey: "idem-1", Header: h}, nil)
	noErr(t, err)
	if res.Status != "completed" || res.HTTPStatus != 200 || string(res.Output) != `{"ok": true}` || res.Stream != nil {
		t.Fatalf("result %+v %s", res, res.Output)
	}
	r, body := s.last(t)
	checks := map[string]string{
		"Authorization": "Bearer " + testKey, "Content-Type": "application/json", "Idempotency-Key": "idem-1",
		"X-Hermes-Session-Id": "sess-1", "X-Hermes-Session-Key": "k1", "Traceparent": h.Get("Traceparent"),
	}
	for k, v := range checks {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if r.Method != "POST" || r.RequestURI != "/prefix/v1/chat/completions" {
		t.Fatalf("%s %s", r.Method, r.RequestURI)
	}
	jsonEqual(t, body, `{"messages":[{"role":"user","content":"hello"}],"model":"hermes-agent","stream":false}`)

	// Path ids are sent exactly as encoded; health carries no Authorization; streams ask for SSE.
	if _, err := call(c, "session_messages", `{"session_id":"a/b c~é"}`); err != nil {
		t.Fatal(err)
	}
	r, _ = s.last(t)
	if r.RequestURI != "/prefix/api/sessions/a%2Fb%20c~%C3%A9/messages" || r.Method != "GET" {
		t.Fatalf("uri %s", r.RequestURI)
	}
	if _, err := call(c, "health", `{}`); err != nil && asError(t, err).Code != hermes.CodeUnhealthy {
		t.Fatal(err)
	}
	r, _ = s.last(t)
	if r.Header.Get("Authorization") != "" || r.RequestURI != "/prefix/health" {
		t.Fatalf("health: auth %q uri %s", r.Header.Get("Authorization"), r.RequestURI)
	}
	if _, err := call(c, "sessions_list", `{"source":"api_server","include_children":true}`); err != nil {
		t.Fatal(err)
	}
	r, _ = s.last(t)
	if r.RequestURI != "/prefix/api/sessions?limit=50&offset=0&source=api_server&include_children=true" {
		t.Fatalf("uri %s", r.RequestURI)
	}
}

func TestKeyFuncAndMissingKey(t *testing.T) {
	var s seen
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { s.add(r); io.WriteString(w, `{}`) })
	var key atomic.Value
	key.Store("key-one")
	c, err := hermes.New(srv.URL, hermes.WithKeyFunc(func() string { return key.Load().(string) }))
	noErr(t, err)
	for _, k := range []string{"key-one", "key-two"} {
		key.Store(k)
		if _, err := call(c, "models", `{}`); err != nil {
			t.Fatal(err)
		}
		if r, _ := s.last(t); r.Header.Get("Authorization") != "Bearer "+k {
			t.Fatalf("auth %q", r.Header.Get("Authorization"))
		}
	}
	key.Store("")
	_, err = call(c, "models", `{}`)
	if e := asError(t, err); e.Code != hermes.CodeAuthentication || !e.NotStarted {
		t.Fatalf("%+v", e)
	}
	if s.count() != 2 {
		t.Fatalf("a request without a key was sent")
	}
	nokey, _ := hermes.New(srv.URL)
	if _, err := call(nokey, "health", `{}`); err == nil || asError(t, err).Code != hermes.CodeUnhealthy {
		t.Fatalf("health without key: %v", err) // {} is not ok, but it was sent
	}
	if s.count() != 3 {
		t.Fatal("health not sent without a key")
	}
}

// roundTripCounter counts the requests sent through it.
type roundTripCounter struct{ n atomic.Int32 }

func (c *roundTripCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestWithHTTPClient: a client given with WithHTTPClient sends every request (with its
// key) through its own transport, and still follows no redirect.
func TestWithHTTPClient(t *testing.T) {
	var s seen
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		s.add(r)
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusFound)
			return
		}
		io.WriteString(w, `{}`)
	})
	var rt roundTripCounter
	c := newClient(t, srv.URL, hermes.WithHTTPClient(&http.Client{Transport: &rt}))
	if _, err := call(c, "chat", `{"prompt":"x"}`); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.last(t); r.Header.Get("Authorization") != "Bearer "+testKey {
		t.Fatalf("auth %q", r.Header.Get("Authorization"))
	}
	if _, err := call(c, "models", `{}`); err == nil || asError(t, err).HTTPStatus != http.StatusFound {
		t.Fatalf("redirect: %v", err)
	}
	if rt.n.Load() != 2 || s.count() != 2 {
		t.Fatalf("%d requests through the given transport, %d received; want 2 and 2", rt.n.Load(), s.count())
	}
}

func TestJSONBodies(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   string
	}{
		{200, `{"object": "list", "data": []}`, `{"object": "list", "data": []}`},
		{201, "  [1,2]\n", `[1,2]`},
		{200, "", `null`},
		{200, " \n\t", `null`},
		{200, "plain <text>", `{"text":"plain <text>"}`},
		{200, "bad \xff utf8", "{\"text\":\"bad \uFFFD utf8\"}"},
	}
	for _, tc := range cases {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		})
		res, err := call(newClient(t, srv.URL), "skills", `{}`)
		noErr(t, err)
		if string(res.Output) != tc.want || res.HTTPStatus != tc.status || res.Status != "completed" {
			t.Fatalf("body %q: got %s (%d %s)", tc.body, res.Output, res.HTTPStatus, res.Status)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", "100")
		}
		io.WriteString(w, `"`+strings.Repeat("x", 98)+`"`)
	})
	c := newClient(t, srv.URL, hermes.WithBodyLimit(50))
	_, err := call(c, "models", `{}`)
	if e := asError(t, err); e.Code != hermes.CodeInvalidResponse || e.Details["reason"] != "body_too_large" {
		t.Fatalf("%+v", e)
	}
}

func TestHealth(t *testing.T) {
	cases := []struct {
		body, status string
		want         string
	}{
		{`{"status": "ok", "platform": "hermes-agent", "version": "0.19.0"}`, "completed",
			`{"endpoint_id":"primary","status":"ok","platform":"hermes-agent","version":"0.19.0","http_status":200,"raw":{"status": "ok", "platform": "hermes-agent", "version": "0.19.0"}}`},
		{`{"status": "ok", "platform": "hermes-agent"}`, "completed",
			`{"endpoint_id":"primary","status":"ok","platform":"hermes-agent","version":null,"http_status":200,"raw":{"status": "ok", "platform": "hermes-agent"}}`},
		{`{"status": "degraded"}`, "failed",
			`{"endpoint_id":"primary","status":"degraded","platform":null,"version":null,"http_status":200,"raw":{"status": "degraded"}}`},
		{`OK`, "failed", `{"endpoint_id":"primary","status":null,"platform":null,"version":null,"http_status":200,"raw":{"text":"OK"}}`},
	}
	for _, tc := range cases {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, tc.body) })
		res, err := call(newClient(t, srv.URL), "health", ``)
		if res == nil || res.Status != tc.status {
			t.Fatalf("%s: res %+v err %v", tc.body, res, err)
		}
		jsonEqual(t, res.Output, tc.want)
		if tc.status == "completed" && err != nil {
			t.Fatal(err)
		}
		if tc.status == "failed" {
			if e := asError(t, err); e.Code != hermes.CodeUnhealthy || e.HTTPStatus != 200 {
				t.Fatalf("%+v", e)
			}
		}
	}
}

func TestErrorClasses(t *testing.T) {
	const secret = "secret-session-id-42"
	httpDate := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		name       string
		op, in     string
		status     int
		body       string
		header     http.Header
		code       string
		category   string
		remote     string
		notStarted bool
		retryAfter time.Duration // minimum expected
		retryable  [2]bool       // Retryable(false), Retryable(true)
	}{
		{"401 gateway", "models", `{}`, 401, `{"error": {"message": "Invalid gateway API key (API_SERVER_KEY)", "type": "gateway_auth_error", "code": "gateway_auth_failed"}}`, nil,
			hermes.CodeAuthentication, "auth", "gateway_auth_failed", true, 0, [2]bool{}},
		{"401 legacy", "chat", `{"prompt":"x"}`, 401, `{"error": {"message": "Invalid API key", "type": "invalid_request_error", "code": "invalid_api_key"}}`, nil,
			hermes.CodeAuthentication, "auth", "invalid_api_key", true, 0, [2]bool{}},
		{"403 empty", "session_chat", `{"session_id":"s","message":"m","session_key":"k"}`, 403, ``, nil,
			hermes.CodeAuthentication, "auth", "", true, 0, [2]bool{}},
		{"400 code", "chat", `{"prompt":"x"}`, 400, `{"error": {"message": "Invalid JSON in request body", "type": "invalid_request_error", "param": null, "code": "invalid_json"}}`, nil,
			hermes.CodeRemoteRejected, "permanent", "invalid_json", true, 0, [2]bool{}},
		{"400 no code", "responses", `{"input":"x"}`, 400, `{"error": {"message": "Missing 'input' field", "type": "invalid_request_error"}}`, nil,
			hermes.CodeRemoteRejected, "permanent", "", true, 0, [2]bool{}},
		{"404 session", "session_get", `{"session_id":"` + secret + `"}`, 404, `{"error": {"message": "Session not found: ` + secret + `", "type": "invalid_request_error", "param": null, "code": "session_not_found"}}`, nil,
			hermes.CodeRemoteRejected, "permanent", "session_not_found", true, 0, [2]bool{}},
		{"404 bare string", "session_get", `{"session_id":"s"}`, 404, `{"error": "Job not found"}`, nil,
			hermes.CodeRemoteRejected, "permanent", "", true, 0, [2]bool{}},
		{"404 text", "session_get", `{"session_id":"s"}`, 404, `404: Not Found`, nil,
			hermes.CodeRemoteRejected, "permanent", "", true, 0, [2]bool{}},
		{"409 exists", "session_create", `{"id":"x"}`, 409, `{"error": {"message": "exists", "type": "invalid_request_error", "param": null, "code": "session_exists"}}`, nil,
			hermes.CodeRemoteRejected, "permanent", "session_exists", true, 0, [2]bool{}},
		{"fork invalid title", "session_fork", `{"session_id":"s","body":{"title":"t"}}`, 400, `{"error": {"message": "x", "type": "invalid_request_error", "param": null, "code": "invalid_title"}}`, nil,
			hermes.CodeRemoteRejected, "permanent", "invalid_title", false, 0, [2]bool{}},
		{"413", "chat", `{"prompt":"x"}`, 413, `{"error": {"message": "Request body too large.", "type": "invalid_request_error", "param": null, "code": "body_too_large"}}`, nil,
			hermes.CodePayloadTooLarge, "permanent", "body_too_large", true, 0, [2]bool{}},
		{"429 gate", "chat", `{"prompt":"x"}`, 429, `{"error":{"message":"Too many concurrent runs (max 10)","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`, http.Header{"Retry-After": {"1"}},
			hermes.CodeRemoteUnavailable, "temporary", "rate_limit_exceeded", true, time.Second, [2]bool{true, true}},
		{"429 other", "chat_stream", `{"prompt":"x"}`, 429, `{}`, nil,
			hermes.CodeRemoteUnavailable, "temporary", "", false, 0, [2]bool{false, true}},
		{"500 text", "session_chat", `{"session_id":"s","message":"m"}`, 500, `500 Internal Server Error`, nil,
			hermes.CodeRemoteUnavailable, "temporary", "", false, 0, [2]bool{false, true}},
		{"502 agent", "chat", `{"prompt":"x"}`, 502, `{"error": {"message": "Response remained truncated", "type": "server_error", "param": null, "code": "agent_incomplete", "hermes": {"completed": false}}}`, nil,
			hermes.CodeAgentIncomplete, "temporary", "agent_incomplete", false, 0, [2]bool{false, true}}, // a safe read may retry a 502
		{"503 draining", "responses_stream", `{"input":"x"}`, 503, `{"error":{"message":"Gateway is draining existing work; retry shortly.","type":"invalid_request_error","param":null,"code":"gateway_draining"}}`, http.Header{"Retry-After": {httpDate}},
			hermes.CodeRemoteUnavailable, "temporary", "gateway_draining", true, 80 * time.Second, [2]bool{true, true}},
		{"503 db", "session_patch", `{"session_id":"s"}`, 503, `{"error":{"message":"x","type":"server_error","param":null,"code":"session_db_unavailable"}}`, nil,
			hermes.CodeRemoteUnavailable, "temporary", "session_db_unavailable", false, 0, [2]bool{false, true}},
		{"302 not followed", "models", `{}`, 302, ``, http.Header{"Location": {"/elsewhere"}},
			hermes.CodeRemoteRejected, "permanent", "", true, 0, [2]bool{}},
		{"weird code dropped", "models", `{}`, 400, `{"error":{"code":"has space <x>"}}`, nil,
			hermes.CodeRemoteRejected, "permanent", "", true, 0, [2]bool{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				if r.URL.Path == "/elsewhere" {
					t.Error("redirect followed")
				}
				for k, v := range tc.header {
					w.Header()[k] = v
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			res, err := call(newClient(t, srv.URL), tc.op, tc.in)
			if res != nil {
				t.Fatalf("result %+v on error", res)
			}
			e := asError(t, err)
			if e.Code != tc.code || e.Category != tc.category || e.RemoteCode != tc.remote || e.NotStarted != tc.notStarted || e.HTTPStatus != tc.status {
				t.Fatalf("got %+v", e)
			}
			if e.RetryAfter < tc.retryAfter || (tc.retryAfter == 0 && e.RetryAfter != 0) {
				t.Fatalf("RetryAfter %v, want >= %v", e.RetryAfter, tc.retryAfter)
			}
			if e.Retryable(false) != tc.retryable[0] || e.Retryable(true) != tc.retryable[1] {
				t.Fatalf("Retryable = %v/%v", e.Retryable(false), e.Retryable(true))
			}
			if e.Operation != tc.op || !strings.Contains(e.Error(), tc.code) {
				t.Fatalf("Error() = %q", e.Error())
			}
			for _, bad := range []string{secret, "Invalid", "Too many", "draining existing", "Not Found", "Internal", testKey} {
				if strings.Contains(e.Error(), bad) || strings.Contains(fmt.Sprint(e.Details), bad) {
					t.Fatalf("error text leaks %q: %s", bad, e.Error())
				}
			}
			if hits.Load() != 1 {
				t.Fatalf("hits %d", hits.Load())
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	noErr(t, err)
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, "http://"+addr)
	for _, op := range []string{"session_chat_stream", "session_delete"} {
		_, err = call(c, op, `{"session_id":"secret-sid","message":"secret prompt"}`)
		e := asError(t, err)
		if e.Code != hermes.CodeTransport || e.Category != "transport" || !e.NotStarted || !e.Retryable(false) {
			t.Fatalf("%s: %+v", op, e)
		}
		if strings.Contains(e.Error(), "secret") {
			t.Fatalf("error leaks the path: %s", e.Error())
		}
	}
}

func TestResetMidStream(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: assistant.delta\ndata: {\"delta\":\"a\"}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // closes the connection mid-body
	})
	var got []hermes.Event
	res, err := newClient(t, srv.URL).Call(context.Background(), hermes.Request{Operation: "session_chat_stream",
		Input: hermes.DecodedInput(`{"session_id":"s","message":"m"}`)}, func(ev hermes.Event) error { got = append(got, ev); return nil })
	// A stream that breaks after it started closed without a terminal event.
	e := asError(t, err)
	if e.Code != hermes.CodeStreamIncomplete || e.NotStarted || e.HTTPStatus != 200 || e.Retryable(false) {
		t.Fatalf("%+v", e)
	}
	if res == nil || res.Status != "failed" || res.Stream.EventCount != 1 || res.Stream.Text != "a" || res.Stream.Terminal {
		t.Fatalf("result %+v", res)
	}
	if len(got) != 1 || got[0].Text != "a" {
		t.Fatalf("events %+v", got)
	}
}

// sseServer serves body as an SSE stream for any request.
func sseServer(t *testing.T, body string) *httptest.Server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	})
}

func streamCall(t *testing.T, c *hermes.Client, op, in string) (*hermes.Result, []hermes.Event, error) {
	t.Helper()
	var evs []hermes.Event
	res, err := c.Call(context.Background(), hermes.Request{Operation: op, Input: hermes.DecodedInput(in)},
		func(ev hermes.Event) error { evs = append(evs, ev); return nil })
	return res, evs, err
}

func TestInvalidStreams(t *testing.T) {
	big := "data: " + strings.Repeat("x", 2048) + "\n\n"
	many := strings.Repeat("data: {\"delta\":\"xxxxxxxxxxxxxxxxxxxx\"}\n\n", 400)
	cases := []struct {
		name, body, reason string
		opts               []hermes.Option
		events             int
	}{
		{"bad utf8", "data: {\"delta\":\"a\"}\n\ndata: \xff\xfe\n\n", "invalid_utf8", nil, 1},
		{"oversized frame", "data: {\"delta\":\"a\"}\n\n" + big, "frame_too_large", []hermes.Option{hermes.WithFrameLimit(1024)}, 1},
		{"oversized line no newline", strings.Repeat("y", 5000), "frame_too_large", []hermes.Option{hermes.WithFrameLimit(1024)}, 0},
		{"stream cap", many, "stream_too_large", []hermes.Option{hermes.WithStreamLimit(4096)}, 4096 / 36},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := sseServer(t, tc.body)
			res, evs, err := streamCall(t, newClient(t, srv.URL, tc.opts...), "chat_stream", `{"prompt":"x"}`)
			e := asError(t, err)
			if res != nil || e.Code != hermes.CodeInvalidResponse || e.Details["reason"] != tc.reason || e.NotStarted || e.HTTPStatus != 200 {
				t.Fatalf("%+v", e)
			}
			if tc.events >= 0 && tc.name != "stream cap" && len(evs) != tc.events {
				t.Fatalf("events %d", len(evs))
			}
			if tc.name == "stream cap" && (len(evs) < 100 || len(evs) > 114) {
				t.Fatalf("events %d", len(evs))
			}
		})
	}
}

const chatFailBody = `data: {"choices": [{"index": 0, "delta": {"content": "partial"}, "finish_reason": null}]}

data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "error"}], "error": {"message": "provider returned 401", "type": "agent_error"}}

data: [DONE]

`

func TestStreamOutcomes(t *testing.T) {
	cases := []struct {
		name, op, in, body string
		status, code       string
		count              int
		text               string
		terminal, trunc    bool
		details            map[string]any
	}{
		{"completed", "session_chat_stream", `{"session_id":"s","message":"m"}`,
			"event: run.started\ndata: {}\n\nevent: assistant.delta\ndata: {\"delta\":\"Hi\"}\n\nevent: run.completed\ndata: {}\n\nevent: done\ndata: {}\n\n",
			"completed", "", 3, "Hi", true, false, nil},
		{"truncated", "chat_stream", `{"prompt":"x","max_events":2}`,
			"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"c\"}}]}\n\ndata: [DONE]\n\n",
			"failed", hermes.CodeStreamTruncated, 2, "ab", false, true, map[string]any{"operation": "chat_stream", "max_events": 2}},
		{"truncated at terminal", "chat_stream", `{"prompt":"x","max_events":1}`, "data: [DONE]\n\n",
			"failed", hermes.CodeStreamTruncated, 1, "", false, true, nil},
		{"incomplete", "responses_stream", `{"input":"x"}`,
			"event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\n: stream closed\n\n",
			"failed", hermes.CodeStreamIncomplete, 2, "x", false, false, map[string]any{"operation": "responses_stream"}},
		{"empty", "chat_stream", `{"prompt":"x"}`, "", "failed", hermes.CodeStreamIncomplete, 0, "", false, false, nil},
		{"cancelled", "chat_stream", `{"prompt":"x"}`, "data: {\"event\":\"run.cancelled\"}\n\n",
			"cancelled", "", 1, "", true, false, nil},
		{"error event", "session_chat_stream", `{"session_id":"s","message":"m"}`,
			"event: error\ndata: {\"message\":\"secret boom\"}\n\nevent: done\ndata: {}\n\n",
			"failed", hermes.CodeStreamFailed, 1, "", true, false, map[string]any{"operation": "session_chat_stream", "last_event": "error"}},
		{"response failed", "responses_stream", `{"input":"x"}`,
			"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\"}}\n\n",
			"failed", hermes.CodeStreamFailed, 1, "", true, false, map[string]any{"operation": "responses_stream", "last_event": "response.failed"}},
		{"finish reason error", "chat_stream", `{"prompt":"x"}`, chatFailBody,
			"failed", hermes.CodeStreamFailed, 3, "partial", true, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := sseServer(t, tc.body)
			res, evs, err := streamCall(t, newClient(t, srv.URL), tc.op, tc.in)
			if res == nil {
				t.Fatalf("no result: %v", err)
			}
			if res.Status != tc.status || res.Stream == nil || res.Stream.EventCount != tc.count || res.Stream.Text != tc.text ||
				res.Stream.Terminal != tc.terminal || res.Stream.Truncated != tc.trunc || len(evs) != tc.count {
				t.Fatalf("result %+v stream %+v events %d", res, res.Stream, len(evs))
			}
			want := fmt.Sprintf(`{"endpoint_id":"primary","operation":%q,"http_status":200,"event_count":%d,"text":%q,"terminal":%v,"truncated":%v}`,
				tc.op, tc.count, tc.text, tc.terminal, tc.trunc)
			if string(res.Output) != want {
				t.Fatalf("output %s\nwant   %s", res.Output, want)
			}
			if tc.code == "" {
				noErr(t, err)
				return
			}
			e := asError(t, err)
			if e.Code != tc.code || e.Category != "connector" || e.Retryable(true) || strings.Contains(e.Error(), "secret") {
				t.Fatalf("%+v", e)
			}
			for k, v := range tc.details {
				if fmt.Sprint(e.Details[k]) != fmt.Sprint(v) {
					t.Fatalf("details %v, want %v", e.Details, tc.details)
				}
			}
		})
	}
}

func TestCallbackError(t *testing.T) {
	srv := sseServer(t, "data: {\"delta\":\"a\"}\n\ndata: {\"delta\":\"b\"}\n\ndata: [DONE]\n\n")
	boom := errors.New("publish failed")
	n := 0
	res, err := newClient(t, srv.URL).Call(context.Background(), hermes.Request{Operation: "chat_stream", Input: hermes.DecodedInput(`{"prompt":"x"}`)},
		func(hermes.Event) error { n++; return boom })
	if res != nil || !errors.Is(err, boom) || n != 1 {
		t.Fatalf("res %v err %v n %d", res, err, n)
	}
	var he *hermes.Error
	if errors.As(err, &he) {
		t.Fatalf("callback error reported as *hermes.Error")
	}
}

func TestCancelClosesStream(t *testing.T) {
	disconnected := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message.started\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(disconnected)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n int
	_, err := newClient(t, srv.URL).Call(ctx, hermes.Request{Operation: "session_chat_stream", Input: hermes.DecodedInput(`{"session_id":"s","message":"m"}`)},
		func(ev hermes.Event) error {
			n++
			if ev.Kind != hermes.KindProgress {
				t.Errorf("kind %s", ev.Kind)
			}
			cancel()
			return nil
		})
	e := asError(t, err)
	if e.Code != hermes.CodeCancelled || e.NotStarted || !errors.Is(err, context.Canceled) || n != 1 {
		t.Fatalf("%+v n=%d", e, n)
	}
	select {
	case <-disconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not observe the disconnect")
	}
}

// TestStreamCutOffKeepsPartial: a stream cut off by its context (a cancel, the
// deadline) reports the aggregate of the events read until then in Error.Partial; a JSON
// operation that ran out of time has none.
func TestStreamCutOffKeepsPartial(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, d := range []string{"Three ", "findings"} {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", d)
			}
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	c := newClient(t, srv.URL)
	type agg struct {
		EventCount int    `json:"event_count"`
		Text       string `json:"text"`
		Terminal   bool   `json:"terminal"`
	}
	for _, tc := range []struct {
		name, code string
		ctx        func() (context.Context, context.CancelFunc)
		cancelAt   int // cancel after this many events (0: never)
	}{
		{"cancelled", hermes.CodeCancelled, func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, 2},
		{"deadline", hermes.CodeDeadlineExceeded, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			var n int
			res, err := c.Call(ctx, hermes.Request{Operation: "chat_stream", Input: hermes.DecodedInput(`{"prompt":"x"}`)}, func(hermes.Event) error {
				if n++; n == tc.cancelAt {
					cancel()
				}
				return nil
			})
			e := asError(t, err)
			if res != nil || e.Code != tc.code || e.Partial == nil {
				t.Fatalf("result %v, error %+v; want only an error %s with the partial aggregate", res, e, tc.code)
			}
			var got agg
			if err := json.Unmarshal(e.Partial.Output, &got); err != nil {
				t.Fatal(err)
			}
			if want := (agg{EventCount: 2, Text: "Three findings"}); got != want || n != 2 {
				t.Fatalf("partial %s after %d events, want %+v", e.Partial.Output, n, want)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Call(ctx, hermes.Request{Operation: "models", Input: hermes.DecodedInput(`{}`)}, nil)
	if e := asError(t, err); e.Code != hermes.CodeDeadlineExceeded || e.Partial != nil {
		t.Fatalf("models: %+v, want deadline_exceeded without a partial output", e)
	}
}

func TestDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	c := newClient(t, srv.URL)
	for _, tc := range []struct{ op, in string }{{"models", `{}`}, {"chat_stream", `{"prompt":"x"}`}} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := c.Call(ctx, hermes.Request{Operation: tc.op, Input: hermes.DecodedInput(tc.in)}, nil)
		cancel()
		e := asError(t, err)
		if e.Code != hermes.CodeDeadlineExceeded || e.Category != "temporary" || !errors.Is(err, context.DeadlineExceeded) || e.Retryable(true) {
			t.Fatalf("%s: %+v", tc.op, e)
		}
	}
	// An already-expired context sends nothing and is certainly not started.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Call(ctx, hermes.Request{Operation: "chat", Input: hermes.DecodedInput(`{"prompt":"x"}`)}, nil)
	if e := asError(t, err); e.Code != hermes.CodeCancelled || !e.NotStarted {
		t.Fatalf("%+v", e)
	}
}

func TestStreamEventFields(t *testing.T) {
	body := "id: 7\r\nevent: tool.started\r\ndata: {\"tool_name\":\"terminal\"}\r\n\r\n" +
		"retry: 100\n: keepalive\n\n" +
		"data: line1\ndata:line2\n\n" +
		"event: approval.request\nid\ndata\n\n" +
		"data: {\"event\":\"reasoning.available\",\"text\":\"copy\"}\n\n" +
		"data: {\"type\":\"response.output_text.delta\",\"text\":\"T\"}\n\n" +
		"event: tool.progress\ndata: {\"tool_name\":\"_thinking\",\"delta\":\"dup\"}\n\n" +
		"event: assistant.completed\ndata: {\"content\":\"late\"}\n\n" +
		"data: 42\n\n" +
		"data: {\"event\":\"run.completed\",\"output\":\"ignored\"}"
	srv := sseServer(t, body)
	res, evs, err := streamCall(t, newClient(t, srv.URL), "chat_stream", `{"prompt":"x"}`)
	noErr(t, err)
	type exp struct {
		event, id, name, kind, text, data string
		terminal                          bool
	}
	want := []exp{
		{"tool.started", "7", "tool.started", "tool", "", `{"tool_name":"terminal"}`, false},
		{"", "-", "", "data", "", `"line1\nline2"`, false},
		{"approval.request", "", "approval.request", "pending_approval", "", `null`, false},
		{"", "-", "reasoning.available", "thought", "", `{"event":"reasoning.available","text":"copy"}`, false},
		{"", "-", "response.output_text.delta", "data", "T", `{"type":"response.output_text.delta","text":"T"}`, false},
		{"tool.progress", "-", "tool.progress", "thought", "", `{"tool_name":"_thinking","delta":"dup"}`, false},
		{"assistant.completed", "-", "assistant.completed", "progress", "", `{"content":"late"}`, false},
		{"", "-", "", "data", "", `42`, false},
		{"", "-", "run.completed", "done", "", `{"event":"run.completed","output":"ignored"}`, true},
	}
	if len(evs) != len(want) {
		t.Fatalf("got %d events: %+v", len(evs), evs)
	}
	for i, w := range want {
		ev := evs[i]
		id := "-"
		if ev.ID != nil {
			id = *ev.ID
		}
		if ev.Index != i || ev.Event != w.event || id != w.id || ev.Name != w.name || ev.Kind != w.kind || ev.Text != w.text || string(ev.Data) != w.data || ev.Terminal != w.terminal {
			t.Errorf("event %d = %+v (data %s id %s), want %+v", i, ev, ev.Data, id, w)
		}
	}
	if res.Status != "completed" || res.Stream.Text != "T" || res.Stream.LastName != "run.completed" {
		t.Fatalf("%+v", res.Stream)
	}
}

func TestIdleConnsReused(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns[c.RemoteAddr().String()] = true
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := hermes.New(srv.URL, hermes.WithAPIKey(testKey), hermes.WithIdleConns(8))
	noErr(t, err)
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Call(context.Background(), hermes.Request{Operation: "models"}, nil); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	// Without reuse (net/http keeps 2 idle connections) about 2+6×5 = 32 would be dialed;
	// with reuse 8, plus a few when a round starts before the last one's connections
	// went back to the pool.
	if len(conns) > 16 {
		t.Errorf("%d connections for 40 calls 8 at a time, want at most 16 (idle connections reused)", len(conns))
	}
	if _, err := hermes.New(srv.URL, hermes.WithIdleConns(0)); err == nil {
		t.Error("WithIdleConns(0) accepted")
	}
}
