package events

import (
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Differential fuzz targets: each optimized hot-path function must agree
// exactly with its pre-optimization copy in legacy_internal_test.go (same
// accept/reject, same error type, fields and message, same values, same bytes).
// Under plain `go test` they run on the seed corpus only.

const diffSHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// sameError fails t unless a and b are both nil or have the same dynamic type,
// the same (deeply equal) value and the same message.
func sameError(t *testing.T, what string, got, want error) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: error %v, legacy %v", what, got, want)
	}
	if got == nil {
		return
	}
	if reflect.TypeOf(got) != reflect.TypeOf(want) || !reflect.DeepEqual(got, want) || got.Error() != want.Error() {
		t.Fatalf("%s: error %T %#v (%v), legacy %T %#v (%v)", what, got, got, got, want, want, want)
	}
	for _, target := range []error{ErrInvalidAction, ErrInvalidOutput, ErrInvalidJSON, ErrNotCloudEvent, ErrInvalidAttribute} {
		if errors.Is(got, target) != errors.Is(want, target) {
			t.Fatalf("%s: errors.Is(%v) differs", what, target)
		}
	}
}

var actionSeeds = []string{
	// valid
	`{}`,
	`{"input":null,"timeout_ms":1e3}`,
	`{"input":{"prompt":"bench c-1"},"idempotency_key":"k-c-1"}`,
	`{"capability_id":"cap:hermes_agent:primary:chat_stream","input":{"prompt":"Summarize the incident notes."},"idempotency_key":"incident-42-summary","timeout_ms":120000,"tenant_id":"acme","approval":null}`,
	`{"input":{"messages":[{"role":"user","content":"hi <b>&</b> \u2028"}],"a":{"a":[1,2.5,-0,1e400]}}}`,
	`{"approval":{"decision":"approve","approver":"ops","reason":"ok","input_sha256":"` + diffSHA + `","decided_at":"2030-01-01T00:00:00.123456789+05:30"}}`,
	`{"approval":{"decision":"deny","input_sha256":"` + diffSHA + `","decided_at":"2030-01-01T00:00:00Z"},"tenant_id":""}`,
	`{"approval":{"decision":"approve","choice":"session","input_sha256":"` + diffSHA + `","decided_at":"2030-01-01T00:00:00Z"}}`,
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
	`{"approval":{"decision":"approve","input_sha256":"` + diffSHA + `","decided_at":"yesterday"}}`,
	`{"approval":{"decision":"approve","input_sha256":"` + diffSHA + `"}}`,
	`{"approval":{"decision":"approve","decided_at":"2030-01-01T00:00:00Z"}}`,
	`{"approval":{"decision":"approve","input_sha256":"` + diffSHA + `","decided_at":"2030-01-01T00:00:00Z","extra":1}}`,
	`{"approval":{"decision":"approve","choice":"deny","input_sha256":"` + diffSHA + `","decided_at":"2030-01-01T00:00:00Z"}}`,
	`{"approval":{"decision":"approve","decision":"deny","input_sha256":"` + diffSHA + `","decided_at":"2030-01-01T00:00:00Z"}}`,
	`{"input":{"a":1},"input":{"b":2}}`, `{"input":{"a":1},"input":null}`, "{\"input\":{\"s\":\"\xff\xfe\"}}",
	"{\"idempotency_key\":\"\xff\"}", "{\"\xff\":1}", `{"zz":1,"yy":2}`, `{"input":{},"x":1,"":2}`,
}

var approvalSeeds = []string{
	`{"decision":"deny","approver":"ops","reason":"no"}`, `{"decision":"approve","input_sha256":"abc"}`,
	`{"decision":"approve"}`, `{"decision":"deny"}`, `{"decision":"approve","choice":"session"}`,
	`{"decision":"approve","choice":"always"}`, `{"decision":"deny","choice":"deny"}`,
	`{"decision":"approve","choice":"deny"}`, `{"decision":"deny","choice":"once"}`,
	`{"decision":"approve","choice":"approve"}`, `{"decision":"approve","choice":1}`, `[]`, `{`, `{"decision":null}`,
	`{"decision":"approve","decided_at":"2030-01-01T00:00:00Z","input_sha256":"` + diffSHA + `","approver":null}`,
}

