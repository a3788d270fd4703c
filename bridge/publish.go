package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/hermes-bridge/hermes-bridge/bridge/fastbatch"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// eventWindow bounds the asynchronous event publishes of one action awaiting their
// acks.
const eventWindow = 2048

// eventPublisher republishes one action's SSE events in order. It is used by exactly
// one goroutine: the one reading the Hermes stream.
//
// When the output stream allows batch publishing (allow_batched, nats-server 2.14+),
// the events go out as fast batches (package fastbatch): pipelined, and stored in
// sequence order without gaps even when the connection breaks or the stream's leader
// changes, because the server stores a batch's message only after its predecessor.
//
// Otherwise, and for an action whose batch the server refuses (too many batches in
// flight, batches disabled), publishes are asynchronous with at most eventWindow
// outstanding acks; flush waits for the rest. There, as soon as a publish fails or the
// connection is not up, the publisher settles every outstanding event in sequence
// order (republishing the failed ones; Nats-Msg-Id makes an already stored one a
// no-op) and publishes the rest of the stream synchronously, one confirmed event at a
// time. That keeps a NATS outage from storing later events before earlier ones, except
// for the events that were already in flight when the connection broke; subscribers
// order by "sequence", which is always contiguous (client.Client.Follow does it for
// them).
type eventPublisher struct {
	js      jetstream.JetStream
	d       *driver
	subject string
	seq     int64
	batch   *fastbatch.Publisher // nil: asynchronous publishes
	// ctx bounds every wait of the publisher: the action's deadline (or its start, when
	// later) plus settleFor (the events read until the deadline get that long to be
	// stored), and the cancellation
	// of in-flight work at the end of the shutdown grace.
	ctx  context.Context
	stop context.CancelFunc

	// pending holds the outstanding futures, oldest first, at most eventWindow. It
	// grows with append: most streams are short, and a thousand concurrent streams
	// should not each hold a full window.
	pending []jetstream.PubAckFuture
	ordered bool // after a failure: one confirmed publish at a time
}

// newEventPublisher returns the publisher of d's events. It uses fast batches if the
// output stream allows them and captures the batch subject, and the connection has not
// been denied publishing there; otherwise it logs why (at most once a minute, see
// logFallback) and publishes asynchronously.
func newEventPublisher(js jetstream.JetStream, d *driver) *eventPublisher {
	p := &eventPublisher{js: js, d: d, subject: d.b.out.events(d.id)}
	end := d.act.deadline
	if now := time.Now(); end.Before(now) {
		end = now
	}
	p.ctx, p.stop = context.WithDeadline(d.b.workCtx, end.Add(settleFor))
	cfg := fastbatch.Config{
		Control:  batchSubject(d.b.out.base, d.id),
		Controls: batchSubjects(d.b.out.base),
		Alone:    func(ctx context.Context, m *nats.Msg) error { return publishRetry(ctx, js, m) },
		Log:      d.b.log.With().Str("action_id", d.id).Logger(),
	}
	if err := cfg.Usable(d.b.nc, d.b.output); err != nil {
		logFallback(d.b, d.id, err)
	} else {
		p.batch = fastbatch.New(d.b.nc, cfg)
	}
	return p
}

// fallbackLog limits the lines about actions published without fast batches: under
// load every action may be refused (too many batches in flight).
var (
	fallbackLog        = rate.Sometimes{First: 1, Interval: time.Minute}
	fallbackSuppressed atomic.Int64
)

// logFallback logs, at most once a minute, that an action's events are published
// without fast batches, and why.
func logFallback(b *Bridge, actionID string, err error) {
	done := false
	fallbackLog.Do(func() {
		done = true
		b.log.Warn().Err(err).Str("action_id", actionID).Int64("others_since_last_line", fallbackSuppressed.Swap(0)).
			Msg("publishing the action's events without fast batches: pipelined, but a failure may store some out of order")
	})
	if !done {
		fallbackSuppressed.Add(1)
	}
}

