package bridge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

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

// job is one attempt at one action: a delivery of its message, a delivery of its
// approval decision, the sweeper expiring it, or a cancel settling it. Every kind is
// built by newJob and runs through Bridge.serve (serve.go), the one way in. Its methods
// run on the goroutine that serves it, except the heartbeat's renew.
type job struct {
	b     *Bridge
	msg   jetstream.Msg // nil for the sweeper and cancel
	md    *jetstream.MsgMetadata
	env   *events.Envelope
	start time.Time
	owner string // this job's name in the records: replica id and a nonce

	actionID   string
	endpointID string
	op         string
	capID      string
	spec       hermes.Spec
	ep         *endpoint
	action     *events.Action
	prepared   *hermes.Prepared // the mapped request, from validation
	inputHash  string
	idemKey    string // the scoped idempotency key's record key, "" for none
	deadline   time.Time
	trace      events.TraceContext

	// cctx is cancelled by a cancel request (cause errCancelRequested) or when the claim
	// is taken over (errLostClaim); the call to Hermes and the waits use it, the records
	// use the work context.
	cctx    context.Context
	cancel  context.CancelCauseFunc
	running *running // this job in the bridge's registry
	// unboundRun: this delivery took over a governed run that an earlier delivery may
	// have posted without storing its id, and posts it again (durable run idempotency);
	// until the run is bound, no failure is certain (a run may exist).
	unboundRun bool

	// keySeen is the key record a one-write start found held by another action: the
	// ordinary path's key claim begins with it (kvstore.Claim.ClaimKeyAfter).
	keySeen *kvstore.Entry

	claim   atomic.Pointer[kvstore.Claim]
	yieldMu sync.Mutex
	yield   func() // gives the dispatcher's worker slot back (once); nil when none is held
	ending  bool   // serve is returning: a yield now is not a wait (under yieldMu)
	waited  bool   // the job gave its slot back to wait: counted in the waiting gauge
	// sent is when the call to Hermes was sent, for the first-event metric
	sent time.Time
	// approval is the outcome of an approval decision message, for its metric
	approval string

	// outcome, for the log line
	status   string
	code     string
	replayOf string
}

// newJob returns a job for action id, served with msg (nil for the sweeper and cancel).
func (b *Bridge) newJob(msg jetstream.Msg, md *jetstream.MsgMetadata, id string) *job {
	return &job{b: b, msg: msg, md: md, start: b.now(), actionID: id, owner: b.cfg.ReplicaID + ":" + nuid.Next()}
}

