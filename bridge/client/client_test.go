package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
)

func startJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, js := natsembed.Connect(t, natsembed.RunTest(t))
	return js
}

func createStreams(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HERMES_ACTIONS", Subjects: []string{"hermes.actions.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HERMES_OUTPUT", Subjects: []string{"hermes.events.>", "hermes.results.>"}, MaxAge: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
}

func publishOutput(t *testing.T, ctx context.Context, js jetstream.JetStream, subj string, h nats.Header, body []byte) {
	t.Helper()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: body}); err != nil {
		t.Fatal(err)
	}
}

func TestPublishBothModes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := startJetStream(t)
	createStreams(t, ctx, js)
	c := client.New(js, client.WithSource("test-publisher"))
	ms := int64(30000)
	a := events.Action{Input: json.RawMessage(`{"prompt":"hi"}`), IdempotencyKey: "k-1", TimeoutMS: &ms}
	tc := events.TraceContext{Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

	id1, err := c.Publish(ctx, "primary", "chat", a, client.WithTrace(tc))
	if err != nil {
		t.Fatal(err)
	}
	id2, err := c.Publish(ctx, "primary", "chat", a, client.WithStructuredMode(), client.WithActionID("given-id"), client.WithTrace(tc))
	if err != nil || id2 != "given-id" {
		t.Fatalf("Publish structured = %q, %v", id2, err)
	}
	// Same id again: JetStream dedups on Nats-Msg-Id.
	if _, err := c.Publish(ctx, "primary", "chat", a, client.WithActionID("given-id")); err != nil {
		t.Fatal(err)
	}

	cons, err := js.OrderedConsumer(ctx, "HERMES_ACTIONS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ id, mode string }{{id1, events.ModeBinary}, {id2, events.ModeStructured}} {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if m.Subject() != "hermes.actions.primary.chat" || m.Headers().Get("Nats-Msg-Id") != want.id {
			t.Fatalf("message %d: subject %q msg-id %q", i, m.Subject(), m.Headers().Get("Nats-Msg-Id"))
		}
		env, err := events.DecodeEnvelope(m.Headers(), m.Data())
		if err != nil {
			t.Fatalf("DecodeEnvelope: %v", err)
		}
		if env.ID != want.id || env.Mode != want.mode || env.Source != "test-publisher" || env.Subject != "cap:hermes_agent:primary:chat" || env.Traceparent != tc.Traceparent {
			t.Fatalf("env = %+v", env)
		}
		act, err := events.DecodeAction(env.Data)
		if err != nil || string(act.Input) != `{"prompt":"hi"}` || act.IdempotencyKey != "k-1" || *act.TimeoutMS != ms {
			t.Fatalf("action = %+v, %v", act, err)
		}
	}
	info, err := js.Stream(ctx, "HERMES_ACTIONS")
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("actions stream holds %d messages, want 2 (duplicate id deduplicated)", n)
	}
	if _, err := c.Publish(ctx, "Primary", "chat", a); err == nil {
		t.Fatal("invalid endpoint accepted")
	}
	if _, err := c.Publish(ctx, "primary", "chat", a, client.WithActionID("a.b")); err == nil {
		t.Fatal("invalid action id accepted")
	}
}

func TestFollowLateReplaysInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := startJetStream(t)
	createStreams(t, ctx, js)
	const id = "act-follow"
	const n = 25

	// Noise from another action must not be delivered.
	h, b, _ := events.EncodeEvent("bridge", "", &events.EventData{ActionID: "other", Kind: "data"}, events.TraceContext{})
	publishOutput(t, ctx, js, "hermes.events.other", h, b)

	// The first half, then a pending_approval result, before Follow starts.
	pub := func(seq int) {
		ev := &events.EventData{ActionID: id, Sequence: int64(seq), Kind: events.KindData,
			Event: events.SSE{Event: "delta", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, seq))}, Text: fmt.Sprint(seq)}
		h, b, err := events.EncodeEvent("bridge", "", ev, events.TraceContext{})
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "hermes.events." + id, Header: h, Data: b}); err != nil {
			t.Error(err)
		}
	}
	for i := 0; i < n/2; i++ {
		pub(i)
	}
	h, b, _ = events.EncodeResult("bridge", &events.Result{ActionID: id, CapabilityID: "cap:hermes_agent:p:chat_stream", Status: events.StatusPendingApproval, Output: json.RawMessage(`{"expires_at":"x"}`)}, events.TraceContext{})
	publishOutput(t, ctx, js, "hermes.results."+id, h, b)

	c := client.New(js)
	type out struct {
		r   *events.Result
		err error
	}
	done := make(chan out, 1)
	var seqs []int64
	var pending int
	pendingSeen := make(chan struct{})
	go func() {
		r, err := c.Follow(ctx, id, func(ev *events.EventData) error {
			seqs = append(seqs, ev.Sequence)
			return nil
		}, func(*events.Result) {
			if pending++; pending == 1 {
				close(pendingSeen)
			}
		})
		done <- out{r, err}
	}()
	// The pending_approval result is the action's latest output when it is read.
	select {
	case <-pendingSeen:
	case o := <-done:
		t.Fatalf("Follow returned before the pending_approval result: %+v %v", o.r, o.err)
	case <-ctx.Done():
		t.Fatal("no pending_approval result")
	}

	// The rest live, then the terminal result.
	for i := n / 2; i < n; i++ {
		pub(i)
	}
	h, b, _ = events.EncodeResult("bridge", &events.Result{ActionID: id, CapabilityID: "cap:hermes_agent:p:chat_stream", Status: events.StatusCompleted, Output: json.RawMessage(`{"text":"done"}`)}, events.TraceContext{})
	publishOutput(t, ctx, js, "hermes.results."+id, h, b)

	var o out
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal("Follow did not return")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.r.Status != events.StatusCompleted || string(o.r.Output) != `{"text":"done"}` {
		t.Fatalf("result = %+v", o.r)
	}
	if pending != 1 {
		t.Fatalf("onPending called %d times, want 1", pending)
	}
	if len(seqs) != n {
		t.Fatalf("got %d events, want %d: %v", len(seqs), n, seqs)
	}
	for i, s := range seqs {
		if s != int64(i) {
			t.Fatalf("events out of order: %v", seqs)
		}
	}

	// A follower that starts after the terminal result replays everything, except the
	// pending_approval result: it was decided since (issue 13, item 9).
	count, stale := 0, 0
	r, err := c.Follow(ctx, id, func(*events.EventData) error { count++; return nil }, func(*events.Result) { stale++ })
	if err != nil || r.Status != events.StatusCompleted || count != n {
		t.Fatalf("late follow: %+v, %d events, %v", r, count, err)
	}
	if stale != 0 {
		t.Fatalf("late follow: onPending called %d times for a decided action, want 0", stale)
	}

	// onEvent's error aborts.
	stop := errors.New("stop")
	if _, err := c.Follow(ctx, id, func(*events.EventData) error { return stop }, nil); !errors.Is(err, stop) {
		t.Fatalf("err = %v, want stop", err)
	}
}

func TestFollowErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := startJetStream(t)
	c := client.New(js)
	if _, err := c.Follow(ctx, "a-1", nil, nil); !errors.Is(err, client.ErrOutputStreamNotFound) {
		t.Fatalf("err = %v, want ErrOutputStreamNotFound", err)
	}
	createStreams(t, ctx, js)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := c.Follow(short, "a-1", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if _, err := c.Follow(ctx, "bad.id", nil, nil); err == nil {
		t.Fatal("invalid id accepted")
	}
}

// TestFollowLeavesNoConsumer: a Follow that returned (with the result, or because its
// context ended) leaves no consumer on the output stream. A server limits consumers per
// stream (nats-server 2.15: 1,000 by default), so followers that each left one behind
// for its inactivity threshold were refused after about a thousand calls in a few
// minutes.
func TestFollowLeavesNoConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := startJetStream(t)
	createStreams(t, ctx, js)
	c := client.New(js)
	h, b, _ := events.EncodeResult("bridge", &events.Result{ActionID: "done-1", CapabilityID: "cap:hermes_agent:p:chat",
		Status: events.StatusCompleted, Output: json.RawMessage(`{}`)}, events.TraceContext{})
	publishOutput(t, ctx, js, "hermes.results.done-1", h, b)
	for range 5 {
		if _, err := c.Follow(ctx, "done-1", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	fctx, fcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := c.Follow(fctx, "never-settles", nil, nil); err == nil {
		t.Fatal("Follow of an action without a result returned no error")
	}
	fcancel()
	s, err := js.Stream(ctx, "HERMES_OUTPUT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Consumers; n != 0 {
		t.Fatalf("%d consumers left on the output stream after the follows returned, want 0", n)
	}
}
