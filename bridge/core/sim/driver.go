package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
)

// job is the simulated driver of one core.Job: it feeds the job its events one at a
// time (held while the job or its replica is paused) and carries out the effects the job
// returns, as bridge/core/io.go says a driver must.
type job struct {
	owner string
	kind  core.JobKind
	act   *action // the scenario action the job is about
	inc   *incarnation
	msg   *message // nil for the sweeper's expiries and cancels
	c     *core.Job

	dead    bool // crashed: vanished with its replica or at a fault point
	done    bool // finished (EffFinish)
	paused  bool // paused at a fault point (its replica's pause is inc.paused)
	q       []item
	ops     []*pendingOp
	beatOn  bool
	beatGen int
	worker  bool // holds one of its replica's worker slots
	slots   int  // endpoint slots taken by Admit and not used by a call
	req     *cancelReq
	// answering is the cancel request whose EvCancel the job is handling.
	answering *cancelReq
}

func (j *job) alive() bool { return !j.dead && !j.done }

// item is one entry of a job's queue: an event to step, or the rest of an effect batch
// cut off by a pause (skip: its first effect already passed its fault point).
type item struct {
	ev     core.Event
	cancel *cancelReq
	cont   []core.Effect
	skip   bool
}

// pendingOp is an effect of a job awaiting its answer.
type pendingOp struct {
	op    uint64
	eff   core.Effect
	stop  func() // withdraws the operation (a watch, a waiting admit, a run reader)
	ep    *endpoint
	slot  bool // a call holding an endpoint slot
	grant bool // an admit granted whose answer is on its way
	safe  bool
	next  func() int64 // RunEvents: the next event number read so far
}

func (j *job) addOp(e core.Effect) *pendingOp {
	p := &pendingOp{op: e.Op, eff: e}
	j.ops = append(j.ops, p)
	return p
}

func (j *job) findOp(op uint64) *pendingOp {
	if i := slices.IndexFunc(j.ops, func(p *pendingOp) bool { return p.op == op }); i >= 0 {
		return j.ops[i]
	}
	return nil
}

func (j *job) removeOp(p *pendingOp) {
	j.ops = slices.DeleteFunc(j.ops, func(q *pendingOp) bool { return q == p })
}

// held reports whether j's events wait: j or its replica is paused.
func (w *World) held(j *job) bool { return j.paused || j.inc.paused }

// newJob makes a job on incarnation inc and registers it there.
func (w *World) newJob(inc *incarnation, kind core.JobKind, a *action, msg *message) *job {
	j := &job{owner: fmt.Sprintf("r%d/j%d.%s", inc.r.n, len(w.jobs)+1, a.id), kind: kind, act: a, inc: inc, msg: msg,
		c: core.NewJob(w.cfg)}
	w.jobs = append(w.jobs, j)
	inc.jobs = append(inc.jobs, j)
	return j
}

// post queues ev for j and handles j's queue, unless another job's events are being
// handled (then j's turn is scheduled right after).
func (w *World) post(j *job, ev core.Event) {
	j.q = append(j.q, item{ev: ev})
	w.kick(j)
}

// kick handles j's queue, unless j's events are being handled already.
func (w *World) kick(j *job) {
	if w.driving != j {
		w.drive(j)
	}
}

// drive handles j's queue until it is empty, j ends, or j is held; while another job's
// events are being handled, right after them.
func (w *World) drive(j *job) {
	if w.driving != nil {
		w.after(0, func() { w.drive(j) })
		return
	}
	w.driving = j
	defer func() { w.driving = nil }()
	for len(j.q) > 0 && j.alive() && !w.held(j) {
		it := j.q[0]
		j.q = j.q[1:]
		if it.cont != nil {
			w.exec(j, it.cont, it.skip)
			continue
		}
		j.answering = it.cancel
		w.step(j, it.ev)
		j.answering = nil
	}
	if j.c.Done() && j.alive() && len(j.q) == 0 && !w.held(j) {
		w.failf("%s: the core is done but emitted no EffFinish", j.owner)
		j.done = true
		w.release(j)
	}
}

// step steps j's core with ev and carries out its effects.
func (w *World) step(j *job, ev core.Event) {
	ev.Now = w.now
	w.tr.printf(j.owner, "→ %s", fmtEvent(ev))
	w.exec(j, slices.Clone(j.c.Step(ev)), false)
}

// storeOps are the effects a job may crash or pause right before.
var storeOps = []core.EffectKind{core.EffCreate, core.EffGet, core.EffUpdate, core.EffDelete, core.EffClaim, core.EffReadLog, core.EffAppend}

// exec carries out effs in order. A job may crash or pause right before a store
// operation, and crash, pause or panic at a hook; a pause holds the rest of the batch
// until it ends.
func (w *World) exec(j *job, effs []core.Effect, skip bool) {
	for i, e := range effs {
		if slices.Contains(storeOps, e.Kind) && !(i == 0 && skip) && w.faults() {
			switch {
			case w.chance(w.p.pOpCrash):
				w.crash(j, "before "+form.Effect(e))
				return
			case w.chance(w.p.pOpPause):
				w.pause(j, effs[i:], true, "before "+form.Effect(e))
				return
			}
		}
		w.tr.printf(j.owner, "← %s", form.Effect(e))
		w.apply(j, e)
		if !j.alive() {
			if i < len(effs)-1 && !j.dead {
				w.failf("%s: effects after finish: %s", j.owner, form.Effect(effs[i+1]))
			}
			return
		}
		if e.Kind == core.EffHook && e.Point == core.PointStored && j.msg != nil && j.msg.lapse {
			w.crash(j, "at stored: its result is never stored, and its key lapses")
			return
		}
		if e.Kind == core.EffHook && w.faults() {
			switch {
			case w.chance(w.p.pHookCrash):
				w.crash(j, "at "+string(e.Point))
				return
			case w.chance(w.p.pHookPause), e.Point == core.PointStored && w.chance(w.p.pStoredPause):
				w.pause(j, effs[i+1:], false, "at "+string(e.Point))
				return
			case !j.c.Done() && w.chance(w.p.pPanic):
				// A panic happens while the core handles an event: not once it has
				// finished (its EffFinish is in this batch).
				w.panicJob(j, string(e.Point), effs[i+1:])
				return
			}
		}
	}
}