// decision is what to do with the message once the job returns. Exactly one place
// (apply) turns it into Ack, NakWithDelay or TermWithReason; leave does nothing (the
// message belongs to the delivery that took the claim over).
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
	if j.md == nil { // the sweeper and cancel work without a message
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
func (j *job) safe() bool               { return j.spec.Safe }

// attempt is the number of this attempt at calling Hermes for the action (1-based),
// kept in the action record so that deliveries spent waiting do not count.
func (j *job) attempt() int {
	if c := j.claim.Load(); c != nil {
		return max(c.Record().Attempt, 1)
	}
	return 1
}

// dispatched reports whether this job's claim carries the write-ahead mark.
func (j *job) dispatched() bool {
	c := j.claim.Load()
	return c != nil && c.Dispatched()
}

// yieldWorker gives the dispatcher's worker slot back before a wait that may be long
// (a duplicate waiting for its original, a takeover waiting out a lease), so that the
// waits never stall other actions. The message stays in progress (heartbeats).
func (j *job) yieldWorker() {
	j.yieldMu.Lock()
	y := j.yield
	j.yield = nil
	wait := y != nil && !j.ending
	j.waited = j.waited || wait
	j.yieldMu.Unlock()
	if y != nil {
		y()
	}
	if m := j.b.metrics; m != nil && wait {
		m.waiting.Inc()
	}
}

// finish gives the worker slot back at the end of serve, and takes the job off the
// waiting gauge if it was counted there.
func (j *job) finish() {
	j.yieldMu.Lock()
	j.ending = true
	waited := j.waited
	j.yieldMu.Unlock()
	j.yieldWorker()
	if m := j.b.metrics; m != nil && waited {
		m.waiting.Dec()
	}
}

func timeoutFor(spec hermes.Spec, a *events.Action) time.Duration {
	if a != nil && a.TimeoutMS != nil && *a.TimeoutMS > 0 {
		return time.Duration(*a.TimeoutMS) * time.Millisecond
	}
	if spec.Name == RunOperation {
		return defaultRunTimeout
	}
	if spec.Stream {
		return defaultStreamTimeout
	}
	return defaultJSONTimeout
}

// handle processes one delivery end to end and acknowledges it exactly once. yield
// gives the delivery's worker slot back; handle calls it at the latest when it returns.
func (b *Bridge) handle(ctx context.Context, msg jetstream.Msg, yield func()) {
	md, err := msg.Metadata()
	if err != nil {
		yield()
		_ = msg.TermWithReason("not a JetStream message")
		return
	}
	if _, perr := b.subjects.ParseApprovals(msg.Subject()); perr == nil {
		b.handleApproval(ctx, msg, md, yield)
		return
	}
	env, err := events.DecodeEnvelope(msg.Headers(), msg.Data())
	if env == nil || env.ID == "" {
		yield()
		if err == nil {
			err = errors.New("no usable id")
		}
		b.apply(msg, b.deadLetter(ctx, msg, md, err))
		return
	}
	j := b.newJob(msg, md, env.ID)
	j.env, j.yield = env, yield
	j.trace = events.TraceContext{Traceparent: env.Traceparent, Tracestate: env.Tracestate}
	b.hook(PointDelivered, j.actionID)
	ctx, span := b.tracing.startAction(ctx, j, msg.Subject())
	d := b.serve(ctx, j, func(ctx context.Context) decision { return j.run(ctx, err) })
	b.apply(msg, d)
	b.tracing.endAction(span, j, d)
}

// apply is the single place where a delivery is acknowledged.
func (b *Bridge) apply(msg jetstream.Msg, d decision) {
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

// identify reads the action from the delivery: subject, envelope, action JSON and input
// hash. It returns the invalid_action error for an identified action that is not valid.
func (j *job) identify(decodeErr error) *events.ErrorInfo {
	b := j.b
	ep, op, perr := b.subjects.ParseAction(j.msg.Subject())
	j.endpointID, j.op = ep, op
	j.capID = events.CapabilityID(ep, op)
	j.spec, _ = lookupOp(op)
	var invalid *events.ErrorInfo
	var attrErr *events.AttributeError
	switch {
	case errors.As(decodeErr, &attrErr):
		invalid = invalidAction(attrErr.Attribute, attrErr.Reason)
	case decodeErr != nil:
		invalid = invalidAction("", decodeErr.Error())
	case perr != nil:
		invalid = invalidAction("subject", perr.Error())
	}
	if invalid == nil {
		a, err := events.DecodeAction(j.env.Data)
		if err != nil {
			invalid = actionErrorInfo(err)
		} else {
			j.action = a
		}
	}
	if j.action != nil {
		if h, err := events.InputSHA256(j.action.Input); err == nil {
			j.inputHash = h
		} else {
			invalid = invalidAction("input", "input is not valid JSON")
		}
		if j.action.IdempotencyKey != "" {
			j.idemKey = kvstore.IdempotencyKey(j.capID, j.action.IdempotencyKey)
		}
	}
	j.deadline = j.md.Timestamp.Add(timeoutFor(j.spec, j.action))
	return invalid
}

func (j *job) intent() kvstore.Intent {
	return kvstore.Intent{ActionID: j.actionID, CapabilityID: j.capID, InputSHA256: j.inputHash,
		IdemKey: j.idemKey, Owner: j.owner, Safe: j.safe()}
}

// run decides the fate of a delivered action. decodeErr is the envelope error for a
// readable CloudEvent whose other attributes are wrong.
func (j *job) run(ctx context.Context, decodeErr error) decision {
	b := j.b
	invalid := j.identify(decodeErr)

	// A paused endpoint: wait without touching any record while the pause ends before
	// the action's deadline (otherwise the action is claimed and settled below).
	if ep, ok := b.eps[j.endpointID]; ok && invalid == nil {
		if ok, wait := ep.brk.pausedFor(b.now()); ok && wait < j.remaining() && !j.finalDelivery() {
			j.setStatus("paused", "")
			return nakAfter(pauseDelay(wait, j.remaining()))
		}
	}

	// An action that may start at once is validated first (the start needs a valid
	// action); any other after its claim, so that a duplicate that finds its result
	// does no validation.
	early := invalid == nil && j.startsAtOnce()
	if early {
		if invalid = j.validate(); invalid == nil {
			if d, done := j.startNow(ctx); done {
				return d
			}
		}
	}

	// The action id is a dedup unit of its own: claim it before anything else happens.
	cctx, span := b.tracing.startClaim(ctx)
	in := j.intent()
	in.WaitLimit = j.waitLimit() // bounded as j.begin bounds a Decide, with no timer unless it waits
	out, err := b.ledger.Begin(cctx, in, j.yieldWorker)
	endClaim(span, out, err)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			b.log.Warn().Str("action_id", j.actionID).Msg(gaveUpWaiting)
		}
		return j.infra(err)
	}
	if d, done := j.onOutcome(ctx, out); done {
		return d
	}
	b.hook(PointClaimed, j.actionID)
	if invalid == nil && !early {
		invalid = j.validate()
	}
	if invalid != nil {
		return j.settle(ctx, failedResult(j, invalid))
	}
	return j.proceed(ctx)
}

