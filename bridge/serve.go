package bridge

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// errLostClaim is the cause of a job context cancelled because another delivery took
// the job's claim over (a heartbeat found out).
var errLostClaim = errors.New("bridge: the claim was taken over")

// lostClaim reports whether ctx was cancelled because the job's claim was taken over.
func lostClaim(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errLostClaim) }

// serve is the one way in: every job (a delivery of an action or of its approval
// decision, the sweeper expiring a parked action, a cancel settling one) runs body
// through it, and gets the same setup: a context that cancel requests and lost claims
// cancel, registration for cancel requests, heartbeats (InProgress and claim renewal),
// panic recovery, the worker slot given back, and one log line.
func (b *Bridge) serve(ctx context.Context, j *job, body func(context.Context) decision) (d decision) {
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	j.cctx, j.cancel = jctx, cancel
	unregister := b.register(j, cancel)
	defer unregister()
	unbeat := b.beats.add(j)
	defer unbeat()
	if m := b.metrics; m != nil {
		m.inFlight.Inc()
		defer m.inFlight.Dec()
		if j.md != nil && j.md.NumDelivered > 1 {
			m.redeliveries.Inc()
		}
	}
	defer j.finish()
	defer func() {
		if p := recover(); p != nil {
			d = j.panicked(ctx, p)
		}
		b.logOutcome(j, d)
	}()
	return body(ctx)
}

// panicked ends an action whose handling panicked: the action settles failed with code
// internal (details.reason "panic"; uncertain if an unsafe call may have been sent), a
// copy of its message goes to the DLQ with the panic's reason, and the message is
// acknowledged, so that one bad message cannot crash replica after replica. The stack
// is logged; the panic value is not (it may hold content).
func (j *job) panicked(ctx context.Context, p any) (d decision) {
	b := j.b
	b.log.Error().Str("action_id", j.actionID).Str("stack", string(debug.Stack())).
		Msg("handling the action panicked; it settles failed")
	defer func() {
		if p2 := recover(); p2 != nil { // settling itself panicked: hand the message to the DLQ only
			b.log.Error().Str("action_id", j.actionID).Msg("settling a panicked action panicked too")
			d = termWith("panic")
		}
	}()
	if j.msg != nil && j.md != nil {
		if dd := b.deadLetter(ctx, j.msg, j.md, errors.New("panic while handling the message")); dd.kind == nak {
			b.log.Warn().Str("action_id", j.actionID).Msg("the DLQ copy of a panicked action failed")
		}
	}
	if j.capID == "" { // not identified far enough to settle (an approval decision, say)
		return ackIt()
	}
	info := &events.ErrorInfo{Code: "internal", Category: "connector", UncertainOutcome: j.dispatched() && !j.safe(),
		Message: "the bridge failed while handling the action", Details: map[string]any{"reason": "panic"}}
	return j.settle(ctx, failedResult(j, info))
}

// logOutcome writes the one log line of a job: ids, status, timing and the decision;
// never content, keys or session identifiers.
func (b *Bridge) logOutcome(j *job, d decision) {
	ev := b.log.Info()
	if d.kind != ack {
		ev = b.log.Warn()
	}
	var ms [24]byte
	ev = ev.Str("action_id", j.actionID).Str("capability", j.capID).Str("status", j.status).
		RawJSON("duration_ms", appendMillis(ms[:0], b.now().Sub(j.start))).Int("attempt", j.attempt()).
		Int("delivery", j.delivery()).Str("decision", d.String())
	if j.code != "" {
		ev = ev.Str("code", j.code)
	}
	if j.replayOf != "" {
		ev = ev.Str("replay_of", j.replayOf)
	}
	if d.kind == nak {
		ev = ev.Str("retry_in", d.delay.String())
	}
	if d.reason != "" {
		ev = ev.Str("reason", d.reason)
	}
	ev.Msg("action")
}

// DLQ headers. The original headers are kept; these are added.
const (
	HeaderDLQReason  = "Hermes-Dlq-Reason"
	HeaderDLQSubject = "Hermes-Dlq-Subject"
	HeaderDLQStream  = "Hermes-Dlq-Stream"
	HeaderDLQSeq     = "Hermes-Dlq-Stream-Seq"
)

// deadLetter copies a message that cannot be handled to the DLQ with the reason, then
// terminates it. If the copy cannot be stored the message is redelivered.
func (b *Bridge) deadLetter(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, cause error) decision {
	reason := cause.Error()
	var de *events.DecodeError
	if errors.As(cause, &de) {
		reason = de.Reason
	}
	h := nats.Header{}
	for k, v := range msg.Headers() {
		if k == jetstream.MsgIDHeader {
			continue
		}
		h[k] = v
	}
	seq := fmt.Sprint(md.Sequence.Stream)
	h.Set(HeaderDLQReason, reason)
	h.Set(HeaderDLQSubject, msg.Subject())
	h.Set(HeaderDLQStream, md.Stream)
	h.Set(HeaderDLQSeq, seq)
	h.Set(jetstream.MsgIDHeader, "dlq:"+md.Stream+":"+seq)
	ctx, cancel := detached(ctx)
	defer cancel()
	if err := publishRetry(ctx, b.js, &nats.Msg{Subject: b.subjects.DLQ(), Header: h, Data: msg.Data()}); err != nil {
		b.log.Warn().Err(err).Uint64("stream_seq", md.Sequence.Stream).Msg("dead-lettering failed; will retry")
		return nakAfter(b.cfg.RetryBase)
	}
	if m := b.metrics; m != nil {
		m.dlq.Inc()
	}
	b.log.Warn().Uint64("stream_seq", md.Sequence.Stream).Str("subject", msg.Subject()).
		Str("reason", reason).Msg("dead-lettered a message that cannot be handled")
	return termWith("dead-lettered: " + reason)
}

// appendMillis appends d in milliseconds, to the microsecond, as a JSON number with
// three decimals ("12.345", "0.007"): the log's duration_ms, the same value as the
// float64 of the milliseconds, without float formatting on every action.
func appendMillis(b []byte, d time.Duration) []byte {
	us := d.Microseconds()
	if us < 0 {
		b = append(b, '-')
		us = -us
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}
