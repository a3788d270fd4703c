package hermes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// benchBody is a chat-completions stream of n-1 content chunks followed by [DONE], shaped like
// the frames Hermes sends.
func benchBody(n int) []byte {
	var b bytes.Buffer
	for i := 0; i < n-1; i++ {
		fmt.Fprintf(&b, "data: {\"id\": \"chatcmpl-ff54bfc023b643bd9229dd31114ef\", \"object\": \"chat.completion.chunk\", \"created\": 1796047009, \"model\": \"hermes-agent\", \"choices\": [{\"index\": 0, \"delta\": {\"content\": \" tok%d\"}, \"finish_reason\": null}]}\n\n", i%10)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkSSEReader streams 100,000 events through the reader, the classifier and the text
// assembly (the whole per-event path of a stream operation except the HTTP transport).
func BenchmarkSSEReader(b *testing.B) {
	const n = 100_000
	body := benchBody(n)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		sum, _, err := consumeStream(bytes.NewReader(body), DefaultFrameLimit, DefaultStreamLimit, MaxMaxEvents, func(Event) error { return nil })
		if err != nil || sum.EventCount != n || !sum.Truncated {
			b.Fatalf("%+v %v", sum, err)
		}
	}
	b.ReportMetric(float64(testing.AllocsPerRun(1, func() {
		_, _, _ = consumeStream(bytes.NewReader(body), DefaultFrameLimit, DefaultStreamLimit, MaxMaxEvents, nil)
	}))/n, "allocs/event")
}

// BenchmarkPrepareChat: mapping a one-prompt chat input to its request, once per action.
func BenchmarkPrepareChat(b *testing.B) {
	benchPrepare(b, "chat", `{"prompt":"summarize the incident"}`, "incident-42")
}

// BenchmarkPrepareChatBench: the chat input of the bridge's load benchmark.
func BenchmarkPrepareChatBench(b *testing.B) {
	benchPrepare(b, "chat", `{"prompt":"bench c-1"}`, "k-c-1")
}

// BenchmarkPrepareChatMessages: a chat with a messages array and session headers.
func BenchmarkPrepareChatMessages(b *testing.B) {
	benchPrepare(b, "chat", `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"bench c-1"}],"session_id":"s-1","session_key":"k"}`, "k-c-1")
}

// BenchmarkPrepareResponses: a responses input at top level.
func BenchmarkPrepareResponses(b *testing.B) {
	benchPrepare(b, "responses", `{"input":"bench r-1","model":"hermes-agent"}`, "k-r-1")
}

// BenchmarkPrepareSessionChat: a session chat with a string message.
func BenchmarkPrepareSessionChat(b *testing.B) {
	benchPrepare(b, "session_chat", `{"session_id":"s-1","message":"bench s-1"}`, "k-s-1")
}

// BenchmarkDecodePrepareChatBench and BenchmarkDecodePrepareSessionChat include decoding
// the input bytes (done once per action by events.DecodeAction, for every reader): the work
// Prepare did alone when it took the input's bytes.
func BenchmarkDecodePrepareChatBench(b *testing.B) {
	benchDecodePrepare(b, "chat", `{"prompt":"bench c-1"}`, "k-c-1")
}

func BenchmarkDecodePrepareSessionChat(b *testing.B) {
	benchDecodePrepare(b, "session_chat", `{"session_id":"s-1","message":"bench s-1"}`, "k-s-1")
}

func benchPrepare(b *testing.B, op, in, key string) {
	b.Helper()
	req := Request{Operation: op, Input: DecodedInput(in), IdempotencyKey: key}
	if _, err := Prepare(req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Prepare(req); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDecodePrepare(b *testing.B, op, in, key string) {
	b.Helper()
	raw := []byte(in)
	b.ReportAllocs()
	for b.Loop() {
		m, ok := decodeInput(raw)
		if _, err := Prepare(Request{Operation: op, Input: m, IdempotencyKey: key}); err != nil || !ok {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendChat is one non-streaming chat exchange as the bridge makes it per action:
// Send of a prepared request (headers, the HTTP round trip on a kept-alive connection,
// the body read and its usage) against a local server answering a fixed completion. The
// server's allocations count too; they are the same from run to run.
func BenchmarkSendChat(b *testing.B) {
	const answer = `{"id":"chatcmpl-1","object":"chat.completion","created":1764504000,"model":"hermes-agent","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithAPIKey("hermestest-key-0123456789"))
	if err != nil {
		b.Fatal(err)
	}
	p, err := Prepare(Request{Operation: "chat", Input: DecodedInput(`{"prompt":"bench c-1"}`), IdempotencyKey: "k-c-1",
		Header: http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		res, err := c.Send(ctx, p, nil)
		if err != nil || res.Usage == nil {
			b.Fatal(res, err)
		}
	}
}
