package events_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
)

func strptr(s string) *string { return &s }

func TestEncodeEvent(t *testing.T) {
	ev := &events.EventData{
		ActionID: "a-123", Sequence: 0, Kind: events.KindData,
		Event: events.SSE{Event: "response.output_text.delta", Data: json.RawMessage(`{ "delta": "Three" }`)},
		Text:  "Three",
	}
	tc := events.TraceContext{Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Tracestate: "a=b c"}
	before := time.Now().UTC()
	h, body, err := events.EncodeEvent("hermes-bridge", "cap:hermes_agent:primary:chat_stream", ev, tc)
	if err != nil {
		t.Fatal(err)
	}
	// The data is compacted; its strings stay as written (TestEventRoundTrip).
	want := `{"action_id":"a-123","sequence":0,"kind":"data","event":{"event":"response.output_text.delta","id":null,"data":{"delta":"Three"}},"text":"Three"}`
	if string(body) != want {
		t.Fatalf("body\n got %s\nwant %s", body, want)
	}
	for k, v := range map[string]string{
		"ce-specversion": "1.0", "ce-id": "a-123:0", "ce-source": "hermes-bridge", "ce-type": events.TypeEvent,
		"content-type": "application/json", "Nats-Msg-Id": "a-123:0",
		"ce-traceparent": tc.Traceparent, "traceparent": tc.Traceparent,
		"ce-tracestate": "a=b%20c", "tracestate": "a=b%20c", "ce-subject": "cap:hermes_agent:primary:chat_stream",
	} {
		if got := h.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	ts, err := time.Parse(time.RFC3339Nano, h.Get("ce-time"))
	if err != nil || ts.Before(before.Add(-time.Second)) || !strings.HasSuffix(h.Get("ce-time"), "Z") {
		t.Errorf("ce-time = %q (%v)", h.Get("ce-time"), err)
	}

	// Minimal event: null name, id present, no text, empty data -> null.
	_, body, err = events.EncodeEvent("s", "", &events.EventData{ActionID: "a", Sequence: 7, Kind: "done", Event: events.SSE{ID: strptr("e\"1")}}, events.TraceContext{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"action_id":"a","sequence":7,"kind":"done","event":{"event":null,"id":"e\"1","data":null}}`; string(body) != want {
		t.Fatalf("body\n got %s\nwant %s", body, want)
	}

	for _, bad := range []*events.EventData{
		{ActionID: "a.b", Kind: "data"}, {ActionID: "a", Sequence: -1, Kind: "data"}, {ActionID: "a"},
	} {
		if _, _, err := events.EncodeEvent("s", "", bad, events.TraceContext{}); !errors.Is(err, events.ErrInvalidOutput) {
			t.Errorf("EncodeEvent(%+v) err = %v", bad, err)
		}
	}
}

func TestEncodeSourcePercentEncoded(t *testing.T) {
	h, _, err := events.EncodeEvent("my bridge é%", "", &events.EventData{ActionID: "a", Kind: "data"}, events.TraceContext{})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("ce-source"); got != "my%20bridge%20%C3%A9%25" {
		t.Fatalf("ce-source = %q", got)
	}
}

func TestEventRoundTrip(t *testing.T) {
	in := &events.EventData{
		ActionID: "act_9", Sequence: 42, Kind: events.KindTool,
		Event: events.SSE{Event: "tool.progress", ID: strptr("17"), Data: json.RawMessage(`"not json \u003c"`)},
		Text:  "line1\nline2 <b>&</b> \u2028 é",
	}
	h, body, err := events.EncodeEvent("src", "", in, events.TraceContext{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := events.DecodeEvent(h, body)
	if err != nil {
		t.Fatal(err)
	}
	if out.ActionID != in.ActionID || out.Sequence != in.Sequence || out.Kind != in.Kind || out.Text != in.Text ||
		out.Event.Event != in.Event.Event || *out.Event.ID != *in.Event.ID || string(out.Event.Data) != string(in.Event.Data) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	// json.Marshal uses the same contract form.
	mb, err := json.Marshal(in)
	if err != nil || string(mb) != string(body) {
		t.Fatalf("json.Marshal = %s, %v\nwant %s", mb, err, body)
	}
	if _, err := events.DecodeEvent(nats.Header{"ce-type": {events.TypeResult}}, body); !errors.Is(err, events.ErrInvalidOutput) {
		t.Fatalf("wrong type accepted: %v", err)
	}
	if _, err := events.DecodeEvent(nil, []byte(`[]`)); !errors.Is(err, events.ErrInvalidOutput) {
		t.Fatalf("array accepted: %v", err)
	}
}

func TestEncodeResult(t *testing.T) {
	r := &events.Result{
		ActionID: "a-123", CapabilityID: "cap:hermes_agent:primary:chat_stream", Status: events.StatusCompleted,
		Output: json.RawMessage(`{"endpoint_id":"primary","operation":"chat_stream","http_status":200,"event_count":7,"text":"Three findings are ready.","terminal":true,"truncated":false}`),
	}
	h, body, err := events.EncodeResult("hermes-bridge", r, events.TraceContext{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"action_id":"a-123","capability_id":"cap:hermes_agent:primary:chat_stream","status":"completed","output":` + string(r.Output) + `,"error":null,"replay_of":null}`
	if string(body) != want {
		t.Fatalf("body\n got %s\nwant %s", body, want)
	}
	for k, v := range map[string]string{
		"ce-id": "a-123:result", "Nats-Msg-Id": "a-123:result", "ce-type": events.TypeResult,
		"ce-subject": "cap:hermes_agent:primary:chat_stream", "ce-specversion": "1.0",
	} {
		if got := h.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}

	failed := &events.Result{
		ActionID: "a-1", CapabilityID: "cap:hermes_agent:p:chat", Status: events.StatusFailed,
		Error: &events.ErrorInfo{Code: "remote_unavailable", Message: "Hermes is busy", Category: "temporary", Retryable: true,
			HTTPStatus: 429, RetryAfterMS: 1000, Details: map[string]any{"remote_code": "rate_limit_exceeded"}},
		ReplayOf: strptr("orig-1"),
	}
	_, body, err = events.EncodeResult("s", failed, events.TraceContext{})
	if err != nil {
		t.Fatal(err)
	}
	want = `{"action_id":"a-1","capability_id":"cap:hermes_agent:p:chat","status":"failed","output":null,"error":{"code":"remote_unavailable","message":"Hermes is busy","category":"temporary","retryable":true,"uncertain_outcome":false,"http_status":429,"retry_after_ms":1000,"details":{"remote_code":"rate_limit_exceeded"}},"replay_of":"orig-1"}`
	if string(body) != want {
		t.Fatalf("body\n got %s\nwant %s", body, want)
	}
	back, err := events.DecodeResult(nil, body)
	if err != nil || back.Error.Code != "remote_unavailable" || back.Error.HTTPStatus != 429 || *back.ReplayOf != "orig-1" || string(back.Output) != "null" {
		t.Fatalf("DecodeResult = %+v, %v", back, err)
	}

	_, body, err = events.EncodeResult("s", &events.Result{ActionID: "a-1", Status: events.StatusFailed,
		Error: &events.ErrorInfo{Code: "internal", Message: "m", Category: "connector"}}, events.TraceContext{})
	if err != nil || !strings.Contains(string(body), `"http_status":null,"retry_after_ms":null,"details":null`) {
		t.Fatalf("nulls: %s, %v", body, err)
	}

	h, _, err = events.EncodeResult("s", &events.Result{ActionID: "a-2", Status: events.StatusPendingApproval, Output: json.RawMessage(`{}`)}, events.TraceContext{})
	if err != nil || h.Get("ce-id") != "a-2:pending" || h.Get("Nats-Msg-Id") != "a-2:pending" {
		t.Fatalf("pending: %v %v", h, err)
	}
	for _, bad := range []*events.Result{
		{ActionID: "a", Status: "done"}, {ActionID: "", Status: "completed"}, {ActionID: "a", Status: "completed", Output: json.RawMessage(`{`)},
	} {
		if _, _, err := events.EncodeResult("s", bad, events.TraceContext{}); !errors.Is(err, events.ErrInvalidOutput) {
			t.Errorf("EncodeResult(%+v) err = %v", bad, err)
		}
	}
	if _, err := events.DecodeResult(nil, []byte(`{"action_id":"a","status":"weird"}`)); !errors.Is(err, events.ErrInvalidOutput) {
		t.Errorf("unknown status accepted: %v", err)
	}
}

// TestJSONStringEscapingMatchesEncodingJSON checks the strings of the body
// against encoding/json on edge cases and random strings: the same bytes for
// valid UTF-8, the same decoded text (U+FFFD for each invalid byte) otherwise.
func TestJSONStringEscapingMatchesEncodingJSON(t *testing.T) {
	cases := []string{"", "plain", "\"\\/", "\x00\x01\x1f\x7f", "\b\f\n\r\t", "<>&", "\u2028\u2029", "é€😀",
		"\xff", "a\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\ufffd\\ufffd\xff", strings.Repeat("x", 1000)}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(24))
		for i := range b {
			if r.IntN(2) == 0 {
				b[i] = byte(r.IntN(0x80))
			} else {
				b[i] = byte(r.IntN(256))
			}
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if s == "" {
			continue
		}
		want, _ := json.Marshal(s)
		ev := events.EventData{ActionID: "a", Kind: "data", Text: s}
		got, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		wantBody := `{"action_id":"a","sequence":0,"kind":"data","event":{"event":null,"id":null,"data":null},"text":` + string(want) + `}`
		if utf8.ValidString(s) && string(got) != wantBody {
			t.Fatalf("escaping %q:\n got %s\nwant %s", s, got, wantBody)
		}
		var gotEv, wantEv events.EventData
		if err := json.Unmarshal(got, &gotEv); err != nil {
			t.Fatalf("escaping %q: %s does not decode: %v", s, got, err)
		}
		if err := json.Unmarshal([]byte(wantBody), &wantEv); err != nil {
			t.Fatal(err)
		}
		if gotEv.Text != wantEv.Text || !strings.HasPrefix(string(got), wantBody[:strings.Index(wantBody, `"text":`)]) {
			t.Fatalf("escaping %q:\n got %s\nwant %s", s, got, wantBody)
		}
	}
}

func BenchmarkEncodeEvent(b *testing.B) {
	ev := &events.EventData{
		ActionID: "01J9ZK3Q4X5Y6Z7A8B9C0D1E2F", Sequence: 12345, Kind: events.KindData,
		Event: events.SSE{Event: "response.output_text.delta", Data: json.RawMessage(`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Three findings are ready "}`)},
		Text:  "Three findings are ready ",
	}
	tc := events.TraceContext{Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := events.EncodeEvent("hermes-bridge", "cap:hermes_agent:primary:chat_stream", ev, tc); err != nil {
			b.Fatal(err)
		}
	}
}

// TestResultUsage: a result with usage carries it as a seventh member, cost_usd only when
// known; a result without usage has no usage member at all (never zeros); DecodeResult reads
// it back.
func TestResultUsage(t *testing.T) {
	cost := 0.75
	r := &events.Result{ActionID: "a-1", CapabilityID: "cap:hermes_agent:p:run", Status: events.StatusCompleted,
		Output: json.RawMessage(`{}`), Usage: &events.Usage{InputTokens: 812, OutputTokens: 40, TotalTokens: 852, CostUSD: &cost}}
	_, body, err := events.EncodeResult("s", r, events.TraceContext{})
	want := `{"action_id":"a-1","capability_id":"cap:hermes_agent:p:run","status":"completed","output":{},"error":null,"replay_of":null,` +
		`"usage":{"input_tokens":812,"output_tokens":40,"total_tokens":852,"cost_usd":0.75}}`
	if err != nil || string(body) != want {
		t.Fatalf("body\n got %s\nwant %s (%v)", body, want, err)
	}
	back, err := events.DecodeResult(nil, body)
	if err != nil || back.Usage == nil || *back.Usage.CostUSD != 0.75 || back.Usage.TotalTokens != 852 {
		t.Fatalf("DecodeResult = %+v, %v", back, err)
	}
	r.Usage.CostUSD = nil
	if _, body, _ = events.EncodeResult("s", r, events.TraceContext{}); !strings.HasSuffix(string(body), `"usage":{"input_tokens":812,"output_tokens":40,"total_tokens":852}}`) {
		t.Fatalf("no cost: %s", body)
	}
	r.Usage = nil
	if _, body, _ = events.EncodeResult("s", r, events.TraceContext{}); strings.Contains(string(body), "usage") {
		t.Fatalf("no usage: %s", body)
	}
}
