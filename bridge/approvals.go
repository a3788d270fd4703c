package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Approvals (CONTRACT §7). An operation that needs approval (response_delete,
// session_delete) runs at once only with a valid pre-approval in the action: decision
// approve, the input's SHA-256, decided within ApprovalTTL. Otherwise the action is
// parked (kvstore.Claim.Park): its park index entry, then its one pending_approval
// result message, then its record (state parked, with the action JSON and the expiry);
// the message is acknowledged. A decision on <prefix>.approvals.<id>, consumed by the
// same durable consumer, ends the parking (kvstore.Ledger.Decide) and its delivery then
// runs or settles the action like any delivery: if the call must be retried, the
// decision's message is redelivered and carries the approved action on. The sweeper in
// every replica settles expired ones approval_expired, also when every bridge was down
// at expiry, and finishes the expiries and cancels of parked actions whose replica
// stopped half way.

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
		return false, approvalDenied(a.Reason)
	}
	if a.InputSHA256 != j.inputHash {
		return false, approvalMismatch()
	}
	return true, nil
}

func approvalDenied(reason string) *events.ErrorInfo {
	info := &events.ErrorInfo{Code: "approval_denied", Category: "policy", Message: "the action was denied by its approver"}
	if reason != "" {
		info.Details = map[string]any{"reason": reason}
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

// park parks the claimed action and acknowledges its message.
func (j *job) park(ctx context.Context) decision {
	expires := j.b.now().Add(j.b.cfg.ApprovalTTL)
	pending, err := j.pendingMsg(expires)
	if err != nil {
		return j.infra(err)
	}
	if j.running != nil {
		// From now on the records answer cancel requests: a cancel that comes while the
		// parking is under way flags the record, and Park reports it.
		j.running.parked.Store(true)
	}
	err = j.claim.Load().Park(ctx, j.env.Data, expires, pending)
	switch {
	case errors.Is(err, kvstore.ErrCancelRequested):
		return j.settleCancelled(ctx, false)
	case errors.Is(err, kvstore.ErrLostClaim):
		return j.lost(ctx)
	case errors.Is(err, kvstore.ErrSettled):
		j.setStatus("duplicate", "")
		return ackIt()
	case err != nil:
		return j.infra(err)
	}
	j.setStatus(events.StatusPendingApproval, "")
	return ackIt()
}

// pendingMsg is the pending_approval result message (id <action_id>:pending).
func (j *job) pendingMsg(expires time.Time) (*nats.Msg, error) {
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
		return nil, err
	}
	h, body, err := events.EncodeResult(j.b.cfg.Source, &events.Result{ActionID: j.actionID, CapabilityID: j.capID,
		Status: events.StatusPendingApproval, Output: out}, j.trace)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: j.resultSubject(), Header: h, Data: body}, nil
}

// decisionTries is how many deliveries a decision that overtook its action waits for it.
const decisionTries = 30

// handleApproval processes one decision message on <prefix>.approvals.<id>: a message
// that is not a readable decision goes to the DLQ with its reason; a readable one ends
// the parking of its action and its delivery runs the action on (serve).
func (b *Bridge) handleApproval(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, yield func()) {
	id, err := b.subjects.ParseApprovals(msg.Subject())
	if err != nil {
		yield()
		b.apply(msg, b.deadLetter(ctx, msg, md, errors.New("approval on an invalid subject")))
		return
	}
	env, err := events.DecodeDecisionEnvelope(msg.Headers(), msg.Data())
	var ap *events.Approval
	if err == nil {
		ap, err = events.DecodeApproval(env.Data)
	}
	if err != nil {
		yield()
		b.log.Warn().Str("action_id", id).Msg("an approval message is not a readable decision; dead-lettered")
		b.apply(msg, b.deadLetter(ctx, msg, md, errors.New("not a readable approval decision: "+err.Error())))
		return
	}
	j := b.newJob(msg, md, id)
	j.yield = yield
	if env.Traceparent != "" {
		j.trace = events.TraceContext{Traceparent: env.Traceparent, Tracestate: env.Tracestate}
	}
	d := b.serve(ctx, j, func(ctx context.Context) decision {
		if d, ok := j.decideRun(ctx, msg, md, env, ap); ok {
			return d
		}
		choose := func(r kvstore.Record) kvstore.Decision {
			switch {
			case b.now().After(r.ExpiresAt):
				j.approval = "expired"
				return kvstore.Decision{Decision: kvstore.DecisionExpired}
			case ap.Decision == events.DecisionDeny:
				j.approval = "deny"
				return kvstore.Decision{Decision: kvstore.DecisionDeny, Approver: ap.Approver, Reason: ap.Reason}
			case ap.InputSHA256 != r.InputSHA256:
				j.approval = "mismatch"
				return kvstore.Decision{Decision: kvstore.DecisionMismatch, Approver: ap.Approver}
			}
			j.approval = "approve"
			return kvstore.Decision{Decision: kvstore.DecisionApprove, Approver: ap.Approver}
		}
		j.deadline = b.now().Add(b.cfg.Lease) // until the record tells the action's own deadline
		out, err := j.begin(ctx, func(ctx context.Context) (kvstore.Outcome, error) {
			return b.ledger.Decide(ctx, id, j.owner, choose, j.yieldWorker)
		})
		if errors.Is(err, kvstore.ErrNotFound) || errors.Is(err, kvstore.ErrNotParked) {
			return j.earlyDecision(ctx, msg, md)
		}
		if err != nil {
			return j.infra(err)
		}
		return j.runDecided(ctx, out)
	})
	if m := b.metrics; m != nil && j.approval != "" {
		m.approvals.WithLabelValues(j.approval).Inc()
	}
	b.apply(msg, d)
}

