package hermes

import (
	"encoding/json"
	"testing"
)

// TestUserMessagesMatchesMarshal: the hand-built one-prompt messages array is exactly
// what encoding/json writes for the same value, escaping included.
func TestUserMessagesMatchesMarshal(t *testing.T) {
	for _, s := range []string{"x", "bench c-ndg", `quote " and \ backslash`, "<b>&amp;</b>", "é 日本 \u2028\u2029",
		"tab\tnewline\n\x00\x1f", "\xff invalid utf-8"} {
		want, err := json.Marshal([]map[string]string{{"role": "user", "content": s}})
		if err != nil {
			t.Fatal(err)
		}
		if got := userMessages(s); string(got) != string(want) {
			t.Errorf("userMessages(%q) = %s, want %s", s, got, want)
		}
	}
}

// TestPreparedHeadersIndependent: the header values Prepare sets share one backing array;
// adding to one of them must not change another.
func TestPreparedHeadersIndependent(t *testing.T) {
	p, err := Prepare(Request{Operation: "chat", Input: json.RawMessage(`{"prompt":"x","session_id":"s","session_key":"k"}`), IdempotencyKey: "i"})
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
