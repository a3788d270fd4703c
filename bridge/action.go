package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// Default action deadlines (CONTRACT §8).
const (
	defaultJSONTimeout   = 60 * time.Second
	defaultStreamTimeout = 300 * time.Second
)

// job is one delivery of one action message. Its methods run on the handler goroutine,
// except renewLease, which the heartbeat goroutine calls; mu guards the claim state.
type job struct {
	b     *Bridge
	msg   jetstream.Msg
	md    *jetstream.MsgMetadata
	env   *events.Envelope
	start time.Time

	actionID   string
	endpointID string
	op         string
	capID      string
	spec       hermes.Spec
	ep         *endpoint
	action     *events.Action
	prepared   *hermes.Prepared // the mapped request, from validation
	inputHash  string
	deadline   time.Time
	trace      events.TraceContext

	// cctx is cancelled by a cancel request for the action (cause errCancelRequested);
	// the call to Hermes and the waits use it, the records use the work context.
	cctx    context.Context
	running *running // this delivery in the bridge's registry, nil outside handle

	mu         sync.Mutex
	actRev     uint64
	actRec     kvstore.Record
	key        string // scoped idempotency key, "" when the action has none
	keyRev     uint64
	keyState   kvstore.State // the key record's state while owned
	owned      bool          // this job holds the key claim
	dispatched bool          // this job marked the action dispatched (the request may go out)

	// outcome, for the log line
	status   string
	code     string
	replayOf string
}

// decision is what to do with the message once the job returns. Exactly one place
// (apply) turns it into Ack, NakWithDelay or TermWithReason.
type decision struct {
	kind   decisionKind
	delay  time.Duration
	reason string
}

type decisionKind int

const (
	ack decisionKind = iota
	nak
	term
)

func ackIt() decision                   { return decision{kind: ack} }
func nakAfter(d time.Duration) decision { return decision{kind: nak, delay: d} }
func termWith(reason string) decision   { return decision{kind: term, reason: reason} }
func (d decision) String() string       { return [...]string{"ack", "nak", "term"}[d.kind] }
func (j *job) delivery() int {
	if j.md == nil { // the approval sweeper works without a message
		return 0
	}
	return int(j.md.NumDelivered)
}
func (j *job) lastAttempt() bool { return j.attempt() >= j.b.cfg.MaxAttempts || j.finalDelivery() }

// finalDelivery reports whether JetStream will not deliver this message again (a finite
// MaxDeliver is reached): the action must settle now, whatever the retry budget says.
func (j *job) finalDelivery() bool {
	return j.b.cfg.MaxDeliver > 0 && j.delivery() >= j.b.cfg.MaxDeliver
}
func (j *job) remaining() time.Duration { return time.Until(j.deadline) }
func (j *job) infra(err error) decision { return j.retryLater(err, "infrastructure") }
func (j *job) setStatus(s, code string) { j.status, j.code = s, code }
func (j *job) resultSubject() string    { return j.b.subjects.Results(j.actionID) }
func (j *job) leaseUntil() time.Time    { return j.b.now().Add(j.b.cfg.Lease) }
func (j *job) actKey() string           { return kvstore.ActionKey(j.actionID) }
func (j *job) owner() string            { return j.b.cfg.ReplicaID }
func (j *job) safe() bool               { return j.spec.Safe }

// cancelCtx is the context a cancel request cancels (the work context outside handle).
func (j *job) cancelCtx() context.Context {
	if j.cctx != nil {
		return j.cctx
	}
	return j.b.workCtx
}

// attempt is the number of this attempt at calling Hermes for the action (1-based),
// kept in the action record so that deliveries spent waiting do not count.
func (j *job) attempt() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return max(j.actRec.Attempt, 1)
}

func timeoutFor(spec hermes.Spec, a *events.Action) time.Duration {
	if a != nil && a.TimeoutMS != nil && *a.TimeoutMS > 0 {
		return time.Duration(*a.TimeoutMS) * time.Millisecond
	}
	if spec.Stream {
		return defaultStreamTimeout
	}
	return defaultJSONTimeout
}

// handle processes one delivery end to end and acknowledges it exactly once.
func (b *Bridge) handle(ctx context.Context, msg jetstream.Msg) {
	start := b.now()
	md, err := msg.Metadata()
	if err != nil {
		_ = msg.TermWithReason("not a JetStream message")
		return
	}
	if _, perr := b.subjects.ParseApprovals(msg.Subject()); perr == nil {
		b.apply(ctx, msg, b.handleApproval(ctx, msg, md))
		return
	}
	env, err := events.DecodeEnvelope(msg.Headers(), msg.Data())
	if env == nil || env.ID == "" {
		if err == nil {
			err = errors.New("no usable id")
		}
		b.apply(ctx, msg, b.deadLetter(ctx, msg, md, err))
		return
	}
	j := &job{b: b, msg: msg, md: md, env: env, start: start, actionID: env.ID,
		trace: events.TraceContext{Traceparent: env.Traceparent, Tracestate: env.Tracestate}}
	// A cancel request for this action cancels jctx with errCancelRequested.
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	j.cctx = jctx
	unregister := b.register(j, cancel)
	defer unregister()
	b.hook(PointDelivered, j.actionID)
	unbeat := b.beats.add(j)
	d := j.run(ctx, err)
	unbeat()
	b.apply(ctx, msg, d)
	b.logOutcome(j, d, start)
}

