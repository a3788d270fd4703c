package events_test

import (
	"bytes"
	v1json "encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/hermes-bridge/hermes-bridge/events"
)

var actionSeeds = []string{
	// valid
	`{}`,
	`{"input":null,"timeout_ms":1e3}`,
	`{"input":{"prompt":"bench c-1"},"idempotency_key":"k-c-1"}`,
	`{"capability_id":"cap:hermes_agent:primary:chat_stream","input":{"prompt":"Summarize the incident notes."},"idempotency_key":"incident-42-summary","timeout_ms":120000,"tenant_id":"acme","approval":null}`,
	`{"input":{"messages":[{"role":"user","content":"hi <b>&</b> \u2028"}],"a":{"a":[1,2.5,-0,1e400]}}}`,
	`{"approval":{"decision":"approve","approver":"ops","reason":"ok","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00.123456789+05:30"}}`,
	`{"approval":{"decision":"deny","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"},"tenant_id":""}`,
	`{"approval":{"decision":"approve","choice":"session","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"}}`,
	` {"input" : { } , "timeout_ms" : 86400000 } `,
	"\t{\n\"input\"\r:\n{\"a\" : [ 1 , \"x\" ] }\n}\n",
	`{"idempotency_key":"k\u00e9y \ud83d\ude00"}`,
	`{"idempotency_key":"ké y","tenant_id":"t\/x"}`,
	`{"capability_id":null,"input":null,"idempotency_key":null,"timeout_ms":null,"tenant_id":null,"approval":null}`,
	`{"timeout_ms":1.0}`, `{"timeout_ms":1E3}`, `{"timeout_ms":9007199254740993}`, `{"timeout_ms":-0}`,
	// invalid
	`{`, `[]`, `"x"`, ``, `null`, ` `, `{} x`, `{"input":{}}}`, `{"input":{},}`, `{"input" {}}`,
	`{"input":{},"prompt":"x"}`, `{"a b":1}`, `{"":1}`, `{"input":[]}`, `{"Input":{}}`, `{"inp\u0075t":{"a":1}}`,
	`{"input":"x"}`, `{"capability_id":1}`, `{"idempotency_key":""}`, `{"idempotency_key":"a\nb"}`, `{"idempotency_key":"a` + "\u0085" + `b"}`,
	`{"idempotency_key":"` + strings.Repeat("k", 1025) + `"}`, `{"idempotency_key":5}`,
	`{"timeout_ms":0}`, `{"timeout_ms":-1}`, `{"timeout_ms":1.5}`, `{"timeout_ms":86400001}`, `{"timeout_ms":"1"}`,
	`{"tenant_id":"a\u0000"}`, `{"tenant_id":true}`, `{"approval":[]}`, `{"approval":"yes"}`, `{"approval":{}}`, `{"approval":{"decision":"maybe"}}`,
	`{"approval":{"decision":"approve","input_sha256":"ABC","decided_at":"2030-01-01T00:00:00Z"}}`,
	`{"approval":{"decision":"approve","input_sha256":"` + sha + `","decided_at":"yesterday"}}`,
	`{"approval":{"decision":"approve","input_sha256":"` + sha + `"}}`,
	`{"approval":{"decision":"approve","decided_at":"2030-01-01T00:00:00Z"}}`,
	`{"approval":{"decision":"approve","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z","extra":1}}`,
	`{"approval":{"decision":"approve","choice":"deny","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"}}`,
	`{"approval":{"decision":"approve","decision":"deny","input_sha256":"` + sha + `","decided_at":"2030-01-01T00:00:00Z"}}`,
	`{"input":{"a":1},"input":{"b":2}}`, `{"input":{"a":1},"input":null}`, "{\"input\":{\"s\":\"\xff\xfe\"}}",
	"{\"idempotency_key\":\"\xff\"}", "{\"\xff\":1}", `{"zz":1,"yy":2}`, `{"input":{},"x":1,"":2}`,
}

