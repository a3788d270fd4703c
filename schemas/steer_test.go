package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// TestSteerSchemas: the steer request schema and events.DecodeSteer agree on what is a
// steer request (the decoder also counts Unicode white space as blank, as Hermes does);
// every reply the bridge can send validates against the reply schema, and a refusal
// without a code or an acceptance with one does not.
func TestSteerSchemas(t *testing.T) {
	for _, tc := range []struct {
		doc string
		ok  bool
	}{
		{`{"text":"focus on the tests"}`, true},
		{`{"text":"line one\nline two"}`, true},
		{`{"text":"` + strings.Repeat("é", events.MaxSteerText) + `"}`, true},
		{`{"text":"` + strings.Repeat("a", events.MaxSteerText+1) + `"}`, false},
		{`{"text":""}`, false},
		{`{"text":" \t\n "}`, false},
		{`{"text":1}`, false},
		{`{}`, false},
		{`{"text":"a","extra":true}`, false},
		{`["a"]`, false},
	} {
		errSchema := schemas.ValidateSteer([]byte(tc.doc))
		_, errDecode := events.DecodeSteer([]byte(tc.doc))
		if (errSchema == nil) != tc.ok || (errDecode == nil) != tc.ok {
			t.Errorf("%.60s: schema %v, decoder %v, want ok=%v", tc.doc, errSchema, errDecode, tc.ok)
		}
	}
	codes := []string{events.SteerInvalid, events.SteerUnknown, events.SteerNotARun, events.SteerNotRunning,
		events.SteerNotAccepted, events.SteerUnsupported, events.SteerFailed}
	for _, code := range codes {
		b, _ := json.Marshal(events.SteerReply{ActionID: "a-1", State: events.SteerRefused, Code: code, Reason: "why"})
		if err := schemas.ValidateSteerReply(b); err != nil {
			t.Errorf("refused %s: %v", code, err)
		}
	}
	b, _ := json.Marshal(events.SteerReply{ActionID: "a-1", State: events.SteerAccepted})
	if err := schemas.ValidateSteerReply(b); err != nil {
		t.Errorf("accepted: %v", err)
	}
	for _, bad := range []string{
		`{"action_id":"a-1","state":"refused"}`,
		`{"action_id":"a-1","state":"refused","code":"gone","reason":"x"}`,
		`{"action_id":"a-1","state":"accepted","code":"unknown","reason":"x"}`,
		`{"action_id":"a-1","state":"maybe"}`,
	} {
		if err := schemas.ValidateSteerReply([]byte(bad)); err == nil {
			t.Errorf("reply %s accepted", bad)
		}
	}
}