// logOutcome writes the one log line of an action's delivery: ids, status, timing and
// the decision; never content, keys or session identifiers.
func (b *Bridge) logOutcome(j *job, d decision, start time.Time) {
	ev := b.log.Info()
	if d.kind != ack {
		ev = b.log.Warn()
	}
	ev = ev.Str("action_id", j.actionID).Str("capability", j.capID).Str("status", j.status).
		Float64("duration_ms", float64(b.now().Sub(start).Microseconds())/1000).Int("attempt", j.attempt()).Int("delivery", j.delivery()).Str("decision", d.String())
	if j.code != "" {
		ev = ev.Str("code", j.code)
	}
	if j.replayOf != "" {
		ev = ev.Str("replay_of", j.replayOf)
	}
	if d.kind == nak {
		ev = ev.Dur("retry_in", d.delay)
	}
	if d.reason != "" {
		ev = ev.Str("reason", d.reason)
	}
	ev.Msg("action")
}

// detached returns a context that survives the cancellation of ctx (shutdown) but is
// bounded, for the writes that end an action: storing, publishing and acknowledging.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// apply is the single place where a delivery is acknowledged.
func (b *Bridge) apply(ctx context.Context, msg jetstream.Msg, d decision) {
	var err error
	switch d.kind {
	case ack:
		// A plain ack is enough: the result is already durable, and a lost ack only
		// means a redelivery that finds the action settled and acks again.
		err = msg.Ack()
	case nak:
		err = msg.NakWithDelay(d.delay)
	case term:
		err = msg.TermWithReason(d.reason)
	}
	if err != nil {
		b.log.Warn().Err(err).Str("decision", d.String()).Msg("acknowledgement failed; the message will be redelivered")
	}
}

// run decides the fate of an identified action. decodeErr is the envelope error for a
// readable CloudEvent whose other attributes are wrong.
func (j *job) run(ctx context.Context, decodeErr error) decision {
	b := j.b
	// Identify: subject -> endpoint, operation, capability.
	ep, op, perr := b.subjects.ParseAction(j.msg.Subject())
	j.endpointID, j.op = ep, op
	j.capID = events.CapabilityID(ep, op)
	j.spec, _ = hermes.Lookup(op)
	var invalid *events.ErrorInfo
	var attrErr *events.AttributeError
	if errors.As(decodeErr, &attrErr) {
		invalid = invalidAction(attrErr.Attribute, attrErr.Reason)
	} else if decodeErr != nil {
		invalid = invalidAction("", decodeErr.Error())
	} else if perr != nil {
		invalid = invalidAction("subject", perr.Error())
	}
	var action *events.Action
	if invalid == nil {
		a, err := events.DecodeAction(j.env.Data)
		if err != nil {
			invalid = actionErrorInfo(err)
		} else {
			action = a
			j.action = a
		}
	}
	if action != nil {
		if h, err := events.InputSHA256(action.Input); err == nil {
			j.inputHash = h
		} else {
			invalid = invalidAction("input", "input is not valid JSON")
		}
	}
	j.deadline = j.md.Timestamp.Add(timeoutFor(j.spec, action))

	// A paused endpoint: wait without touching any record while the pause ends before
	// the action's deadline (otherwise the action is claimed and settled below).
	if ep, ok := b.eps[j.endpointID]; ok && invalid == nil {
		if ok, wait := ep.brk.pausedFor(b.now()); ok && wait < j.remaining() && !j.finalDelivery() {
			j.setStatus("paused", "")
			return nakAfter(pauseDelay(wait, j.remaining()))
		}
	}

	// The action id is a dedup unit of its own: claim it before anything else happens.
	if d, done := j.claimAction(ctx); done {
		return d
	}
	b.hook(PointClaimed, j.actionID)
	if cancelRequested(j.cancelCtx()) {
		return j.settleCancelled(ctx, false)
	}
	if invalid == nil {
		invalid = j.validate()
	}
	if invalid != nil {
		return j.settle(ctx, failedResult(j, invalid))
	}
	if j.spec.Approval {
		ok, info := j.preApproval()
		switch {
		case info != nil:
			return j.settle(ctx, failedResult(j, info))
		case !ok:
			return j.park(ctx)
		}
	}
	return j.execute(ctx)
}

