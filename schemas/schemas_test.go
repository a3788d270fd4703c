package schemas_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// seedInputs are the operation inputs given in shared/seeds (one per operation).
var seedInputs = map[string]string{
	"health": `{}`, "health_detailed": `{}`, "models": `{}`, "capabilities": `{}`, "skills": `{}`, "toolsets": `{}`,
	"chat": `{"messages":[{"role":"system","content":"Answer with a short operational summary."},{"role":"user","content":"Summarize the current incident notes."}],
		"model":"hermes-agent","temperature":0.2,"session_id":"incident-review-2030-01","session_key":"support:incident-review"}`,
	"chat_stream": `{"prompt":"Summarize the incident notes.","max_events":200}`,
	"responses": `{"body":{"model":"hermes-agent","input":"Summarize the current incident notes.","instructions":"Return three concise findings.","store":true,"truncation":"auto"},
		"session_key":"support:incident-review"}`,
	"responses_stream": `{"input":"Summarize.","model":"hermes-agent","max_events":4096}`,
	"response_get":     `{"response_id":"resp_0123456789abcdef0123456789ab"}`,
	"response_delete":  `{"response_id":"resp_0123456789abcdef0123456789ab"}`,
	"sessions_list":    `{"limit":50,"offset":0,"source":"api_server","include_children":false}`,
	"session_create":   `{"body":{"id":"support-case-2030","title":"Support case 2030","model":"hermes-agent","system_prompt":"Keep responses factual and concise."}}`,
	"session_get":      `{"session_id":"support-case-2030"}`,
	"session_patch":    `{"session_id":"support-case-2030","body":{"title":"Support case 2030 — reviewed","end_reason":"client_closed"}}`,
	"session_delete":   `{"session_id":"support-case-2030"}`,
	"session_messages": `{"session_id":"support-case-2030"}`,
	"session_fork":     `{"session_id":"support-case-2030","body":{"id":"support-case-2030-alternative","title":"Support case 2030 — alternative"}}`,
	"session_chat": `{"session_id":"support-case-2030","message":"Summarize only the findings supported by the transcript.",
		"system_message":"Return at most three bullets.","session_key":"support:case-review"}`,
	"session_chat_stream": `{"session_id":"support-case-2030","message":[{"type":"text","text":"Go on."}],"max_events":100}`,
	// The run operations (not in the seeds: hermes-api.md §9 and the AIP connector's §3).
	"run_start":    `{"input":"List the files in the build directory.","instructions":"Be brief.","session_id":"build-review"}`,
	"run_status":   `{"run_id":"run_0123456789abcdef0123456789abcdef"}`,
	"run_events":   `{"run_id":"run_0123456789abcdef0123456789abcdef","max_events":1000}`,
	"run_approval": `{"run_id":"run_0123456789abcdef0123456789abcdef","choice":"once"}`,
	"run_stop":     `{"run_id":"run_0123456789abcdef0123456789abcdef"}`,
	"run":          `{"input":[{"role":"user","content":"Clean the build directory."}],"max_events":500}`,
}

// noErr fails the test at once on an error.
func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// numOperations is the number of operations with an input schema: the contract's 21, the
// five run operations and the governed run.
const numOperations = 27

func TestEveryOperationHasASchemaAndSeedInputPasses(t *testing.T) {
	ops := schemas.Operations()
	if len(ops) != numOperations {
		t.Fatalf("Operations() = %d ops: %v", len(ops), ops)
	}
	for _, op := range ops {
		in, ok := seedInputs[op]
		if !ok {
			t.Errorf("no seed input for %s", op)
			continue
		}
		action := `{"capability_id":"cap:hermes_agent:primary:` + op + `","input":` + in + `,"idempotency_key":"k-1","timeout_ms":60000,"tenant_id":"acme","approval":null}`
		if err := schemas.ValidateAction(op, json.RawMessage(action)); err != nil {
			t.Errorf("%s: %v", op, err)
		}
		if err := schemas.ValidateInput(op, json.RawMessage(in)); err != nil {
			t.Errorf("%s ValidateInput: %v", op, err)
		}
	}
	// Absent and null input mean {}.
	for _, a := range []string{`{}`, `{"input":null}`} {
		if err := schemas.ValidateAction("health", json.RawMessage(a)); err != nil {
			t.Errorf("health %s: %v", a, err)
		}
	}
	if err := schemas.ValidateAction("chat", json.RawMessage(`{}`)); err == nil {
		t.Error("chat without input accepted")
	}
}

