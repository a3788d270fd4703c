package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// FuzzDecodeAction feeds arbitrary action data to DecodeAction. Invariants: no panic; an
// accepted action re-marshals to JSON that DecodeAction accepts again, with the same
// fields; a rejection is an *ActionError (errors.Is ErrInvalidAction) with a Field or a
// Reason.
func FuzzDecodeAction(f *testing.F) {
	for _, s := range []string{
		// valid
		`{}`,
		`{"input":null,"timeout_ms":1e3}`,
		`{"capability_id":"cap:hermes_agent:primary:chat_stream","input":{"prompt":"Summarize the incident notes."},"idempotency_key":"incident-42-summary","timeout_ms":120000,"tenant_id":"acme","approval":null}`,
		`{"input":{"messages":[{"role":"user","content":"hi <b>&</b> \u2028"}],"a":{"a":[1,2.5,-0,1e400]}}}`,
		`{"approval":{"decision":"approve","approver":"ops","reason":"ok","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00.123456789+05:30"}}`,
		`{"approval":{"decision":"deny","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"},"tenant_id":""}`,
		` {"input" : { } , "timeout_ms" : 86400000 } `,
		`{"idempotency_key":"k\u00e9y \ud83d\ude00"}`,
		// invalid
		`{`, `[]`, `"x"`, ``, `null`, `{"input":{},"prompt":"x"}`, `{"a b":1}`, `{"":1}`, `{"input":[]}`,
		`{"input":"x"}`, `{"capability_id":1}`, `{"idempotency_key":""}`, `{"idempotency_key":"a\nb"}`,
		`{"timeout_ms":0}`, `{"timeout_ms":-1}`, `{"timeout_ms":1.5}`, `{"timeout_ms":86400001}`, `{"timeout_ms":"1"}`,
		`{"tenant_id":"a\u0000"}`, `{"approval":[]}`, `{"approval":{}}`, `{"approval":{"decision":"maybe"}}`,
		`{"approval":{"decision":"approve","input_sha256":"ABC","decided_at":"2030-01-01T00:00:00Z"}}`,
		`{"approval":{"decision":"approve","input_sha256":"` + sha + `","decided_at":"yesterday"}}`,
		`{"approval":{"decision":"approve","input_sha256":"` + sha + `"}}`,
		`{"input":{"a":1},"input":{"b":2}}`, "{\"input\":{\"s\":\"\xff\xfe\"}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := events.DecodeAction(data)
		if err != nil {
			var ae *events.ActionError
			if !errors.As(err, &ae) || !errors.Is(err, events.ErrInvalidAction) {
				t.Fatalf("error %T %v is not an *ActionError", err, err)
			}
			if ae.Field == "" && ae.Reason == "" {
				t.Fatalf("ActionError without field or reason for %q", data)
			}
			if a != nil {
				t.Fatalf("an action returned with error %v", err)
			}
			return
		}
		if a == nil {
			t.Fatalf("nil action without error for %q", data)
		}
		raw, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("accepted action %q does not marshal: %v", data, err)
		}
		b, err := events.DecodeAction(raw)
		if err != nil {
			t.Fatalf("re-marshalled action %q (from %q) rejected: %v", raw, data, err)
		}
		if a.CapabilityID != b.CapabilityID || a.IdempotencyKey != b.IdempotencyKey || a.TenantID != b.TenantID ||
			!reflect.DeepEqual(a.TimeoutMS, b.TimeoutMS) {
			t.Fatalf("round trip changed the action: %+v -> %+v", a, b)
		}
		if !sameValue(t, a.Input, b.Input) {
			t.Fatalf("round trip changed the input: %q -> %q", a.Input, b.Input)
		}
		if (a.Approval == nil) != (b.Approval == nil) {
			t.Fatalf("round trip changed the approval: %+v -> %+v", a.Approval, b.Approval)
		}
		if a.Approval != nil {
			x, y := *a.Approval, *b.Approval
			if x.Decision != y.Decision || x.Approver != y.Approver || x.Reason != y.Reason || x.InputSHA256 != y.InputSHA256 ||
				(x.DecidedAt == nil) != (y.DecidedAt == nil) || x.DecidedAt != nil && !x.DecidedAt.Equal(*y.DecidedAt) {
				t.Fatalf("round trip changed the approval: %+v -> %+v", x, y)
			}
		}
	})
}

// sameValue reports whether two JSON texts decode to the same value (numbers compared as text).
func sameValue(t *testing.T, a, b []byte) bool {
	t.Helper()
	dec := func(raw []byte) any {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decode %q: %v", raw, err)
		}
		return v
	}
	return reflect.DeepEqual(dec(a), dec(b))
}
