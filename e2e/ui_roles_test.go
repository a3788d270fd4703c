package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// TestDashboardUserOverWebSocket connects as the dashboard user of deploy/nats-server.conf
// over the WebSocket listener the /ui page uses (issue 16), with the page's inbox prefix,
// and shows it can read what the page reads, the way the page reads it (ordered consumers
// on the output stream: results with their bodies, events headers only), and cannot
// publish an action or an approval decision.
func TestDashboardUserOverWebSocket(t *testing.T) {
	h, _ := deployHarness(t, false, nil,
		withNATS(func(o *natsembed.Options) { o.WebSocketPort = -1 }),
		withConfig(func(c *bridge.Config) { c.AckWait = 2 * time.Second }),
	)
	ws := h.ns.WebSocketURL()
	if !strings.HasPrefix(ws, "ws://") {
		t.Fatalf("no WebSocket listener: %q", ws)
	}
	dash, opts := newRole(t, "dashboard", "DASHBOARD_PASSWORD", "_INBOX_dashboard")
	var err error
	if dash.nc, err = nats.Connect(ws, append(opts, nats.Name("hermes-bridge-ui"))...); err != nil {
		t.Fatalf("connect as dashboard over %s: %v", ws, err)
	}
	defer dash.nc.Close()
	if dash.js, err = jetstream.New(dash.nc); err != nil {
		t.Fatal(err)
	}
	dash.client = client.New(dash.js, client.WithSource("urn:test:dashboard"))

	// The page's live feed, opened before the action: events headers only, from now on.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	evc, err := dash.js.OrderedConsumer(ctx, "HERMES_OUTPUT", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"hermes.events.>"}, DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true})
	requireOK(t, err, "dashboard: events consumer: %v")
	evIt, err := evc.Messages() // creates the consumer now (an ordered consumer is lazy)
	requireOK(t, err, "dashboard: events consumer: %v")
	defer evIt.Stop()
	res, evs := h.call("chat_stream", map[string]any{"prompt": "watch me"})
	requireCompleted(t, res)
	for i := range evs {
		m, err := evIt.Next(jetstream.NextMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("dashboard: event header %d: %v", i, err)
		}
		if m.Subject() != "hermes.events."+res.ActionID || len(m.Data()) != 0 {
			t.Fatalf("dashboard: event %d on %s with %d bytes, want headers only", i, m.Subject(), len(m.Data()))
		}
	}
	// The recent-actions feed: results from a start time, with their bodies.
	rc, err := dash.js.OrderedConsumer(ctx, "HERMES_OUTPUT", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"hermes.results.>"}, DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime: ptr(time.Now().Add(-time.Hour))})
	requireOK(t, err, "dashboard: results consumer: %v")
	m, err := rc.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || m.Subject() != "hermes.results."+res.ActionID || !strings.Contains(string(m.Data()), `"completed"`) {
		t.Fatalf("dashboard: result %v %v", m, err)
	}
	// One action replayed from its first event (the detail view).
	got, replayed := followAs(t, dash, res.ActionID)
	if got.Status != events.StatusCompleted || len(replayed) != len(evs) {
		t.Fatalf("dashboard replay: %s, %d events, want %d", got.Status, len(replayed), len(evs))
	}
	dash.noViolation(t)

	// It cannot write: no action, no decision (and nothing is stored).
	refusedPublish(t, dash, "hermes.actions.primary.chat", func(ctx context.Context) error {
		_, err := dash.client.Publish(ctx, "primary", "chat", events.Action{Input: mustJSON(t, `{"prompt":"x"}`)})
		return err
	})
	refusedPublish(t, dash, "hermes.approvals."+res.ActionID, func(ctx context.Context) error {
		return dash.client.Decide(ctx, res.ActionID, events.Approval{Decision: "approve"})
	})
	for _, subj := range []string{"hermes.actions.primary.session_delete", "hermes.approvals.x"} {
		requireOK(t, dash.nc.Publish(subj, []byte(`{}`)))
		dash.violation(t, subj)
	}
	wantEq(t, storedOn(t, h.js, "HERMES_ACTIONS", "hermes.approvals."+res.ActionID), 0, "%d approvals stored")
	wantEq(t, storedOn(t, h.js, "HERMES_ACTIONS", "hermes.actions.primary.session_delete"), 0, "%d deletions stored")
}
