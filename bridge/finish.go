package bridge

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// apply is the single place where a delivery is acknowledged: as the job's EffFinish
// says.
func (b *Bridge) apply(msg jetstream.Msg, e core.Effect) {
	var err error
	switch e.Ack {
	case core.AckIt:
		// A plain ack is enough: the result is already durable, and a lost ack only
		// means a redelivery that finds the action settled and acks again.
		err = msg.Ack()
	case core.NakIt:
		err = msg.NakWithDelay(e.Delay)
	case core.TermIt:
		err = msg.TermWithReason(e.Reason)
	}
	if err != nil {
		b.log.Warn().Err(err).Str("decision", e.Ack.String()).Msg("acknowledgement failed; the message will be redelivered")
	}
}

// logOutcome writes the one log line of a job: ids, status, timing and the decision;
// never content, keys or session identifiers.
func (b *Bridge) logOutcome(d *driver, o core.Outcome, e core.Effect) {
	ev := b.log.Info()
	if e.Ack != core.AckIt {
		ev = b.log.Warn()
	}
	var ms [24]byte
	delivery := 0
	if d.md != nil {
		delivery = int(d.md.NumDelivered)
	}
	ev = ev.Str("action_id", d.id).Str("capability", o.CapabilityID).Str("status", o.Status).
		RawJSON("duration_ms", appendMillis(ms[:0], b.now().Sub(d.start))).Int("attempt", o.Attempt).
		Int("delivery", delivery).Str("decision", e.Ack.String())
	if d.kind != core.KindAction {
		ev = ev.Str("job", d.kind.String())
	}
	if o.Code != "" {
		ev = ev.Str("code", o.Code)
	}
	if o.ReplayOf != "" {
		ev = ev.Str("replay_of", o.ReplayOf)
	}
	if e.Ack == core.NakIt {
		ev = ev.Str("retry_in", e.Delay.String())
	}
	if e.Reason != "" {
		ev = ev.Str("reason", e.Reason)
	}
	ev.Msg("action")
}

// observeOutcome counts what a finished job did.
func (b *Bridge) observeOutcome(d *driver, o core.Outcome, e core.Effect) {
	m := b.metrics
	if m == nil {
		return
	}
	if o.Verdict == core.VerdictTakeover {
		m.takeovers.Inc()
	}
	if o.Approval != "" {
		m.approvals.WithLabelValues(o.Approval).Inc()
	}
	if !o.Settled {
		return
	}
	m.settledAction(d, o.Status, o.Code)
	if o.ReplayOf != "" {
		m.replays.Inc()
	} else if u := d.usage.Load(); u != nil {
		m.usage(d, u)
	}
	if o.Code == "idempotency_conflict" {
		m.conflicts.Inc()
	}
}

// dlqMargin is left free in a DLQ copy for the headers the copy adds.
const dlqMargin = 4 << 10

// publishDLQ copies a message that cannot be handled to the DLQ with the reason and
// the other events.HeaderDLQ* headers (its Nats-Msg-Id names the message's stream
// position, so a retried copy is stored once).
func (b *Bridge) publishDLQ(msg jetstream.Msg, md *jetstream.MsgMetadata, reason string) error {
	h := nats.Header{}
	maps.Copy(h, msg.Headers()) // its Nats-Msg-Id is replaced below
	seq := fmt.Sprint(md.Sequence.Stream)
	h.Set(events.HeaderDLQReason, reason)
	h.Set(events.HeaderDLQSubject, msg.Subject())
	h.Set(events.HeaderDLQStream, md.Stream)
	h.Set(events.HeaderDLQStreamSeq, seq)
	h.Set(events.HeaderDLQTime, b.now().UTC().Format(time.RFC3339Nano))
	h.Set(jetstream.MsgIDHeader, "dlq:"+md.Stream+":"+seq)
	data := msg.Data()
	if max := int(b.nc.MaxPayload()) - dlqMargin; max > 0 && len(data)+headerSize(h) > max {
		h.Set(events.HeaderDLQTruncated, strconv.Itoa(len(data)))
		data = nil
	}
	// Bounded, and not cut off by the shutdown: the dead letter ends the message.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.workCtx), 30*time.Second)
	defer cancel()
	if err := publishRetry(ctx, b.js, &nats.Msg{Subject: b.subjects.DLQ(), Header: h, Data: data}); err != nil {
		return err
	}
	if m := b.metrics; m != nil {
		m.dlq.Inc()
	}
	b.log.Warn().Uint64("stream_seq", md.Sequence.Stream).Str("subject", msg.Subject()).
		Str("reason", reason).Msg("dead-lettered a message that cannot be handled")
	return nil
}

// headerSize is about the encoded size of h.
func headerSize(h nats.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
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