// fallBack switches the publisher from batches to asynchronous publishes after the
// server refused the batch (err), and publishes the events not confirmed stored.
func (p *eventPublisher) fallBack(ctx context.Context, err error) error {
	logFallback(p.d.b, p.d.id, err)
	msgs := p.batch.Unconfirmed()
	p.batch.Close()
	p.batch = nil
	for _, m := range msgs {
		m.Reply = ""
		if err := p.publishAsync(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// publish sends ev as event number p.seq. It blocks only when the window is full, or
// after a failure (see eventPublisher and fastbatch.Publisher.Add).
func (p *eventPublisher) publish(ev hermes.Event) error {
	ctx := p.ctx
	d := events.EventData{ActionID: p.d.id, Sequence: p.seq, Kind: ev.Kind,
		Event: events.SSE{Event: ev.Event, ID: ev.ID, Data: ev.Data}, Text: ev.Text}
	h, body, err := events.EncodeEvent(p.d.b.cfg.Source, p.d.act.capID, &d, p.d.trace)
	if err != nil {
		return fmt.Errorf("encode event %d: %w", p.seq, err)
	}
	if len(body) > p.d.b.maxOut {
		small, err := p.offloadEvent(ctx, &d)
		if err != nil {
			return fmt.Errorf("event %d: %w", p.seq, err)
		}
		if h, body, err = events.EncodeEvent(p.d.b.cfg.Source, p.d.act.capID, small, p.d.trace); err != nil {
			return fmt.Errorf("encode event %d: %w", p.seq, err)
		}
	}
	if mt := p.d.b.metrics; mt != nil {
		if p.seq == 0 {
			mt.observeFirstEvent(p.d, time.Since(p.d.sent))
		}
		mt.eventsOut.Inc()
	}
	p.seq++
	m := &nats.Msg{Subject: p.subject, Header: h, Data: body}
	defer p.d.b.hook(PointEvent, p.d.id)
	if p.batch != nil {
		err := p.batch.Add(ctx, m)
		if errors.Is(err, fastbatch.ErrRefused) {
			return p.fallBack(ctx, err)
		}
		return err
	}
	return p.publishAsync(ctx, m)
}

// publishAsync publishes m asynchronously (or, after a failure, synchronously once the
// outstanding publishes are settled).
func (p *eventPublisher) publishAsync(ctx context.Context, m *nats.Msg) error {
	if !p.ordered && p.d.b.nc.Status() != nats.CONNECTED {
		p.ordered = true
	}
	if !p.ordered && len(p.pending) == eventWindow {
		if err := p.awaitOldest(ctx); err != nil { // a failed oldest sets ordered
			return err
		}
	}
	if !p.ordered {
		f, err := p.js.PublishMsgAsync(m, jetstream.WithRetryAttempts(0))
		if err == nil {
			p.pending = append(p.pending, f)
			return nil
		}
		p.ordered = true // could not even queue it: publish in order from now on
	}
	if err := p.settle(ctx); err != nil {
		return err
	}
	return publishRetry(ctx, p.js, m)
}

// awaitOldest waits for the oldest outstanding publish; a failed one is republished
// synchronously and switches the publisher to ordered mode.
func (p *eventPublisher) awaitOldest(ctx context.Context) error {
	f := p.pending[0]
	p.pending[0] = nil
	p.pending = p.pending[1:]
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		if err == nil {
			return nil
		}
		p.ordered = true
		// The same Nats-Msg-Id makes a retry of an already stored event a no-op.
		return publishRetry(ctx, p.js, f.Msg())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush returns once every event published so far is stored, or an error; it gives up
// when ctx ends or the publisher's bound passes (the action's deadline plus
// settleFor). It is called once, after the last
// event; the publisher is not usable afterwards.
func (p *eventPublisher) flush(ctx context.Context) error {
	defer p.stop()
	if end, ok := p.ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	if p.batch != nil {
		err := p.batch.Flush(ctx)
		if errors.Is(err, fastbatch.ErrRefused) {
			err = p.fallBack(ctx, err)
		} else {
			p.batch.Close()
		}
		if err != nil {
			return err
		}
	}
	return p.settle(ctx)
}

// settle waits until every asynchronous publish so far is stored, oldest first.
func (p *eventPublisher) settle(ctx context.Context) error {
	for len(p.pending) > 0 {
		if err := p.awaitOldest(ctx); err != nil {
			return err
		}
	}
	return nil
}

// publishRetry publishes m synchronously, retrying transient failures for up to 30s.
func publishRetry(ctx context.Context, js jetstream.JetStream, m *nats.Msg) error {
	delay := 50 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.PublishMsg(pctx, m)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		delay = min(2*delay, 2*time.Second)
	}
}
