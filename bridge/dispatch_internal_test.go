package bridge

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// countingNext counts the Next calls made on a real iterator.
type countingNext struct {
	it    jetstream.MessagesContext
	calls atomic.Int32
}

func (c *countingNext) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	c.calls.Add(1)
	return c.it.Next(opts...)
}

// TestNextMessagesBoundsOnlyTheFirstWait: on an idle consumer the first Next after a
// message gives up after nextWait (the re-check that ends a lost wake-up), and the one
// after it waits without limit (so the iterator's missing-heartbeat check can run)
// until a message comes, which the dispatcher then gets at once.
func TestNextMessagesBoundsOnlyTheFirstWait(t *testing.T) {
	s := natsembed.RunTest(t)
	_, js := natsembed.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy})
	noErr(t, err)
	it, err := cons.Messages(jetstream.PullMaxMessages(8), jetstream.PullHeartbeat(time.Second),
		jetstream.WithMessagesErrOnMissingHeartbeat(false))
	noErr(t, err)
	defer it.Stop()
	c := &countingNext{it: it}
	n := &nextMessages{it: c, bounded: true}

	t0 := time.Now()
	if _, err := n.next(ctx); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("first Next on an idle consumer: %v, want nats.ErrTimeout", err)
	}
	if d := time.Since(t0); d < nextWait/2 || d > 10*nextWait {
		t.Errorf("the bounded Next returned after %v, want about %v", d, nextWait)
	}

	type got struct {
		msg jetstream.Msg
		err error
	}
	res := make(chan got, 1)
	go func() {
		m, err := n.next(ctx)
		res <- got{m, err}
	}()
	// Ten times nextWait and a pull heartbeat with nothing to deliver: the Next after the
	// timeout must still be waiting, as one call. (Absence has to be waited for.)
	select {
	case r := <-res:
		t.Fatalf("the Next after a timeout returned while idle: %v, %v", r.msg, r.err)
	case <-time.After(10 * nextWait):
	}
	if calls := c.calls.Load(); calls != 2 {
		t.Fatalf("%d Next calls while idle, want 2 (one bounded, then one waiting)", calls)
	}
	if _, err := js.Publish(ctx, "t.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.err != nil || string(r.msg.Data()) != "x" {
			t.Fatalf("Next = %v, %v; want the published message", r.msg, r.err)
		}
		_ = r.msg.Ack()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Next did not return the published message within 5 s")
	}
	if !n.bounded {
		t.Error("after a message the next call is not bounded again")
	}
}
