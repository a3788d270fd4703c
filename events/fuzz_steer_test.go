package events_test

import (
	v1json "encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hermes-bridge/hermes-bridge/events"
)

var steerSeeds = []string{
	`{"text":"focus on the tests"}`, `{"text":""}`, `{"text":"  \n"}`, `{"text":"\u00a0"}`, `{"text":1}`,
	`{"text":null}`, `{}`, `[]`, `{`, `{"text":"a","text":"b"}`, `{"text":"a","x":1}`, `{"Text":"a"}`,
	`{"text":"` + strings.Repeat("a", events.MaxSteerText) + `"}`, `{"text":"` + strings.Repeat("a", events.MaxSteerText+1) + `"}`,
	`{"text":"secret-steer\u0000"}`, "{\"text\":\"\xff\"}",
}

// FuzzDecodeSteer feeds arbitrary bytes to DecodeSteer (the body of a steer request,
// from any NATS client). Invariants: no panic; it accepts only a JSON object the library
// decodes, whose text is 1 to MaxSteerText characters and not blank; an accepted request
// re-marshals to JSON that DecodeSteer accepts with the same text; a rejection is an
// *ActionError that agrees with the library and never quotes the text.
func FuzzDecodeSteer(f *testing.F) {
	for _, s := range steerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := events.DecodeSteer(data)
		if err != nil {
			if req != nil {
				t.Fatalf("a request returned with error %v", err)
			}
			checkRejection(t, "steer request", data, err)
			var obj map[string]any
			if v1json.Unmarshal(data, &obj) == nil {
				if s, ok := obj["text"].(string); ok && len(strings.TrimSpace(s)) >= 8 && strings.Contains(err.Error(), strings.TrimSpace(s)) {
					t.Fatalf("the error %q quotes the text", err)
				}
			}
			return
		}
		if tree, ok := libraryTree(data); !ok {
			t.Fatalf("DecodeSteer accepted %q, which the library rejects", data)
		} else if _, isObject := tree.(map[string]any); !isObject {
			t.Fatalf("DecodeSteer accepted %q, which is not an object", data)
		}
		if strings.TrimSpace(req.Text) == "" || utf8.RuneCountInString(req.Text) > events.MaxSteerText || !utf8.ValidString(req.Text) {
			t.Fatalf("accepted text of %d characters, blank %v", utf8.RuneCountInString(req.Text), strings.TrimSpace(req.Text) == "")
		}
		raw, err := v1json.Marshal(req)
		if err != nil {
			t.Fatalf("accepted request does not marshal: %v", err)
		}
		again, err := events.DecodeSteer(raw)
		if err != nil || again.Text != req.Text {
			t.Fatalf("round trip: %q -> %v", raw, err)
		}
	})
}

// TestSteerSubjects: the steer subject round-trips and rejects what is not one.
func TestSteerSubjects(t *testing.T) {
	s := events.Subjects{Prefix: "acme.hermes"}
	if got := s.Steer("a-1"); got != "acme.hermes.steer.a-1" {
		t.Fatalf("Steer %q", got)
	}
	if got := s.AllSteer(); got != "acme.hermes.steer.*" {
		t.Fatalf("AllSteer %q", got)
	}
	if id, err := s.ParseSteer("acme.hermes.steer.a-1"); err != nil || id != "a-1" {
		t.Fatalf("ParseSteer %q %v", id, err)
	}
	for _, bad := range []string{"acme.hermes.cancel.a-1", "acme.hermes.steer.", "acme.hermes.steer.a.b", "hermes.steer.a-1"} {
		if _, err := s.ParseSteer(bad); err == nil {
			t.Errorf("ParseSteer(%q) accepted", bad)
		}
	}
}