// startsAtOnce reports whether the job's valid action takes the one-write start: an
// unsafe call with nothing to decide first (no approval, not a governed run), whose
// deadline has not passed and that no cancel request stopped.
func (j *job) startsAtOnce() bool {
	return !j.safe() && !j.spec.Approval && j.op != RunOperation && j.remaining() > 0 && !cancelRequested(j.cctx)
}

// startNow runs an action that starts at once (startsAtOnce) with one durable write before
// the send instead of three: under the endpoint's concurrency limit and circuit
// breaker, kvstore.Ledger.Start claims the key and creates the action record already
// dispatched, and the request follows. done is false when the job must take the
// ordinary path instead, having written at most its key: the action has a record (a
// redelivery, a takeover, a cancel that came first), another action holds its key (a
// replay, a conflict or a wait), the endpoint has no free slot (the action queues
// claimed, visible in the records), or the breaker holds the endpoint; the ordinary
// path decides each of those under a claim, as it always did.
func (j *job) startNow(ctx context.Context) (d decision, done bool) {
	b := j.b
	select {
	case j.ep.sem <- struct{}{}:
	default:
		// The endpoint is at its limit: the ordinary path claims the action first, so
		// that the records show it waiting (status, cancel from another replica).
		return decision{}, false
	}
	defer func() { <-j.ep.sem }()
	cctx, cancel := context.WithDeadline(j.cctx, j.deadline)
	defer cancel()
	if ok, _ := j.ep.brk.allow(b.now()); !ok {
		return decision{}, false
	}
	b.hook(PointClaimed, j.actionID)
	sctx, span := b.tracing.startClaim(ctx)
	claim, err := b.ledger.Start(sctx, j.intent())
	endStart(span, err)
	if err != nil {
		j.ep.brk.abandon()
		var nf *kvstore.NotFreshError
		if errors.As(err, &nf) {
			j.keySeen = &nf.Holder
		}
		if errors.Is(err, kvstore.ErrNotFresh) {
			return decision{}, false
		}
		return j.infra(err), true
	}
	j.claim.Store(claim)
	b.hook(PointDispatched, j.actionID)
	return j.call(ctx, cctx, claim), true
}

