package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
)

const actionBody = `{"capability_id":"cap:hermes_agent:primary:chat","input":{"prompt":"hi"}}`

func binaryHeaders(kv ...string) nats.Header {
	h := nats.Header{}
	for i := 0; i < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

func validBinary() nats.Header {
	return binaryHeaders(
		"ce-specversion", "1.0",
		"ce-id", "act-1",
		"ce-source", "test",
		"ce-type", events.TypeAction,
		"content-type", "application/json",
	)
}

func structured(fields string) string {
	return `{"specversion":"1.0","id":"act-1","source":"test","type":"hermes.bridge.action.v1"` + fields + `}`
}

func TestDecodeEnvelope(t *testing.T) {
	ctStructured := binaryHeaders("content-type", "application/cloudevents+json")
	type want struct {
		dlq       bool   // *DecodeError, nil envelope
		attr      string // *AttributeError with this attribute
		id        string
		mode      string
		data      string
		source    string
		subject   string
		traceprnt string
		tracest   string
		time      string
	}
	tests := []struct {
		name string
		h    nats.Header
		data string
		want want
	}{
		{name: "binary", h: validBinary(), data: actionBody, want: want{id: "act-1", mode: events.ModeBinary, data: actionBody, source: "test"}},
		{name: "binary mixed-case names", h: binaryHeaders(
			"Ce-SpecVersion", "1.0", "CE-ID", "act-2", "ce-Source", "test", "Ce-Type", events.TypeAction,
			"CE-Subject", "cap:hermes_agent:primary:chat", "Content-Type", "application/json; charset=utf-8",
			"ce-time", "2030-01-02T03:04:05.5Z"),
			data: actionBody,
			want: want{id: "act-2", mode: events.ModeBinary, data: actionBody, source: "test", subject: "cap:hermes_agent:primary:chat", time: "2030-01-02T03:04:05.5Z"}},
		{name: "binary percent-encoded", h: binaryHeaders(
			"ce-specversion", "1.0", "ce-id", "act-3", "ce-source", "my%20publisher%C3%A9", "ce-type", "hermes.bridge.action.v1"),
			data: actionBody, want: want{id: "act-3", mode: events.ModeBinary, data: actionBody, source: "my publisheré"}},
		{name: "binary quoted values", h: binaryHeaders(
			"ce-specversion", `"1.0"`, "ce-id", `"act-4"`, "ce-source", `"a \"b\""`, "ce-type", `"hermes.bridge.action.v1"`),
			data: actionBody, want: want{id: "act-4", mode: events.ModeBinary, data: actionBody, source: `a "b"`}},
		{name: "binary trace extensions", h: func() nats.Header {
			h := validBinary()
			h["ce-traceparent"] = []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
			h["ce-tracestate"] = []string{"congo=t61rcWkgMzE"}
			h["traceparent"] = []string{"00-11111111111111111111111111111111-2222222222222222-01"}
			return h
		}(), data: actionBody, want: want{id: "act-1", mode: events.ModeBinary, data: actionBody, source: "test",
			traceprnt: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracest: "congo=t61rcWkgMzE"}},
		{name: "binary plain traceparent fallback", h: func() nats.Header {
			h := validBinary()
			h["Traceparent"] = []string{"00-11111111111111111111111111111111-2222222222222222-01"}
			return h
		}(), data: actionBody, want: want{id: "act-1", mode: events.ModeBinary, data: actionBody, source: "test",
			traceprnt: "00-11111111111111111111111111111111-2222222222222222-01"}},
		{name: "binary invalid UTF-8 in id", h: binaryHeaders(
			"ce-specversion", "1.0", "ce-id", "act%FF", "ce-source", "s", "ce-type", events.TypeAction),
			data: actionBody, want: want{dlq: true}},
		{name: "binary invalid UTF-8 in source", h: binaryHeaders(
			"ce-specversion", "1.0", "ce-id", "act-5", "ce-source", "s%C3%28", "ce-type", events.TypeAction),
			data: actionBody, want: want{attr: "source", id: "act-5"}},
		{name: "binary raw invalid UTF-8 in type", h: binaryHeaders(
			"ce-specversion", "1.0", "ce-id", "act-5", "ce-source", "s", "ce-type", "hermes\xff"),
			data: actionBody, want: want{attr: "type", id: "act-5"}},
		{name: "binary bad percent escape", h: binaryHeaders(
			"ce-specversion", "1.0", "ce-id", "act-5", "ce-source", "s%2", "ce-type", events.TypeAction),
			data: actionBody, want: want{attr: "source", id: "act-5"}},
		{name: "binary missing id", h: binaryHeaders("ce-specversion", "1.0", "ce-source", "s", "ce-type", events.TypeAction),
			data: actionBody, want: want{dlq: true}},
		{name: "binary bad id", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act.1", "ce-source", "s", "ce-type", events.TypeAction),
			data: actionBody, want: want{dlq: true}},
		{name: "binary id too long", h: binaryHeaders("ce-specversion", "1.0", "ce-id", strings.Repeat("a", 129), "ce-source", "s", "ce-type", events.TypeAction),
			data: actionBody, want: want{dlq: true}},
		{name: "binary conflicting ids", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "a", "CE-ID", "b", "ce-source", "s", "ce-type", events.TypeAction),
			data: actionBody, want: want{dlq: true}},
		{name: "binary wrong type", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act-6", "ce-source", "s", "ce-type", "com.example.other"),
			data: actionBody, want: want{attr: "type", id: "act-6"}},
		{name: "binary wrong specversion", h: binaryHeaders("ce-specversion", "0.3", "ce-id", "act-7", "ce-source", "s", "ce-type", events.TypeAction),
			data: actionBody, want: want{attr: "specversion", id: "act-7"}},
		{name: "binary missing source", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act-8", "ce-type", events.TypeAction),
			data: actionBody, want: want{attr: "source", id: "act-8"}},
		{name: "binary bad time", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act-9", "ce-source", "s", "ce-type", events.TypeAction, "ce-time", "yesterday"),
			data: actionBody, want: want{attr: "time", id: "act-9"}},
		{name: "binary empty source", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act-8", "ce-source", "", "ce-type", events.TypeAction),
			data: actionBody, want: want{attr: "source", id: "act-8"}},
		{name: "binary source formats empty", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act-8", "ce-source", "#", "ce-type", events.TypeAction),
			data: actionBody, want: want{attr: "source", id: "act-8"}},
		{name: "binary blank type", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act-8", "ce-source", "s", "ce-type", " "),
			data: actionBody, want: want{attr: "type", id: "act-8"}},
		{name: "binary relative dataschema", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act-8", "ce-source", "s", "ce-type", events.TypeAction,
			"ce-dataschema", "relative/a.json"), data: actionBody, want: want{attr: "dataschema", id: "act-8"}},
		{name: "binary non-JSON content type", h: binaryHeaders("ce-specversion", "1.0", "ce-id", "act-10", "ce-source", "s", "ce-type", events.TypeAction, "content-type", "text/plain"),
			data: actionBody, want: want{attr: "datacontenttype", id: "act-10"}},
		{name: "binary data not an object is the action decoder's problem", h: validBinary(), data: `[1]`,
			want: want{id: "act-1", mode: events.ModeBinary, data: `[1]`, source: "test"}},

		{name: "structured", h: ctStructured, data: structured(`,"subject":"cap:hermes_agent:primary:chat","time":"2030-01-02T03:04:05Z","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","data":` + actionBody),
			want: want{id: "act-1", mode: events.ModeStructured, data: actionBody, source: "test", subject: "cap:hermes_agent:primary:chat",
				time: "2030-01-02T03:04:05Z", traceprnt: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		{name: "structured content type case-insensitive", h: binaryHeaders("Content-Type", "Application/CloudEvents+JSON; charset=utf-8"),
			data: structured(`,"datacontenttype":"application/json","data":` + actionBody), want: want{id: "act-1", mode: events.ModeStructured, data: actionBody, source: "test"}},
		{name: "structured without headers (sdk-go rule)", h: nil, data: structured(`,"data":` + actionBody),
			want: want{id: "act-1", mode: events.ModeStructured, data: actionBody, source: "test"}},
		{name: "structured content type wins over ce headers", h: func() nats.Header {
			h := validBinary()
			h["content-type"] = []string{"application/cloudevents+json"}
			return h
		}(), data: `{"specversion":"1.0","id":"other","source":"s2","type":"hermes.bridge.action.v1","data":{}}`,
			want: want{id: "other", mode: events.ModeStructured, data: `{}`, source: "s2"}},
		{name: "structured data_base64", h: ctStructured, data: structured(`,"datacontenttype":"application/json","data_base64":"eyJpbnB1dCI6e319"`),
			want: want{id: "act-1", mode: events.ModeStructured, data: `{"input":{}}`, source: "test"}},
		{name: "structured missing id", h: ctStructured, data: `{"specversion":"1.0","source":"s","type":"hermes.bridge.action.v1","data":{}}`, want: want{dlq: true}},
		{name: "structured numeric id", h: ctStructured, data: `{"specversion":"1.0","id":5,"source":"s","type":"hermes.bridge.action.v1","data":{}}`, want: want{dlq: true}},
		{name: "structured bad id", h: ctStructured, data: `{"specversion":"1.0","id":"a b","source":"s","type":"hermes.bridge.action.v1","data":{}}`, want: want{dlq: true}},
		{name: "structured wrong type", h: ctStructured, data: `{"specversion":"1.0","id":"act-11","source":"s","type":"x.y","data":{}}`, want: want{attr: "type", id: "act-11"}},
		{name: "structured specversion 0.3", h: ctStructured, data: `{"specversion":"0.3","id":"act-12","source":"s","type":"hermes.bridge.action.v1","data":{}}`, want: want{attr: "specversion", id: "act-12"}},
		{name: "structured unknown specversion", h: ctStructured, data: `{"specversion":"2.0","id":"act-13","source":"s","type":"hermes.bridge.action.v1","data":{}}`, want: want{attr: "specversion", id: "act-13"}},
		{name: "structured missing source", h: ctStructured, data: `{"specversion":"1.0","id":"act-14","type":"hermes.bridge.action.v1","data":{}}`, want: want{attr: "source", id: "act-14"}},
		{name: "structured non-JSON datacontenttype", h: ctStructured, data: structured(`,"datacontenttype":"text/plain","data":"x"`), want: want{attr: "datacontenttype", id: "act-1"}},
		{name: "structured not JSON", h: ctStructured, data: `{"specversion":`, want: want{dlq: true}},
		{name: "structured array", h: ctStructured, data: `[{"specversion":"1.0"}]`, want: want{dlq: true}},
		{name: "batch mode", h: binaryHeaders("content-type", "application/cloudevents-batch+json"), data: `[]`, want: want{dlq: true}},
		{name: "not JSON, no headers", h: nil, data: `hello`, want: want{dlq: true}},
		{name: "JSON but not an event", h: binaryHeaders("content-type", "application/json"), data: `{"input":{}}`, want: want{dlq: true}},
		{name: "empty", h: nil, data: ``, want: want{dlq: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := events.DecodeEnvelope(tt.h, []byte(tt.data))
			switch {
			case tt.want.dlq:
				var de *events.DecodeError
				if !errors.As(err, &de) || !errors.Is(err, events.ErrNotCloudEvent) || de.Reason == "" {
					t.Fatalf("err = %v, want *DecodeError wrapping ErrNotCloudEvent", err)
				}
				if env != nil {
					t.Fatalf("env = %+v, want nil", env)
				}
				return
			case tt.want.attr != "":
				var ae *events.AttributeError
				if !errors.As(err, &ae) || !errors.Is(err, events.ErrInvalidAttribute) {
					t.Fatalf("err = %v, want *AttributeError", err)
				}
				if errors.Is(err, events.ErrNotCloudEvent) {
					t.Fatal("AttributeError must not match ErrNotCloudEvent")
				}
				if ae.Attribute != tt.want.attr {
					t.Fatalf("attribute = %q (%v), want %q", ae.Attribute, err, tt.want.attr)
				}
				if env == nil || env.ID != tt.want.id {
					t.Fatalf("env = %+v, want ID %q", env, tt.want.id)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeEnvelope: %v", err)
			}
			if env.ID != tt.want.id || env.Mode != tt.want.mode || string(env.Data) != tt.want.data ||
				env.Source != tt.want.source || env.Subject != tt.want.subject ||
				env.Traceparent != tt.want.traceprnt || env.Tracestate != tt.want.tracest ||
				env.Type != events.TypeAction || env.SpecVersion != "1.0" {
				t.Fatalf("env = %+v\nwant %+v", env, tt.want)
			}
			if tt.want.time != "" {
				wt, _ := time.Parse(time.RFC3339Nano, tt.want.time)
				if !env.Time.Equal(wt) {
					t.Fatalf("time = %v, want %v", env.Time, wt)
				}
			}
		})
	}
}

func TestDecodeErrorsDoNotEchoValues(t *testing.T) {
	const secret = "sk-secret-value"
	cases := []struct {
		h    nats.Header
		data string
	}{
		{binaryHeaders("ce-specversion", "1.0", "ce-id", secret+".x", "ce-source", "s", "ce-type", events.TypeAction), ""},
		{binaryHeaders("ce-specversion", "1.0", "ce-id", "ok", "ce-source", "s", "ce-type", secret), ""},
		{binaryHeaders("ce-specversion", secret, "ce-id", "ok", "ce-source", "s", "ce-type", events.TypeAction), ""},
		{binaryHeaders("content-type", "application/cloudevents+json"), `{"specversion":"` + secret + `","id":"ok"}`},
		{nil, `{"specversion":"1.0","id":"ok","source":"s","type":"` + secret + `"}`},
	}
	for _, c := range cases {
		_, err := events.DecodeEnvelope(c.h, []byte(c.data))
		if err == nil {
			t.Fatal("expected an error")
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("error echoes a value: %v", err)
		}
	}
}

// TestDecodeDecisionEnvelope: an approval decision's CloudEvent id may be any printable ASCII
// string (CloudEvents allows any; the action id comes from the subject), as in
// deploy/README.md's example; its type must be the approval type; an action's id is
// still held to the action id rule.
func TestDecodeDecisionEnvelope(t *testing.T) {
	h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"del-7:approval:1"}, "ce-source": {"urn:approver:alice"},
		"ce-type": {events.TypeApproval}, "content-type": {"application/json"}}
	body := []byte(`{"decision":"approve","approver":"alice","input_sha256":"00"}`)
	env, err := events.DecodeDecisionEnvelope(h, body)
	if err != nil || env.ID != "del-7:approval:1" || env.Type != events.TypeApproval {
		t.Fatalf("decision with a colon in its id: %+v, %v", env, err)
	}
	if _, err := events.DecodeEnvelope(h, body); !errors.Is(err, events.ErrNotCloudEvent) {
		t.Errorf("the same id as an action's: %v, want a DecodeError (not a valid action id)", err)
	}
	h.Set("ce-type", events.TypeAction)
	if _, err := events.DecodeDecisionEnvelope(h, body); !errors.Is(err, events.ErrInvalidAttribute) {
		t.Errorf("a decision of the action type: %v, want an AttributeError", err)
	}
	h.Set("ce-id", "bad\x01id")
	if env, err := events.DecodeDecisionEnvelope(h, body); env != nil || !errors.Is(err, events.ErrNotCloudEvent) {
		t.Errorf("an unprintable id: %+v, %v; want a DecodeError", env, err)
	}
}
