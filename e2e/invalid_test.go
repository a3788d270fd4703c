package e2e_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
)

const chatSubject = "hermes.actions.primary.chat"

// TestUnreadableMessagesGoToDLQ: messages that are not a readable CloudEvent or have no
// usable id are copied to hermes.dlq with the reason, never reach Hermes, are not
// redelivered, and the bridge keeps serving.
func TestUnreadableMessagesGoToDLQ(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	structured := nats.Header{"content-type": []string{"application/cloudevents+json"}}
	cases := []struct {
		name string
		hdr  nats.Header
		data string
	}{
		{"not_json", nil, "this is not JSON at all"},
		{"empty", nil, ""},
		{"json_not_cloudevent", nil, `{"hello":"world","input":{"prompt":"x"}}`},
		{"json_array", nil, `[1,2,3]`},
		{"structured_garbage", structured, `{"specversion":`},
		{"structured_missing_id", structured, `{"specversion":"1.0","source":"e2e","type":"hermes.bridge.action.v1","data":{"input":{"prompt":"x"}}}`},
		{"structured_id_space", structured, `{"specversion":"1.0","id":"bad id","source":"e2e","type":"hermes.bridge.action.v1","data":{}}`},
		{"binary_missing_id", binaryHeader("", events.TypeAction, ""), `{"input":{"prompt":"x"}}`},
		{"binary_id_dot", binaryHeader("bad.id", events.TypeAction, ""), `{"input":{"prompt":"x"}}`},
		{"binary_id_encoded_space", binaryHeader("bad%20id", events.TypeAction, ""), `{"input":{"prompt":"x"}}`},
		{"binary_id_too_long", binaryHeader(strings.Repeat("a", 129), events.TypeAction, ""), `{"input":{"prompt":"x"}}`},
	}
	published := time.Now()
	for _, c := range cases {
		h.publishRaw(chatSubject, c.hdr, []byte(c.data))
	}
	msgs := h.dlq(len(cases), 20*time.Second)
	received := time.Now()
	if len(msgs) != len(cases) {
		t.Fatalf("dlq holds %d messages, want %d", len(msgs), len(cases))
	}
	for i, m := range msgs { // the consumer delivers in stream order, one at a time per message
		reason := m.Header.Get("Hermes-Dlq-Reason")
		if reason == "" {
			t.Errorf("dlq message %d has no Hermes-Dlq-Reason header: %v", i, m.Header)
		}
		if s := m.Header.Get("Hermes-Dlq-Subject"); s != chatSubject {
			t.Errorf("dlq message %d: Hermes-Dlq-Subject %q", i, s)
		}
		// When the bridge dead-lettered it: RFC 3339 in UTC (schemas/dlq.schema.json).
		if v := m.Header.Get(events.HeaderDLQTime); !strings.HasSuffix(v, "Z") {
			t.Errorf("dlq message %d: %s %q is not an RFC 3339 time in UTC", i, events.HeaderDLQTime, v)
		} else if at, err := time.Parse(time.RFC3339Nano, v); err != nil || at.Before(published) || at.After(received) {
			t.Errorf("dlq message %d: %s %q is not between publication (%s) and receipt (%s): %v", i, events.HeaderDLQTime, v,
				published.UTC().Format(time.RFC3339Nano), received.UTC().Format(time.RFC3339Nano), err)
		}
		if m.Subject != "hermes.dlq" {
			t.Errorf("dlq message %d on subject %q", i, m.Subject)
		}
		found := false
		for _, c := range cases {
			found = found || bytes.Equal(m.Data, []byte(c.data))
		}
		if !found {
			t.Errorf("dlq message %d does not carry an original payload: %q", i, truncate(string(m.Data), 80))
		}
		if strings.Contains(reason, "world") || strings.Contains(reason, "bad id") {
			t.Errorf("dlq reason quotes message content: %q", reason)
		}
	}
	h.waitIdle(10 * time.Second)
	if rs := h.fake.Requests(); len(rs) != 0 {
		t.Errorf("%d requests reached Hermes", len(rs))
	}
	// Nothing was answered on a results subject for the ids that were unusable, and the
	// bridge keeps serving.
	h.callOK("chat", `{"prompt":"still serving"}`)
	if len(h.dlq(len(cases), time.Second)) != len(cases) {
		t.Errorf("a valid action was dead-lettered")
	}
}

// invalidCase is an identifiable action that must fail with invalid_action.
type invalidCase struct {
	name string
	// publish sends the action and returns its id.
	publish func(h *harness) string
	// want must appear in details.field or details.reason.
	want string
}

func clientCase(name, ep, op, input, want string, mod ...func(*events.Action)) invalidCase {
	return invalidCase{name: name, want: want, publish: func(h *harness) string {
		a := events.Action{Input: mustJSON(h.t, input)}
		for _, f := range mod {
			f(&a)
		}
		return h.publishTo(ep, op, a)
	}}
}

