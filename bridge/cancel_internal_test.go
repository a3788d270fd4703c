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

// TestCancelAnsweredOnceWhateverTheHandlersOrder: a replica hears a cancel request on two
// subscriptions, in two goroutines, in either order. It must answer exactly once (the
// deploy/ roles allow a replica one reply per request): when the queue subscription's
// worker runs while the job is still registered and the plain subscription's handler
// after it has gone, and when both find the job.
func TestCancelAnsweredOnceWhateverTheHandlersOrder(t *testing.T) {
	s := natsembed.RunTest(t)
	nc, _ := natsembed.Connect(t, s)
	limiter := rate.NewLimiter(rate.Inf, 1)
	for _, tc := range []struct {
		name      string
		endsFirst bool // the job ends between the two handlers
		want      string
	}{
		{"job ends between the handlers", true, events.CancelAlreadySettled},
		{"both handlers find the job", false, events.CancelAlreadySettled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Bridge{nc: nc, subjects: events.Subjects{}, beats: newHeartbeats(time.Hour)}
			id := "job-" + nats.NewInbox()[len("_INBOX."):]
			d := newSteppedDriver(t, b, id)
			b.register(d.driver)
			unregister := func() { b.unregister(d.driver) }
			defer unregister()
			d.toSettling(t)
			sub, err := nc.Subscribe(b.subjects.Cancel(id), func(m *nats.Msg) {
				b.cancelFromStore(context.Background(), m, limiter) // the queue subscription's worker
				if tc.endsFirst {
					unregister()
				}
				if state := b.cancelLocal(id); state != "" { // the plain subscription's handler
					b.replyCancel(m, id, state)
				}
			})
			noErr(t, err)
			defer func() { _ = sub.Unsubscribe() }()
			inbox := nats.NewInbox()
			replies, err := nc.SubscribeSync(inbox)
			noErr(t, err)
			noErr(t, nc.PublishRequest(b.subjects.Cancel(id), inbox, nil))
			m, err := replies.NextMsg(2 * time.Second)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			var r events.CancelReply
			noErr(t, json.Unmarshal(m.Data, &r))
			if r.ActionID != id || r.State != tc.want {
				t.Fatalf("answer %+v, want %s for %s", r, tc.want, id)
			}
			// The handler has returned once the subscription is flushed past it.
			noErr(t, nc.Flush())
			if extra, err := replies.NextMsg(200 * time.Millisecond); err == nil {
				t.Fatalf("a second answer: %s", extra.Data)
			}
		})
	}
}
