package bridge

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// driver runs one core.Job: it steps the job with events and carries out the effects
// the job asks for. It decides nothing itself: every decision about the action is the
// job's (bridge/core). Every job, whatever started it (a delivery of an action or of a
// decision, the sweeper, a cancel answered from the records), runs through a driver,
// the one way in: the same registration for cancel requests, heartbeats, panic
// recovery, worker slot, metrics, spans and log line.
//
// Events are stepped one at a time under mu, by whichever goroutine has one: the
// goroutine that started the job (its home), a heartbeat, a timer, a cancel request, or
// the goroutine of a wait or a call. The effects of a step are carried out by the
// goroutine that stepped it, after mu is released: store and log operations inline
// (their answer is stepped next), the call inline on the home goroutine (elsewhere in a
// goroutine of its own, so that a heartbeat is never held by a call), waits and timers
// in goroutines of their own, which step their answer when it comes.
type driver struct {
	b     *Bridge
	kind  core.JobKind
	id    string
	owner string
	msg   jetstream.Msg // nil for the sweeper and cancels
	md    *jetstream.MsgMetadata
	start time.Time

	// What the driver knows of the action, from its message or its record.
	act      actionInfo
	prepared *hermes.Prepared // the mapped request, from validation
	trace    events.TraceContext

	mu       sync.Mutex
	job      *core.Job
	ops      []asyncOp // async operations in flight, for Abort (few at a time)
	opsBuf   [2]asyncOp
	finished bool
	fin      core.Effect // the job's EffFinish
	done     chan struct{}
	panics   int

	yieldMu sync.Mutex
	yield   func() // gives the dispatcher's worker slot back (once); nil when none is held
	ending  bool   // the job ended: a yield now is not a wait
	slot    slot   // the endpoint slot this delivery holds (limiter.go)
	waited  bool   // the job gave its slot back to wait: counted in the waiting gauge

	replyMu   sync.Mutex         // one cancel request at a time
	onReply   func(state string) // answers the cancel request being stepped (EvCancel, KindCancel)
	beating   bool
	sent      time.Time       // when the call was sent, for the first-event metric
	span      trace.Span      // the root span of the delivery
	spanCtx   context.Context // carries span
	child     trace.Span      // the span of the ledger step under way (tracing.traceStep)
	spanGroup string
	pubEvents int64 // events the call published
	// usage is the usage of the terminal result this job stored itself (not a replay),
	// counted by observeOutcome once the job settled the action.
	usage atomic.Pointer[events.Usage]

	// steerRun is the run_id of the governed run this job follows (set once it reads
	// the run's events or status), runStopping that it asked the run to stop: what a
	// steer request needs (steer.go).
	steerRun    atomic.Pointer[string]
	runStopping atomic.Bool
}

// asyncOp is an async operation in flight: a context to cancel, or a timer to stop.
type asyncOp struct {
	op     uint64
	cancel context.CancelFunc
	timer  *time.Timer
}

// stop cancels the operation's context, or stops its timer and reports whether the
// timer had not fired yet.
func (a asyncOp) stop() bool {
	if a.timer != nil {
		return a.timer.Stop()
	}
	a.cancel()
	return false
}

// newDriver returns the driver of a job of kind about action id.
func (b *Bridge) newDriver(kind core.JobKind, id string, msg jetstream.Msg, md *jetstream.MsgMetadata) *driver {
	return &driver{b: b, kind: kind, id: id, owner: b.cfg.ReplicaID + ":" + nuid.Next(), msg: msg, md: md,
		start: b.now(), job: core.NewJob(b.coreCfg), done: make(chan struct{})}
}

// run starts the job with s on the calling goroutine (its home) and returns once the
// job has finished. The calling goroutine carries out the effects of the steps it takes;
// when they are done and the job is not, it waits for the job's other goroutines.
func (d *driver) run(ctx context.Context, s *core.Start) {
	d.spanCtx = ctx
	s.Owner, s.Seed = d.owner, seed()
	d.b.register(d)
	if m := d.b.metrics; m != nil {
		m.inFlight.Inc()
		if d.md != nil && d.md.NumDelivered > 1 {
			m.redeliveries.Inc()
		}
	}
	d.deliver(core.Event{Kind: core.EvDeliver, Start: s}, true)
	<-d.done
}