// TestValidateActionErrors: the envelope's rules and input rules beside inputRules (which
// holds the input rules once).
func TestValidateActionErrors(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	tests := []struct {
		op, action, field, reason string
	}{
		{"chat", `[]`, "", "must be an object"},
		{"chat", `{"input":{"prompt":"x"},"extra":1}`, "extra", "is not allowed"},
		{"chat", `{"input":{"prompt":"x"},"capability_id":"cap:other"}`, "capability_id", ""},
		{"chat", `{"input":{"prompt":"x"},"idempotency_key":""}`, "idempotency_key", "must not be empty"},
		{"chat", `{"input":{"prompt":"x"},"idempotency_key":"a\u0001"}`, "idempotency_key", "control characters"},
		{"chat", `{"input":{"prompt":"x"},"timeout_ms":86400001}`, "timeout_ms", "at most 86400000"},
		{"chat", `{"input":{"prompt":"x"},"timeout_ms":1.5}`, "timeout_ms", "an integer"},
		{"chat", `{"input":[]}`, "input", ""},
		{"chat", `{"input":{"prompt":"x"},"approval":{"decision":"approve","input_sha256":"` + sha + `","decided_at":"yesterday"}}`, "approval.decided_at", "date-time"},
		{"chat", `{"input":{"prompt":"x"},"approval":{"decision":"approve","decided_at":"2030-01-01T00:00:00Z"}}`, "approval.input_sha256", "is required"},
		{"chat", `{"input":{"prompt":"a","messages":[{"role":"user","content":"b"}]}}`, "input", "exactly one of prompt, query, messages is required"},
		{"chat", `{"input":{"prompt":"x","session_id":"` + strings.Repeat("s", 257) + `"}}`, "input.session_id", "at most 256"},
		{"chat", `{"input":{"prompt":"x","max_tokens":-1}}`, "input.max_tokens", "at least 0"},
		{"chat", `{"input":{"prompt":"x","metadata":[]}}`, "input.metadata", "must be an object"},
		{"chat_stream", `{"input":{"prompt":"x","max_events":100001}}`, "input.max_events", "at most 100000"},
		{"health", `{"input":{"verbose":true}}`, "input.verbose", "is not allowed"},
		{"responses", `{"input":{"body":{"input":5}}}`, "input.body.input", ""},
		{"response_get", `{"input":{}}`, "input.response_id", "is required"},
		{"response_delete", `{"input":{"response_id":""}}`, "input.response_id", ""},
		{"sessions_list", `{"input":{"limit":-1}}`, "input.limit", "at least 0"},
		{"sessions_list", `{"input":{"offset":1.5}}`, "input.offset", "integer"},
		{"sessions_list", `{"input":{"query":{"a":[1]}}}`, "input.query.a", ""},
		{"sessions_list", `{"input":{"include_children":"yes"}}`, "input.include_children", "must be a boolean"},
		{"session_create", `{"input":{"body":[]}}`, "input.body", "must be an object"},
		{"session_get", `{"input":{}}`, "input.session_id", "is required"},
		{"session_get", `{"input":{"session_id":"a\nb"}}`, "input.session_id", "CR, LF or NUL"},
		{"session_patch", `{"input":{"session_id":"s","body":{"model":"x"}}}`, "input.body.model", "is not allowed"},
		{"session_patch", `{"input":{"session_id":"s","body":{"title":1}}}`, "input.body.title", "null or a string"},
		{"session_fork", `{"input":{"session_id":"s","body":{"system_prompt":"x"}}}`, "input.body.system_prompt", "is not allowed"},
		{"session_chat_stream", `{"input":{"session_id":"s","prompt":"x","max_events":0}}`, "input.max_events", "at least 1"},
		{"run_start", `{"input":{"instructions":"x"}}`, "input", "input is required"},
		{"run_start", `{"input":{"input":""}}`, "input.input", ""},
		{"run_start", `{"input":{"input":[]}}`, "input.input", ""},
		{"run_start", `{"input":{"input":"x","body":{"input":"y"}}}`, "input", "input is required"},
		{"run", `{"input":{"body":{"input":"y"},"model":"m"}}`, "input", "input is required"},
		{"run", `{"input":{"input":"x","conversation_history":[{"role":"user"}]}}`, "input.conversation_history.0.content", ""},
		{"run_status", `{"input":{}}`, "input.run_id", "is required"},
		{"run_approval", `{"input":{"run_id":"r","choice":"maybe"}}`, "input.choice", "must be one of"},
		{"run_stop", `{"input":{"run_id":"a\u0001"}}`, "input.run_id", ""},
	}
	for _, tt := range tests {
		err := schemas.ValidateAction(tt.op, json.RawMessage(tt.action))
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, schemas.ErrInvalid) {
			t.Errorf("%s %s: err = %v, want *ValidationError", tt.op, tt.action, err)
			continue
		}
		if ve.Field != tt.field || !strings.Contains(ve.Reason, tt.reason) {
			t.Errorf("%s %s: got field %q reason %q; want field %q reason containing %q", tt.op, tt.action, ve.Field, ve.Reason, tt.field, tt.reason)
		}
	}
	if err := schemas.ValidateAction("jobs_list", json.RawMessage(`{}`)); !errors.Is(err, schemas.ErrUnknownOperation) {
		t.Errorf("unknown op: %v", err)
	}
	if err := schemas.ValidateAction("chat", json.RawMessage(`{`)); !errors.Is(err, schemas.ErrInvalid) {
		t.Errorf("invalid JSON: %v", err)
	}
}

