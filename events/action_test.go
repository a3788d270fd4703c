package events_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
)

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestDecodeAction(t *testing.T) {
	a, err := events.DecodeAction([]byte(`{
		"capability_id": "cap:hermes_agent:primary:chat_stream",
		"input": { "prompt": "Summarize the incident notes." },
		"idempotency_key": "incident-42-summary",
		"timeout_ms": 120000,
		"tenant_id": "acme",
		"approval": null
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.CapabilityID != "cap:hermes_agent:primary:chat_stream" || a.IdempotencyKey != "incident-42-summary" ||
		a.TimeoutMS == nil || *a.TimeoutMS != 120000 || a.TenantID != "acme" || a.Approval != nil ||
		string(a.Input) != `{ "prompt": "Summarize the incident notes." }` || a.Timeout().Seconds() != 120 {
		t.Fatalf("unexpected action %+v", a)
	}

	a, err = events.DecodeAction([]byte(`{}`))
	if err != nil || string(a.Input) != `{}` || a.TimeoutMS != nil {
		t.Fatalf("empty action: %+v, %v", a, err)
	}
	a, err = events.DecodeAction([]byte(`{"input":null,"timeout_ms":1e3}`))
	if err != nil || string(a.Input) != `{}` || *a.TimeoutMS != 1000 {
		t.Fatalf("null input: %+v, %v", a, err)
	}

	a, err = events.DecodeAction([]byte(`{"approval":{"decision":"approve","approver":"ops","reason":"ok","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"}}`))
	if err != nil || a.Approval == nil || a.Approval.Decision != "approve" || a.Approval.InputSHA256 != sha || a.Approval.DecidedAt == nil {
		t.Fatalf("approval: %+v, %v", a, err)
	}
}

// TestDecodeActionTree: the data is decoded once into Data, numbers as encoding/json
// Numbers holding the literal; Value is the input object and Input its text.
func TestDecodeActionTree(t *testing.T) {
	data := []byte(`{"input": {"n":[1.50,123456789012345678901234567890,-0,1e400],"s":"\u00e9","o":{},"z":null,"b":true},"timeout_ms":2e3}`)
	a, err := events.DecodeAction(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"n": []any{json.Number("1.50"), json.Number("123456789012345678901234567890"), json.Number("-0"), json.Number("1e400")},
		"s": "é", "o": map[string]any{}, "z": nil, "b": true,
	}
	if !reflect.DeepEqual(a.Value, want) || !reflect.DeepEqual(a.Data, map[string]any{"input": want, "timeout_ms": json.Number("2e3")}) {
		t.Fatalf("Value %#v, Data %#v", a.Value, a.Data)
	}
	if string(a.Input) != `{"n":[1.50,123456789012345678901234567890,-0,1e400],"s":"\u00e9","o":{},"z":null,"b":true}` {
		t.Fatalf("Input %s", a.Input)
	}
	for i := range data {
		data[i] = ' '
	}
	if a.Value["s"] != "é" || a.Input[0] != '{' {
		t.Fatal("the action shares memory with data")
	}
	for _, in := range []string{`{}`, `{"input":null}`} {
		a, err := events.DecodeAction([]byte(in))
		if err != nil || a.Value == nil || len(a.Value) != 0 || string(a.Input) != `{}` {
			t.Fatalf("%s: Value %#v, Input %s, %v", in, a.Value, a.Input, err)
		}
	}
}

// TestDecodeActionStrictJSON: the data is JSON as the library reads it by default; a
// repeated member name (at any depth), invalid UTF-8 or a lone surrogate makes it
// invalid.
func TestDecodeActionStrictJSON(t *testing.T) {
	for _, in := range []string{
		`{"input":{"a":1},"input":{"b":2}}`, `{"input":{"a":1,"a":1}}`, `{"input":{"a":[{"b":1,"b":2}]}}`,
		"{\"input\":{\"s\":\"\xff\"}}", "{\"tenant_id\":\"\xc3\"}", `{"input":{"s":"\ud800"}}`,
		`{"input":{}} {}`, `{"input":{},}`, strings.Repeat(`{"input":`, 10001) + `{}` + strings.Repeat(`}`, 10001),
	} {
		_, err := events.DecodeAction([]byte(in))
		var ae *events.ActionError
		if !errors.As(err, &ae) || ae.Field != "" || ae.Reason != "action is not valid JSON" {
			t.Errorf("%.40q: %v, want action is not valid JSON", in, err)
		}
		if _, err := events.DecodeApproval([]byte(strings.Replace(in, "input", "decision", 1))); err == nil {
			t.Errorf("DecodeApproval(%.40q) accepted", in)
		}
	}
}

func TestDecodeActionErrors(t *testing.T) {
	tests := []struct{ name, in, field string }{
		{"not JSON", `{`, ""},
		{"array", `[]`, ""},
		{"string", `"x"`, ""},
		{"empty", ``, ""},
		{"unknown field", `{"input":{},"prompt":"x"}`, "prompt"},
		{"unknown field with odd name", `{"a b":1}`, "(unnamed field)"},
		{"input array", `{"input":[]}`, "input"},
		{"input string", `{"input":"x"}`, "input"},
		{"capability not string", `{"capability_id":1}`, "capability_id"},
		{"key empty", `{"idempotency_key":""}`, "idempotency_key"},
		{"key too long", `{"idempotency_key":"` + strings.Repeat("k", 1025) + `"}`, "idempotency_key"},
		{"key control char", `{"idempotency_key":"a\nb"}`, "idempotency_key"},
		{"key number", `{"idempotency_key":5}`, "idempotency_key"},
		{"timeout zero", `{"timeout_ms":0}`, "timeout_ms"},
		{"timeout negative", `{"timeout_ms":-5}`, "timeout_ms"},
		{"timeout fraction", `{"timeout_ms":1.5}`, "timeout_ms"},
		{"timeout too big", `{"timeout_ms":86400001}`, "timeout_ms"},
		{"timeout string", `{"timeout_ms":"100"}`, "timeout_ms"},
		{"tenant not string", `{"tenant_id":true}`, "tenant_id"},
		{"approval not object", `{"approval":"yes"}`, "approval"},
		{"approval bad decision", `{"approval":{"decision":"maybe","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"}}`, "approval.decision"},
		{"approval missing decision", `{"approval":{"input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"}}`, "approval.decision"},
		{"approval uppercase hash", `{"approval":{"decision":"approve","input_sha256":"` + strings.ToUpper(sha) + `","decided_at":"2030-01-01T00:00:00Z"}}`, "approval.input_sha256"},
		{"approval missing hash", `{"approval":{"decision":"approve","decided_at":"2030-01-01T00:00:00Z"}}`, "approval.input_sha256"},
		{"approval bad time", `{"approval":{"decision":"approve","input_sha256":"` + sha + `","decided_at":"yesterday"}}`, "approval.decided_at"},
		{"approval missing time", `{"approval":{"decision":"approve","input_sha256":"` + sha + `"}}`, "approval.decided_at"},
		{"approval choice against decision", `{"approval":{"decision":"approve","choice":"deny","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"}}`, "approval.choice"},
		{"approval approver not string", `{"approval":{"decision":"approve","approver":1,"input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"}}`, "approval.approver"},
		{"tenant control char", `{"tenant_id":"a\u0000"}`, "tenant_id"},
		{"unknown fields: the smallest name", `{"zz":1,"yy":2,"input":[]}`, "yy"},
		{"unknown empty name", `{"input":{},"x":1,"":2}`, "(unnamed field)"},
		{"unknown field before a bad one", `{"timeout_ms":0,"extra":1}`, "extra"},
		{"approval unknown field", `{"approval":{"decision":"approve","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z","extra":1}}`, "approval.extra"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := events.DecodeAction([]byte(tt.in))
			var ae *events.ActionError
			if !errors.As(err, &ae) || !errors.Is(err, events.ErrInvalidAction) {
				t.Fatalf("err = %v, want *ActionError", err)
			}
			if ae.Field != tt.field {
				t.Fatalf("field = %q (%v), want %q", ae.Field, err, tt.field)
			}
		})
	}
}

func TestDecodeApproval(t *testing.T) {
	ap, err := events.DecodeApproval([]byte(`{"decision":"deny","approver":"ops","reason":"no"}`))
	if err != nil || ap.Decision != "deny" || ap.InputSHA256 != "" || ap.DecidedAt != nil {
		t.Fatalf("%+v, %v", ap, err)
	}
	if _, err := events.DecodeApproval([]byte(`{"decision":"approve","input_sha256":"abc"}`)); err == nil {
		t.Fatal("short hash accepted")
	}
	// A run's tool approval: choice, and RunChoice's defaults.
	for in, want := range map[string]string{
		`{"decision":"approve"}`:                    "once",
		`{"decision":"deny"}`:                       "deny",
		`{"decision":"approve","choice":"session"}`: "session",
		`{"decision":"approve","choice":"always"}`:  "always",
		`{"decision":"deny","choice":"deny"}`:       "deny",
	} {
		ap, err := events.DecodeApproval([]byte(in))
		if err != nil || ap.RunChoice() != want {
			t.Errorf("%s: %+v, %v; want choice %s", in, ap, err, want)
		}
	}
	for _, in := range []string{`{"decision":"approve","choice":"deny"}`, `{"decision":"deny","choice":"once"}`,
		`{"decision":"approve","choice":"approve"}`, `{"decision":"approve","choice":1}`,
		`{"decision":"approve","request_id":""}`, `{"decision":"approve","request_id":7}`,
		`{"decision":"approve","request_id":"` + strings.Repeat("r", 257) + `"}`} {
		if _, err := events.DecodeApproval([]byte(in)); err == nil {
			t.Errorf("%s accepted", in)
		}
	}
	// A run's tool approval by request_id.
	ap, err = events.DecodeApproval([]byte(`{"decision":"approve","request_id":"4be0c1"}`))
	if err != nil || ap.RequestID != "4be0c1" {
		t.Fatalf("request_id: %+v, %v", ap, err)
	}
}

func TestActionJSONRoundTrip(t *testing.T) {
	ms := int64(5000)
	in := events.Action{CapabilityID: "cap:hermes_agent:p:chat", Input: json.RawMessage(`{"prompt":"x"}`), IdempotencyKey: "k", TimeoutMS: &ms, TenantID: "t"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := events.DecodeAction(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.CapabilityID != in.CapabilityID || string(out.Input) != string(in.Input) || *out.TimeoutMS != ms || out.TenantID != "t" || out.IdempotencyKey != "k" {
		t.Fatalf("round trip: %+v", out)
	}
}

// TestErrorTextsNameTheFieldOnce: an error whose reason starts with its field or
// attribute does not name it twice (issue 13).
func TestErrorTextsNameTheFieldOnce(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&events.AttributeError{Attribute: "specversion", Reason: "specversion must be 1.0"},
			"events: invalid CloudEvent attribute specversion must be 1.0"},
		{&events.AttributeError{Attribute: "source", Reason: "ce-source header is missing"},
			"events: invalid CloudEvent attribute source: ce-source header is missing"},
		{&events.ActionError{Field: "input", Reason: "input is not valid JSON"},
			"events: invalid action: input is not valid JSON"},
		{&events.ActionError{Field: "timeout_ms", Reason: "must be a positive integer no greater than 86400000"},
			"events: invalid action: timeout_ms: must be a positive integer no greater than 86400000"},
		{&events.ActionError{Reason: "data is not valid JSON"}, "events: invalid action: data is not valid JSON"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