// deliver steps ev and then the answers of the effects carried out inline, until there
// is nothing left to step on this goroutine. A panic in a step or an effect is stepped
// as EvPanic (the job settles failed, reason panic).
//
// A call on the home goroutine that is the last thing to carry out (the last effect of
// the last step queued) runs once the buffers of the queue and the step are back in
// their pools, and its answer is stepped afresh: nothing runs in between either way,
// and a stream does not hold them for as long as it runs.
func (d *driver) deliver(ev core.Event, home bool) {
	for {
		call, ok := d.stepQueue(ev, home)
		if !ok {
			return
		}
		if ev, ok = d.callSafely(call, home); !ok {
			return
		}
	}
}

// stepQueue steps ev and the answers queued after it; ok reports a call left to run on
// the home goroutine (see deliver).
func (d *driver) stepQueue(ev core.Event, home bool) (call core.Effect, ok bool) {
	qp := eventBufs.Get().(*[]core.Event)
	q := append((*qp)[:0], ev)
	for i := 0; i < len(q); i++ {
		var panicked bool
		if q, call, ok, panicked = d.stepSafely(&q[i], home, q, i == len(q)-1); panicked {
			// What was left to step is dropped: the job is stepped with EvPanic next.
			q = q[:i+1]
			if d.panicked(home) {
				q = append(q, core.Event{Kind: core.EvPanic})
			}
		}
	}
	clear(q)
	*qp = q[:0]
	eventBufs.Put(qp)
	return call, ok
}

// eventBufs and effectBufs hold the buffers of deliver's queue and of a step's effects
// (an Event is about 600 bytes and an Effect 230, and every step of every job needs
// them): reused, not allocated per step. Nothing keeps a pointer into them once
// deliver or stepSafely returns (exec copies what its goroutines need).
var (
	eventBufs  = sync.Pool{New: func() any { b := make([]core.Event, 0, 8); return &b }}
	effectBufs = sync.Pool{New: func() any { b := make([]core.Effect, 0, 8); return &b }}
)

// stepSafely steps *ev, carries its effects out and appends the answers to q; it
// reports a panic in the step or an effect instead of propagating it. ev (an Event is
// about 600 bytes: a pointer, not a copy per call) is not used once the step is taken,
// so it may point into q. When ev is the last event queued (last), a home call that is
// the step's last effect and finds nothing queued is not run but returned (call,
// deferred), for deliver to run.
func (d *driver) stepSafely(ev *core.Event, home bool, q []core.Event, last bool) (out []core.Event, call core.Effect, deferred, panicked bool) {
	var effs []core.Effect
	i := 0
	defer func() {
		if p := recover(); p != nil {
			d.logPanic()
			if i < len(effs) && givesSlotBack(effs[i+1:]) && d.slot.held {
				d.unadmit() // the effect that would have given it back is dropped
			}
			out, deferred, panicked = q, false, true
		}
	}()
	bp := effectBufs.Get().(*[]core.Effect)
	effs = d.step(ev, (*bp)[:0])
	end := len(q)
	for i = range effs {
		if e := &effs[i]; home && last && e.Kind == core.EffCall && i == len(effs)-1 && len(q) == end {
			call, deferred = *e, true
			break
		}
		if ans, ok := d.exec(&effs[i], home); ok {
			q = append(q, ans)
		}
	}
	clear(effs)
	*bp = effs[:0]
	effectBufs.Put(bp) // not reached after a panic: that buffer is dropped
	return q, call, deferred, false
}

// callSafely runs the call e on the home goroutine and returns its answer to step;
// ok is false when there is nothing to step: the job has finished, or the call
// panicked once too often (see panicked). A panic is answered with EvPanic.
func (d *driver) callSafely(e core.Effect, home bool) (ev core.Event, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			d.logPanic()
			ev, ok = core.Event{Kind: core.EvPanic}, d.panicked(home)
		}
	}()
	return d.exec(&e, home)
}

// logPanic logs a recovered panic with its stack (never the panic value, which may
// hold content).
func (d *driver) logPanic() {
	d.b.log.Error().Str("action_id", d.id).Str("stack", string(debug.Stack())).
		Msg("handling the action panicked; it settles failed")
}

// givesSlotBack reports whether effs, the effects a panic dropped, include one that gives
// the endpoint slot back: an EffUnadmit, or an EffCall never sent. The job forgets its slot
// when it emits them, so after the panic only the driver can give it back.
func givesSlotBack(effs []core.Effect) bool {
	for _, e := range effs {
		if e.Kind == core.EffUnadmit || e.Kind == core.EffCall {
			return true
		}
	}
	return false
}