func FuzzDecodeActionMatchesLegacy(f *testing.F) {
	for _, s := range actionSeeds {
		f.Add([]byte(s))
	}
	for _, s := range approvalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := append([]byte(nil), data...)
		got, err := DecodeAction(data)
		want, wantErr := legacyDecodeAction(in)
		sameError(t, "DecodeAction", err, wantErr)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeAction(%q) = %+v, legacy %+v", data, got, want)
		}
		if string(data) != string(in) {
			t.Fatalf("DecodeAction modified its input")
		}
		// The returned input must not alias data (the legacy one is a copy).
		if got != nil && len(data) > 0 {
			for i := range data {
				data[i] = 'x'
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeAction's result aliases its input")
			}
		}
		gotAp, err := DecodeApproval(in)
		wantAp, wantErr := legacyDecodeApproval(in, "", false)
		sameError(t, "DecodeApproval", err, wantErr)
		if !reflect.DeepEqual(gotAp, wantAp) {
			t.Fatalf("DecodeApproval(%q) = %+v, legacy %+v", in, gotAp, wantAp)
		}
	})
}

var resultSeeds = []string{
	`{"action_id":"c-1","capability_id":"cap:hermes_agent:primary:chat","status":"completed","output":{"id":"chatcmpl-1","choices":[{"message":{"content":"ok \u2028 é"}}]},"error":null,"replay_of":null}`,
	`{"action_id":"a-1","capability_id":"cap:hermes_agent:p:chat","status":"failed","output":null,"error":{"code":"remote_unavailable","message":"Hermes is busy","category":"temporary","retryable":true,"uncertain_outcome":false,"http_status":429,"retry_after_ms":1000,"details":{"remote_code":"rate_limit_exceeded"}},"replay_of":"orig-1"}`,
	`{"action_id":"a-2","capability_id":"","status":"pending_approval","output":{},"error":null,"replay_of":null}`,
	`{"action_id":"a","status":"cancelled"}`, `{"action_id":"a","status":"weird"}`, `{"status":"completed"}`,
	` {"action_id" : "a" , "status" : "completed" , "output" : [ 1 , 2 ] } `, `{"action_id":"a","status":"completed","output":"s"}`,
	`{"action_id":"a","status":"completed","output":12.5e3}`, `{"action_id":"a","status":"completed","output":true}`,
	`{"Action_ID":"a","STATUS":"completed"}`, `{"action_id":"a","action_id":"b","status":"completed"}`,
	`{"action_id":"a","status":"completed","extra":{"x":[1]}}`, `{"action_id":"a\u002d1","status":"completed"}`,
	`{"action_id":null,"status":"completed"}`, `{"action_id":"a","status":"completed","replay_of":"r\"x"}`,
	`{"action_id":"a","status":"completed","replay_of":5}`, `{"action_id":1,"status":"completed"}`,
	"{\"action_id\":\"a\",\"status\":\"completed\",\"capability_id\":\"\xff\"}", `{"action_id":"a","status":"completed"}x`,
	`{"action_id":"a","status":"completed",}`, `[]`, `{`, ``, `null`, `{"action_id":"a","status":"completed","output":}`,
	`{"action_id":"a","status":"completed","output":nul}`, `{"action_id":"a","status":"completed","error":{}}`,
	`{"action_id":"a","status":"completed","error":{"http_status":"x"}}`, `{"action_id":"a","status":"completed","output":{"a":"\ud800"}}`,
}

func FuzzDecodeResultMatchesLegacy(f *testing.F) {
	for _, s := range resultSeeds {
		f.Add(uint8(0), []byte(s))
		f.Add(uint8(1), []byte(s))
	}
	f.Add(uint8(2), []byte(resultSeeds[0]))
	f.Fuzz(func(t *testing.T, hdr uint8, data []byte) {
		var h nats.Header
		switch hdr % 4 {
		case 1:
			h = nats.Header{HeaderType: {TypeResult}}
		case 2:
			h = nats.Header{"CE-Type": {TypeEvent}}
		case 3:
			h = nats.Header{}
		}
		in := append([]byte(nil), data...)
		got, err := DecodeResult(h, data)
		want, wantErr := legacyDecodeResult(h, in)
		sameError(t, "DecodeResult", err, wantErr)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeResult(%q) = %+v, legacy %+v", data, got, want)
		}
		if got != nil {
			for i := range data {
				data[i] = 'x'
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeResult's result aliases its input")
			}
		}
	})
}