// waitLimit bounds a wait on another delivery: the action's remaining time plus two
// leases, long enough to outwait a dead owner, never forever.
func (j *job) waitLimit() time.Duration { return max(j.remaining(), 0) + 2*j.b.ledger.Lease() }

const gaveUpWaiting = "gave up waiting for the action's owner; the delivery is retried"

// begin runs a ledger entry (a Decide) bounded by the action's deadline plus a
// lease: long enough to outwait a dead owner, never forever.
func (j *job) begin(ctx context.Context, f func(context.Context) (kvstore.Outcome, error)) (kvstore.Outcome, error) {
	bctx, cancel := context.WithTimeout(ctx, j.waitLimit())
	defer cancel()
	out, err := f(bctx)
	if err != nil && bctx.Err() != nil && ctx.Err() == nil {
		j.b.log.Warn().Str("action_id", j.actionID).Msg(gaveUpWaiting)
	}
	return out, err
}

// onOutcome acts on a ledger verdict. done is false when the job holds a claim to run.
func (j *job) onOutcome(ctx context.Context, out kvstore.Outcome) (decision, bool) {
	switch out.Verdict {
	case kvstore.Done:
		j.statusFrom(out.Log.Data, "duplicate:")
		return ackIt(), true
	case kvstore.Parked:
		j.setStatus("duplicate:"+events.StatusPendingApproval, "")
		return ackIt(), true
	case kvstore.Stored:
		return j.settleStored(ctx, out.Record), true
	}
	j.claim.Store(out.Claim)
	if m := j.b.metrics; m != nil && out.Claim.TookOver() {
		m.takeovers.Inc()
	}
	if out.Verdict == kvstore.Uncertain {
		if j.op == RunOperation {
			// A run is followed to its end, not resent (see run.go).
			return j.resumeRun(ctx, out.Claim)
		}
		// The request may have reached Hermes: never resend an unsafe call.
		if out.Claim.Record().Cancel {
			return j.settleCancelled(ctx, true), true
		}
		return j.settle(ctx, failedResult(j, outcomeUnknown())), true
	}
	if out.Claim.Record().Cancel || cancelRequested(j.cctx) {
		return j.settleCancelled(ctx, false), true
	}
	return decision{}, false
}

