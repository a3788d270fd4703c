package e2e_test

import (
	"strings"
	"testing"
)

func TestChatStreamEndToEnd(t *testing.T) {
	h := newHarness(t)
	res, evs := h.call("chat_stream", `{"prompt":"Summarize the incident notes."}`)
	if res.Status != "completed" {
		t.Fatalf("status %q, error %+v", res.Status, res.Error)
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	var text strings.Builder
	for i, e := range evs {
		if e.Sequence != int64(i) {
			t.Fatalf("event %d has sequence %d", i, e.Sequence)
		}
		text.WriteString(e.Text)
	}
	if got, want := text.String(), "stub reply: Summarize the incident notes."; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	wantEq(t, evs[len(evs)-1].Kind, "done", "last kind %q")
	wantEq(t, h.fake.Calls("chat_stream"), 1, "chat_stream calls %d")
}