// validate checks everything about an identified action that needs no I/O.
func (j *job) validate() *events.ErrorInfo {
	b, a := j.b, j.action
	ep, ok := b.eps[j.endpointID]
	if !ok {
		return invalidAction("subject", fmt.Sprintf("unknown endpoint %q", j.endpointID))
	}
	j.ep = ep
	if _, ok := hermes.Lookup(j.op); !ok {
		return invalidAction("subject", fmt.Sprintf("unknown operation %q", j.op))
	}
	if a.CapabilityID != "" && a.CapabilityID != j.capID {
		return invalidAction("capability_id", "capability_id does not match the subject's capability "+j.capID)
	}
	if j.env.Subject != "" && j.env.Subject != j.capID {
		return invalidAction("subject", "the CloudEvent subject does not match the capability "+j.capID)
	}
	if err := schemas.ValidateAction(j.op, j.env.Data); err != nil {
		return actionErrorInfo(err)
	}
	p, err := hermes.Prepare(j.request())
	if err != nil {
		return clientErrorInfo(err, true)
	}
	j.prepared = p
	if j.spec.KeyRequired && a.IdempotencyKey == "" {
		return &events.ErrorInfo{Code: "idempotency_key_required", Category: "policy",
			Message: j.op + " requires an idempotency_key", Details: map[string]any{"operation": j.op}}
	}
	if t := ep.cfg.TenantID; t != "" && a.TenantID != t {
		return &events.ErrorInfo{Code: "tenant_mismatch", Category: "auth",
			Message: "the action's tenant is not admitted to endpoint " + j.endpointID}
	}
	return nil
}

func (j *job) request() hermes.Request {
	r := hermes.Request{Operation: j.op, Input: j.action.Input, IdempotencyKey: j.action.IdempotencyKey}
	if j.trace.Traceparent != "" {
		r.Header = map[string][]string{"Traceparent": {j.trace.Traceparent}}
		if j.trace.Tracestate != "" {
			r.Header["Tracestate"] = []string{j.trace.Tracestate}
		}
	}
	return r
}

// claimAction creates the action record, or decides what a redelivery or duplicate
// must do. done is false when this job now owns the action and should go on.
func (j *job) claimAction(ctx context.Context) (decision, bool) {
	b := j.b
	if j.action != nil && j.action.IdempotencyKey != "" {
		j.key = kvstore.IdempotencyKey(j.capID, j.action.IdempotencyKey)
	}
	rec := kvstore.Record{State: kvstore.StateClaimed, ActionID: j.actionID, CapabilityID: j.capID,
		InputSHA256: j.inputHash, Owner: j.owner(), LeaseUntil: j.leaseUntil(), Attempt: 1, IdemKey: j.key,
		CreatedAt: b.now()}
	rev, err := b.store.Create(ctx, j.actKey(), rec)
	if err == nil {
		j.mu.Lock()
		j.actRev, j.actRec = rev, rec
		j.mu.Unlock()
		return decision{}, false
	}
	if !errors.Is(err, kvstore.ErrExists) {
		return j.infra(err), true
	}
	for {
		e, err := b.store.Get(ctx, j.actKey())
		if errors.Is(err, kvstore.ErrNotFound) {
			// Released between Create and Get (a retry in progress): try again later.
			return nakAfter(b.cfg.RetryBase), true
		}
		if err != nil {
			return j.infra(err), true
		}
		switch {
		case e.Record.State == kvstore.StateSettled:
			j.setStatus("duplicate", "")
			return j.republish(ctx, e.Record), true
		case e.Record.State == kvstore.StateParked:
			// Parked by an earlier delivery: make sure its pending result is out (a crash
			// may have come between parking and publishing it), and leave it to the
			// decision or the expiry.
			j.setStatus("duplicate:"+events.StatusPendingApproval, "")
			if j.action != nil {
				if err := j.publishPending(ctx, e.Record.ExpiresAt); err != nil {
					return j.infra(err), true
				}
			}
			return ackIt(), true
		case !e.Record.LeaseExpired(b.now()):
			// Another delivery holds it: wait for it to settle, then republish.
			we, err := j.waitSettled(ctx, j.actKey(), e.Revision)
			if err != nil {
				return j.retryLater(err, "original still in flight"), true
			}
			if we.Record.State == kvstore.StateSettled {
				j.setStatus("duplicate", "")
				return j.republish(ctx, we.Record), true
			}
			continue
		}
		// The owner is gone, or released the claim to retry. Take it over with CAS.
		prev := e.Record
		rec.CreatedAt, rec.State, rec.Attempt = prev.CreatedAt, kvstore.StateClaimed, prev.Attempt+1
		if !j.safe() {
			sent, err := b.mayHaveSent(ctx, prev)
			if err != nil {
				return j.infra(err), true
			}
			if sent {
				// The request may have reached Hermes: never resend an unsafe call.
				rec.State = kvstore.StateDispatched
			}
		}
		rev, err := b.store.Update(ctx, j.actKey(), rec, e.Revision)
		if errors.Is(err, kvstore.ErrConflict) {
			continue
		}
		if err != nil {
			return j.infra(err), true
		}
		j.mu.Lock()
		j.actRev, j.actRec = rev, rec
		j.mu.Unlock()
		if rec.State == kvstore.StateDispatched {
			// The key record (if any) keeps pointing at this action; its waiters read the
			// outcome_unknown result from this action's record.
			return j.settle(ctx, failedResult(j, outcomeUnknown())), true
		}
		return decision{}, false
	}
}

