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