var approvalSeeds = []string{
	`{"decision":"deny","approver":"ops","reason":"no"}`, `{"decision":"approve","input_sha256":"abc"}`,
	`{"decision":"approve"}`, `{"decision":"deny"}`, `{"decision":"approve","choice":"session"}`,
	`{"decision":"approve","choice":"always"}`, `{"decision":"deny","choice":"deny"}`,
	`{"decision":"approve","choice":"deny"}`, `{"decision":"deny","choice":"once"}`,
	`{"decision":"approve","choice":"approve"}`, `{"decision":"approve","choice":1}`, `[]`, `{`, `{"decision":null}`,
	`{"decision":"approve","decided_at":"2030-01-01T00:00:00Z","input_sha256":"` + sha + `","approver":null}`,
}

// numberAsV1 is the oracle's decoding of the tree: the library's own Unmarshal, with
// numbers as encoding/json Numbers.
var numberAsV1 = json.WithUnmarshalers(json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *any) error {
	if dec.PeekKind() != '0' {
		return json.SkipFunc
	}
	val, err := dec.ReadValue()
	if err != nil {
		return err
	}
	*v = v1json.Number(val)
	return nil
}))

// libraryTree decodes data with the library; ok is false when the library rejects it.
func libraryTree(data []byte) (v any, ok bool) {
	return v, json.Unmarshal(data, &v, numberAsV1) == nil
}

// checkRejection fails t unless err is an *ActionError (errors.Is ErrInvalidAction)
// that agrees with the library: "<what> is not valid JSON" exactly when the library
// rejects data, "<what> must be a JSON object" exactly when it decodes something else.
func checkRejection(t *testing.T, what string, data []byte, err error) {
	t.Helper()
	var ae *events.ActionError
	if !errors.As(err, &ae) || !errors.Is(err, events.ErrInvalidAction) {
		t.Fatalf("error %T %v is not an *ActionError", err, err)
	}
	if ae.Field == "" && ae.Reason == "" {
		t.Fatalf("ActionError without field or reason for %q", data)
	}
	tree, ok := libraryTree(data)
	_, isObject := tree.(map[string]any)
	switch {
	case !ok && (ae.Field != "" || ae.Reason != what+" is not valid JSON"):
		t.Fatalf("the library rejects %q; got %v", data, err)
	case ok && !isObject && (ae.Field != "" || ae.Reason != what+" must be a JSON object"):
		t.Fatalf("the library decodes %q as a non-object; got %v", data, err)
	case ok && isObject && ae.Field == "":
		t.Fatalf("the library decodes %q as an object; got %v", data, err)
	}
}