// mayHaveSent reports whether the action of record rec may have reached Hermes: its
// record says dispatched, or (a keyed action) its idempotency record, which carries
// the write-ahead mark for keyed actions, is held by the action and says dispatched,
// or was settled for it by a duplicate that found its owner dead after dispatch.
func (b *Bridge) mayHaveSent(ctx context.Context, rec kvstore.Record) (bool, error) {
	if rec.State == kvstore.StateDispatched {
		return true, nil
	}
	if rec.IdemKey == "" {
		return false, nil
	}
	ke, err := b.store.Get(ctx, rec.IdemKey)
	if errors.Is(err, kvstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return ke.Record.ActionID == rec.ActionID &&
		(ke.Record.State == kvstore.StateDispatched || ke.Record.State == kvstore.StateSettled), nil
}

// claimKey tries once to create the action's idempotency record. It is called with
// the endpoint's slot held and the breaker's permission, right before the request: for
// an unsafe operation the record is created "dispatched", so that this one write is
// both the key's claim and the write-ahead mark. claimed is false when the key is held
// already (resolveKey decides then).
func (j *job) claimKey(ctx context.Context) (claimed bool, err error) {
	b := j.b
	state := kvstore.StateClaimed
	if !j.safe() {
		state = kvstore.StateDispatched
	}
	rec := kvstore.Record{State: state, ActionID: j.actionID, CapabilityID: j.capID,
		InputSHA256: j.inputHash, Owner: j.owner(), CreatedAt: b.now()}
	rev, err := b.store.Create(ctx, j.key, rec)
	if errors.Is(err, kvstore.ErrExists) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	j.keyRev, j.keyState, j.owned = rev, state, true
	return true, nil
}

// resolveKey decides what an action does about a key that another record holds: it
// replays a settled original, refuses a different input, waits for an original in
// flight, or takes over its own earlier delivery's claim. done is false when the
// caller should go on: with the key owned (j.owned), or to try claiming it again.
func (j *job) resolveKey(ctx context.Context) (decision, bool) {
	b := j.b
	for {
		e, err := b.store.Get(ctx, j.key)
		if errors.Is(err, kvstore.ErrNotFound) {
			return decision{}, false // released meanwhile: claim it
		}
		if err != nil {
			return j.infra(err), true
		}
		if e.Record.ActionID == j.actionID {
			// Our own earlier delivery claimed it.
			j.keyRev, j.keyState, j.owned = e.Revision, e.Record.State, true
			switch {
			case e.Record.State == kvstore.StateSettled:
				return j.settleOwn(ctx, e.Record), true
			case e.Record.State == kvstore.StateDispatched && !j.safe():
				// That delivery may have sent the request: never resend it.
				return j.settle(ctx, failedResult(j, outcomeUnknown())), true
			}
			return decision{}, false
		}
		if e.Record.InputSHA256 != j.inputHash {
			return j.settle(ctx, failedResult(j, &events.ErrorInfo{Code: "idempotency_conflict", Category: "policy",
				Message: "the idempotency key was already used with a different input",
				Details: map[string]any{"original_action_id": e.Record.ActionID}})), true
		}
		if e.Record.State == kvstore.StateSettled {
			return j.settleReplay(ctx, e.Record), true
		}
		// Same key, same input, not settled: the original is in flight, or settled in
		// its own record only. Wait for it, then replay.
		we, err := j.waitKey(j.cancelCtx(), e)
		if err != nil {
			if errors.Is(err, errOwnerGone) {
				return decision{}, false // released or taken over: try to claim again
			}
			if cancelRequested(j.cancelCtx()) {
				return j.settleCancelled(ctx, false), true
			}
			if j.remaining() <= 0 {
				return j.settle(ctx, failedResult(j, deadlineExceeded(false))), true
			}
			return j.retryLater(err, "waiting for the original action"), true
		}
		return j.settleReplay(ctx, we.Record), true
	}
}

var errOwnerGone = errors.New("bridge: the key's owner is gone")

// waitKey waits for the action that holds the key record e to settle, watching that
// action's own record (its owner never writes the key record again after claiming it).
// Once the owner has settled, its result is copied into the key record (finishKey), so
// that later duplicates find it there in one read. An owner whose claim expired is
// taken over: one that may have sent an unsafe request settles the key as
// outcome_unknown; one that never reached Hermes (or a safe one) releases the key
// (errOwnerGone: the caller claims it again).
func (j *job) waitKey(ctx context.Context, e kvstore.Entry) (kvstore.Entry, error) {
	b := j.b
	ownerKey := kvstore.ActionKey(e.Record.ActionID)
	oe, oerr := b.store.Get(ctx, ownerKey)
	for {
		if oerr != nil && !errors.Is(oerr, kvstore.ErrNotFound) {
			return kvstore.Entry{}, oerr
		}
		switch {
		case oerr == nil && oe.Record.State == kvstore.StateSettled:
			return j.finishKey(ctx, e, oe.Record.Result)
		case oerr == nil && oe.Record.LeaseExpired(b.now()) && !j.safe() &&
			(oe.Record.State == kvstore.StateDispatched || e.Record.State == kvstore.StateDispatched):
			res := &events.Result{ActionID: e.Record.ActionID, CapabilityID: j.capID, Status: "failed", Error: outcomeUnknown()}
			raw, err := json.Marshal(res)
			if err != nil {
				return kvstore.Entry{}, err
			}
			return j.finishKey(ctx, e, raw)
		case oerr != nil || oe.Record.LeaseExpired(b.now()):
			// The owner never reached Hermes (or the call is safe): free the key.
			if err := b.store.Delete(ctx, j.key, e.Revision); err != nil && !errors.Is(err, kvstore.ErrConflict) {
				return kvstore.Entry{}, err
			}
			return kvstore.Entry{}, errOwnerGone
		}
		// The owner is alive: wait for its record to change (a settle, a lease renewal or
		// a release), at most a heartbeat, then look again.
		wctx, cancel := context.WithTimeout(ctx, min(b.cfg.Heartbeat, max(j.remaining(), time.Millisecond)))
		we, err := b.store.Wait(wctx, ownerKey, oe.Revision)
		cancel()
		switch {
		case err == nil:
			oe = we
		case errors.Is(err, kvstore.ErrNotFound):
			oe, oerr = kvstore.Entry{}, err
		case ctx.Err() != nil || j.remaining() <= 0:
			return kvstore.Entry{}, err
		default: // the wait timed out: read both records again
			ne, kerr := b.store.Get(ctx, j.key)
			switch {
			case errors.Is(kerr, kvstore.ErrNotFound):
				return kvstore.Entry{}, errOwnerGone
			case kerr != nil:
				return kvstore.Entry{}, kerr
			case ne.Record.State == kvstore.StateSettled:
				return ne, nil
			case ne.Record.ActionID != e.Record.ActionID:
				return kvstore.Entry{}, errOwnerGone // taken over: look at the new owner
			}
			e = ne
			oe, oerr = b.store.Get(ctx, ownerKey)
		}
	}
}

// finishKey settles a key record that its owner left unsettled, with the owner's
// stored result (raw). A result that is retryable and certain is not kept: the key is
// released instead (errOwnerGone). Returns the settled key entry.
func (j *job) finishKey(ctx context.Context, e kvstore.Entry, raw json.RawMessage) (kvstore.Entry, error) {
	b := j.b
	var r events.Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return kvstore.Entry{}, fmt.Errorf("stored result of %s is unreadable: %w", e.Record.ActionID, err)
	}
	if r.Error != nil && r.Error.Retryable && !r.Error.UncertainOutcome {
		if err := b.store.Delete(ctx, j.key, e.Revision); err != nil && !errors.Is(err, kvstore.ErrConflict) {
			return kvstore.Entry{}, err
		}
		return kvstore.Entry{}, errOwnerGone
	}
	rec := e.Record
	rec.State, rec.Result = kvstore.StateSettled, raw
	rev, err := b.store.Update(ctx, j.key, rec, e.Revision)
	if errors.Is(err, kvstore.ErrConflict) {
		ne, gerr := b.store.Get(ctx, j.key)
		if gerr != nil {
			return kvstore.Entry{}, errOwnerGone
		}
		if ne.Record.State == kvstore.StateSettled {
			return ne, nil
		}
		return kvstore.Entry{}, errOwnerGone // someone else owns it now: start over
	}
	if err != nil {
		return kvstore.Entry{}, err
	}
	return kvstore.Entry{Key: j.key, Record: rec, Revision: rev}, nil
}

