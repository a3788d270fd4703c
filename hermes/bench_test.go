package hermes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
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
	b.ReportAllocs()
	in := json.RawMessage(`{"prompt":"summarize the incident"}`)
	for b.Loop() {
		if _, err := Prepare(Request{Operation: "chat", Input: in, IdempotencyKey: "incident-42"}); err != nil {
			b.Fatal(err)
		}
	}
}
