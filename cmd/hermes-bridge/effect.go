package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// defaultDecideTimeout bounds approve's and deny's wait for the effect of their
// decision. A decision that finds nothing parked is retried by the bridge for about 30 s
// before it is dead-lettered, so the wait is longer than that.
const defaultDecideTimeout = 60 * time.Second

// decisionEffect is what a published decision led to: the action's first output after
// its pending_approval result (an event, or a result), or the decision's dead letter.
type decisionEffect struct {
	event     *events.EventData
	result    *events.Result
	dlqReason string // the bridge dead-lettered the decision, for this reason
}

// dlqWatch sees the dead letters: a subscription to the dead-letter subject, set up
// before a decision is published, that remembers the reason of each copy by the stream
// and sequence of the message it copies (the decision's are known once its publish is
// acknowledged, possibly after its dead letter came).
type dlqWatch struct {
	notify  chan struct{} // a dead letter came
	refused bool          // the NATS user may not subscribe to the dead-letter subject
	stop    func()

	mu   sync.Mutex
	seen map[string]string // "<stream>:<seq>" → reason, at most dlqSeenMax
}

// dlqSeenMax bounds the dead letters a watch remembers.
const dlqSeenMax = 4096

// watchDLQ subscribes to the dead letters. A user without the permission gets a watch
// that never reports (refused says so) instead of a failed command: the decision's
// effect is still watched on the output stream.
func (cl *clientConn) watchDLQ() (*dlqWatch, error) {
	subj := cl.subjects.DLQ()
	w := &dlqWatch{notify: make(chan struct{}, 1), seen: map[string]string{}}
	untolerate := cl.guard.tolerateOn(subj, nil)
	sub, err := cl.nc.Subscribe(subj, func(m *nats.Msg) {
		w.mu.Lock()
		if len(w.seen) < dlqSeenMax {
			w.seen[m.Header.Get(events.HeaderDLQStream)+":"+m.Header.Get(events.HeaderDLQStreamSeq)] = m.Header.Get(events.HeaderDLQReason)
		}
		w.mu.Unlock()
		select {
		case w.notify <- struct{}{}:
		default:
		}
	})
	if err != nil {
		untolerate()
		return nil, err
	}
	// The subscription is in place (or refused) before the decision goes out.
	_ = cl.nc.FlushTimeout(2 * time.Second)
	if pe := cl.guard.parse(cl.nc.LastError()); pe != nil && pe.Subject == subj {
		w.refused = true
	}
	w.stop = func() {
		_ = sub.Unsubscribe()
		untolerate()
	}
	return w, nil
}

// reason returns the reason of the dead letter of the message at ack, if one came.
func (w *dlqWatch) reason(ack *jetstream.PubAck) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.seen[ack.Stream+":"+strconv.FormatUint(ack.Sequence, 10)]
	return r, ok
}

// awaitEffect waits for the effect of the decision stored at ack on action id: the
// output it caused (see firstOutputAfter: afterSeq is the sequence of the action's
// pending_approval result, askSHA its input_sha256 for a run's tool approval, else
// ""), or the dead letter of the decision that w sees. It returns
// ctx's error when ctx ends first; after waitHintAfter without an effect it says once
// on stderr that it still waits.
func awaitEffect(ctx context.Context, cl *clientConn, id string, afterSeq uint64, askSHA string, ack *jetstream.PubAck, w *dlqWatch, timeout time.Duration, stderr io.Writer) (*decisionEffect, error) {
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		eff *decisionEffect
		err error
	}
	out := make(chan outcome, 1)
	go func() {
		eff, err := firstOutputAfter(ectx, cl, id, afterSeq, askSHA)
		out <- outcome{eff, err}
	}()
	hint := time.NewTimer(waitHintAfter)
	defer hint.Stop()
	for {
		if reason, ok := w.reason(ack); ok {
			cancel()
			<-out
			return &decisionEffect{dlqReason: reason}, nil
		}
		select {
		case <-w.notify:
		case o := <-out:
			return o.eff, o.err
		case <-hint.C:
			fmt.Fprintf(stderr, "action %s: no effect of the decision after %s; still waiting (until --timeout %s)\n", id, waitHintAfter, timeout)
		case <-ctx.Done():
			cancel()
			<-out
			return nil, ctx.Err()
		}
	}
}

// firstOutputAfter returns the first output of action id that the decision caused,
// waiting for it until ctx ends. For a parked action (askSHA "") it is the first event
// or result stored after message afterSeq of the output stream, its pending_approval
// result. For a run's tool approval (askSHA the input_sha256 of the pending request)
// events stored after the pending result may predate the decision, so it is the first
// result after afterSeq, or the first event after the run's approval.request event of
// that hash: the run is paused until the approval is answered.
func firstOutputAfter(ctx context.Context, cl *clientConn, id string, afterSeq uint64, askSHA string) (*decisionEffect, error) {
	stream := cl.cfg.OutputStream
	evSubj, resSubj := cl.subjects.Events(id), cl.subjects.Results(id)
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{evSubj, resSubj}, InactiveThreshold: 30 * time.Second,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: afterSeq + 1}
	if askSHA != "" {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverAllPolicy, 0
	}
	cons, err := cl.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("output stream %s: %w", stream, err)
	}
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = cl.js.DeleteConsumer(dctx, stream, info.Name)
		}
	}()
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("output stream %s: %w", stream, err)
	}
	defer it.Stop()
	asked := askSHA == "" // the approval's request was seen (a parked action has none)
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if m.Subject() == resSubj {
			md, err := m.Metadata()
			if err != nil || md.Sequence.Stream <= afterSeq {
				continue
			}
			r, err := events.DecodeResult(m.Headers(), m.Data())
			if err == nil {
				err = client.ResolveResult(ctx, cl.js, r)
			}
			if err != nil {
				return nil, err
			}
			return &decisionEffect{result: r}, nil
		}
		ev, err := events.DecodeEvent(m.Headers(), m.Data())
		if err == nil {
			ev, err = client.ResolveEvent(ctx, cl.js, ev)
		}
		if err != nil {
			return nil, err
		}
		if ev.Event.Event == "approval.request" {
			if sum, _ := events.InputSHA256(ev.Event.Data); sum == askSHA {
				asked = true
				continue
			}
		}
		if asked {
			return &decisionEffect{event: ev}, nil
		}
	}
}

// noEffect reports a decision whose effect did not come: err is awaitEffect's. It
// returns the exit status: exitInterrupted when the command was interrupted, else
// exitUsage.
func (cl *clientConn) noEffect(ctx context.Context, stderr io.Writer, id string, ack *jetstream.PubAck, w *dlqWatch, timeout time.Duration, err error) int {
	switch {
	case cl.permissionDenied(stderr):
		return exitUsage
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "hermes-bridge %s: interrupted before the decision took effect; it is stored and a bridge applies it: hermes-bridge status %s\n", cl.cmd, id)
		return exitInterrupted
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "hermes-bridge %s: no effect of the decision on action %s within --timeout %s: is a bridge running? "+
			"The decision is stored (stream %s, message %d) and a bridge applies it when it reads it: hermes-bridge status %s\n",
			cl.cmd, id, timeout, ack.Stream, ack.Sequence, id)
		if w.refused {
			fmt.Fprintf(stderr, "(this NATS user may not subscribe to %s, so a dead-lettered decision shows only as this timeout)\n", cl.subjects.DLQ())
		}
	default:
		fmt.Fprintf(stderr, "hermes-bridge %s: waiting for the effect of the decision on action %s: %v\n", cl.cmd, id, err)
	}
	return exitUsage
}