func FuzzEncodeResultMatchesLegacy(f *testing.F) {
	out := `{"id":"chatcmpl-bench-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"bench c-1: ok"}}]}`
	f.Add("hermes-bridge", "c-1", "cap:hermes_agent:primary:chat", StatusCompleted, []byte(out), false, "", "", 0, int64(0), "", false, "", "", "")
	f.Add("s", "a-1", "cap:hermes_agent:p:chat", StatusFailed, []byte(nil), true, "remote_unavailable", "Hermes <is> busy", 429, int64(1000), "orig-1", true, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v", "remote_code")
	f.Add("src with space", "a-2", "", StatusPendingApproval, []byte(`{}`), false, "", "", 0, int64(0), "", false, "", "", "")
	f.Add("s", "a", "c", "done", []byte(`{`), false, "", "", 0, int64(0), "", false, "", "", "")
	f.Add("s", "", "c", StatusCompleted, []byte(`1`), false, "", "", 0, int64(0), "", false, "", "", "")
	f.Add("s", "a", "c\u00e9\"", StatusCancelled, []byte(` [1] `), true, "c\x00", "\xff", -1, int64(-5), "r\u2028", true, "tp\"", "", "x")
	f.Fuzz(func(t *testing.T, src, actionID, capID, status string, output []byte, hasErr bool, code, msg string, httpStatus int, retryAfter int64, replay string, hasReplay bool, traceparent, tracestate, detailKey string) {
		r := &Result{ActionID: actionID, CapabilityID: capID, Status: status, Output: output}
		if hasErr {
			r.Error = &ErrorInfo{Code: code, Message: msg, Category: "temporary", Retryable: httpStatus%2 == 0, UncertainOutcome: retryAfter%2 == 0,
				HTTPStatus: httpStatus, RetryAfterMS: retryAfter}
			if detailKey != "" {
				r.Error.Details = map[string]any{detailKey: msg, "n": httpStatus}
			}
		}
		if hasReplay {
			r.ReplayOf = &replay
		}
		trace := TraceContext{Traceparent: traceparent, Tracestate: tracestate}
		before := time.Now().UTC()
		gh, gb, gerr := EncodeResult(src, r, trace)
		wh, wb, werr := legacyEncodeResult(src, r, trace)
		after := time.Now().UTC()
		sameError(t, "EncodeResult", gerr, werr)
		if string(gb) != string(wb) || (gb == nil) != (wb == nil) {
			t.Fatalf("EncodeResult body\n got %q\nwant %q", gb, wb)
		}
		checkSameHeader(t, gh, wh, before, after)

		ga, gerr := r.AppendJSON([]byte("prefix"))
		wa, werr := legacyResultAppendJSON(r, []byte("prefix"))
		sameError(t, "AppendJSON", gerr, werr)
		if string(ga) != string(wa) || (ga == nil) != (wa == nil) {
			t.Fatalf("AppendJSON\n got %q\nwant %q", ga, wa)
		}
		if gb != nil && r.Error == nil && len(gb) != r.sizeHint() {
			t.Fatalf("sizeHint %d, body length %d", r.sizeHint(), len(gb))
		}
		for _, s := range []string{src, actionID, capID, status, code, msg, replay, traceparent, detailKey} {
			if n := len(appendJSONString(nil, s)); n != jsonStringLen(s) {
				t.Fatalf("jsonStringLen(%q) = %d, want %d", s, jsonStringLen(s), n)
			}
		}
		ev := &EventData{ActionID: actionID, Sequence: retryAfter, Kind: code, Event: SSE{Event: capID, Data: r.Output}, Text: msg}
		if hasReplay {
			ev.Event.ID = &replay
		}
		if !json.Valid(ev.Event.Data) {
			ev.Event.Data = nil
		}
		eh, eb, eerr := EncodeEvent(src, ev, trace)
		weh, web, weerr := legacyEncodeEvent(src, ev, trace)
		sameError(t, "EncodeEvent", eerr, weerr)
		if string(eb) != string(web) || (eb == nil) != (web == nil) {
			t.Fatalf("EncodeEvent body\n got %q\nwant %q", eb, web)
		}
		checkSameHeader(t, eh, weh, before, time.Now().UTC())
		gbh := binaryHeader(src, TypeResult, ResultID(actionID, status), capID, trace)
		wbh := legacyBinaryHeader(src, TypeResult, ResultID(actionID, status), capID, trace)
		checkSameHeader(t, gbh, wbh, before, time.Now().UTC())
	})
}

// checkSameHeader compares two headers built at (almost) the same time: equal except
// for ce-time, which in both is an RFC 3339 UTC time between before and after.
func checkSameHeader(t *testing.T, got, want nats.Header, before, after time.Time) {
	t.Helper()
	if (got == nil) != (want == nil) || len(got) != len(want) {
		t.Fatalf("headers %v, legacy %v", got, want)
	}
	for k, wv := range want {
		gv, ok := got[k]
		if !ok || len(gv) != len(wv) || cap(gv) != cap(wv) {
			t.Fatalf("header %s = %q (cap %d), legacy %q (cap %d)", k, gv, cap(gv), wv, cap(wv))
		}
		if k == HeaderTime {
			for _, v := range []string{gv[0], wv[0]} {
				ts, err := time.Parse(time.RFC3339Nano, v)
				if err != nil || ts.Location() != time.UTC || ts.Before(before) || ts.After(after) || !strings.HasSuffix(v, "Z") {
					t.Fatalf("ce-time %q (legacy %q) not in [%v, %v]", gv[0], wv[0], before, after)
				}
			}
			continue
		}
		if !reflect.DeepEqual(gv, wv) {
			t.Fatalf("header %s = %q, legacy %q", k, gv, wv)
		}
	}
}

func FuzzInputSHA256MatchesLegacy(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"bench c-1"}`, `{}`, ``, `null`, ` null `, "\t{ }\n", `[]`, `0`, `"x"`, `{"a":{"a":{}}}`,
		`{"b":[1,2.50,-0,1e21,1e-7],"a":"\u20ac\ud83d\ude00\n"}`, `{"\ufb33":1,"\ud83d\ude00":2}`, `{"\ue000":1,"\ud800\udc00":2,"a":3}`,
		`[1e400]`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `"\ud800"`, `"\udc00"`, `123456789012345678901234567890`,
		`{"messages":[{"role":"user","content":"hi <b>&</b> \u2028 \/ \b\f\r\t \u001f"}],"temperature":0.7,"max_tokens":100}`,
		`{"prompt":"x","stream":true,"n":null,"x":false}`, "\"\xff\"", `{"a" 1}`, `{"a":1,}`, `[1,]`, `{"a":1} x`, `-`, `01`, `1.`, `1e`, `tru`,
		`{"z":{"y":[{"x":1,"w":2}]},"é":"ü","aa":"a"}`, `1E+2`, `-1.5e-10`, `5e-324`, `1.7976931348623157e308`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := InputSHA256(in)
		want, wantErr := legacyInputSHA256(in)
		sameError(t, "InputSHA256", err, wantErr)
		if got != want {
			t.Fatalf("InputSHA256(%q) = %s, legacy %s", in, got, want)
		}
		gc, err := Canonicalize(in)
		wc, wantErr := legacyCanonicalize(in)
		sameError(t, "Canonicalize", err, wantErr)
		if string(gc) != string(wc) || (gc == nil) != (wc == nil) {
			t.Fatalf("Canonicalize(%q) = %q, legacy %q", in, gc, wc)
		}
	})
}

func FuzzDecodeEnvelopeMatchesLegacy(f *testing.F) {
	f.Add("ce-specversion: 1.0\nce-id: c-1\nce-source: hermes-bench\nce-subject: cap:hermes_agent:primary:chat\nce-time: 2026-11-30T12:00:00.123456Z\nce-type: hermes.bridge.action.v1\ncontent-type: application/json\nNats-Msg-Id: c-1", []byte(`{"input":{"prompt":"bench c-1"},"idempotency_key":"k-c-1"}`))
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: s\nce-type: hermes.bridge.action.v1", []byte(`{"input":{}}`))
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: urn:x:y\nce-type: hermes.bridge.action.v1\nce-time: ", []byte(`{}`))
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: 1:x\nce-type: hermes.bridge.action.v1\nce-time: 2030-01-01T00:00:00+01:00", []byte(`{}`))
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: http://h:x/p\nce-type: hermes.bridge.action.v1\nce-time: 2030-13-01T00:00:00Z", []byte(`{}`))
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: %3Ax\nce-type: hermes.bridge.action.v1\ntraceparent: 00-x\nce-tracestate: %zz", []byte(`{}`))
	f.Add("content-type: application/cloudevents+json", []byte(`{"specversion":"1.0","id":"a","source":"s","type":"hermes.bridge.action.v1","data":{}}`))
	f.Add("", []byte(`{"specversion":"1.0","id":"a","source":"s","type":"x","data_base64":"e30="}`))
	f.Add("CE-SPECVERSION: \"1.0\"\nCe-Id: %61\nce-time: 2030-01-01T00:00:00Z\nce-source: %C3%28", []byte(`[]`))
	f.Add("content-type: application/cloudevents-batch+json", []byte(`[]`))
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: a.b/c_d~e\nce-type: hermes.bridge.action.v1\ncontent-type: application/json; charset=utf-8", []byte(`{}`))
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: \nce-type: hermes.bridge.action.v1\ncontent-type: Application/JSON", []byte(`{}`))
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: s\nce-type: hermes.bridge.action.v1\ncontent-type: text/plain", []byte(`{}`))
	f.Add("content-type: application/cloudevents+json", []byte(`{"specversion":"1.0","id":"a","source":"s","type":"hermes.bridge.action.v1","datacontenttype":"application/json","data":{}}`))
	f.Add("ce-specversion: 1.0\nce-id: del-7:approval:1\nce-source: urn:approver:alice\nce-type: hermes.bridge.approval.v1", []byte(`{"decision":"approve"}`))
	f.Fuzz(func(t *testing.T, headers string, body []byte) {
		var h nats.Header
		if headers != "" {
			h = nats.Header{}
			for _, line := range strings.Split(headers, "\n") {
				k, v, _ := strings.Cut(line, ":")
				h[strings.TrimSpace(k)] = append(h[strings.TrimSpace(k)], strings.TrimSpace(v))
			}
		}
		for _, vs := range h {
			for _, v := range vs {
				if got, want := checkJSONContentType(v), legacyCheckJSONContentType(v); got != want {
					t.Fatalf("checkJSONContentType(%q) = %q, legacy %q", v, got, want)
				}
				_, err := url.Parse(v)
				if got := parsesAsURL(v); got != (err == nil) {
					t.Fatalf("parsesAsURL(%q) = %v, url.Parse error %v", v, got, err)
				}
			}
		}
		for _, rules := range []*envelopeRules{actionRules, decisionRules} {
			got, err := decodeEnvelope(h, body, rules)
			want, wantErr := legacyDecodeEnvelope(h, body, rules)
			sameError(t, "decodeEnvelope", err, wantErr)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeEnvelope = %+v, legacy %+v", got, want)
			}
		}
	})
}

// TestLegacySeedsStillDecode keeps json imported for the seeds' sake and checks that the
// benchmark inputs agree too.
func TestBenchInputsMatchLegacy(t *testing.T) {
	a, err := DecodeAction(benchActionData)
	b, err2 := legacyDecodeAction(benchActionData)
	if err != nil || err2 != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("%+v %v / %+v %v", a, err, b, err2)
	}
	r, err := DecodeResult(benchResultHeader, benchResultData)
	r2, err2 := legacyDecodeResult(benchResultHeader, benchResultData)
	if err != nil || err2 != nil || !reflect.DeepEqual(r, r2) || !json.Valid(r.Output) {
		t.Fatalf("%+v %v / %+v %v", r, err, r2, err2)
	}
}

func FuzzValidJSONMatchesEncodingJSON(f *testing.F) {
	for _, s := range append(append(append([]string{}, actionSeeds...), resultSeeds...), []string{
		`0`, `-0`, `-`, `01`, `1.`, `.1`, `1e`, `1e+`, `1E-5`, `-1.5e+10`, `1.5.5`, `+1`, `0x1`, `Infinity`, `NaN`,
		`true`, `tru`, `truex`, `false`, `null`, `nul`, ` null `, "\vnull", "null\f", "\u00a0null",
		`""`, `"\u12"`, `"\u12G4"`, `"\uD800"`, `"\x"`, "\"\x01\"", "\"\x7f\xff\"", `"\/\b\f\n\r\t\\\""`, `"`, `"\`,
		`[]`, `[ ]`, `[,]`, `[1,]`, `[1 2]`, `[[[]]]`, `[[[]]`, `{}`, `{ }`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{1:1}`,
		`{"a":1 "b":2}`, `{"a" : [ {"b" : null} , 2 ] }`, `{}{}`, `[] x`, `{"a":1}}`,
		strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth),
		strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
		strings.Repeat(`{"a":`, maxJSONDepth) + "1" + strings.Repeat("}", maxJSONDepth),
		strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1),
		strings.Repeat("[", 100) + strings.Repeat("]", 99),
	}...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", data, got, want)
		}
	})
}
