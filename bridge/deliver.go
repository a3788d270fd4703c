package bridge

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// handle processes one delivery end to end and acknowledges it exactly once. yield
// gives the delivery's worker slot back; handle calls it at the latest when it returns.
// A message that is not a readable CloudEvent, or has no usable id, is copied to the
// DLQ with the reason and terminated; every other goes to a job (a driver).
func (b *Bridge) handle(ctx context.Context, msg jetstream.Msg, yield func()) {
	md, err := msg.Metadata()
	if err != nil {
		yield()
		_ = msg.TermWithReason("not a JetStream message")
		return
	}
	if _, perr := b.subjects.ParseApprovals(msg.Subject()); perr == nil {
		b.handleDecision(ctx, msg, md, yield)
		return
	}
	env, err := events.DecodeEnvelope(msg.Headers(), msg.Data())
	if env == nil || env.ID == "" {
		yield()
		if err == nil {
			err = errors.New("no usable id")
		}
		b.deadLetterMsg(msg, md, err)
		return
	}
	d := b.newDriver(core.KindAction, env.ID, msg, md)
	d.yield = yield
	d.trace = events.TraceContext{Traceparent: env.Traceparent, Tracestate: env.Tracestate}
	ep, op, perr := b.subjects.ParseAction(msg.Subject())
	d.act.env = env
	d.act.identify(b, ep, op, perr, err, env.Data, md.Timestamp)
	s := &core.Start{Kind: core.KindAction, Action: d.act.core(env.ID), Delivery: int(md.NumDelivered),
		Final: b.cfg.MaxDeliver > 0 && int(md.NumDelivered) >= b.cfg.MaxDeliver}
	if d.act.ep != nil && d.act.invalid == nil {
		if paused, wait, _ := d.act.ep.brk.pause(b.now()); paused {
			s.PausedFor = wait
		}
	}
	ctx, d.span = b.tracing.startAction(ctx, d, msg.Subject())
	d.run(ctx, s)
}

// handleDecision processes one decision message on <prefix>.approvals.<id>: a message
// that is not a readable decision goes to the DLQ with its reason; a readable one goes
// to a job, which ends the parking of its action (or answers its run's tool approval)
// and carries the action on.
func (b *Bridge) handleDecision(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, yield func()) {
	id, err := b.subjects.ParseApprovals(msg.Subject())
	if err != nil {
		yield()
		b.deadLetterMsg(msg, md, errors.New("approval on an invalid subject"))
		return
	}
	env, err := events.DecodeDecisionEnvelope(msg.Headers(), msg.Data())
	var ap *events.Approval
	if err == nil {
		ap, err = events.DecodeApproval(env.Data)
	}
	if err == nil {
		err = schemas.ValidateApproval(env.Data) // the rules the decoder leaves to the schema (lengths)
	}
	if err != nil {
		yield()
		b.log.Warn().Str("action_id", id).Msg("an approval message is not a valid decision; dead-lettered")
		b.deadLetterMsg(msg, md, errors.New(decisionProblem(err)))
		return
	}
	d := b.newDriver(core.KindDecision, id, msg, md)
	d.yield = yield
	if env.Traceparent != "" {
		d.trace = events.TraceContext{Traceparent: env.Traceparent, Tracestate: env.Tracestate}
	}
	s := &core.Start{Kind: core.KindDecision, Action: &core.Action{ID: id}, Delivery: int(md.NumDelivered),
		Final: b.cfg.MaxDeliver > 0 && int(md.NumDelivered) >= b.cfg.MaxDeliver,
		Decision: &core.Decision{MsgID: env.ID, Decision: ap.Decision, Approver: ap.Approver, Reason: ap.Reason,
			InputSHA256: ap.InputSHA256, Choice: ap.RunChoice(), RequestID: ap.RequestID}}
	d.run(ctx, s)
}

// decisionProblem is the dead-letter reason of a message on an approvals subject that is
// not a valid decision: "invalid decision: " and what is wrong, naming the field but
// never quoting its value ("invalid decision: input_sha256: must be 64 lowercase
// hexadecimal digits").
func decisionProblem(err error) string {
	why := err.Error()
	var ae *events.ActionError
	var ve *schemas.ValidationError
	var de *events.DecodeError
	switch {
	case errors.As(err, &ae):
		why = events.FieldReason(ae.Field, ae.Reason)
	case errors.As(err, &ve):
		why = events.FieldReason(ve.Field, ve.Reason)
	case errors.As(err, &de):
		why = de.Reason
	}
	return "invalid decision: " + why
}

// expire settles one parked (or half-expired) action approval_expired: the sweeper's job.
func (b *Bridge) expire(ctx context.Context, id string) {
	d := b.newDriver(core.KindExpire, id, nil, nil)
	d.run(ctx, &core.Start{Kind: core.KindExpire, Action: &core.Action{ID: id}})
}

// deadLetterMsg copies a message that is no job's to the DLQ with the reason, then
// terminates it; a copy that cannot be stored leaves the message to be redelivered.
func (b *Bridge) deadLetterMsg(msg jetstream.Msg, md *jetstream.MsgMetadata, cause error) {
	reason := cause.Error()
	var de *events.DecodeError
	if errors.As(cause, &de) {
		reason = de.Reason
	}
	if err := b.publishDLQ(msg, md, reason); err != nil {
		b.log.Warn().Err(err).Uint64("stream_seq", md.Sequence.Stream).Msg("dead-lettering failed; will retry")
		b.apply(msg, core.Effect{Kind: core.EffFinish, Ack: core.NakIt, Delay: b.cfg.RetryBase})
		return
	}
	b.apply(msg, core.Effect{Kind: core.EffFinish, Ack: core.TermIt, Reason: "dead-lettered: " + reason})
}
