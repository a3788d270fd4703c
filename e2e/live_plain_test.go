package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// liveOutputs subscribes with core NATS, as `nats sub` does, to an action's public event
// and result subjects and returns what arrived once its terminal result did.
func (h *harness) liveOutputs(id string, start func()) []*nats.Msg {
	h.t.Helper()
	ch := make(chan *nats.Msg, 256)
	for _, subj := range []string{"hermes.events." + id, "hermes.results." + id} {
		sub, err := h.nc.ChanSubscribe(subj, ch)
		requireOK(h.t, err, "subscribe: %v")
		defer func() { _ = sub.Unsubscribe() }()
	}
	requireOK(h.t, h.nc.Flush(), "flush: %v")
	start()
	var got []*nats.Msg
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-ch:
			got = append(got, m)
			if m.Subject == "hermes.results."+id {
				return got
			}
		case <-deadline:
			h.t.Fatalf("no result on hermes.results.%s within 30s (%d messages)", id, len(got))
		}
	}
}

// requirePlain fails unless msgs hold events and a result, none with a reply subject: a
// live subscriber must see plain outputs, not the bridge's JetStream acks or its fast
// batches' flow subjects.
func requirePlain(t *testing.T, msgs []*nats.Msg) {
	t.Helper()
	if len(msgs) < 2 {
		t.Fatalf("%d live messages, want events and a result", len(msgs))
	}
	for _, m := range msgs {
		if m.Reply != "" {
			t.Errorf("%s arrived with reply %q, want none", m.Subject, m.Reply)
		}
	}
}

// TestLiveOutputsHaveNoReply: core NATS subscribers of hermes.events.<id> and
// hermes.results.<id> get the stream's republished copies, which carry no reply subject,
// not the bridge's own publishes (fast batch flow subjects, ack inboxes). A bridge that
// binds an output stream in the older shape, which does not republish and would have it
// publish on the public subjects itself, refuses it.
func TestLiveOutputsHaveNoReply(t *testing.T) {
	t.Parallel()
	stream := func(h *harness) []*nats.Msg {
		id := events.NewActionID()
		return h.liveOutputs(id, func() {
			h.publish("chat_stream", events.Action{Input: mustJSON(t, map[string]string{"prompt": "one two three four five"})},
				client.WithActionID(id))
		})
	}
	t.Run("provisioned", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		msgs := stream(h)
		requirePlain(t, msgs)
		// Events name their capability as results do (ce-subject): a reader of headers
		// alone, such as the dashboard, knows what a running action is.
		for _, m := range msgs {
			if got := m.Header.Get("ce-subject"); got != "cap:hermes_agent:primary:chat_stream" {
				t.Errorf("%s: ce-subject %q, want the capability", m.Subject, got)
			}
		}
	})
	t.Run("bound to an output stream an older bridge provisioned", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.stopBridge(0)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := h.js.Stream(ctx, h.cfg.WithDefaults().OutputStream)
		requireOK(t, err)
		sc := s.CachedInfo().Config
		// The shape before the bridge published on hermes.out.>: the public subjects
		// captured directly, batches allowed.
		sc.Subjects = []string{"hermes.events.>", "hermes.results.>", "hermes.batch.>"}
		sc.SubjectTransform, sc.RePublish = nil, nil
		_, err = h.js.UpdateStream(ctx, sc)
		requireOK(t, err, "update the output stream: %v")
		// The bridge would publish on the public subjects itself, each message with its
		// reply subject: it refuses the stream, saying how to repair it.
		h.cfg.Provision = false
		err = h.runBridgeOnce()
		for _, want := range []string{"does not republish", "HERMES_BRIDGE_PROVISION=true", "hermes.out.> -> hermes.>"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("binding the older stream: %v; want an error saying %q", err, want)
			}
		}
		h.cfg.Provision = true
		requireOK(t, h.runBridgeOnce(), "provisioning did not repair the stream: %v")
		h.cfg.Provision = false
		h.startBridge()
		requirePlain(t, stream(h))
	})
}