func TestErrorsDoNotEchoValues(t *testing.T) {
	const secret = "sk-live-SECRET"
	for _, c := range []struct{ op, a string }{
		{"chat", `{"input":{"prompt":"x","session_id":"` + secret + strings.Repeat("x", 300) + `"}}`},
		{"chat", `{"input":{"prompt":"x"},"idempotency_key":"` + secret + `\n"}`},
		{"chat", `{"input":{"prompt":"x"},"capability_id":"` + secret + `"}`},
		{"chat", `{"input":{"prompt":"x"},"approval":{"decision":"` + secret + `"}}`},
		{"session_get", `{"input":{"session_id":"` + secret + `\n"}}`},
		{"sessions_list", `{"input":{"limit":123456789}}`},
	} {
		err := schemas.ValidateAction(c.op, json.RawMessage(c.a))
		if err == nil {
			t.Fatalf("%s accepted", c.a)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "123456789") {
			t.Errorf("error echoes the value: %v", err)
		}
	}
}

func TestContractExamples(t *testing.T) {
	event := `{"action_id":"a-123","sequence":0,"kind":"data","event":{"event":"response.output_text.delta","id":null,"data":{"delta":"Three"}},"text":"Three"}`
	if err := schemas.ValidateEvent([]byte(event)); err != nil {
		t.Errorf("event: %v", err)
	}
	result := `{"action_id":"a-123","capability_id":"cap:hermes_agent:primary:chat_stream","status":"completed",
	  "output":{"endpoint_id":"primary","operation":"chat_stream","http_status":200,"event_count":7,"text":"Three findings are ready.","terminal":true,"truncated":false},
	  "error":null,"replay_of":null}`
	if err := schemas.ValidateResult([]byte(result)); err != nil {
		t.Errorf("result: %v", err)
	}
	action := `{"capability_id":"cap:hermes_agent:primary:chat_stream","input":{"prompt":"Summarize the incident notes."},
	  "idempotency_key":"incident-42-summary","timeout_ms":120000,"tenant_id":"acme","approval":null}`
	if err := schemas.ValidateAction("chat_stream", json.RawMessage(action)); err != nil {
		t.Errorf("action: %v", err)
	}
	if err := schemas.ValidateApproval([]byte(`{"decision":"approve","approver":"ops","reason":"ok","input_sha256":"` + strings.Repeat("0", 64) + `"}`)); err != nil {
		t.Errorf("approval: %v", err)
	}
	if err := schemas.ValidateApproval([]byte(`{"decision":"maybe"}`)); err == nil {
		t.Error("bad approval accepted")
	}
	for _, state := range []string{"cancelled", "already_settled", "unknown"} {
		if err := schemas.ValidateCancelReply([]byte(`{"action_id":"a-1","state":"` + state + `"}`)); err != nil {
			t.Errorf("cancel reply %s: %v", state, err)
		}
	}
	if err := schemas.ValidateCancelReply([]byte(`{"action_id":"a-1","state":"gone"}`)); err == nil {
		t.Error("bad cancel state accepted")
	}
	bad := []struct{ doc, field string }{
		{`{"action_id":"a","sequence":-1,"kind":"data","event":{"event":null,"id":null,"data":null}}`, "sequence"},
		{`{"action_id":"a","sequence":0,"kind":"chunk","event":{"event":null,"id":null,"data":null}}`, "kind"},
		{`{"action_id":"a","sequence":0,"kind":"data","event":{"event":null,"data":null}}`, "event.id"},
	}
	for _, b := range bad {
		var ve *schemas.ValidationError
		if err := schemas.ValidateEvent([]byte(b.doc)); !errors.As(err, &ve) || ve.Field != b.field {
			t.Errorf("event %s: err = %v, want field %q", b.doc, err, b.field)
		}
	}
}

