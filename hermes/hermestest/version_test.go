package hermestest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

func TestVersion016(t *testing.T) {
	srv := newServer(t, hermestest.WithVersion(hermestest.Version016))
	r := must(t, do(t, srv, "GET", "/v1/models", "", "Authorization", ""), 401)
	if r.body != `{"error": {"message": "Invalid API key", "type": "invalid_request_error", "code": "invalid_api_key"}}` {
		t.Errorf("401 %s", r.body)
	}
	if r := must(t, do(t, srv, "GET", "/health", ""), 200); r.body != `{"status": "ok", "platform": "hermes-agent"}` {
		t.Errorf("health %s", r.body)
	}
	m := must(t, do(t, srv, "GET", "/health/detailed", "", "Authorization", ""), 200).json(t)
	if _, ok := m["version"]; ok {
		t.Errorf("0.16 detailed health has version: %v", m)
	}
	if _, ok := m["readiness"]; ok {
		t.Errorf("0.16 detailed health has readiness: %v", m)
	}
	// 0.19 requires auth for /health/detailed and serves /v1/health and /p/<profile>/.
	srv19 := newServer(t)
	must(t, do(t, srv19, "GET", "/health/detailed", "", "Authorization", ""), 401)
	must(t, do(t, srv19, "GET", "/v1/health", "", "Authorization", ""), 200)
	must(t, do(t, srv19, "GET", "/p/default/v1/models", ""), 200)
	must(t, do(t, srv19, "GET", "/v1/skills", ""), 200)
	must(t, do(t, srv19, "GET", "/v1/toolsets", ""), 200)
	must(t, do(t, srv19, "GET", "/v1/models", "", "Authorization", "Bearer wrong-key-0123456789abcdef"), 401)
}

// TestVersion016NoGate: v0.16.0 predates the chat/responses concurrency gate.
func TestVersion016NoGate(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, hermestest.WithVersion(hermestest.Version016), blockingAgent(release))
	res := make(chan result, 12)
	for range 12 {
		go func() { res <- do(t, srv, "POST", "/v1/chat/completions", chatBody) }()
	}
	noErr(t, srv.WaitInFlight(testCtx(t), 12))
	close(release)
	for range 12 {
		if r := <-res; r.status != 200 {
			t.Errorf("status %d", r.status)
		}
	}
}

func TestObservation(t *testing.T) {
	srv := newServer(t)
	go func() {
		for i := 0; i < 3; i++ {
			do(t, srv, "POST", "/v1/responses", `{"input":"x","stream":"yes"}`, "Idempotency-Key", "k-1")
		}
	}()
	noErr(t, srv.WaitCalls(testCtx(t), "responses_stream", 3))
	if srv.Calls("responses") != 0 {
		t.Errorf("stream flag not used for the route key")
	}
	do(t, srv, "GET", "/nowhere", "")
	if srv.Calls("") != 1 {
		t.Errorf("Calls(\"\") = %d", srv.Calls(""))
	}
	reqs := srv.Requests()
	if reqs[0].IdempotencyKey != "k-1" || reqs[0].Method != http.MethodPost || !strings.Contains(string(reqs[0].Body), `"stream":"yes"`) {
		t.Errorf("recorded %+v", reqs[0])
	}
	srv.ResetCounters()
	if srv.Calls("responses_stream") != 0 || len(srv.Requests()) != 0 {
		t.Errorf("ResetCounters")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.WaitCalls(ctx, "chat", 1); err == nil {
		t.Errorf("WaitCalls ignored ctx")
	}
}

func BenchmarkChatStream100k(b *testing.B) {
	srv := hermestest.NewServer(hermestest.WithAgent(func(context.Context, hermestest.Turn) hermestest.Reply {
		return hermestest.Reply{Text: "x", Events: 100000, PadText: "y"}
	}))
	defer srv.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(chatStreamBody))
		req.Header.Set("Authorization", "Bearer "+srv.APIKey())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		b.SetBytes(n)
	}
}

// TestForgetSessions: ForgetSessions drops the persisted chats, sessions and stored
// responses and keeps the counters.
func TestForgetSessions(t *testing.T) {
	srv := newServer(t)
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"s"}`), 201)
	must(t, do(t, srv, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`), 200)
	resp := must(t, do(t, srv, "POST", "/v1/responses", `{"input":"hi"}`), 200).json(t)["id"].(string)
	must(t, do(t, srv, "GET", "/v1/responses/"+resp, ""), 200)
	if n := len(must(t, do(t, srv, "GET", "/api/sessions", ""), 200).json(t)["data"].([]any)); n < 2 {
		t.Fatalf("%d sessions before, want the created one and the chat's", n)
	}
	calls := srv.Calls("chat")
	srv.ForgetSessions()
	if n := len(must(t, do(t, srv, "GET", "/api/sessions", ""), 200).json(t)["data"].([]any)); n != 0 {
		t.Errorf("%d sessions after ForgetSessions", n)
	}
	must(t, do(t, srv, "GET", "/api/sessions/s", ""), 404)
	must(t, do(t, srv, "GET", "/v1/responses/"+resp, ""), 404)
	if srv.Calls("chat") != calls {
		t.Errorf("ForgetSessions changed the counters: chat %d, was %d", srv.Calls("chat"), calls)
	}
}