// panicked counts a recovered panic (its stack is logged, never the panic value, which
// may hold content) and reports whether the job is to be stepped with EvPanic: the
// first times yes; a job that keeps panicking is finished with its message terminated.
func (d *driver) panicked(home bool) bool {
	d.mu.Lock()
	d.panics++
	n := d.panics
	d.mu.Unlock()
	if n > 2 {
		d.b.log.Error().Str("action_id", d.id).Msg("settling a panicked action panicked too")
		d.exec(&core.Effect{Kind: core.EffFinish, Ack: core.TermIt, Reason: "panic"}, home)
		return false
	}
	return true
}

// step steps the job with ev (at the driver's time) and appends its effects to out. It
// registers the async operations the effects start (so that an Abort, which another
// goroutine may step before the operation starts, finds them) and carries out aborts.
func (d *driver) step(ev *core.Event, out []core.Effect) []core.Effect {
	ev.Now = time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(out)
	effs := d.job.StepAppend(*ev, out)
	d.b.tracing.traceStep(d)
	out = effs[:n] // the effects kept are moved down over the aborts carried out here
	for i := n; i < len(effs); i++ {
		e := &effs[i]
		switch e.Kind {
		case core.EffAbort:
			if a, ok := d.takeOp(e.Op); ok {
				// A timer that had not fired answers Aborted here; the other
				// operations answer when they see their context cancelled.
				if a.stop() {
					go d.deliver(core.Event{Kind: core.EvTimer, Op: e.Op, Status: core.Aborted}, false)
				}
			}
			continue
		case core.EffFinish:
			d.finished = true
			for _, a := range d.ops {
				a.stop()
			}
			clear(d.ops)
			d.ops = d.ops[:0]
		}
		out = append(out, *e)
	}
	clear(effs[len(out):])
	return out
}

// async registers op and returns its context (ended by Abort or the job's end), or
// false when the job has finished.
func (d *driver) async(op uint64, deadline time.Time) (context.Context, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.finished {
		return nil, false
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if deadline.IsZero() {
		ctx, cancel = context.WithCancel(context.Background())
	} else {
		ctx, cancel = context.WithDeadline(context.Background(), deadline)
	}
	d.addOp(asyncOp{op: op, cancel: cancel})
	return ctx, true
}

// opDone forgets op once it answered.
func (d *driver) opDone(op uint64) {
	d.mu.Lock()
	if a, ok := d.takeOp(op); ok {
		a.stop()
	}
	d.mu.Unlock()
}

// spawn runs f for op in a goroutine of its own and steps its answer.
func (d *driver) spawn(op uint64, deadline time.Time, f func(context.Context) core.Event) {
	ctx, ok := d.async(op, deadline)
	if !ok {
		return
	}
	go func() {
		ev := f(ctx)
		ev.Op = op
		d.opDone(op)
		d.deliver(ev, false)
	}()
}

// inline runs f for op on this goroutine and returns its answer.
func (d *driver) inline(op uint64, deadline time.Time, f func(context.Context) core.Event) (core.Event, bool) {
	ctx, ok := d.async(op, deadline)
	if !ok {
		return core.Event{}, false
	}
	ev := f(ctx)
	ev.Op = op
	d.opDone(op)
	return ev, true
}

// timer sets the job's timer op for until.
func (d *driver) timer(e *core.Effect) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.finished {
		return
	}
	op, t := e.Op, e.Timer
	d.addOp(asyncOp{op: op, timer: time.AfterFunc(max(time.Until(e.Until), 0), func() {
		d.opDone(op)
		d.deliver(core.Event{Kind: core.EvTimer, Op: op, Timer: t, Status: core.OK}, false)
	})})
}

// addOp registers an async operation (under mu).
func (d *driver) addOp(a asyncOp) {
	if d.ops == nil {
		d.ops = d.opsBuf[:0]
	}
	d.ops = append(d.ops, a)
}

// takeOp forgets the async operation op and returns it, if it is registered (under mu).
func (d *driver) takeOp(op uint64) (asyncOp, bool) {
	for i, a := range d.ops {
		if a.op == op {
			last := len(d.ops) - 1
			d.ops[i] = d.ops[last]
			d.ops[last] = asyncOp{}
			d.ops = d.ops[:last]
			return a, true
		}
	}
	return asyncOp{}, false
}