// waitSettled waits for key to reach a revision after rev, bounded by the lease and deadline.
func (j *job) waitSettled(ctx context.Context, key string, rev uint64) (kvstore.Entry, error) {
	d := min(j.b.cfg.Lease, max(j.remaining(), j.b.cfg.Heartbeat))
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return j.b.store.Wait(wctx, key, rev)
}

// execute calls Hermes, with retries for failures that are certain not to have started
// (and, for safe operations, transport errors and 5xx), under the endpoint's concurrency
// limit and circuit breaker.
func (j *job) execute(ctx context.Context) decision {
	b := j.b
	if j.remaining() <= 0 {
		return j.settle(ctx, failedResult(j, deadlineExceeded(false)))
	}
	cctx, cancel := context.WithDeadline(j.cancelCtx(), j.deadline)
	defer cancel()
	for {
		if d, ok := j.acquireSlot(ctx, cctx); !ok {
			return d
		}
		if ok, wait := j.ep.brk.allow(b.now()); !ok {
			<-j.ep.sem
			if wait >= j.remaining() || j.finalDelivery() {
				_, _, code := j.ep.brk.pause(b.now())
				return j.settle(ctx, failedResult(j, endpointPaused(code)))
			}
			j.setStatus("paused", "")
			return j.release(ctx, false, nakAfter(pauseDelay(wait, j.remaining())))
		}
		if j.key == "" || j.owned {
			break
		}
		// Claim the key last, right before the request: for an unsafe call this write is
		// also the write-ahead mark.
		claimed, err := j.claimKey(ctx)
		if claimed {
			break
		}
		j.ep.brk.abandon()
		<-j.ep.sem
		if err != nil {
			return j.infra(err)
		}
		if d, done := j.resolveKey(ctx); done {
			return d
		}
	}
	defer func() { <-j.ep.sem }()

	if !j.safe() {
		// Write ahead: from here the request may reach Hermes.
		if err := j.markDispatched(ctx); err != nil {
			j.ep.brk.abandon()
			return j.infra(err)
		}
		b.hook(PointDispatched, j.actionID)
	}
	var pub *eventPublisher
	var onEvent func(hermes.Event) error
	if j.spec.Stream {
		pub = newEventPublisher(b.js, j)
		onEvent = pub.publish
	}
	res, err := j.ep.client.Send(cctx, j.prepared, onEvent)
	if pub != nil {
		if perr := pub.flush(ctx); perr != nil && err == nil {
			err = perr
		}
	}
	j.ep.brk.done(b.now(), err)
	if err != nil && res == nil && cancelRequested(cctx) {
		// The HTTP request was aborted on request: certain only if nothing was sent.
		var he *hermes.Error
		return j.settleCancelled(ctx, !(errors.As(err, &he) && he.NotStarted))
	}
	if err != nil && ctx.Err() != nil && res == nil {
		// Shutdown interrupted the call: a safe call or one certain not to have started
		// is released for another replica; an unsafe one may have reached Hermes.
		var he *hermes.Error
		if j.safe() || (errors.As(err, &he) && he.NotStarted) {
			return j.release(ctx, false, nakAfter(b.cfg.RetryBase))
		}
		info := outcomeUnknown()
		info.Details = map[string]any{"reason": "the bridge shut down while the call was in flight"}
		return j.settle(ctx, failedResult(j, info))
	}
	var he *hermes.Error
	if res == nil && errors.As(err, &he) && he.Retryable(j.safe()) {
		delay := backoff(b.cfg.RetryBase, b.cfg.RetryMax, j.attempt(), he.RetryAfter)
		if !j.lastAttempt() && delay < j.remaining() {
			j.setStatus("retrying", he.Code)
			return j.release(ctx, true, nakAfter(delay))
		}
	}
	return j.settle(ctx, resultOf(j, res, err))
}