func TestEncodedOutputConforms(t *testing.T) {
	results := []*events.Result{
		{ActionID: "a-1", CapabilityID: "cap:hermes_agent:p:chat", Status: events.StatusCompleted, Output: json.RawMessage(`{"id":"chatcmpl-1"}`)},
		{ActionID: "a-2", CapabilityID: "cap:hermes_agent:p:chat", Status: events.StatusFailed,
			Error: &events.ErrorInfo{Code: "remote_unavailable", Message: "busy", Category: "temporary", Retryable: true, HTTPStatus: 429, RetryAfterMS: 1000,
				Details: map[string]any{"remote_code": "rate_limit_exceeded"}}},
		{ActionID: "a-3", CapabilityID: "cap:hermes_agent:p:session_delete", Status: events.StatusPendingApproval,
			Output: json.RawMessage(`{"capability_id":"cap:hermes_agent:p:session_delete","input":{"session_id":"s"},"input_sha256":"` + strings.Repeat("a", 64) + `","expires_at":"2030-01-01T00:15:00Z"}`)},
		{ActionID: "a-4", CapabilityID: "cap:hermes_agent:p:chat", Status: events.StatusCancelled,
			Error: &events.ErrorInfo{Code: "cancelled", Message: "cancelled", Category: "permanent", UncertainOutcome: true}, ReplayOf: func() *string { s := "a-0"; return &s }()},
		{ActionID: "a-5", CapabilityID: "cap:hermes_agent:p:run", Status: events.StatusCompleted, Output: json.RawMessage(`{}`),
			Usage: &events.Usage{InputTokens: 812, OutputTokens: 40, TotalTokens: 852, CostUSD: func() *float64 { c := 0.75; return &c }()}},
		{ActionID: "a-6", CapabilityID: "cap:hermes_agent:p:chat", Status: events.StatusCompleted, Output: json.RawMessage(`{}`),
			Usage: &events.Usage{}},
	}
	for _, r := range results {
		_, body, err := events.EncodeResult("hermes-bridge", r, events.TraceContext{})
		noErr(t, err)
		if err := schemas.ValidateResult(body); err != nil {
			t.Errorf("%s: %v\n%s", r.ActionID, err, body)
		}
	}
	_, body, _ := events.EncodeResult("s", &events.Result{ActionID: "a", Status: events.StatusFailed,
		Error: &events.ErrorInfo{Code: "made_up", Message: "m", Category: "c"}}, events.TraceContext{})
	var ve *schemas.ValidationError
	if err := schemas.ValidateResult(body); !errors.As(err, &ve) || ve.Field != "error.code" {
		t.Errorf("undocumented code: %v", err)
	}
	_, body, _ = events.EncodeResult("s", &events.Result{ActionID: "a", Status: events.StatusFailed}, events.TraceContext{})
	if err := schemas.ValidateResult(body); err == nil {
		t.Error("failed result without error accepted")
	}
	for _, u := range []string{`{"input_tokens":1,"output_tokens":2}`, `{"input_tokens":-1,"output_tokens":2,"total_tokens":1}`,
		`{"input_tokens":1,"output_tokens":2,"total_tokens":3,"cost_usd":-1}`, `{"input_tokens":1,"output_tokens":2,"total_tokens":3,"tokens":3}`, `null`} {
		doc := `{"action_id":"a","capability_id":"c","status":"completed","output":null,"error":null,"replay_of":null,"usage":` + u + `}`
		if err := schemas.ValidateResult([]byte(doc)); err == nil {
			t.Errorf("usage %s accepted", u)
		}
	}
	id := "1"
	_, body, err := events.EncodeEvent("s", "", &events.EventData{ActionID: "a", Sequence: 3, Kind: events.KindDone, Event: events.SSE{ID: &id, Data: json.RawMessage(`"[DONE]"`)}}, events.TraceContext{})
	noErr(t, err)
	if err := schemas.ValidateEvent(body); err != nil {
		t.Errorf("event: %v", err)
	}
}

func TestFSAndConcurrency(t *testing.T) {
	names, err := fs.Glob(schemas.FS(), "*.schema.json")
	if err != nil || len(names) != 9 {
		t.Fatalf("FS: %v, %v", names, err)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := schemas.Operations()[i%numOperations]
			if err := schemas.ValidateAction(op, json.RawMessage(`{"input":`+seedInputs[op]+`}`)); err != nil {
				t.Errorf("%s: %v", op, err)
			}
		}()
	}
	wg.Wait()
}