// exec carries out e; an effect answered at once returns its answer.
func (d *driver) exec(e *core.Effect, home bool) (core.Event, bool) {
	switch e.Kind {
	case core.EffCreate, core.EffGet, core.EffUpdate, core.EffDelete, core.EffClaim:
		return d.storeOp(e), true
	case core.EffReadLog:
		return d.readLog(e), true
	case core.EffAppend:
		return d.appendResult(e), true
	case core.EffAwaitMove:
		key, rev := e.Key, e.Rev
		d.spawn(e.Op, e.Until, func(ctx context.Context) core.Event { return d.awaitMove(ctx, key, rev) })
	case core.EffWaitTerminal:
		id := e.ActionID
		d.spawn(e.Op, e.Until, func(ctx context.Context) core.Event { return d.waitTerminal(ctx, id) })
	case core.EffAdmit:
		if ev, ok := d.tryAdmit(e); ok {
			return ev, true
		}
		d.spawn(e.Op, e.Until, func(ctx context.Context) core.Event { return d.admitWait(ctx) })
	case core.EffUnadmit:
		d.unadmit()
	case core.EffValidate:
		return core.Event{Kind: core.EvValidated, Op: e.Op, Invalid: d.validate()}, true
	case core.EffResume:
		return d.resume(e), true
	case core.EffCall:
		if home {
			return d.inline(e.Op, e.Until, func(ctx context.Context) core.Event { return d.call(ctx) })
		}
		d.spawn(e.Op, e.Until, func(ctx context.Context) core.Event { return d.call(ctx) })
	case core.EffRun:
		r := e.Run
		f := func(ctx context.Context) core.Event { return d.runOp(ctx, r) }
		if home && e.Run.Op != core.RunEvents {
			return d.inline(e.Op, time.Time{}, f)
		}
		d.spawn(e.Op, e.Until, f)
	case core.EffTimer:
		d.timer(e)
	case core.EffBeat:
		d.setBeats(e.On)
	case core.EffInProgress:
		if d.msg != nil {
			_ = d.msg.InProgress()
		}
	case core.EffYield:
		d.yieldWorker()
	case core.EffHook:
		d.b.hook(e.Point, d.id)
	case core.EffNote:
		d.note(e)
	case core.EffDeadLetter:
		return core.Event{Kind: core.EvDeadLettered, Op: e.Op, Status: d.deadLetter(e.Reason)}, true
	case core.EffReplyCancel:
		if d.onReply != nil {
			d.onReply(e.State)
		}
	case core.EffFinish:
		d.finish(*e)
	}
	return core.Event{}, false
}

// beat steps a heartbeat.
func (d *driver) beat() { d.signal(core.EvBeat) }

// setBeats starts or stops the job's heartbeats.
func (d *driver) setBeats(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if on == d.beating || (on && d.finished) {
		return
	}
	d.beating = on
	if on {
		d.b.beats.add(d)
	} else {
		d.b.beats.remove(d)
	}
}

// finish ends the job: its message is acknowledged as the job said, its heartbeats,
// registration and worker slot end, and its log line, metrics and span are written.
func (d *driver) finish(e core.Effect) {
	d.mu.Lock()
	d.fin = e
	beating := d.beating
	d.beating = false
	d.mu.Unlock()
	if beating {
		d.b.beats.remove(d)
	}
	if d.msg != nil {
		d.b.apply(d.msg, e)
	}
	d.b.unregister(d)
	d.end()
	o := d.job.Outcome()
	d.b.observeOutcome(d, o, e)
	d.b.logOutcome(d, o, e)
	d.b.tracing.endAction(d.span, d, o, e)
	close(d.done)
}

// yieldWorker gives the dispatcher's worker slot back before a wait that may be long
// (a duplicate waiting for its original, a takeover waiting out a lease), so that the
// waits never stall other actions. The message stays in progress (heartbeats).
func (d *driver) yieldWorker() {
	d.yieldMu.Lock()
	y := d.yield
	d.yield = nil
	wait := y != nil && !d.ending
	d.waited = d.waited || wait
	d.yieldMu.Unlock()
	if y != nil {
		y()
	}
	if m := d.b.metrics; m != nil && wait {
		m.waiting.Inc()
	}
}

// end gives the worker slot back at the job's end, and takes the job off the waiting
// gauge if it was counted there.
func (d *driver) end() {
	d.yieldMu.Lock()
	d.ending = true
	waited := d.waited
	d.yieldMu.Unlock()
	d.yieldWorker()
	if m := d.b.metrics; m != nil {
		m.inFlight.Dec()
		if waited {
			m.waiting.Dec()
		}
	}
}

// step with an event from outside the job's own operations: a heartbeat, a cancel
// request, shutdown.
func (d *driver) signal(kind core.EventKind) { d.deliver(core.Event{Kind: kind}, false) }

// seed is a job's seed for its jitter.
func seed() uint64 { return uint64(time.Now().UnixNano()) }
