package hermestest_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

func TestFaultStatus(t *testing.T) {
	srv := newServer(t)
	srv.InjectFault(hermestest.Fault{Route: "chat", Status: 429, Times: 2})
	srv.InjectFault(hermestest.Fault{Route: "models", Status: 500, Body: "oops", Header: http.Header{"X-Test": {"1"}}})
	must(t, do(t, srv, "GET", "/health", ""), 200) // not matching: not consumed
	for i := 0; i < 2; i++ {
		r := must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody), 429)
		if r.header.Get("Retry-After") != "1" || r.errCode(t) != "rate_limit_exceeded" {
			t.Errorf("fault 429 %v %s", r.header, r.body)
		}
	}
	must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody), 200)
	r := must(t, do(t, srv, "GET", "/v1/models", ""), 500)
	if r.body != "oops" || r.header.Get("X-Test") != "1" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("custom fault %v %q", r.header, r.body)
	}
	if srv.PendingFaults() != 0 || srv.Calls("chat") != 3 || srv.Calls("models") != 1 {
		t.Errorf("pending %d calls %d/%d", srv.PendingFaults(), srv.Calls("chat"), srv.Calls("models"))
	}
	srv.InjectFault(hermestest.Fault{Status: 503})
	if r := must(t, do(t, srv, "GET", "/api/sessions", ""), 503); r.errCode(t) != "gateway_draining" {
		t.Errorf("503 %s", r.body)
	}
}

func TestFaultDelay(t *testing.T) {
	srv := newServer(t)
	srv.InjectFault(hermestest.Fault{Route: "health", Delay: 30 * time.Millisecond})
	start := time.Now()
	must(t, do(t, srv, "GET", "/health", ""), 200)
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("delay not applied: %v", d)
	}
}

func TestFaultReset(t *testing.T) {
	rec := &turnLog{}
	srv := newServer(t, rec.agent())
	srv.InjectFault(hermestest.Fault{Route: "chat", Reset: true})
	if r := do(t, srv, "POST", "/v1/chat/completions", chatBody); r.err == nil {
		t.Fatalf("expected a transport error, got %d", r.status)
	}
	if len(rec.get()) != 0 || srv.Calls("chat") != 1 {
		t.Errorf("agent called=%d calls=%d", len(rec.get()), srv.Calls("chat"))
	}
}

