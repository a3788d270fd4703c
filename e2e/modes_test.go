package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestContentModes publishes the same kind of action in structured and binary mode, and
// a binary-mode message made by hand with mixed-case ce- headers and percent-encoded values.
func TestContentModes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	for i, mode := range []struct {
		name string
		opt  client.PublishOption
	}{{"structured", client.WithStructuredMode()}, {"binary", client.WithBinaryMode()}} {
		t.Run(mode.name, func(t *testing.T) {
			h := h.at(t)
			prompt := "mode " + mode.name
			id := h.publish("chat_stream", events.Action{Input: mustJSON(t, map[string]any{"prompt": prompt})}, mode.opt,
				client.WithTrace(events.TraceContext{Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}))
			res, evs := h.follow(id)
			checkStream(t, res, evs, "chat_stream", "stub reply: "+prompt)
			r := h.lastRequest("chat_stream", i+1)
			if jstr(body(t, r), "messages", 0, "content") != prompt {
				t.Errorf("body %s", r.Body)
			}
			const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			wantEq(t, r.Header.Get("Traceparent"), tp, "traceparent reaching Hermes %q")
			// The trace context is on every output too.
			for _, subj := range []string{"hermes.results." + id, "hermes.events." + id} {
				m := h.lastOutput(subj)
				if m.Header.Get("ce-traceparent") != tp && m.Header.Get("traceparent") != tp {
					t.Errorf("%s: headers %v carry no traceparent %s", subj, m.Header, tp)
				}
				if m.Header.Get("Nats-Msg-Id") != m.Header.Get("ce-id") || m.Header.Get("ce-id") == "" {
					t.Errorf("%s: Nats-Msg-Id %q, ce-id %q", subj, m.Header.Get("Nats-Msg-Id"), m.Header.Get("ce-id"))
				}
			}
			if got := h.lastOutput("hermes.results." + id).Header.Get("ce-id"); got != id+":result" {
				t.Errorf("result ce-id %q, want %s:result", got, id)
			}
			if got := h.lastOutput("hermes.events." + id).Header.Get("ce-id"); got != fmt.Sprintf("%s:%d", id, len(evs)-1) {
				t.Errorf("last event ce-id %q, want %s:%d", got, id, len(evs)-1)
			}
		})
	}

	t.Run("raw_binary", func(t *testing.T) {
		h := h.at(t)
		hdr := nats.Header{}
		hdr["CE-SpecVersion"] = []string{"1.0"}
		hdr["Ce-Id"] = []string{"raw%2Dbinary%5F1"} // percent-encoded "raw-binary_1"
		hdr["ce-SOURCE"] = []string{"urn:e2e%20raw%20publisher"}
		hdr["cE-type"] = []string{"hermes.bridge.action.v1"}
		hdr["ce-subject"] = []string{"cap%3Ahermes_agent%3Aprimary%3Achat"}
		hdr["ce-traceparent"] = []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		hdr["Content-Type"] = []string{"application/json"}
		h.publishRaw("hermes.actions.primary.chat", hdr, []byte(`{"input":{"prompt":"raw hello"},"idempotency_key":"raw%20key"}`))
		res := h.followOK("raw-binary_1")
		if res.ActionID != "raw-binary_1" || res.CapabilityID != "cap:hermes_agent:primary:chat" {
			t.Errorf("result action %q capability %q", res.ActionID, res.CapabilityID)
		}
		r := h.lastRequest("chat", 1)
		if jstr(body(t, r), "messages", 0, "content") != "raw hello" {
			t.Errorf("body %s", r.Body)
		}
		// Only ce- header values are percent-decoded; data is taken verbatim.
		wantEq(t, r.IdempotencyKey, "raw%20key", "Idempotency-Key %q, want the data's value verbatim")
		wantEq(t, r.Header.Get("Traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "traceparent reaching Hermes %q")
	})

	t.Run("raw_structured", func(t *testing.T) {
		h := h.at(t)
		hdr := nats.Header{"Content-Type": []string{"application/cloudevents+json; charset=utf-8"}}
		h.publishRaw("hermes.actions.primary.models", hdr, []byte(`{"specversion":"1.0","id":"raw-structured-1",
			"source":"e2e","type":"hermes.bridge.action.v1","subject":"cap:hermes_agent:primary:models",
			"datacontenttype":"application/json","data":{"input":{}}}`))
		res := h.followOK("raw-structured-1")
		if jstr(output(t, res), "data", 0, "id") != "hermes-agent" {
			t.Errorf("output %s", res.Output)
		}
		h.lastRequest("models", 1)
	})
}

// TestLateSubscriberReplaysStream follows a stream only after its result exists and gets
// every event from the first one.
func TestLateSubscriberReplaysStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.publish("session_chat_stream", events.Action{Input: mustJSON(t, `{"session_id":"late","message":"late subscriber"}`)})
	// The session does not exist: fail fast, and exercise a finished failed JSON-ish
	// stream too. Then run a real stream.
	res, _ := h.follow(id)
	requireFailed(t, res, "remote_rejected")

	id = h.publish("chat_stream", events.Action{Input: mustJSON(t, `{"prompt":"one two three four five six"}`)})
	h.until(20*time.Second, "a stored result", func() bool { return h.results(id) > 0 })
	for i := 0; i < 2; i++ { // two independent late subscribers see the same replay
		res, evs := h.follow(id)
		checkStream(t, res, evs, "chat_stream", "stub reply: one two three four five six")
	}

	// A subscriber that joins mid-stream still starts at event 0.
	slow := newHarness(t, withFake(hermestest.WithAgent(func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		return hermestest.Reply{Text: "stub reply: " + turn.UserText, DeltaDelay: 40 * time.Millisecond}
	})))
	id = slow.publish("chat_stream", events.Action{Input: mustJSON(t, `{"prompt":"mid stream join"}`)})
	slow.waitCalls("chat_stream", 1)
	slow.until(10*time.Second, "some events stored", func() bool {
		return storedOn(t, slow.js, "HERMES_OUTPUT", "hermes.events."+id) >= 2
	})
	res, evs := slow.follow(id)
	checkStream(t, res, evs, "chat_stream", "stub reply: mid stream join")
}
