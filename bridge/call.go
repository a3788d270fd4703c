package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// Default action deadlines (schemas/README.md, "Cancellation and deadlines").
const (
	defaultJSONTimeout   = 60 * time.Second
	defaultStreamTimeout = 300 * time.Second
)

// actionInfo is what the driver knows of its action: from the message (identify) or
// from a parked action's record (resume).
type actionInfo struct {
	endpointID, op, capID string
	spec                  hermes.Spec
	ep                    *endpoint
	env                   *events.Envelope
	action                *events.Action
	inputHash, idemKey    string
	deadline              time.Time
	invalid               *events.ErrorInfo
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

// identify reads the action from its capability and data: the operation, the action
// JSON and the input's hash. decodeErr is the envelope's error for a readable
// CloudEvent whose other attributes are wrong; perr the subject's. It sets the error of
// an identified action that is not valid.
func (a *actionInfo) identify(b *Bridge, ep, op string, perr, decodeErr error, data []byte, since time.Time) {
	a.endpointID, a.op = ep, op
	a.capID = events.CapabilityID(ep, op)
	a.spec, _ = LookupOperation(op)
	a.ep = b.eps[ep]
	attrErr, isAttr := errors.AsType[*events.AttributeError](decodeErr)
	switch {
	case isAttr:
		a.invalid = invalidAction(attrErr.Attribute, attrErr.Reason)
	case decodeErr != nil:
		a.invalid = invalidAction("", decodeErr.Error())
	case perr != nil:
		a.invalid = invalidAction("subject", perr.Error())
	}
	if a.invalid == nil {
		if act, err := events.DecodeAction(data); err != nil {
			a.invalid = actionErrorInfo(err)
		} else {
			a.action = act
		}
	}
	if a.action != nil {
		if h, err := events.InputSHA256(a.action.Input); err == nil {
			a.inputHash = h
		} else {
			a.invalid = invalidAction("input", "input is not valid JSON")
		}
		if a.action.IdempotencyKey != "" {
			a.idemKey = kvstore.IdempotencyKey(a.capID, a.action.IdempotencyKey)
		}
	}
	a.deadline = since.Add(timeoutFor(a.spec, a.action))
}

// core is the action as the job needs it.
func (a *actionInfo) core(id string) *core.Action {
	c := &core.Action{ID: id, CapabilityID: a.capID, InputSHA256: a.inputHash, IdemKey: a.idemKey,
		Deadline: a.deadline, Invalid: a.invalid,
		Op: core.Op{Name: a.op, Safe: a.spec.Safe, Stream: a.spec.Stream, Approval: a.spec.Approval,
			Run: a.op == RunOperation, KeyRequired: a.spec.KeyRequired}}
	if a.action != nil {
		c.PreApproval, c.Input = a.action.Approval, a.action.Input
	}
	if a.env != nil {
		c.Raw = a.env.Data
	}
	return c
}

// validate checks everything about an identified action that needs no I/O and maps its
// request (kept for the call).
func (d *driver) validate() *events.ErrorInfo {
	a := &d.act
	if a.invalid != nil {
		return a.invalid
	}
	if a.ep == nil {
		return invalidAction("subject", fmt.Sprintf("unknown endpoint %q", a.endpointID))
	}
	if _, ok := LookupOperation(a.op); !ok {
		return invalidAction("subject", fmt.Sprintf("unknown operation %q", a.op))
	}
	act := a.action
	if act.CapabilityID != "" && act.CapabilityID != a.capID {
		return invalidAction("capability_id", "capability_id does not match the subject's capability "+a.capID)
	}
	if a.env.Subject != "" && a.env.Subject != a.capID {
		return invalidAction("subject", "the CloudEvent subject does not match the capability "+a.capID)
	}
	if err := validateAction(a.op, act); err != nil {
		return actionErrorInfo(err)
	}
	if a.spec.KeyRequired && act.IdempotencyKey == "" {
		return &events.ErrorInfo{Code: "idempotency_key_required", Category: "policy",
			Message: a.op + " requires an idempotency_key", Details: map[string]any{"operation": a.op}}
	}
	p, err := hermes.Prepare(d.request())
	if err != nil {
		return clientErrorInfo(err, true)
	}
	d.prepared = p
	if t := a.ep.cfg.TenantID; t != "" && act.TenantID != t {
		return &events.ErrorInfo{Code: "tenant_mismatch", Category: "auth",
			Message: "the action's tenant is not admitted to endpoint " + a.endpointID}
	}
	return nil
}

// validateAction checks an action against the contract's schema, action.schema.json:
// the object, then its input against $defs/<op>. events.DecodeAction, which read the
// action, has checked every rule of the object's own schema for an action whose members
// are among shortMembers (TestDecodeActionCoversTheActionSchema): such an action, the
// usual one, has only its input checked. An action with a capability_id, a timeout_ms or
// a pre-approval, whose rules DecodeAction does not check exactly as the schema does, is
// checked whole.
func validateAction(op string, act *events.Action) error {
	for k := range act.Data {
		if !slices.Contains(shortMembers, k) {
			return schemas.ValidateActionValue(op, act.Data)
		}
	}
	return schemas.ValidateActionInput(op, act.Value)
}

// shortMembers are the action members whose schema rules events.DecodeAction checks too.
var shortMembers = []string{"input", "idempotency_key", "tenant_id"}

// request is the Hermes request of the action (a governed run starts with run_start's).
func (d *driver) request() hermes.Request {
	op := d.act.op
	if op == RunOperation {
		op = "run_start"
	}
	r := hermes.Request{Operation: op, Input: d.act.action.Value, IdempotencyKey: d.act.action.IdempotencyKey}
	if d.trace.Traceparent != "" {
		r.Header = map[string][]string{"Traceparent": {d.trace.Traceparent}}
		if d.trace.Tracestate != "" {
			r.Header["Tracestate"] = []string{d.trace.Tracestate}
		}
	}
	return r
}

// resume reads a formerly parked action from its record: the action JSON (or its copy
// in the object store), identified and validated as a delivery's.
func (d *driver) resume(e *core.Effect) core.Event {
	rec := e.Rec
	ev := core.Event{Kind: core.EvResumed, Op: e.Op}
	ep, op, ok := events.ParseCapabilityID(rec.CapabilityID)
	raw := []byte(rec.Action)
	var err error
	if ref, isRef := events.ParseRef(rec.Action); isRef {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		raw, err = client.Fetch(ctx, d.b.js, ref)
		cancel()
	}
	d.act = actionInfo{env: &events.Envelope{ID: d.id, Data: raw}}
	d.act.identify(d.b, ep, op, nil, nil, raw, d.b.now())
	if _, known := LookupOperation(op); !ok || !known || d.act.ep == nil || err != nil || d.act.action == nil {
		d.act.invalid = invalidAction("", "the parked action cannot be resumed")
	}
	ev.Invalid = d.validate()
	ev.Action = d.act.core(d.id)
	return ev
}

// tryAdmit takes one of the endpoint's concurrency slots and the circuit breaker's
// admission at once, if it can; ok false means a wait (EffAdmit with Wait) is needed.
func (d *driver) tryAdmit(e *core.Effect) (core.Event, bool) {
	ep := d.act.ep
	ev := core.Event{Kind: core.EvAdmit, Op: e.Op}
	s, ok := ep.lim.tryAcquire()
	if !ok {
		if e.Wait {
			return ev, false
		}
		ev.Status = core.Busy
		return ev, true
	}
	d.slot = s
	return d.admitted(ev), true
}

// admitWait waits, in order, for a slot under the endpoint's learned limit until ctx
// ends (the action's deadline, or an Abort).
func (d *driver) admitWait(ctx context.Context) core.Event {
	ev := core.Event{Kind: core.EvAdmit}
	s, err := d.act.ep.lim.acquire(ctx)
	if err != nil {
		ev.Status = waitEnd(ctx, err).Status
		return ev
	}
	d.slot = s
	return d.admitted(ev)
}

// admitted asks the breaker once a slot is taken: a paused endpoint gives the slot back.
func (d *driver) admitted(ev core.Event) core.Event {
	ep := d.act.ep
	if ok, wait := ep.brk.allow(d.b.now()); !ok {
		ep.lim.release(&d.slot)
		_, _, ev.Code = ep.brk.pause(d.b.now())
		ev.Status, ev.Wait = core.Paused, wait
		return ev
	}
	ev.Status = core.OK
	return ev
}

// unadmit gives back a slot no call used; the breaker forgets the admission.
func (d *driver) unadmit() {
	ep := d.act.ep
	ep.lim.release(&d.slot)
	ep.brk.abandon()
}

// call sends the validated request under the slot taken, republishing a stream's
// events while it runs; then gives the slot back and tells the breaker how it went.
func (d *driver) call(ctx context.Context) core.Event {
	b, ep := d.b, d.act.ep
	defer ep.lim.release(&d.slot)
	var pub *eventPublisher
	var onEvent func(hermes.Event) error
	if d.act.spec.Stream {
		pub = newEventPublisher(b.js, d)
		onEvent = pub.publish
	}
	hctx, hspan := b.tracing.startCall(ctx, d)
	espan := b.tracing.startEvents(d)
	d.sent = time.Now()
	res, err := ep.client.Send(hctx, d.prepared, onEvent)
	b.metrics.observeCall(d, d.sent, res, err)
	endCall(hspan, res, err)
	if pub != nil {
		perr := pub.flush(context.Background())
		d.pubEvents = pub.seq
		endEvents(espan, pub.seq, perr)
		if perr != nil && err == nil {
			err = perr
		}
	}
	ep.brk.done(b.now(), err)
	d.gateFeedback(err)
	return core.Event{Kind: core.EvCall, Call: d.callAnswer(ctx, res, err)}
}

// callAnswer maps a call's answer for the job.
func (d *driver) callAnswer(ctx context.Context, res *hermes.Result, err error) *core.CallAnswer {
	c := &core.CallAnswer{Result: resultOf(d, res, err), Responded: res != nil}
	if he, ok := errors.AsType[*hermes.Error](err); ok {
		c.NotStarted, c.RetryAfter = he.NotStarted, he.RetryAfter
		c.Gated = gateRefused(he)
		c.Retryable = res == nil && he.Retryable(d.act.spec.Safe)
		c.Auth = he.Code == hermes.CodeAuthentication
		if he.Partial != nil {
			c.Output = c.Result.Output
		}
	}
	c.Aborted = err != nil && res == nil && errors.Is(ctx.Err(), context.Canceled)
	return c
}

// gateRefused reports whether he is Hermes's concurrency gate refusing a call: 429
// rate_limit_exceeded, certain that nothing ran.
func gateRefused(he *hermes.Error) bool {
	return he.HTTPStatus == http.StatusTooManyRequests && he.NotStarted
}

// gateFeedback tells the endpoint's limiter how the call under the slot went: a gate
// 429 decreases the learned limit, an answer without error may increase it, and other
// failures say nothing about the gate.
func (d *driver) gateFeedback(err error) {
	lim := d.act.ep.lim
	if err == nil {
		lim.succeeded(&d.slot)
	} else if he, ok := errors.AsType[*hermes.Error](err); ok && gateRefused(he) {
		lim.refused(&d.slot)
	}
}
