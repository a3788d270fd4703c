package hermes

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestChatPromptMatchesMarshal: the one-prompt chat body prepChat writes is exactly what
// encoding/json writes for the same messages value, escaping included.
// (It replaces TestUserMessagesMatchesMarshal, whose userMessages prepChat no longer uses.)
func TestChatPromptMatchesMarshal(t *testing.T) {
	for _, s := range []string{"x", "bench c-ndg", `quote " and \ backslash`, "<b>&amp;</b>", "é 日本 \u2028\u2029",
		"tab\tnewline\n\x00\x1f", "\xff invalid utf-8"} {
		// The input holds s as is (invalid UTF-8 included); the prompt is its decoded value.
		in := []byte(`{"prompt":"` + strings.NewReplacer(`"`, `\"`, `\`, `\\`, "\t", `\t`, "\n", `\n`, "\x00", `\u0000`, "\x1f", `\u001f`).Replace(s) + `"}`)
		var decoded struct{ Prompt string }
		if err := json.Unmarshal(in, &decoded); err != nil {
			t.Fatal(err)
		}
		msgs, err := json.Marshal([]map[string]string{{"role": "user", "content": decoded.Prompt}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := Prepare(Request{Operation: "chat", Input: in})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"messages":` + string(msgs) + `,"model":"hermes-agent","stream":false}`; string(p.Body) != want {
			t.Errorf("prompt %q: body %s, want %s", s, p.Body, want)
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