// acquireSlot takes one of the endpoint's concurrency slots. When it cannot (the action
// was cancelled, its deadline passed, or the bridge is shutting down) it returns the
// decision that ends this delivery and ok false.
func (j *job) acquireSlot(ctx, cctx context.Context) (d decision, ok bool) {
	select {
	case j.ep.sem <- struct{}{}:
		return decision{}, true
	case <-cctx.Done():
		if cancelRequested(cctx) {
			return j.settleCancelled(ctx, false), false
		}
		if ctx.Err() != nil {
			return j.release(ctx, false, nakAfter(j.b.cfg.RetryBase)), false
		}
		return j.settle(ctx, failedResult(j, deadlineExceeded(false))), false
	}
}

// markDispatched records that the request may reach Hermes from now on. A keyed action
// whose claim was created for this call carries the mark already; one that took over
// an earlier claim updates the key record; an action without a key updates its own.
func (j *job) markDispatched(ctx context.Context) error {
	b := j.b
	switch {
	case j.owned && j.keyState == kvstore.StateDispatched:
	case j.owned:
		rec := kvstore.Record{State: kvstore.StateDispatched, ActionID: j.actionID, CapabilityID: j.capID,
			InputSHA256: j.inputHash, Owner: j.owner(), CreatedAt: j.start}
		rev, err := b.store.Update(ctx, j.key, rec, j.keyRev)
		if err != nil {
			return err
		}
		j.keyRev, j.keyState = rev, kvstore.StateDispatched
	default:
		if err := j.updateAction(ctx, func(r *kvstore.Record) { r.State = kvstore.StateDispatched }); err != nil {
			return err
		}
	}
	j.dispatched = true
	return nil
}