// proceed runs a claimed, valid action: approval first, then the call.
func (j *job) proceed(ctx context.Context) decision {
	rec := j.claim.Load().Record()
	switch rec.Decision {
	case kvstore.DecisionApprove:
		return j.execute(ctx)
	case kvstore.DecisionDeny:
		return j.settle(ctx, failedResult(j, approvalDenied(rec.Reason)))
	case kvstore.DecisionMismatch:
		return j.settle(ctx, failedResult(j, approvalMismatch()))
	case kvstore.DecisionExpired:
		return j.settle(ctx, failedResult(j, approvalExpired()))
	case kvstore.DecisionCancel:
		return j.settleCancelled(ctx, false)
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
	if _, ok := lookupOp(j.op); !ok {
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
	if j.spec.KeyRequired && a.IdempotencyKey == "" {
		return &events.ErrorInfo{Code: "idempotency_key_required", Category: "policy",
			Message: j.op + " requires an idempotency_key", Details: map[string]any{"operation": j.op}}
	}
	p, err := hermes.Prepare(j.request())
	if err != nil {
		return clientErrorInfo(err, true)
	}
	j.prepared = p
	if t := ep.cfg.TenantID; t != "" && a.TenantID != t {
		return &events.ErrorInfo{Code: "tenant_mismatch", Category: "auth",
			Message: "the action's tenant is not admitted to endpoint " + j.endpointID}
	}
	return nil
}

func (j *job) request() hermes.Request {
	op := j.op
	if op == RunOperation {
		op = "run_start" // the governed run starts with run_start's request
	}
	r := hermes.Request{Operation: op, Input: j.action.Input, IdempotencyKey: j.action.IdempotencyKey}
	if j.trace.Traceparent != "" {
		r.Header = map[string][]string{"Traceparent": {j.trace.Traceparent}}
		if j.trace.Tracestate != "" {
			r.Header["Tracestate"] = []string{j.trace.Tracestate}
		}
	}
	return r
}

// execute resolves the idempotency key, then calls Hermes, with retries for failures
// that are certain not to have started (and, for safe operations, transport errors and
// 5xx), under the endpoint's concurrency limit and circuit breaker.
func (j *job) execute(ctx context.Context) decision {
	b := j.b
	if j.remaining() <= 0 {
		return j.settle(ctx, failedResult(j, deadlineExceeded(false)))
	}
	cctx, cancel := context.WithDeadline(j.cctx, j.deadline)
	defer cancel()
	claim := j.claim.Load()
	if j.idemKey != "" {
		kctx, span := b.tracing.startClaimKey(cctx)
		ko, err := claim.ClaimKeyAfter(kctx, j.keySeen, j.yieldWorker)
		endClaimKey(span, ko, err)
		if err != nil {
			return j.interrupted(ctx, cctx, err, "waiting for the original action")
		}
		switch ko.Verdict {
		case kvstore.KeyConflict:
			return j.settle(ctx, failedResult(j, &events.ErrorInfo{Code: "idempotency_conflict", Category: "policy",
				Message: "the idempotency key was already used with a different input",
				Details: map[string]any{"original_action_id": ko.Original}}))
		case kvstore.KeyReplay:
			claim.Replays()
			return j.replay(ctx, ko.Original, ko.Log.Data)
		}
	}
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
	defer func() { <-j.ep.sem }()

	if !j.safe() {
		// Write ahead: from here the request may reach Hermes. The mark is fenced by the
		// claim's revision: a delivery that lost its claim cannot write it.
		if err := claim.Dispatch(ctx); err != nil {
			j.ep.brk.abandon()
			switch {
			case errors.Is(err, kvstore.ErrCancelRequested):
				return j.settleCancelled(ctx, false)
			case errors.Is(err, kvstore.ErrLostClaim):
				return j.lost(ctx)
			case errors.Is(err, kvstore.ErrFenced):
				return j.settle(ctx, failedResult(j, interruptedSettle()))
			}
			return j.infra(err)
		}
		b.hook(PointDispatched, j.actionID)
	}
	return j.call(ctx, cctx, claim)
}

// call sends the job's request (marked dispatched, if unsafe) under the endpoint slot
// and breaker admission its caller holds, and settles the answer. cctx carries the
// action's deadline and its cancellation.
func (j *job) call(ctx, cctx context.Context, claim *kvstore.Claim) decision {
	b := j.b
	var pub *eventPublisher
	var onEvent func(hermes.Event) error
	var espan trace.Span
	if j.spec.Stream {
		pub = newEventPublisher(b.js, j)
		onEvent = pub.publish
		espan = b.tracing.startEvents(ctx, j)
	}
	hctx, hspan := b.tracing.startCall(cctx, j)
	j.sent = time.Now()
	if j.op == RunOperation {
		return j.settleRun(ctx, hctx, claim, pub, func(res *hermes.Result, err error) {
			endCall(hspan, res, err)
			endEvents(espan, pub.seq, nil)
		})
	}
	res, err := j.ep.client.Send(hctx, j.prepared, onEvent)
	b.metrics.observeCall(j, j.sent, res, err)
	endCall(hspan, res, err)
	if pub != nil {
		perr := pub.flush(ctx)
		endEvents(espan, pub.seq, perr)
		if perr != nil && err == nil {
			err = perr
		}
	}
	j.ep.brk.done(b.now(), err)
	return j.settleCall(ctx, cctx, res, err)
}

// settleRun ends a governed run (see run.go): its result, a hand-back, or the same
// mapping as any call's when its start failed.
// cctx carries the deadline, the cancellation and the call's span; endSpans ends the
// call's and the events' spans once the run has ended.
func (j *job) settleRun(ctx, cctx context.Context, claim *kvstore.Claim, pub *eventPublisher, endSpans func(*hermes.Result, error)) decision {
	b := j.b
	r, err := j.executeRun(ctx, cctx, claim, pub)
	if perr := pub.flush(ctx); perr != nil && err == nil && r != nil {
		err, r = perr, nil
	}
	if r != nil {
		endSpans(&hermes.Result{HTTPStatus: 200}, nil)
	} else {
		endSpans(nil, err)
	}
	switch {
	case errors.Is(err, errLostClaimRun):
		return j.lost(ctx)
	case errors.Is(err, errRunHandBack):
		j.setStatus("handed_back", "")
		return nakAfter(b.ledger.Lease())
	case r != nil:
		b.metrics.observeCall(j, j.sent, &hermes.Result{HTTPStatus: 200}, nil)
		j.ep.brk.done(b.now(), nil)
		return j.settle(ctx, r)
	}
	b.metrics.observeCall(j, j.sent, nil, err)
	j.ep.brk.done(b.now(), err)
	return j.settleCall(ctx, cctx, nil, err)
}

// settleCall maps the answer of a Hermes call (or its error) to the delivery's end:
// the result, a retry, a hand-back or an interruption.
func (j *job) settleCall(ctx, cctx context.Context, res *hermes.Result, err error) decision {
	b := j.b
	if err != nil && res == nil && cctx.Err() != nil {
		var he *hermes.Error
		notStarted := errors.As(err, &he) && he.NotStarted
		switch {
		case lostClaim(cctx):
			return j.lost(ctx)
		case cancelRequested(cctx):
			// The HTTP request was aborted on request: certain only if nothing was sent.
			return j.settleCancelled(ctx, !notStarted)
		case ctx.Err() != nil:
			// Shutdown interrupted the call: a safe call or one certain not to have
			// started is released for another replica; an unsafe one may have reached
			// Hermes.
			if j.safe() || notStarted {
				return j.release(ctx, false, nakAfter(b.cfg.RetryBase))
			}
			info := outcomeUnknown()
			info.Details = map[string]any{"reason": "the bridge shut down while the call was in flight"}
			return j.settle(ctx, failedResult(j, info))
		}
	}
	var he *hermes.Error
	if res == nil && errors.As(err, &he) && he.Retryable(j.safe()) {
		delay := backoff(b.cfg.RetryBase, b.cfg.RetryMax, j.attempt(), he.RetryAfter)
		if !j.lastAttempt() && delay < j.remaining() {
			j.setStatus("retrying", he.Code)
			return j.release(ctx, true, nakAfter(delay))
		}
	}
	r := resultOf(j, res, err)
	if r.Error != nil && r.Error.Code == hermes.CodeAuthentication {
		// Every action of the endpoint fails the same way until its key is fixed: say
		// where the key comes from (never the key).
		ev := b.log.Warn().Str("endpoint", j.endpointID).Str("action_id", j.actionID).Str("code", r.Error.Code)
		if j.ep.cfg.KeySource != "" {
			ev = ev.Str("key", j.ep.cfg.KeySource)
		}
		ev.Msg("Hermes endpoint " + j.endpointID + " refused the request: " + r.Error.Message)
	}
	return j.settle(ctx, r)
}

// interrupted ends a wait (for a key's holder) that failed with err: a cancel, the
// deadline, a lost claim, shutdown, or a store failure.
func (j *job) interrupted(ctx, cctx context.Context, err error, what string) decision {
	switch {
	case lostClaim(cctx):
		return j.lost(ctx)
	case cancelRequested(cctx):
		return j.settleCancelled(ctx, false)
	case ctx.Err() != nil:
		return j.release(ctx, false, nakAfter(j.b.cfg.RetryBase))
	case j.remaining() <= 0:
		return j.settle(ctx, failedResult(j, deadlineExceeded(false)))
	}
	return j.retryLater(err, what)
}

// acquireSlot takes one of the endpoint's concurrency slots. When it cannot (the action
// was cancelled, its deadline passed, or the bridge is shutting down) it returns the
// decision that ends this delivery and ok false.
func (j *job) acquireSlot(ctx, cctx context.Context) (d decision, ok bool) {
	select {
	case j.ep.sem <- struct{}{}:
		return decision{}, true
	case <-cctx.Done():
		return j.interrupted(ctx, cctx, cctx.Err(), "waiting for the endpoint"), false
	}
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

// release gives the claim up (nothing was sent) so that a later delivery of this
// message takes it over. counted says whether this delivery spent an attempt.
func (j *job) release(ctx context.Context, counted bool, d decision) decision {
	ctx, cancel := detached(ctx)
	defer cancel()
	if c := j.claim.Load(); c != nil {
		if err := c.Release(ctx, counted); err != nil && !errors.Is(err, kvstore.ErrLostClaim) {
			j.b.log.Warn().Err(err).Str("action_id", j.actionID).Msg("releasing the action claim failed; the next delivery waits out the lease")
		}
	}
	return d
}

// lost ends a job whose claim another delivery took over: it neither sends nor
// settles. Its message is acknowledged once the new owner's terminal result is stored
// (it may be this very message, redelivered), or handed back when that takes too long.
func (j *job) lost(ctx context.Context) decision {
	j.setStatus("taken_over", "")
	j.b.log.Warn().Str("action_id", j.actionID).Msg("the claim was taken over by another delivery; this one stops")
	j.yieldWorker()
	wctx, cancel := context.WithTimeout(ctx, j.waitLimit())
	defer cancel()
	if _, err := j.b.ledger.Log().WaitTerminal(wctx, j.actionID); err != nil {
		return nakAfter(j.b.cfg.RetryBase)
	}
	return ackIt()
}

// retryLater naks for a bridge-side failure (KV or publish). On the final delivery it
// still tries to end the action with a terminal result.
func (j *job) retryLater(err error, what string) decision {
	j.setStatus("retrying", "")
	j.b.log.Warn().Err(err).Str("action_id", j.actionID).Str("while", what).Msg("retrying action later")
	if j.finalDelivery() {
		return j.lastResort(what)
	}
	return nakAfter(backoff(j.b.cfg.RetryBase, j.b.cfg.RetryMax, j.attempt(), 0))
}

// lastResort settles an action on its final delivery when the bridge's own storage
// failed, so that the action still ends. Whether Hermes may have been called is taken
// from the claim this job holds.
func (j *job) lastResort(what string) decision {
	info := &events.ErrorInfo{Code: "internal", Category: "connector", UncertainOutcome: j.dispatched() && !j.safe(),
		Message: "the bridge could not record the action before its last delivery",
		Details: map[string]any{"while": what}}
	ctx, cancel := detached(j.b.workCtx)
	defer cancel()
	res := failedResult(j, info)
	hdr, raw, err := events.EncodeResult(j.b.cfg.Source, res, j.trace)
	if err == nil {
		_, err = j.b.ledger.SettleUnclaimed(ctx, j.actionID, &nats.Msg{Subject: j.resultSubject(), Header: hdr, Data: raw}, 0)
	}
	if err != nil && !errors.Is(err, kvstore.ErrSettled) {
		j.b.log.Error().Err(err).Str("action_id", j.actionID).Msg("the final delivery could not publish a result")
	}
	j.setStatus("failed", "internal")
	return ackIt()
}

// detached returns a context that survives the cancellation of ctx (shutdown) but is
// bounded, for the writes that end an action: storing, publishing and acknowledging.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}
