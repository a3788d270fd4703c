package bridge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"
)

// subscribeStored starts the records path of a request/reply subject (cancel, steer): a
// queue subscription of the replicas on subject, in group queue, whose requests wait in a
// queue of size requests for workers goroutines that answer each with handle. A request
// that finds the queue full is not answered (the requester's timeout tells it to ask
// again); the first such request in a second is logged with the count so far. The returned
// function unsubscribes and waits for the workers; they also stop when ctx ends.
func (b *Bridge) subscribeStored(ctx context.Context, what, subject, queue string, size, workers int,
	handle func(context.Context, *nats.Msg)) (func(), error) {
	reqs := make(chan *nats.Msg, size)
	var dropped atomic.Int64
	warn := rate.Sometimes{Interval: time.Second}
	sub, err := b.nc.QueueSubscribe(subject, queue, func(m *nats.Msg) {
		select {
		case reqs <- m:
		default:
			n := dropped.Add(1)
			warn.Do(func() {
				b.log.Warn().Int64("dropped", n).Msg(what + " requests arrive faster than they can be answered; some are not answered")
			})
		}
	})
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	quit := make(chan struct{})
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				case <-ctx.Done():
					return
				case m := <-reqs:
					handle(ctx, m)
				}
			}
		}()
	}
	return func() {
		_ = sub.Unsubscribe()
		close(quit)
		wg.Wait()
	}, nil
}