// FuzzDecodeAction feeds arbitrary action data to DecodeAction. Invariants: no panic;
// it accepts only what the library decodes as an object, and its Data is the library's
// tree (numbers as encoding/json Numbers); Value is Data's input object ({} when
// absent or null) and Input that member's text; the action shares no memory with
// data; an accepted action re-marshals to JSON that DecodeAction accepts again, with
// the same fields; a rejection is an *ActionError that agrees with the library on
// whether data is JSON and an object.
func FuzzDecodeAction(f *testing.F) {
	for _, s := range actionSeeds {
		f.Add([]byte(s))
	}
	for _, s := range approvalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		a, err := events.DecodeAction(data)
		if !bytes.Equal(data, in) {
			t.Fatalf("DecodeAction modified its input")
		}
		if err != nil {
			if a != nil {
				t.Fatalf("an action returned with error %v", err)
			}
			checkRejection(t, "action", data, err)
			return
		}
		if a == nil {
			t.Fatalf("nil action without error for %q", data)
		}
		tree, ok := libraryTree(data)
		if !ok || !reflect.DeepEqual(any(a.Data), tree) {
			t.Fatalf("DecodeAction(%q).Data = %#v, the library's tree %#v (ok %v)", data, a.Data, tree, ok)
		}
		wantValue, _ := a.Data["input"].(map[string]any)
		if wantValue == nil {
			wantValue = map[string]any{}
		}
		inputTree, ok := libraryTree(a.Input)
		if !reflect.DeepEqual(a.Value, wantValue) || !ok || !reflect.DeepEqual(inputTree, any(wantValue)) {
			t.Fatalf("DecodeAction(%q): Value %#v, Input %q, want %#v", data, a.Value, a.Input, wantValue)
		}
		// The action must not share memory with data.
		again, err := events.DecodeAction(in)
		if err != nil {
			t.Fatalf("DecodeAction(%q) accepted once, then %v", in, err)
		}
		for i := range data {
			data[i] = 'x'
		}
		if !reflect.DeepEqual(a, again) {
			t.Fatalf("DecodeAction's result aliases its input")
		}

		raw, err := v1json.Marshal(a)
		if err != nil {
			t.Fatalf("accepted action %q does not marshal: %v", in, err)
		}
		b, err := events.DecodeAction(raw)
		if err != nil {
			t.Fatalf("re-marshalled action %q (from %q) rejected: %v", raw, in, err)
		}
		if a.CapabilityID != b.CapabilityID || a.IdempotencyKey != b.IdempotencyKey || a.TenantID != b.TenantID ||
			!reflect.DeepEqual(a.TimeoutMS, b.TimeoutMS) || !reflect.DeepEqual(a.Value, b.Value) {
			t.Fatalf("round trip changed the action: %+v -> %+v", a, b)
		}
		if !sameValue(t, a.Input, b.Input) {
			t.Fatalf("round trip changed the input: %q -> %q", a.Input, b.Input)
		}
		if (a.Approval == nil) != (b.Approval == nil) {
			t.Fatalf("round trip changed the approval: %+v -> %+v", a.Approval, b.Approval)
		}
		if a.Approval != nil {
			sameApproval(t, a.Approval, b.Approval)
		}
	})
}

// FuzzDecodeApproval feeds arbitrary approval data to DecodeApproval. Invariants: no
// panic; it accepts only what the library decodes as an object; an accepted approval
// re-marshals to JSON that DecodeApproval accepts again, with the same fields; a
// rejection is an *ActionError that agrees with the library.
func FuzzDecodeApproval(f *testing.F) {
	for _, s := range approvalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ap, err := events.DecodeApproval(data)
		if err != nil {
			if ap != nil {
				t.Fatalf("an approval returned with error %v", err)
			}
			checkRejection(t, "approval", data, err)
			return
		}
		if tree, ok := libraryTree(data); !ok {
			t.Fatalf("DecodeApproval accepted %q, which the library rejects", data)
		} else if _, isObject := tree.(map[string]any); !isObject {
			t.Fatalf("DecodeApproval accepted %q, which is not an object", data)
		}
		raw, err := v1json.Marshal(ap)
		if err != nil {
			t.Fatalf("accepted approval %q does not marshal: %v", data, err)
		}
		again, err := events.DecodeApproval(raw)
		if err != nil {
			t.Fatalf("re-marshalled approval %q (from %q) rejected: %v", raw, data, err)
		}
		sameApproval(t, ap, again)
	})
}

func sameApproval(t *testing.T, x, y *events.Approval) {
	t.Helper()
	if x.Decision != y.Decision || x.Approver != y.Approver || x.Reason != y.Reason || x.InputSHA256 != y.InputSHA256 ||
		x.Choice != y.Choice || (x.DecidedAt == nil) != (y.DecidedAt == nil) || x.DecidedAt != nil && !x.DecidedAt.Equal(*y.DecidedAt) {
		t.Fatalf("round trip changed the approval: %+v -> %+v", x, y)
	}
}

// sameValue reports whether two JSON texts decode to the same value (numbers compared as text).
func sameValue(t *testing.T, a, b []byte) bool {
	t.Helper()
	dec := func(raw []byte) any {
		d := v1json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decode %q: %v", raw, err)
		}
		return v
	}
	return reflect.DeepEqual(dec(a), dec(b))
}
