package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Approvals (CONTRACT §7). An operation that needs approval (response_delete,
// session_delete) runs at once only with a valid pre-approval in the action: decision
// approve, the input's SHA-256, decided within ApprovalTTL. Otherwise the action is
// parked: its record moves to state parked with the action JSON and an expiry, an index
// entry park.<id> is written, a pending_approval result is published, and the message is
// acknowledged. The parked action lives only in KV, so it survives restarts and any
// replica can finish it: a decision on <prefix>.approvals.<id> (consumed by the same
// durable consumer) approves, denies or mismatches it, and a sweeper in every replica
// settles expired ones approval_expired, also when every bridge was down at expiry.

// preApproval checks an action's own approval. ok means run now; a non-nil info is the
// failure to settle with; neither means park.
func (j *job) preApproval() (ok bool, info *events.ErrorInfo) {
	a := j.action.Approval
	if a == nil || j.b.cfg.NoPreApprovals {
		return false, nil
	}
	if a.DecidedAt == nil || j.b.now().Sub(*a.DecidedAt) > j.b.cfg.ApprovalTTL || a.DecidedAt.After(j.b.now().Add(time.Minute)) {
		return false, nil // stale or from the future: ask again
	}
	if a.Decision == events.DecisionDeny {
		return false, approvalDenied(a)
	}
	if a.InputSHA256 != j.inputHash {
		return false, approvalMismatch()
	}
	return true, nil
}

func approvalDenied(a *events.Approval) *events.ErrorInfo {
	info := &events.ErrorInfo{Code: "approval_denied", Category: "policy", Message: "the action was denied by its approver"}
	if a != nil && a.Reason != "" {
		info.Details = map[string]any{"reason": a.Reason}
	}
	return info
}

func approvalMismatch() *events.ErrorInfo {
	return &events.ErrorInfo{Code: "approval_mismatch", Category: "policy",
		Message: "the approval's input_sha256 does not match the action's input"}
}

func approvalExpired() *events.ErrorInfo {
	return &events.ErrorInfo{Code: "approval_expired", Category: "policy",
		Message: "no approval decision arrived within the approval window"}
}

// park stores the action as parked, indexes it, publishes its pending_approval result
// and acknowledges the message.
func (j *job) park(ctx context.Context) decision {
	b := j.b
	expires := b.now().Add(b.cfg.ApprovalTTL)
	err := j.updateAction(ctx, func(r *kvstore.Record) {
		r.State, r.Action, r.ExpiresAt, r.LeaseUntil = kvstore.StateParked, j.env.Data, expires, time.Time{}
	})
	if err != nil {
		return j.infra(err)
	}
	if j.running != nil {
		j.running.parked.Store(true) // from now on the stored state answers cancels
	}
	idx := kvstore.Record{State: kvstore.StateParked, ActionID: j.actionID, CapabilityID: j.capID,
		InputSHA256: j.inputHash, ExpiresAt: expires}
	if _, err := b.store.Create(ctx, kvstore.ParkKey(j.actionID), idx); err != nil && !errors.Is(err, kvstore.ErrExists) {
		return j.infra(err)
	}
	if err := j.publishPending(ctx, expires); err != nil {
		return j.infra(err)
	}
	j.setStatus(events.StatusPendingApproval, "")
	return ackIt()
}

// publishPending publishes the pending_approval result (id <action_id>:pending).
func (j *job) publishPending(ctx context.Context, expires time.Time) error {
	input := j.action.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	out, err := json.Marshal(struct {
		CapabilityID string          `json:"capability_id"`
		Input        json.RawMessage `json:"input"`
		InputSHA256  string          `json:"input_sha256"`
		ExpiresAt    time.Time       `json:"expires_at"`
	}{j.capID, input, j.inputHash, expires.UTC()})
	if err != nil {
		return err
	}
	return j.publishResult(ctx, &events.Result{ActionID: j.actionID, CapabilityID: j.capID,
		Status: events.StatusPendingApproval, Output: out})
}

// handleApproval processes one decision message on <prefix>.approvals.<id>.
func (b *Bridge) handleApproval(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata) decision {
	id, err := b.subjects.ParseApprovals(msg.Subject())
	if err != nil {
		return termWith("approval on an invalid subject")
	}
	env, err := events.DecodeEnvelope(msg.Headers(), msg.Data())
	var ae *events.AttributeError
	if env == nil || (err != nil && !(errors.As(err, &ae) && env.Type == events.TypeApproval)) || env.Type != events.TypeApproval {
		b.log.Warn().Str("action_id", id).Msg("ignored an approval message that is not an approval CloudEvent")
		return termWith("not an approval CloudEvent")
	}
	ap, err := events.DecodeApproval(env.Data)
	if err != nil {
		b.log.Warn().Str("action_id", id).Msg("ignored an approval decision that does not decode")
		return termWith("invalid approval decision")
	}
	e, err := b.store.Get(ctx, kvstore.ActionKey(id))
	if errors.Is(err, kvstore.ErrNotFound) {
		// The decision may have overtaken its action: look again shortly, for a while.
		if md.NumDelivered < 30 {
			return nakAfter(time.Second)
		}
		return termWith("no parked action with this id")
	}
	if err != nil {
		return nakAfter(b.cfg.RetryBase)
	}
	if e.Record.State != kvstore.StateParked {
		b.log.Info().Str("action_id", id).Str("state", string(e.Record.State)).Msg("approval decision for an action that is not parked; ignored")
		return ackIt()
	}
	j, d, ok := b.resume(ctx, msg, md, e)
	if !ok {
		return d
	}
	start := b.now()
	defer b.beats.add(j)()
	switch {
	case b.now().After(e.Record.ExpiresAt):
		d = j.settleParked(ctx, approvalExpired())
	case ap.Decision == events.DecisionDeny:
		d = j.settleParked(ctx, approvalDenied(ap))
	case ap.InputSHA256 != e.Record.InputSHA256:
		d = j.settleParked(ctx, approvalMismatch())
	default:
		d = j.runApproved(ctx)
	}
	b.logOutcome(j, d, start)
	return d
}

// resume rebuilds the job of a parked action from its record. ok false means d is the
// decision for the message (the record is unusable).
func (b *Bridge) resume(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, e kvstore.Entry) (*job, decision, bool) {
	rec := e.Record
	ep, op, ok := events.ParseCapabilityID(rec.CapabilityID)
	endpoint, known := b.eps[ep]
	spec, known2 := hermes.Lookup(op)
	a, err := events.DecodeAction(rec.Action)
	if !ok || !known || !known2 || err != nil {
		b.log.Error().Str("action_id", rec.ActionID).Msg("a parked action record cannot be resumed")
		return nil, termWith("parked action unusable"), false
	}
	j := &job{b: b, msg: msg, md: md, start: b.now(), actionID: rec.ActionID, endpointID: ep, op: op,
		capID: rec.CapabilityID, spec: spec, ep: endpoint, action: a, inputHash: rec.InputSHA256,
		env: &events.Envelope{ID: rec.ActionID, Data: rec.Action}}
	j.deadline = b.now().Add(timeoutFor(spec, a))
	j.actRev, j.actRec = e.Revision, rec
	if a.IdempotencyKey != "" {
		j.key = kvstore.IdempotencyKey(rec.CapabilityID, a.IdempotencyKey)
	}
	return j, decision{}, true
}

// settleParked ends a parked action with a failure and removes it from the index.
func (j *job) settleParked(ctx context.Context, info *events.ErrorInfo) decision {
	d := j.settle(ctx, failedResult(j, info))
	j.unpark(ctx)
	return d
}

func (j *job) unpark(ctx context.Context) {
	ctx, cancel := detached(ctx)
	defer cancel()
	if e, err := j.b.store.Get(ctx, kvstore.ParkKey(j.actionID)); err == nil {
		_ = j.b.store.Delete(ctx, kvstore.ParkKey(j.actionID), e.Revision)
	}
}

// runApproved takes the parked action over (CAS parked -> claimed) and runs it.
func (j *job) runApproved(ctx context.Context) decision {
	err := j.updateAction(ctx, func(r *kvstore.Record) {
		r.State, r.Owner, r.LeaseUntil, r.Attempt, r.IdemKey = kvstore.StateClaimed, j.owner(), j.leaseUntil(), 1, j.key
	})
	if errors.Is(err, kvstore.ErrConflict) {
		return ackIt() // another replica handled a decision first
	}
	if err != nil {
		return j.infra(err)
	}
	j.unpark(ctx)
	p, err := hermes.Prepare(j.request())
	if err != nil {
		return j.settle(ctx, failedResult(j, clientErrorInfo(err, true)))
	}
	j.prepared = p
	return j.execute(ctx)
}

// sweepParked settles parked actions whose approval window has passed. Every replica
// runs it; CAS on the records makes exactly one of them settle each action.
func (b *Bridge) sweepParked(ctx context.Context) {
	keys, err := b.store.Keys(ctx, "park.>")
	if err != nil {
		b.log.Warn().Err(err).Msg("listing parked actions failed")
		return
	}
	for _, k := range keys {
		idx, err := b.store.Get(ctx, k)
		if err != nil || b.now().Before(idx.Record.ExpiresAt) {
			continue
		}
		id := idx.Record.ActionID
		e, err := b.store.Get(ctx, kvstore.ActionKey(id))
		if err != nil || e.Record.State != kvstore.StateParked {
			_ = b.store.Delete(ctx, k, idx.Revision) // stale index entry
			continue
		}
		j, _, ok := b.resume(ctx, nil, nil, e)
		if !ok {
			continue
		}
		d := j.settleParked(ctx, approvalExpired())
		b.logOutcome(j, d, j.start)
	}
}

// runSweeper sweeps parked actions until ctx ends.
func (b *Bridge) runSweeper(ctx context.Context) {
	every := min(max(b.cfg.ApprovalTTL/10, 100*time.Millisecond), 10*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.sweepParked(ctx)
		}
	}
}
