package bridge

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// TestCancelAnsweredWhenTheJobEndsBetweenTheHandlers: a replica hears a cancel request on
// two subscriptions, in two goroutines, in either order. Here the queue subscription's
// worker runs while the job is still registered (it has stored its result) and the plain
// subscription's handler runs after the job has gone. One of them must answer.
func TestCancelAnsweredWhenTheJobEndsBetweenTheHandlers(t *testing.T) {
	s := natsembed.RunTest(t)
	nc, _ := natsembed.Connect(t, s)
	b := &Bridge{nc: nc, subjects: events.Subjects{}}
	const id = "ends-between"
	j := &job{b: b, actionID: id}
	unregister := b.register(j, func(error) {})
	j.running.settling.Store(true)

	limiter := rate.NewLimiter(rate.Inf, 1)
	sub, err := nc.Subscribe(b.subjects.Cancel(id), func(m *nats.Msg) {
		b.cancelFromStore(context.Background(), m, limiter) // the queue subscription's worker
		unregister()                                        // the job ends
		if state := b.cancelLocal(id); state != "" {        // the plain subscription's handler
			b.replyCancel(m, id, state)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	reply, err := nc.Request(b.subjects.Cancel(id), nil, 2*time.Second)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	var r events.CancelReply
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		t.Fatal(err)
	}
	if r.ActionID != id || r.State != events.CancelAlreadySettled {
		t.Fatalf("answer %+v, want %s for %s", r, events.CancelAlreadySettled, id)
	}
}
