package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// oracleResult is DecodeResult by encoding/json: a JSON object read into a Result, a
// valid action id, a known status, a null output when absent.
func oracleResult(data []byte) *events.Result {
	var r events.Result
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' || json.Unmarshal(data, &r) != nil {
		return nil
	}
	if !events.ValidActionID(r.ActionID) || !events.Terminal(r.Status) && r.Status != events.StatusPendingApproval {
		return nil
	}
	if len(r.Output) == 0 {
		r.Output = json.RawMessage("null")
	}
	return &r
}

// oracleEvent is DecodeEvent by encoding/json.
func oracleEvent(data []byte) *events.EventData {
	var ev events.EventData
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' || json.Unmarshal(data, &ev) != nil {
		return nil
	}
	if !events.ValidActionID(ev.ActionID) {
		return nil
	}
	if len(ev.Event.Data) == 0 {
		ev.Event.Data = json.RawMessage("null")
	}
	return &ev
}

// FuzzDecodeOutput feeds arbitrary bodies, with no headers, the result type, the event
// type (a header name in another case) or empty headers, to DecodeResult and
// DecodeEvent: each accepts what encoding/json reads into a valid result (event), with
// the same fields, unless a ce-type names the other, and refuses the rest with
// ErrInvalidOutput. A decoded result shares no memory with the body.
func FuzzDecodeOutput(f *testing.F) {
	for _, s := range []string{
		`{"action_id":"c-1","capability_id":"cap:hermes_agent:primary:chat","status":"completed","output":{"a": [1, 2]},"error":null,"replay_of":null}`,
		`{"action_id":"a-1","capability_id":"cap:hermes_agent:p:chat","status":"failed","output":null,"error":{"code":"remote_unavailable","message":"Hermes is busy","category":"temporary","retryable":true,"uncertain_outcome":false,"http_status":429,"retry_after_ms":1000,"details":{"remote_code":"rate_limit_exceeded"}},"replay_of":"orig-1"}`,
		`{"ACTION_ID":"a","Status":"cancelled","status":"pending_approval","output":1,"output":"\ud800x\u00e9","extra":[{}]}`,
		`{"action_id":"a","status":"completed","error":{"http_status":null,"details":{"b":1,"a":[true]}},"error":{"code":"x"}}`,
		` {"action_id":"a","status":"completed","replay_of":null,"replay_of":"r"}`,
		`{"action_id":"a-123","sequence":0,"kind":"data","event":{"event":"response.output_text.delta","id":null,"data":{ "delta": "Three" }},"text":"Three"}`,
		`{"action_id":"a","sequence":7,"kind":"done","event":{"event":null,"id":"e\"1","data":null}}`,
		"{\"action_id\":\"a\",\"status\":\"completed\",\"text\":\"\xff\",\"output\":\"\xff\"}", `[]`, `null`, `{"action_id":"a"} x`, ``,
		`{"action_id":"a","status":"weird"}`, `{"action_id":"a","status":"completed","output":12.5e3}`, `{"action_id":null,"status":"completed"}`,
		`{"action_id":1,"status":"completed"}`, `{"action_id":"a","status":"completed",}`, `{"action_id":"a","status":"completed","output":nul}`,
		`{"action_id":"a","status":"completed","error":{"http_status":"x"}}`,
		`{"action_id":"a","status":"completed","usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3,"cost_usd":0.5}}`,
		`{"action_id":"a","status":"completed","usage":{"input_tokens":1.5,"cost_usd":"x"}}`, `{"action_id":"a","status":"completed","usage":null}`, `{"action_id":"a","status":"completed","output":{"a":"\ud800"}}`,
	} {
		for hdr := range uint8(4) {
			f.Add(hdr, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, hdr uint8, data []byte) {
		var h nats.Header
		switch hdr % 4 {
		case 1:
			h = nats.Header{events.HeaderType: {events.TypeResult}}
		case 2:
			h = nats.Header{"CE-Type": {events.TypeEvent}}
		case 3:
			h = nats.Header{}
		}
		in := bytes.Clone(data)
		got, err := events.DecodeResult(h, data)
		want := oracleResult(in)
		if hdr%4 == 2 {
			want = nil
		}
		if (got == nil) != (err != nil) || err != nil && !errors.Is(err, events.ErrInvalidOutput) {
			t.Fatalf("DecodeResult(%q) = %v, %v", in, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeResult(%q)\n got %#v\nwant %#v", in, got, want)
		}
		gotEv, err := events.DecodeEvent(h, data)
		wantEv := oracleEvent(in)
		if hdr%4 == 1 {
			wantEv = nil
		}
		if (gotEv == nil) != (err != nil) || err != nil && !errors.Is(err, events.ErrInvalidOutput) {
			t.Fatalf("DecodeEvent(%q) = %v, %v", in, gotEv, err)
		}
		if !reflect.DeepEqual(gotEv, wantEv) {
			t.Fatalf("DecodeEvent(%q)\n got %#v\nwant %#v", in, gotEv, wantEv)
		}
		for i := range data {
			data[i] = 'x'
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeResult's result aliases its input")
		}
	})
}

// FuzzEncodeResult: EncodeResult accepts a valid result with valid JSON output, writes a
// body that encoding/json reads back to the same result (output compacted), and refuses
// anything else with ErrInvalidOutput.
func FuzzEncodeResult(f *testing.F) {
	f.Add("a-1", "cap:hermes_agent:p:chat", "failed", []byte(`{"x": [1, "<é>"]}`), true, "remote_unavailable", "Hermes <is> busy", 429, int64(1000), "orig-1", true, "k")
	f.Add("a", "", "completed", []byte(``), false, "", "", 0, int64(0), "", false, "")
	f.Add("a", "c", "pending_approval", []byte(`{"a":1,"a":2}`), true, "c", "m\xff\u2028", 0, int64(-1), "", false, "")
	f.Add("a.b", "c", "done", []byte(`{`), false, "", "", 0, int64(0), "", false, "")
	f.Fuzz(func(t *testing.T, id, capID, status string, output []byte, hasErr bool, code, msg string, httpStatus int, retryAfter int64, replay string, hasReplay bool, detailKey string) {
		r := &events.Result{ActionID: id, CapabilityID: capID, Status: status, Output: output}
		if hasErr {
			r.Error = &events.ErrorInfo{Code: code, Message: msg, Category: "temporary", Retryable: httpStatus%2 == 0,
				UncertainOutcome: retryAfter%2 == 0, HTTPStatus: httpStatus, RetryAfterMS: retryAfter}
			if detailKey != "" {
				r.Error.Details = map[string]any{detailKey: msg, "n": float64(httpStatus)}
			}
		}
		if hasReplay {
			r.ReplayOf = &replay
		}
		_, body, err := events.EncodeResult("s", r, events.TraceContext{})
		valid := events.ValidActionID(id) && (events.Terminal(status) || status == events.StatusPendingApproval) &&
			(len(output) == 0 || json.Valid(output))
		if err != nil {
			if !errors.Is(err, events.ErrInvalidOutput) || valid {
				t.Fatalf("EncodeResult(%+v): %v", r, err)
			}
			return
		}
		if !valid {
			t.Fatalf("EncodeResult(%+v) accepted: %s", r, body)
		}
		var back events.Result
		if err := json.Unmarshal(body, &back); err != nil {
			t.Fatalf("body %q does not decode: %v", body, err)
		}
		want := *r
		want.Output = json.RawMessage("null")
		if len(output) > 0 {
			var b bytes.Buffer
			if err := json.Compact(&b, output); err != nil {
				t.Fatal(err)
			}
			want.Output = b.Bytes()
		}
		if hasErr {
			e := *r.Error
			if e.Message, e.Code = toValidUTF8(e.Message), toValidUTF8(e.Code); len(e.Details) > 0 {
				e.Details = map[string]any{toValidUTF8(detailKey): e.Message, "n": float64(httpStatus)}
			}
			want.Error = &e
		}
		want.ActionID, want.CapabilityID = toValidUTF8(id), toValidUTF8(capID)
		if hasReplay {
			s := toValidUTF8(replay)
			want.ReplayOf = &s
		}
		if !sameJSON(back.Output, want.Output) {
			t.Fatalf("output %s, want %s", back.Output, want.Output)
		}
		back.Output, want.Output = nil, nil
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("body %s decodes to\n%#v\nwant %#v", body, back, want)
		}
	})
}

// toValidUTF8 is s as encoding/json reads it back after writing it: each invalid byte
// becomes U+FFFD.
func toValidUTF8(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// sameJSON reports whether a and b read the same by encoding/json.
func sameJSON(a, b []byte) bool {
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
}