// runDecided carries on an action after Decide (or a takeover of a decided one).
func (j *job) runDecided(ctx context.Context, out kvstore.Outcome) decision {
	if out.Claim != nil {
		j.claim.Store(out.Claim)
		if d, ok := j.resume(ctx, out.Claim.Record()); !ok {
			return d
		}
	}
	if d, done := j.onOutcome(ctx, out); done {
		return d
	}
	return j.proceed(ctx)
}

// resume fills the job in from a formerly parked action's record. ok false means d
// settles the action (the record cannot be resumed).
func (j *job) resume(ctx context.Context, rec kvstore.Record) (decision, bool) {
	b := j.b
	ep, op, ok := events.ParseCapabilityID(rec.CapabilityID)
	endpoint, known := b.eps[ep]
	spec, known2 := lookupOp(op)
	j.endpointID, j.op, j.capID, j.spec, j.ep, j.inputHash = ep, op, rec.CapabilityID, spec, endpoint, rec.InputSHA256
	j.env = &events.Envelope{ID: rec.ActionID, Data: rec.Action}
	j.deadline = b.now().Add(timeoutFor(spec, nil))
	a, err := events.DecodeAction(rec.Action)
	if err == nil {
		j.action = a
		j.deadline = b.now().Add(timeoutFor(spec, a))
		if a.IdempotencyKey != "" {
			j.idemKey = kvstore.IdempotencyKey(rec.CapabilityID, a.IdempotencyKey)
		}
	}
	if !ok || !known || !known2 || err != nil {
		b.log.Error().Str("action_id", rec.ActionID).Msg("a parked action record cannot be resumed")
		return j.settle(ctx, failedResult(j, invalidAction("", "the parked action cannot be resumed"))), false
	}
	p, err := hermes.Prepare(j.request())
	if err != nil {
		return j.settle(ctx, failedResult(j, clientErrorInfo(err, true))), false
	}
	j.prepared = p
	return decision{}, true
}

// sweeper expires parked actions and finishes the ones whose expiry or cancel a
// replica left half done. Every replica runs one; compare-and-set on the records makes
// exactly one of them settle each action.
type sweeper struct {
	b *Bridge
	// busy holds the ids a takeover is running for (at most maxTakeovers at once).
	mu   sync.Mutex
	busy map[string]bool
	wg   sync.WaitGroup
}

const maxTakeovers = 4

// sweepEvery is how often the sweeper looks: a tenth of the approval window, between
// 100 ms and 10 s. A parked action settles approval_expired at most sweepEvery after its
// expiry while any replica runs.
func (b *Bridge) sweepEvery() time.Duration {
	return min(max(b.cfg.ApprovalTTL/10, 100*time.Millisecond), 10*time.Second)
}

// run sweeps until ctx ends, then waits for the takeovers it started.
func (s *sweeper) run(ctx context.Context) {
	defer s.wg.Wait()
	t := time.NewTicker(s.b.sweepEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweep(ctx)
		}
	}
}

func (s *sweeper) sweep(ctx context.Context) {
	b := s.b
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
		if err != nil {
			// Not found may be a stale read (a direct get answered by a replica that is
			// behind): never drop the index on it. An index whose action record expired
			// expires with it (same bucket TTL).
			continue
		}
		r := e.Record
		if le, err := b.ledger.Log().Last(ctx, id); err == nil && le.Terminal {
			_ = b.store.Delete(ctx, k, idx.Revision) // settled; the index entry is stale
			continue
		}
		switch {
		case r.State == kvstore.StateParked:
		case r.Decision == kvstore.DecisionExpired || r.Decision == kvstore.DecisionCancel:
			// An expiry or cancel whose replica stopped before settling: no message
			// will come back for it, so the sweeper takes it over (after its lease).
		default:
			continue // parking ended by a decision: the decision's message owns it
		}
		s.start(ctx, id)
	}
}

// start settles action id in its own goroutine (a takeover waits out a lease), unless
// one runs for it already or maxTakeovers do.
func (s *sweeper) start(ctx context.Context, id string) {
	s.mu.Lock()
	if s.busy == nil {
		s.busy = map[string]bool{}
	}
	if s.busy[id] || len(s.busy) >= maxTakeovers {
		s.mu.Unlock()
		return
	}
	s.busy[id] = true
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { s.mu.Lock(); delete(s.busy, id); s.mu.Unlock() }()
		s.b.expire(ctx, id)
	}()
}

// expire settles one parked (or half-expired) action approval_expired, through serve.
func (b *Bridge) expire(ctx context.Context, id string) {
	j := b.newJob(nil, nil, id)
	b.serve(ctx, j, func(ctx context.Context) decision {
		j.deadline = b.now().Add(b.cfg.Lease)
		out, err := j.begin(ctx, func(ctx context.Context) (kvstore.Outcome, error) {
			return b.ledger.Decide(ctx, id, j.owner, func(kvstore.Record) kvstore.Decision { return kvstore.Decision{Decision: kvstore.DecisionExpired} }, nil)
		})
		if err != nil {
			j.setStatus("sweep_failed", "")
			return nakAfter(0) // nothing to acknowledge: the next sweep tries again
		}
		return j.runDecided(ctx, out)
	})
}