func TestFaultDropMidStream(t *testing.T) {
	srv := newServer(t)
	srv.InjectFault(hermestest.Fault{Route: "chat_stream", Drop: true, AfterEvents: 2})
	r := do(t, srv, "POST", "/v1/chat/completions", chatStreamBody)
	if r.err == nil || !errors.Is(r.err, io.ErrUnexpectedEOF) {
		t.Fatalf("want unexpected EOF, got %v", r.err)
	}
	if n := len(sseFrames(r.body)); n != 2 {
		t.Errorf("%d frames before drop: %q", n, r.body)
	}
	// JSON route: the work is persisted, the response is lost.
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"s"}`), 201)
	srv.InjectFault(hermestest.Fault{Route: "session_chat", Drop: true})
	if r := do(t, srv, "POST", "/api/sessions/s/chat", `{"message":"x"}`); r.err == nil {
		t.Fatalf("expected transport error, got %d", r.status)
	}
	if msgs := must(t, do(t, srv, "GET", "/api/sessions/s/messages", ""), 200).json(t)["data"].([]any); len(msgs) != 2 {
		t.Errorf("turn not persisted: %v", msgs)
	}
}

func TestFaultMalformedAndOversized(t *testing.T) {
	srv := newServer(t)
	srv.InjectFault(hermestest.Fault{Route: "chat_stream", Malformed: true, AfterEvents: 1})
	r := must(t, do(t, srv, "POST", "/v1/chat/completions", chatStreamBody), 200)
	if !strings.Contains(r.body, "\xff\xfe") || !strings.Contains(r.body, "\nthis line is not an SSE field") || !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
		t.Errorf("malformed stream %q", r.body)
	}
	srv.InjectFault(hermestest.Fault{Route: "responses_stream", Oversized: 200000, AfterEvents: 3})
	r = must(t, do(t, srv, "POST", "/v1/responses", `{"input":"x","stream":true}`), 200)
	fs := sseFrames(r.body)
	if len(fs[3].data) != 200002 || !strings.Contains(r.body, "event: response.completed") {
		t.Errorf("oversized frame len %d", len(fs[3].data))
	}
	srv.InjectFault(hermestest.Fault{Route: "models", Malformed: true})
	if r := must(t, do(t, srv, "GET", "/v1/models", ""), 200); !strings.Contains(r.body, "garbage") {
		t.Errorf("malformed JSON body %q", r.body)
	}
}

// openStream starts a streaming request and returns the reader after the first frame,
// and that frame.
func openStream(t *testing.T, ctx context.Context, client *http.Client, srv *hermestest.Server, path, body string) (*http.Response, *bufio.Reader, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+srv.APIKey())
	resp, err := client.Do(req)
	noErr(t, err)
	br := bufio.NewReader(resp.Body)
	var first strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended early: %v", err)
		}
		if line == "\n" {
			return resp, br, first.String()
		}
		first.WriteString(line)
	}
}

func TestFaultStallUntilClientGoes(t *testing.T) {
	srv := newServer(t)
	srv.InjectFault(hermestest.Fault{Route: "chat_stream", Stall: true, AfterEvents: 1})
	ctx, cancel := context.WithCancel(testCtx(t))
	resp, _, _ := openStream(t, ctx, http.DefaultClient, srv, "/v1/chat/completions", chatStreamBody)
	defer resp.Body.Close()
	noErr(t, srv.WaitInFlight(testCtx(t), 1))
	cancel()
	if err := srv.WaitInFlight(testCtx(t), 0); err != nil {
		t.Fatalf("stalled handler did not end after client left: %v", err)
	}
}

func TestInProgressSnapshot(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, blockingAgent(release))
	resp, br, first := openStream(t, testCtx(t), http.DefaultClient, srv, "/v1/responses", `{"input":"x","stream":true}`)
	defer resp.Body.Close()
	// The first frame (response.created) was read: the in_progress snapshot is stored.
	i := strings.Index(first, `"id": "`) + 7
	id := first[i : i+33]
	if g := must(t, do(t, srv, "GET", "/v1/responses/"+id, ""), 200); g.body != `{"id": "`+id+`", "object": "response", "status": "in_progress", "created_at": `+g.body[strings.Index(g.body, `"created_at": `)+14:] || !strings.Contains(g.body, `"output": []}`) {
		t.Errorf("snapshot %s", g.body)
	}
	if srv.StoredResponses() != 1 {
		t.Fatalf("stored %d", srv.StoredResponses())
	}
	close(release)
	rest, err := io.ReadAll(br)
	noErr(t, err)
	fs := sseFrames(string(rest))
	if len(fs) == 0 || fs[len(fs)-1].event != "response.completed" {
		t.Fatalf("stream %s", rest)
	}
	if g := must(t, do(t, srv, "GET", "/v1/responses/"+id, ""), 200).json(t); g["status"] != "completed" {
		t.Errorf("stored %v", g)
	}
}

// TestCloseReleasesStalledStream: Close ends stalled streams and agent
// goroutines, and leaves no goroutines behind.
func TestCloseReleasesStalledStream(t *testing.T) {
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	base := runtime.NumGoroutine()
	blocked := make(chan struct{})
	srv := hermestest.NewServer(hermestest.WithKeepalive(5*time.Millisecond), hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		if tu.Route == "session_chat_stream" {
			close(blocked)
			<-ctx.Done() // a slow agent: only Close frees it
		}
		return hermestest.StubAgent(ctx, tu)
	}))
	srv.InjectFault(hermestest.Fault{Route: "chat_stream", Stall: true, AfterEvents: 1})
	ctx := testCtx(t)
	r1, _, _ := openStream(t, ctx, client, srv, "/v1/chat/completions", chatStreamBody)
	defer r1.Body.Close()
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"s"}`), 201)
	r2, _, _ := openStream(t, ctx, client, srv, "/api/sessions/s/chat/stream", `{"message":"x"}`)
	defer r2.Body.Close()
	<-blocked
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Close blocked on a stalled stream")
	}
	for _, r := range []*http.Response{r1, r2} {
		_, _ = io.ReadAll(r.Body) // an error or EOF: the stream ends
	}
	tr.CloseIdleConnections()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	waitGoroutines(t, ctx, base)
}
