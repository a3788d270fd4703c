package hermes

import (
	v1json "encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

// TestChatPromptBody: the one-prompt chat body is the library's deterministic encoding of
// {messages:[{role:user, content:prompt}], model, stream}: keys sorted, strings re-encoded
// (decoding it gives the prompt back exactly). A prompt that is not valid UTF-8 cannot be
// encoded: an *InputError, not a body with replaced bytes.
func TestChatPromptBody(t *testing.T) {
	for _, s := range []string{"x", "bench c-ndg", `quote " and \ backslash`, "<b>&amp;</b>", "é 日本 \u2028\u2029",
		"tab\tnewline\n\x00\x1f"} {
		p, err := Prepare(Request{Operation: "chat", Input: map[string]any{"prompt": s}})
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": s}},
			"model": "hermes-agent", "stream": false}, json.Deterministic(true))
		if err != nil {
			t.Fatal(err)
		}
		if string(p.Body) != string(want) || !strings.HasPrefix(string(p.Body), `{"messages":[{"content":`) {
			t.Errorf("prompt %q: body %s, want %s", s, p.Body, want)
		}
		var back struct{ Messages []struct{ Content string } }
		if err := v1json.Unmarshal(p.Body, &back); err != nil || len(back.Messages) != 1 || back.Messages[0].Content != s {
			t.Errorf("prompt %q: body %s decodes to %+v (%v)", s, p.Body, back, err)
		}
	}
	// The same with a member to pass through (the body is then encoded from a map).
	p, err := Prepare(Request{Operation: "chat_stream", Input: map[string]any{"prompt": "<é>", "top_p": v1json.Number("0.50"), "model": "m"}})
	if err != nil || string(p.Body) != `{"messages":[{"content":"<é>","role":"user"}],"model":"m","stream":true,"top_p":0.50}` {
		t.Errorf("body %s (%v)", p.Body, err)
	}
	_, err = Prepare(Request{Operation: "chat", Input: map[string]any{"prompt": "\xff invalid utf-8"}})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Field != "input" {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}

// TestPreparedHeadersIndependent: the header values Prepare sets share one backing array;
// adding to one of them must not change another.
func TestPreparedHeadersIndependent(t *testing.T) {
	p, err := Prepare(Request{Operation: "chat", Input: DecodedInput(`{"prompt":"x","session_id":"s","session_key":"k"}`), IdempotencyKey: "i"})
	if err != nil {
		t.Fatal(err)
	}
	want := p.Header.Clone()
	for name := range want {
		p.Header.Add(name, "added")
	}
	for name, vals := range want {
		if got := p.Header[name]; len(got) != 2 || got[0] != vals[0] || got[1] != "added" {
			t.Errorf("%s: %q, want %q + added", name, got, vals)
		}
	}
	if len(want) != 5 {
		t.Errorf("headers %v", want)
	}
}