func rawCase(name, subject string, hdr nats.Header, data, want string) invalidCase {
	return invalidCase{name: name, want: want, publish: func(h *harness) string {
		h.publishRaw(subject, hdr, []byte(data))
		return hdr.Get("ce-id")
	}}
}

// TestInvalidActions: identifiable actions with bad attributes or input fail with
// invalid_action naming the field, none reaches Hermes, none is lost.
func TestInvalidActions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	k := withKey("invalid-key")
	long := strings.Repeat("x", 257)
	cases := []invalidCase{
		// Subject, capability and CloudEvent attributes.
		clientCase("unknown_endpoint", "nope", "chat", `{"prompt":"x"}`, "endpoint"),
		clientCase("unknown_operation", "primary", "frobnicate", `{}`, "operation"),
		clientCase("capability_mismatch", "primary", "chat", `{"prompt":"x"}`, "capability_id",
			withCapability("cap:hermes_agent:primary:models")),
		clientCase("capability_other_endpoint", "primary", "chat", `{"prompt":"x"}`, "capability_id",
			withCapability("cap:hermes_agent:secondary:chat")),
		rawCase("ce_subject_mismatch", chatSubject, binaryHeader("bad-ce-subject", events.TypeAction, "cap:hermes_agent:primary:models"),
			`{"input":{"prompt":"x"}}`, "subject"),
		rawCase("wrong_type", chatSubject, binaryHeader("bad-type", "hermes.bridge.result.v1", ""), `{"input":{"prompt":"x"}}`, "type"),
		rawCase("wrong_specversion", chatSubject, func() nats.Header {
			h := binaryHeader("bad-specversion", events.TypeAction, "")
			h.Set("ce-specversion", "0.3")
			return h
		}(), `{"input":{"prompt":"x"}}`, "specversion"),
		// The action object.
		rawCase("data_not_object", chatSubject, binaryHeader("bad-data-array", events.TypeAction, ""), `["x"]`, "object"),
		rawCase("data_not_json", chatSubject, binaryHeader("bad-data-json", events.TypeAction, ""), `{"input":`, "JSON"),
		rawCase("unknown_member", chatSubject, binaryHeader("bad-member", events.TypeAction, ""), `{"input":{"prompt":"x"},"frobnicate":1}`, "frobnicate"),
		rawCase("timeout_negative", chatSubject, binaryHeader("bad-timeout", events.TypeAction, ""), `{"input":{"prompt":"x"},"timeout_ms":-5}`, "timeout_ms"),
		rawCase("input_not_object", chatSubject, binaryHeader("bad-input", events.TypeAction, ""), `{"input":"hello"}`, "input"),
		rawCase("key_control_char", chatSubject, binaryHeader("bad-key", events.TypeAction, ""), `{"input":{"prompt":"x"},"idempotency_key":"a\nb"}`, "idempotency_key"),
		// Operation inputs (seeds).
		clientCase("chat_prompt_and_messages", "primary", "chat", `{"prompt":"x","messages":[{"role":"user","content":"y"}]}`, "prompt"),
		clientCase("chat_no_branch", "primary", "chat", `{"temperature":0.1}`, "prompt"),
		clientCase("chat_empty_messages", "primary", "chat", `{"messages":[]}`, "messages"),
		clientCase("chat_blank_prompt", "primary", "chat", `{"prompt":"   "}`, "prompt"),
		clientCase("chat_session_id_too_long", "primary", "chat", `{"prompt":"x","session_id":"`+long+`"}`, "session_id"),
		clientCase("responses_no_input", "primary", "responses", `{"body":{"instructions":"x"}}`, "input"),
		clientCase("responses_conversation_and_previous", "primary", "responses",
			`{"body":{"input":"x","conversation":"c","previous_response_id":"resp_1"}}`, "conversation"),
		clientCase("responses_stream_no_input", "primary", "responses_stream", `{}`, "input"),
		clientCase("sessions_list_unknown_query_key", "primary", "sessions_list", `{"query":{"sort":"asc"}}`, "sort"),
		clientCase("sessions_list_unknown_property", "primary", "sessions_list", `{"bogus":1}`, "bogus"),
		clientCase("sessions_list_negative_limit", "primary", "sessions_list", `{"limit":-1}`, "limit"),
		clientCase("session_patch_other_field", "primary", "session_patch", `{"session_id":"s","body":{"model":"m"}}`, "model", k),
		clientCase("session_create_dotdot", "primary", "session_create", `{"body":{"id":"a..b"}}`, "id", k),
		clientCase("session_create_slash", "primary", "session_create", `{"body":{"id":"a/b"}}`, "id", k),
		clientCase("session_create_too_long", "primary", "session_create", `{"body":{"id":"`+long+`"}}`, "id", k),
		clientCase("session_fork_slash", "primary", "session_fork", `{"session_id":"s","body":{"id":"a\\b"}}`, "id", k),
		clientCase("health_extra_property", "primary", "health", `{"verbose":true}`, "verbose"),
		clientCase("models_extra_property", "primary", "models", `{"x":1}`, "x"),
		clientCase("max_events_zero", "primary", "chat_stream", `{"prompt":"x","max_events":0}`, "max_events"),
		clientCase("max_events_too_big", "primary", "chat_stream", `{"prompt":"x","max_events":100001}`, "max_events"),
		clientCase("max_events_not_integer", "primary", "responses_stream", `{"input":"x","max_events":"ten"}`, "max_events"),
		// Path ids with CR, LF, NUL.
		clientCase("session_get_lf", "primary", "session_get", `{"session_id":"a\nb"}`, "session_id"),
		clientCase("session_messages_cr", "primary", "session_messages", `{"session_id":"a\rb"}`, "session_id"),
		clientCase("session_chat_nul", "primary", "session_chat", `{"session_id":"a\u0000b","message":"hi"}`, "session_id"),
		clientCase("session_chat_stream_crlf", "primary", "session_chat_stream", `{"session_id":"a\r\nb","message":"hi"}`, "session_id"),
		clientCase("session_delete_lf", "primary", "session_delete", `{"session_id":"a\nb"}`, "session_id", k),
		clientCase("response_get_lf", "primary", "response_get", `{"response_id":"resp\n1"}`, "response_id"),
		clientCase("response_delete_nul", "primary", "response_delete", `{"response_id":"resp\u00001"}`, "response_id", k),
		clientCase("response_get_blank", "primary", "response_get", `{"response_id":" "}`, "response_id"),
		clientCase("session_get_dotdot", "primary", "session_get", `{"session_id":".."}`, "session_id"),
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		ids[i] = c.publish(h)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := h.at(t)
			res, evs := h.follow(ids[i])
			e := requireFailed(t, res, "invalid_action")
			if e.Retryable || e.UncertainOutcome {
				t.Errorf("retryable=%v uncertain=%v, want false/false", e.Retryable, e.UncertainOutcome)
			}
			field, reason := detail(e, "field"), detail(e, "reason")
			t.Logf("details.field %q details.reason %q", field, reason)
			if reason == "" {
				t.Errorf("details.reason is empty: %s", errString(e))
			}
			if !strings.Contains(strings.ToLower(field+" "+reason), strings.ToLower(c.want)) {
				t.Errorf("details field %q reason %q do not name %q", field, reason, c.want)
			}
			// The message names the field once (issue 13: "capability_id: capability_id does
			// not match ...").
			if field != "" && strings.Contains(e.Message, field+": "+field+" ") {
				t.Errorf("message repeats the field: %q", e.Message)
			}
			if res.ActionID != ids[i] {
				t.Errorf("result for %q carries action id %q", ids[i], res.ActionID)
			}
			wantEq(t, len(evs), 0, "%d events for an invalid action")
		})
	}
	h.requireResults(1, 10*time.Second, ids...)
	if rs := h.fake.Requests(); len(rs) != 0 {
		t.Errorf("%d invalid actions reached Hermes, first %s %s", len(rs), rs[0].Method, rs[0].Path)
	}
	if msgs := h.dlq(0, time.Second); len(msgs) != 0 {
		t.Errorf("%d identifiable actions were dead-lettered (reason %q)", len(msgs), msgs[0].Header.Get("Hermes-Dlq-Reason"))
	}
	res, evs := h.call("chat_stream", `{"prompt":"valid after invalid"}`)
	checkStream(t, res, evs, "chat_stream", "stub reply: valid after invalid")
}

// TestPayloadTooLarge: a request body over Hermes's 10,000,000-byte limit is refused
// before any call. The embedded server's max_payload is raised to 16 MiB so that the
// action itself can be published.
func TestPayloadTooLarge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withNATS(func(o *natsembed.Options) { o.MaxPayload = 16 << 20 }))
	big := strings.Repeat("a", 10_000_000)
	res, _ := h.call("chat", map[string]any{"prompt": big}, withKey("big-key"))
	e := requireFailed(t, res, "payload_too_large")
	if e.Retryable || e.UncertainOutcome {
		t.Errorf("retryable=%v uncertain=%v, want false/false", e.Retryable, e.UncertainOutcome)
	}
	if rs := h.fake.Requests(); len(rs) != 0 {
		t.Errorf("%d requests reached Hermes", len(rs))
	}
	h.requireResults(1, 10*time.Second, res.ActionID)
}