// pauseDelay is how long an action waits for a paused endpoint: until the pause ends,
// with jitter so that the waiting actions do not all come back at once, but never past
// the action's deadline (then it settles deadline_exceeded).
func pauseDelay(wait, remaining time.Duration) time.Duration {
	d := wait + rand.N(wait/4+time.Millisecond)
	if remaining > 0 && d > remaining {
		d = remaining
	}
	return max(d, time.Millisecond)
}

// release gives up this delivery's claims so that a later delivery (of this message or
// a duplicate) starts afresh. counted says whether this delivery spent an attempt.
func (j *job) release(ctx context.Context, counted bool, d decision) decision {
	b := j.b
	ctx, cancel := detached(ctx)
	defer cancel()
	if j.owned {
		if err := b.store.Delete(ctx, j.key, j.keyRev); err != nil && !errors.Is(err, kvstore.ErrConflict) {
			b.log.Warn().Err(err).Str("action_id", j.actionID).Msg("releasing the idempotency claim failed")
		}
		j.owned = false
	}
	// Keep the record (it counts the attempts) but give up the lease: the next delivery
	// takes the claim over. Nothing was sent, so the state goes back to claimed.
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.actRev != 0 {
		rec := j.actRec
		rec.State, rec.LeaseUntil = kvstore.StateClaimed, time.Time{}
		if !counted {
			rec.Attempt = max(rec.Attempt-1, 0)
		}
		if _, err := b.store.Update(ctx, j.actKey(), rec, j.actRev); err != nil && !errors.Is(err, kvstore.ErrConflict) {
			b.log.Warn().Err(err).Str("action_id", j.actionID).Msg("releasing the action claim failed")
		}
		j.actRev = 0
	}
	return d
}

// retryLater naks for a bridge-side failure (KV or publish). On the final delivery it
// still tries to end the action with a terminal result, published without the store.
func (j *job) retryLater(err error, what string) decision {
	j.setStatus("retrying", "")
	j.b.log.Warn().Err(err).Str("action_id", j.actionID).Str("while", what).Msg("retrying action later")
	if j.finalDelivery() {
		return j.lastResort(what)
	}
	return nakAfter(backoff(j.b.cfg.RetryBase, j.b.cfg.RetryMax, j.attempt(), 0))
}

// lastResort publishes a failed result for an action on its final delivery when the
// bridge's own storage failed, so that the action still ends. Whether Hermes may have
// been called is taken from the claim this job holds.
func (j *job) lastResort(what string) decision {
	j.mu.Lock()
	dispatched := j.actRec.State == kvstore.StateDispatched || j.dispatched
	j.mu.Unlock()
	info := &events.ErrorInfo{Code: "internal", Category: "connector", UncertainOutcome: dispatched && !j.safe(),
		Message: "the bridge could not record the action before its last delivery",
		Details: map[string]any{"while": what}}
	ctx, cancel := detached(j.b.workCtx)
	defer cancel()
	if err := j.publishResult(ctx, failedResult(j, info)); err != nil {
		j.b.log.Error().Err(err).Str("action_id", j.actionID).Msg("the final delivery could not publish a result")
	}
	j.setStatus("failed", "internal")
	return ackIt()
}

// updateAction applies fn to the action record with CAS.
func (j *job) updateAction(ctx context.Context, fn func(*kvstore.Record)) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	rec := j.actRec
	fn(&rec)
	rev, err := j.b.store.Update(ctx, j.actKey(), rec, j.actRev)
	if err != nil {
		return err
	}
	j.actRev, j.actRec = rev, rec
	return nil
}

// renewLease extends the claim while the job runs; called by the heartbeats.
func (j *job) renewLease(ctx context.Context) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.actRev == 0 || j.actRec.State == kvstore.StateSettled || j.actRec.Owner != j.owner() {
		return
	}
	rec := j.actRec
	rec.LeaseUntil = j.leaseUntil()
	rev, err := j.b.store.Update(ctx, j.actKey(), rec, j.actRev)
	if err == nil {
		j.actRev, j.actRec = rev, rec
	}
}

