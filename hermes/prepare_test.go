package hermes_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/hermes"
)

type prepCase struct {
	name   string
	op     string
	in     string
	field  string            // expected InputError.Field; "" means success
	path   string            // expected Prepared.Path
	body   string            // expected body (JSON, compared semantically); "" means nil body
	header map[string]string // expected headers; value "" means absent
	max    int               // expected MaxEvents (streams)
}

func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
}

// runPrep runs Prepare on each case's input decoded as the bridge decodes it. The input rules
// are the schema's (schemas/input_rules_test.go holds the cases that moved there); these cases
// cover the mapping and the rules Prepare keeps.
func runPrep(t *testing.T, cases []prepCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.op+"/"+tc.name, func(t *testing.T) {
			p, err := hermes.Prepare(hermes.Request{Operation: tc.op, Input: hermes.DecodedInput(tc.in)})
			if tc.field != "" {
				var ie *hermes.InputError
				if !errors.As(err, &ie) {
					t.Fatalf("want InputError at %s, got %v", tc.field, err)
				}
				if !errors.Is(err, hermes.ErrInvalidInput) {
					t.Fatalf("errors.Is(ErrInvalidInput) false for %v", err)
				}
				if ie.Field != tc.field {
					t.Fatalf("field = %q, want %q (%s)", ie.Field, tc.field, ie.Reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			spec, _ := hermes.Lookup(tc.op)
			if p.Method != spec.Method || p.Spec != spec {
				t.Fatalf("method/spec mismatch: %s %+v", p.Method, p.Spec)
			}
			want := tc.path
			if want == "" {
				want = spec.Path
			}
			if p.Path != want {
				t.Fatalf("path = %q, want %q", p.Path, want)
			}
			if tc.body == "" {
				if p.Body != nil {
					t.Fatalf("body = %s, want none", p.Body)
				}
				if p.Header.Get("Content-Type") != "" {
					t.Fatalf("Content-Type set without a body")
				}
			} else {
				jsonEqual(t, p.Body, tc.body)
				if got := p.Header.Get("Content-Type"); got != "application/json" {
					t.Fatalf("Content-Type = %q", got)
				}
			}
			for k, v := range tc.header {
				if got := p.Header.Get(k); got != v {
					t.Fatalf("header %s = %q, want %q", k, got, v)
				}
			}
			if p.Header.Get("Authorization") != "" {
				t.Fatalf("Prepare must not set Authorization")
			}
			if spec.Stream {
				if p.Header.Get("Accept") != "text/event-stream" {
					t.Fatalf("stream Accept = %q", p.Header.Get("Accept"))
				}
				wantMax := tc.max
				if wantMax == 0 {
					wantMax = hermes.DefaultMaxEvents
				}
				if p.MaxEvents != wantMax {
					t.Fatalf("MaxEvents = %d, want %d", p.MaxEvents, wantMax)
				}
			}
		})
	}
}

// TestPrepare: the mapping of each operation's input to its request, and the rules Prepare
// keeps, one subtest per operation and case.
func TestPrepare(t *testing.T) {
	ok := strings.Repeat("é", 65536)
	var cases []prepCase
	for _, op := range []string{"health", "health_detailed", "models", "capabilities", "skills", "toolsets"} {
		cases = append(cases,
			prepCase{name: "empty", op: op, in: `{}`},
			prepCase{name: "null", op: op, in: `null`},
			prepCase{name: "absent", op: op, in: ``},
		)
	}
	runPrep(t, append(cases, []prepCase{
		{name: "prompt", op: "chat", in: `{"prompt":"hi"}`,
			body: `{"messages":[{"role":"user","content":"hi"}],"model":"hermes-agent","stream":false}`},
		{name: "query", op: "chat_stream", in: `{"query":"hi","max_events":7}`,
			body: `{"messages":[{"role":"user","content":"hi"}],"model":"hermes-agent","stream":true}`, max: 7},
		{name: "messages", op: "chat", in: `{"messages":[{"role":"user","content":"x"}],"model":"m","temperature":0.2,"extra":{"a":1},"stream":true}`,
			body: `{"messages":[{"role":"user","content":"x"}],"model":"m","temperature":0.2,"extra":{"a":1},"stream":false}`},
		{name: "headers", op: "chat", in: `{"prompt":"hi","session_id":"s-1","session_key":"k:1","idempotency_key":"i","max_events":3}`,
			body:   `{"messages":[{"role":"user","content":"hi"}],"model":"hermes-agent","stream":false}`,
			header: map[string]string{"X-Hermes-Session-Id": "s-1", "X-Hermes-Session-Key": "k:1", "Accept": "application/json"}},
		{name: "empty session id omitted", op: "chat", in: `{"prompt":"hi","session_id":""}`,
			body:   `{"messages":[{"role":"user","content":"hi"}],"model":"hermes-agent","stream":false}`,
			header: map[string]string{"X-Hermes-Session-Id": ""}},
		{name: "null prompt ignored", op: "chat", in: `{"prompt":null,"messages":[{"role":"user","content":"x"}]}`,
			body: `{"messages":[{"role":"user","content":"x"}],"model":"hermes-agent","stream":false}`},
		{name: "session id 256", op: "chat", in: `{"prompt":"a","session_id":"` + strings.Repeat("é", 256) + `"}`,
			body: `{"messages":[{"role":"user","content":"a"}],"model":"hermes-agent","stream":false}`},
		{name: "session id control", op: "chat", in: `{"prompt":"a","session_id":"a\nb"}`, field: "input.session_id"},
		{name: "session key control", op: "chat", in: `{"prompt":"a","session_key":"a\u0000b"}`, field: "input.session_key"},
		{name: "max_events max", op: "chat_stream", in: `{"prompt":"a","max_events":100000}`, max: 100000,
			body: `{"messages":[{"role":"user","content":"a"}],"model":"hermes-agent","stream":true}`},
		{name: "body", op: "responses", in: `{"body":{"input":"hi","store":true,"stream":true},"session_key":"k","idempotency_key":"x"}`,
			body: `{"input":"hi","store":true,"stream":false}`, header: map[string]string{"X-Hermes-Session-Key": "k"}},
		{name: "whole input", op: "responses_stream", in: `{"input":[{"role":"user","content":"a"}],"model":"m","session_key":"k","idempotency_key":"x","max_events":9}`,
			body: `{"input":[{"role":"user","content":"a"}],"model":"m","stream":true}`, header: map[string]string{"X-Hermes-Session-Key": "k"}, max: 9},
		{name: "non-object body", op: "responses", in: `{"body":"hello"}`, body: `{"input":"hello","stream":false}`},
		{name: "array body", op: "responses", in: `{"body":["a","b"]}`, body: `{"input":["a","b"],"stream":false}`},
		{name: "history", op: "responses", in: `{"input":"x","conversation_history":[{"role":"user","content":"a"}]}`,
			body: `{"input":"x","conversation_history":[{"role":"user","content":"a"}],"stream":false}`},
		{name: "session key bad", op: "responses", in: `{"input":"x","session_key":"a\rb"}`, field: "input.session_key"},
		{name: "get", op: "response_get", in: `{"response_id":"resp_1"}`, path: "/v1/responses/resp_1"},
		{name: "from body", op: "response_delete", in: `{"body":{"response_id":"resp_2"}}`, path: "/v1/responses/resp_2"},
		{name: "encoded", op: "response_get", in: `{"response_id":"a/b c+d~e*f%é"}`, path: "/v1/responses/a%2Fb%20c%2Bd~e%2Af%25%C3%A9"},
		{name: "missing", op: "response_get", in: `{}`, field: "input.response_id"},
		{name: "not string", op: "response_get", in: `{"response_id":3}`, field: "input.response_id"},
		{name: "dotdot", op: "response_get", in: `{"response_id":".."}`, field: "input.response_id"},
		{name: "too long", op: "response_get", in: `{"response_id":"` + strings.Repeat("a", 513) + `"}`, field: "input.response_id"},
		{name: "body blank", op: "response_get", in: `{"body":{"response_id":""}}`, field: "input.body.response_id"},
		{name: "defaults", op: "sessions_list", in: `{}`, path: "/api/sessions?limit=50&offset=0"},
		{name: "all", op: "sessions_list", in: `{"include_children":true,"source":"api server/x","offset":5,"limit":10}`,
			path: "/api/sessions?limit=10&offset=5&source=api%20server%2Fx&include_children=true"},
		{name: "clamped", op: "sessions_list", in: `{"limit":1000,"offset":5000000}`, path: "/api/sessions?limit=200&offset=1000000"},
		{name: "zero limit", op: "sessions_list", in: `{"limit":0}`, path: "/api/sessions?limit=0&offset=0"},
		{name: "integral float", op: "sessions_list", in: `{"limit":20.0}`, path: "/api/sessions?limit=20&offset=0"},
		{name: "minus zero", op: "sessions_list", in: `{"limit":-0,"query":{"offset":"-0"}}`, path: "/api/sessions?limit=0&offset=0"},
		{name: "huge", op: "sessions_list", in: `{"query":{"limit":"99999999999999999999","offset":"1` + strings.Repeat("0", 400) + `"}}`, path: "/api/sessions?limit=200&offset=1000000"},
		{name: "query object", op: "sessions_list", in: `{"query":{"limit":"7","include_children":"false","source":"cli"}}`,
			path: "/api/sessions?limit=7&offset=0&source=cli&include_children=false"},
		{name: "same duplicate", op: "sessions_list", in: `{"limit":7,"query":{"limit":7}}`, path: "/api/sessions?limit=7&offset=0"},
		{name: "negative", op: "sessions_list", in: `{"limit":-1}`, field: "input.limit"},
		{name: "fraction", op: "sessions_list", in: `{"offset":1.5}`, field: "input.offset"},
		{name: "source bytes", op: "sessions_list", in: `{"source":"` + strings.Repeat("é", 2049) + `"}`, field: "input.source"},
		{name: "query children", op: "sessions_list", in: `{"query":{"include_children":true}}`, path: "/api/sessions?limit=50&offset=0&include_children=true"},
		{name: "conflict", op: "sessions_list", in: `{"limit":5,"query":{"limit":6}}`, field: "input.query.limit"},
		{name: "query negative", op: "sessions_list", in: `{"query":{"offset":"-1"}}`, field: "input.query.offset"},
		{name: "body", op: "session_create", in: `{"body":{"id":"case-1","title":"T","system_prompt":"p"}}`, body: `{"id":"case-1","title":"T","system_prompt":"p"}`},
		{name: "whole", op: "session_create", in: `{"session_id":"case-2","idempotency_key":"k"}`, body: `{"session_id":"case-2"}`},
		{name: "empty", op: "session_create", in: `{}`, body: `{}`},
		{name: "empty id falls back", op: "session_create", in: `{"id":"","session_id":"x"}`, body: `{"id":"","session_id":"x"}`},
		{name: "body type", op: "session_create", in: `{"body":"x"}`, field: "input.body"},
		{name: "get", op: "session_get", in: `{"session_id":"api_1_a"}`, path: "/api/sessions/api_1_a"},
		{name: "delete", op: "session_delete", in: `{"session_id":"a b"}`, path: "/api/sessions/a%20b"},
		{name: "messages", op: "session_messages", in: `{"session_id":"x/y"}`, path: "/api/sessions/x%2Fy/messages"},
		{name: "missing", op: "session_get", in: `{}`, field: "input.session_id"},
		{name: "body", op: "session_patch", in: `{"session_id":"s","body":{"title":"T","end_reason":"client_closed"}}`, path: "/api/sessions/s", body: `{"title":"T","end_reason":"client_closed"}`},
		{name: "whole", op: "session_patch", in: `{"session_id":"s","title":null,"idempotency_key":"k"}`, path: "/api/sessions/s", body: `{"title":null}`},
		{name: "empty", op: "session_patch", in: `{"session_id":"s"}`, path: "/api/sessions/s", body: `{}`},
		{name: "id in body", op: "session_patch", in: `{"body":{"session_id":"s","title":"x"}}`, path: "/api/sessions/s", body: `{"title":"x"}`},
		{name: "no id", op: "session_patch", in: `{"title":"x"}`, field: "input.session_id"},
		{name: "empty body", op: "session_fork", in: `{"session_id":"s"}`, path: "/api/sessions/s/fork", body: `{}`},
		{name: "explicit empty body", op: "session_fork", in: `{"session_id":"s","body":{}}`, path: "/api/sessions/s/fork", body: `{}`},
		{name: "child", op: "session_fork", in: `{"session_id":"s","body":{"id":"child","title":"T"}}`, path: "/api/sessions/s/fork", body: `{"id":"child","title":"T"}`},
		{name: "child session_id", op: "session_fork", in: `{"session_id":"s","body":{"session_id":"c2"}}`, body: `{"session_id":"c2"}`, path: "/api/sessions/s/fork"},
		{name: "whole", op: "session_fork", in: `{"session_id":"s","id":"c","idempotency_key":"k"}`, path: "/api/sessions/s/fork", body: `{"id":"c"}`},
		{name: "path only top level", op: "session_fork", in: `{"body":{"session_id":"s"}}`, field: "input.session_id"},
		{name: "message", op: "session_chat", in: `{"session_id":"s","message":"hi","system_message":"x","session_key":"k","idempotency_key":"i"}`,
			path: "/api/sessions/s/chat", body: `{"message":"hi","system_message":"x"}`, header: map[string]string{"X-Hermes-Session-Key": "k"}},
		{name: "prompt", op: "session_chat_stream", in: `{"session_id":"s","prompt":"hi","max_events":5}`,
			path: "/api/sessions/s/chat/stream", body: `{"message":"hi"}`, max: 5},
		{name: "query", op: "session_chat", in: `{"session_id":"s","query":"q"}`, path: "/api/sessions/s/chat", body: `{"message":"q"}`},
		{name: "input kept", op: "session_chat", in: `{"session_id":"s","input":"i","prompt":"p"}`, path: "/api/sessions/s/chat", body: `{"input":"i"}`},
		{name: "body", op: "session_chat", in: `{"session_id":"s","body":{"message":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x"}}]},"session_key":"k"}`,
			path: "/api/sessions/s/chat", body: `{"message":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x"}}]}`, header: map[string]string{"X-Hermes-Session-Key": "k"}},
		{name: "body form", op: "session_chat_stream", in: `{"session_id":"s","body":{"prompt":" ","query":"q","session_key":"bk","session_id":"x"},"max_events":2}`,
			path: "/api/sessions/s/chat/stream", body: `{"message":"q"}`, header: map[string]string{"X-Hermes-Session-Key": "bk"}, max: 2},
		{name: "session key control", op: "session_chat", in: `{"session_id":"s","message":"m","session_key":"a\u007fb"}`, field: "input.session_key"},
		{name: "body session id", op: "session_chat", in: `{"body":{"session_id":"s2","message":"m"}}`, path: "/api/sessions/s2/chat", body: `{"message":"m"}`},
		{name: "max text", op: "session_chat", in: `{"session_id":"s","message":"` + ok + `"}`, path: "/api/sessions/s/chat", body: `{"message":"` + ok + `"}`},
		{name: "no session", op: "session_chat", in: `{"message":"m"}`, field: "input.session_id"},
		{name: "body type", op: "session_chat_stream", in: `{"session_id":"s","body":[1]}`, field: "input.body"},
	}...))
}

func TestPrepareRequestFields(t *testing.T) {
	h := http.Header{}
	h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.Set("Authorization", "Bearer stolen")
	h.Set("X-Hermes-Session-Id", "smuggled")
	p, err := hermes.Prepare(hermes.Request{Operation: "chat", Input: hermes.DecodedInput(`{"prompt":"a"}`), IdempotencyKey: "key-1", Header: h})
	noErr(t, err)
	if p.Header.Get("Idempotency-Key") != "key-1" || p.Header.Get("Traceparent") == "" {
		t.Fatalf("headers: %v", p.Header)
	}
	if p.Header.Get("Authorization") != "" || p.Header.Get("X-Hermes-Session-Id") != "" {
		t.Fatalf("reserved headers copied: %v", p.Header)
	}

	if _, err := hermes.Prepare(hermes.Request{Operation: "nope"}); !errors.Is(err, hermes.ErrInvalidInput) {
		t.Fatalf("unknown op: %v", err)
	}
	_, err = hermes.Prepare(hermes.Request{Operation: "chat", Input: hermes.DecodedInput(`{"prompt":"a"}`), IdempotencyKey: "a\r\nb"})
	var ie *hermes.InputError
	if !errors.As(err, &ie) || ie.Field != "idempotency_key" {
		t.Fatalf("bad key: %v", err)
	}
	bad := http.Header{"X-Trace": {"a\nb"}}
	if _, err := hermes.Prepare(hermes.Request{Operation: "models", Header: bad}); !errors.Is(err, hermes.ErrInvalidInput) {
		t.Fatalf("bad header: %v", err)
	}
	if strings.Contains(ie.Error(), "a\r\nb") {
		t.Fatalf("error echoes the value: %v", ie)
	}
}

func TestPreparePayloadTooLarge(t *testing.T) {
	big := strings.Repeat("a", hermes.MaxRequestBody)
	_, err := hermes.Prepare(hermes.Request{Operation: "chat", Input: hermes.DecodedInput(`{"prompt":"` + big + `"}`)})
	var e *hermes.Error
	if !errors.As(err, &e) || e.Code != hermes.CodePayloadTooLarge || !e.NotStarted {
		t.Fatalf("want payload_too_large, got %v", err)
	}
	if strings.Contains(e.Error(), "aaaa") {
		t.Fatalf("error echoes content")
	}
}

func TestOperationsTable(t *testing.T) {
	ops := hermes.Operations()
	if len(ops) != 21 {
		t.Fatalf("len = %d", len(ops))
	}
	streams, safe, keys, approvals := 0, 0, 0, 0
	for _, s := range ops {
		got, ok := hermes.Lookup(s.Name)
		if !ok || got != s {
			t.Fatalf("Lookup(%s) = %+v %v", s.Name, got, ok)
		}
		if s.Stream != (s.Timeout == 0) {
			t.Fatalf("%s: stream %v timeout %v", s.Name, s.Stream, s.Timeout)
		}
		if s.Auth != (s.Name != "health") {
			t.Fatalf("%s auth %v", s.Name, s.Auth)
		}
		for _, b := range []struct {
			v bool
			n *int
		}{{s.Stream, &streams}, {s.Safe, &safe}, {s.KeyRequired, &keys}, {s.Approval, &approvals}} {
			if b.v {
				*b.n++
			}
		}
	}
	if streams != 3 || safe != 10 || keys != 5 || approvals != 2 {
		t.Fatalf("streams %d safe %d keys %d approvals %d", streams, safe, keys, approvals)
	}
	if _, ok := hermes.Lookup("run_start"); ok {
		t.Fatal("run_start is not an operation")
	}
	ops[0].Name = "changed"
	if hermes.Operations()[0].Name != "health" {
		t.Fatal("Operations shares its slice")
	}
}
