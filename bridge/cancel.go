package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Cancellation (CONTRACT §8). A request on <prefix>.cancel.<id> reaches every replica
// twice: every replica hears it on a plain subscription and answers only if it is
// running the action (it cancels the job's context and replies "cancelled"); one replica
// also hears it on a queue subscription and answers from the stored state when no live
// replica owns the action: "already_settled", "cancelled" for a parked action or one
// whose owner died (it settles it), or "unknown" when there is no record at all (it then
// stores a cancelled result, so that an action still queued never reaches Hermes).

// errCancelRequested is the cause of a job context cancelled by a cancel request.
var errCancelRequested = errors.New("bridge: cancel requested")

// running is a delivery being handled by this replica.
type running struct {
	j        *job
	cancel   context.CancelCauseFunc
	settling atomic.Bool // the result is decided; a cancel comes too late
	parked   atomic.Bool // the action is parked: the stored state answers cancels
}

type registry struct {
	mu   sync.Mutex
	jobs map[string][]*running
}

// register records j as running until the returned function is called.
func (b *Bridge) register(j *job, cancel context.CancelCauseFunc) func() {
	r := &running{j: j, cancel: cancel}
	j.running = r
	b.inflight.mu.Lock()
	if b.inflight.jobs == nil {
		b.inflight.jobs = map[string][]*running{}
	}
	b.inflight.jobs[j.actionID] = append(b.inflight.jobs[j.actionID], r)
	b.inflight.mu.Unlock()
	return func() {
		b.inflight.mu.Lock()
		defer b.inflight.mu.Unlock()
		list := b.inflight.jobs[j.actionID]
		for i, x := range list {
			if x == r {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(b.inflight.jobs, j.actionID)
		} else {
			b.inflight.jobs[j.actionID] = list
		}
	}
}

// cancelLocal cancels this replica's deliveries of id. It returns the state to answer,
// or "" when this replica is not running the action.
func (b *Bridge) cancelLocal(id string) string {
	b.inflight.mu.Lock()
	defer b.inflight.mu.Unlock()
	state := ""
	for _, r := range b.inflight.jobs[id] {
		switch {
		case r.parked.Load():
		case r.settling.Load():
			if state == "" {
				state = events.CancelAlreadySettled
			}
		default:
			r.cancel(errCancelRequested)
			state = events.CancelCancelled
		}
	}
	return state
}

// subscribeCancel starts both cancel subscriptions; the returned function stops them.
func (b *Bridge) subscribeCancel(ctx context.Context) (func(), error) {
	owner, err := b.nc.Subscribe(b.subjects.AllCancel(), func(m *nats.Msg) {
		id, err := b.subjects.ParseCancel(m.Subject)
		if err != nil {
			return
		}
		if state := b.cancelLocal(id); state != "" {
			b.replyCancel(m, id, state)
		}
	})
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	store, err := b.nc.QueueSubscribe(b.subjects.AllCancel(), b.cfg.Consumer+"-cancel", func(m *nats.Msg) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.cancelFromStore(ctx, m)
		}()
	})
	if err != nil {
		_ = owner.Unsubscribe()
		return nil, err
	}
	return func() {
		_ = owner.Unsubscribe()
		_ = store.Unsubscribe()
		wg.Wait()
	}, nil
}

func (b *Bridge) replyCancel(m *nats.Msg, id, state string) {
	if m.Reply == "" {
		return
	}
	body, _ := json.Marshal(events.CancelReply{ActionID: id, State: state})
	_ = m.Respond(body)
}

// cancelFromStore answers a cancel request from the KV records when no live replica
// owns the action.
func (b *Bridge) cancelFromStore(ctx context.Context, m *nats.Msg) {
	id, err := b.subjects.ParseCancel(m.Subject)
	if err != nil {
		return
	}
	if b.localRunning(id) {
		return // the plain subscription answers
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for range 5 {
		e, err := b.store.Get(ctx, kvstore.ActionKey(id))
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			// Unknown: remember the cancellation so that the action, if it is still
			// queued, settles cancelled without reaching Hermes.
			res, _ := json.Marshal(&events.Result{ActionID: id, Status: events.StatusCancelled, Output: json.RawMessage("null"),
				Error: cancelledInfo(false, "cancelled before the bridge received the action")})
			rec := kvstore.Record{State: kvstore.StateSettled, ActionID: id, Result: res}
			if _, err := b.store.Create(ctx, kvstore.ActionKey(id), rec); errors.Is(err, kvstore.ErrExists) {
				continue
			}
			b.replyCancel(m, id, events.CancelUnknown)
			return
		case err != nil:
			return // no authoritative answer; the requester times out
		case e.Record.State == kvstore.StateSettled:
			b.replyCancel(m, id, events.CancelAlreadySettled)
			return
		case e.Record.State == kvstore.StateParked:
			if b.cancelStored(ctx, e, false) {
				b.replyCancel(m, id, events.CancelCancelled)
				return
			}
		case !e.Record.LeaseExpired(b.now()):
			return // a live replica owns it and answers
		default: // the owner died
			uncertain, err := b.mayHaveSent(ctx, e.Record)
			if err != nil {
				return // no authoritative answer; the requester times out
			}
			if b.cancelStored(ctx, e, uncertain) {
				b.replyCancel(m, id, events.CancelCancelled)
				return
			}
		}
	}
}

// localRunning reports whether this replica runs a delivery of id that answers cancel
// requests itself (a delivery that parked the action leaves that to the stored state).
func (b *Bridge) localRunning(id string) bool {
	b.inflight.mu.Lock()
	defer b.inflight.mu.Unlock()
	for _, r := range b.inflight.jobs[id] {
		if !r.parked.Load() {
			return true
		}
	}
	return false
}

// cancelStored settles a stored, unowned action cancelled. It reports false when the
// record changed meanwhile (the caller looks again).
func (b *Bridge) cancelStored(ctx context.Context, e kvstore.Entry, uncertain bool) bool {
	rec := e.Record
	ep, op, _ := events.ParseCapabilityID(rec.CapabilityID)
	spec, _ := hermes.Lookup(op)
	j := &job{b: b, start: b.now(), actionID: rec.ActionID, capID: rec.CapabilityID, endpointID: ep, op: op, spec: spec}
	j.actRev, j.actRec = e.Revision, rec
	res := &events.Result{ActionID: rec.ActionID, CapabilityID: rec.CapabilityID, Status: events.StatusCancelled,
		Error: cancelledInfo(uncertain && !spec.Safe, "cancelled on request")}
	d := j.settle(ctx, res)
	if rec.State == kvstore.StateParked {
		j.unpark(ctx)
	}
	b.logOutcome(j, d, j.start)
	return j.status == events.StatusCancelled && d.kind == ack
}

func cancelledInfo(uncertain bool, msg string) *events.ErrorInfo {
	return &events.ErrorInfo{Code: "cancelled", Category: "policy", UncertainOutcome: uncertain, Message: msg}
}

// cancelRequested reports whether ctx was cancelled by a cancel request.
func cancelRequested(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errCancelRequested)
}

// settleCancelled ends the job's action cancelled; uncertain when an unsafe call may
// have reached Hermes.
func (j *job) settleCancelled(ctx context.Context, mayHaveStarted bool) decision {
	return j.settle(ctx, &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: events.StatusCancelled,
		Output: json.RawMessage("null"), Error: cancelledInfo(mayHaveStarted && !j.safe(), "cancelled on request")})
}