// settle stores the terminal result in the action record, publishes it and acks. The
// key record it owns keeps naming this action (duplicates read the result from the
// action record), unless the result frees the key. If the store or the publish fails
// the message is redelivered and the stored result (if any) is republished then.
func (j *job) settle(ctx context.Context, res *events.Result) decision {
	b := j.b
	// Settling must finish even when shutdown has cancelled the work context.
	ctx, cancel := detached(ctx)
	defer cancel()
	if j.running != nil {
		j.running.settling.Store(true) // a cancel request now comes too late
	}
	if res.Error != nil {
		j.setStatus(res.Status, res.Error.Code)
	} else {
		j.setStatus(res.Status, "")
	}
	// Encode once: the same bytes are stored in KV and published.
	hdr, raw, err := j.encodeResult(ctx, res)
	if err != nil {
		return j.infra(err)
	}
	j.mu.Lock()
	haveClaim := j.actRev != 0
	j.mu.Unlock()
	if haveClaim {
		err := j.updateAction(ctx, func(r *kvstore.Record) { r.State, r.Result = kvstore.StateSettled, raw })
		if errors.Is(err, kvstore.ErrConflict) {
			// Someone else settled or took over; their result wins.
			e, gerr := b.store.Get(ctx, j.actKey())
			if gerr == nil && e.Record.State == kvstore.StateSettled {
				return j.republish(ctx, e.Record)
			}
			return j.infra(err)
		}
		if err != nil {
			return j.infra(err)
		}
	}
	b.hook(PointStored, j.actionID)
	if j.owned {
		// The key record stays as claimed: it names this action, whose record now holds
		// the result (duplicates read it there). Only a result that is retryable and
		// certain (Hermes never started) frees the key, so that a later action runs.
		if res.Error != nil && res.Error.Retryable && !res.Error.UncertainOutcome {
			if err := b.store.Delete(ctx, j.key, j.keyRev); err != nil && !errors.Is(err, kvstore.ErrConflict) {
				b.log.Warn().Err(err).Str("action_id", j.actionID).Msg("releasing the idempotency claim failed")
			}
		}
		j.owned = false
	}
	if err := publishRetry(ctx, b.js, &nats.Msg{Subject: j.resultSubject(), Header: hdr, Data: raw}); err != nil {
		return j.infra(err)
	}
	b.hook(PointPublished, j.actionID)
	return ackIt()
}

// storedResult decodes the result held in record rec.
func storedResult(rec kvstore.Record) (*events.Result, error) {
	var r events.Result
	if err := json.Unmarshal(rec.Result, &r); err != nil {
		return nil, fmt.Errorf("stored result of %s is unreadable: %w", rec.ActionID, err)
	}
	return &r, nil
}

// settleOwn settles this action with a result stored for it in its key record.
func (j *job) settleOwn(ctx context.Context, rec kvstore.Record) decision {
	r, err := storedResult(rec)
	if err != nil {
		return j.infra(err)
	}
	if r.ActionID != j.actionID {
		return j.replay(ctx, rec.ActionID, r)
	}
	j.owned = false
	return j.settle(ctx, r)
}

// settleReplay settles this action with the original's stored result.
func (j *job) settleReplay(ctx context.Context, orig kvstore.Record) decision {
	r, err := storedResult(orig)
	if err != nil {
		return j.infra(err)
	}
	return j.replay(ctx, orig.ActionID, r)
}

// replay settles this action with r, the result of action origID (or of the action
// r itself replays), marked as its replay.
func (j *job) replay(ctx context.Context, origID string, r *events.Result) decision {
	if r.ReplayOf != nil {
		origID = *r.ReplayOf
	}
	r.ActionID = j.actionID
	r.ReplayOf = &origID
	j.replayOf = origID
	j.owned = false // the key belongs to the original
	return j.settle(ctx, r)
}

// republish publishes an already settled action's result again. The Nats-Msg-Id makes
// it a no-op inside the duplicate window; outside it, the stream is checked first.
func (j *job) republish(ctx context.Context, rec kvstore.Record) decision {
	r, err := storedResult(rec)
	if err != nil {
		return j.infra(err)
	}
	if r.Error != nil {
		j.setStatus("duplicate:"+r.Status, r.Error.Code)
	} else {
		j.setStatus("duplicate:"+r.Status, "")
	}
	if m, err := j.b.output.GetLastMsgForSubject(ctx, j.resultSubject()); err == nil && isTerminalResult(m) {
		return ackIt()
	}
	if err := j.publishResult(ctx, r); err != nil {
		return j.infra(err)
	}
	return ackIt()
}