// crash makes j vanish: its operations' answers are dropped (writes already sent
// still land), its slots are freed, its message is left to its ack wait.
func (w *World) crash(j *job, where string) {
	w.tr.printf(j.owner, "CRASH %s", where)
	w.stats.JobCrashes++
	w.kill(j)
}

// kill ends j without a word (a crash of it or of its replica).
func (w *World) kill(j *job) {
	if !j.alive() {
		return
	}
	j.dead = true
	w.release(j)
}

// pause holds j's events (heartbeats included) for a while; rest is what was left of
// the batch.
func (w *World) pause(j *job, rest []core.Effect, skip bool, where string) {
	d := w.pauseLength()
	w.tr.printf(j.owner, "PAUSE %s for %s", where, d)
	w.stats.JobPauses++
	j.paused = true
	if len(rest) > 0 {
		j.q = append([]item{{cont: rest, skip: skip}}, j.q...)
	}
	w.after(d, func() {
		j.paused = false
		w.tr.printf(j.owner, "wakes")
		w.kick(j)
	})
}

// pauseLength is how long a pause lasts: mostly past the lease (1.5 to 3 leases, so
// that another delivery takes over), sometimes short.
func (w *World) pauseLength() time.Duration {
	if w.chance(0.25) {
		return w.between(time.Second, 20*time.Second)
	}
	return w.between(lease*3/2, 3*lease)
}

// panicJob: handling j panicked at point. Everything in flight is gone, and so is the
// rest of the batch (a call in it, never sent, or an unadmit gives its slot back, as
// the bridge's driver does: givesSlotBack); the driver recovers and steps EvPanic.
func (w *World) panicJob(j *job, point string, rest []core.Effect) {
	w.tr.printf(j.owner, "PANIC at %s", point)
	w.stats.Panics++
	w.dropOps(j)
	for _, e := range rest {
		if (e.Kind == core.EffCall || e.Kind == core.EffUnadmit) && j.slots > 0 {
			w.unadmit(j)
			break
		}
	}
	j.q = append([]item{{ev: core.Event{Kind: core.EvPanic}}}, j.q...)
}

// dropOps withdraws every operation of j; their answers, if any come, are dropped.
func (w *World) dropOps(j *job) {
	ops := j.ops
	j.ops = nil
	for _, p := range ops {
		w.withdraw(j, p)
	}
}

// withdraw stops p and gives back the endpoint slot it holds.
func (w *World) withdraw(j *job, p *pendingOp) {
	if p.stop != nil {
		p.stop()
	}
	if p.slot {
		p.slot = false
		p.ep.free(w)
	}
	if p.grant {
		p.grant = false
		w.unadmit(j)
	}
}

// release gives back everything j holds (at its end).
func (w *World) release(j *job) {
	w.dropOps(j)
	j.beatOn = false
	for j.slots > 0 {
		w.unadmit(j)
	}
	if j.worker {
		j.worker = false
		j.inc.freeWorker(w)
	}
	j.inc.unregister(j)
	if j.kind == core.KindExpire {
		delete(j.inc.sweeping, j.act.id)
	}
}

// answer delivers the answer of j's operation op, unless j ended or withdrew it.
func (w *World) answer(j *job, op uint64, ev core.Event) {
	if !j.alive() {
		return
	}
	p := j.findOp(op)
	if p == nil {
		return
	}
	j.removeOp(p)
	if p.slot {
		p.slot = false
		p.ep.free(w)
	}
	p.grant = false
	ev.Op = op
	w.post(j, ev)
}

// answerNow answers an operation of j at once: the answer is handled right after the
// effects of the current step.
func (w *World) answerNow(j *job, ev core.Event) {
	j.q = append(j.q, item{ev: ev})
}

// finish ends j: its message is acked, naked or terminated, every operation still
// running is withdrawn, and what it holds is given back.
func (w *World) finish(j *job, e core.Effect) {
	j.done = true
	if j.slots > 0 {
		w.failf("%s finished holding %d endpoint slot(s) that no call used (io.go: EffUnadmit gives them back)", j.owner, j.slots)
	}
	w.release(j)
	w.js.finish(j, e)
	o := j.c.Outcome()
	switch o.Verdict {
	case core.VerdictTakeover:
		w.stats.Takeovers++
	case core.VerdictReleased:
		w.stats.Released++
	}
	if e.Ack == core.TermIt {
		w.stats.Terms++
	}
	if strings.HasPrefix(o.Status, "superseded:") {
		w.stats.Superseded++
	}
	w.tr.printf(j.owner, "= done: %s %s", o.Status, o.Code)
}
