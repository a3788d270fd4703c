package sim

import (
	"slices"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
)

// endpoint is a replica's view of the Hermes endpoint: its concurrency slots, the
// admits waiting for one (first come, first served), and its circuit breaker.
type endpoint struct {
	max, inUse int
	waiters    []*admitWait
	brk        core.Breaker // the bridge's own
}

// admitWait is an Admit waiting for a slot.
type admitWait struct {
	j    *job
	p    *pendingOp
	done bool
}

// admit carries out j's Admit (io.go: OK, Busy, Paused with Wait and Code, Expired,
// Aborted). Without Wait it answers Busy when no slot is free; with Wait it queues
// until a slot frees or Until passes. A slot granted while the breaker holds the
// endpoint is given back at once: Paused.
func (w *World) admit(j *job, e core.Effect) {
	ep := j.inc.ep
	p := j.addOp(e)
	p.ep = ep
	ep.waiters = slices.DeleteFunc(ep.waiters, func(wa *admitWait) bool { return wa.done || !wa.j.alive() })
	if ep.inUse < ep.max && len(ep.waiters) == 0 {
		w.grant(j, p, true)
		return
	}
	if !e.Wait {
		j.removeOp(p)
		w.answerNow(j, core.Event{Kind: core.EvAdmit, Op: e.Op, Status: core.Busy})
		return
	}
	if !w.now.Before(e.Until) {
		j.removeOp(p)
		w.answerNow(j, core.Event{Kind: core.EvAdmit, Op: e.Op, Status: core.Expired})
		return
	}
	wa := &admitWait{j: j, p: p}
	ep.waiters = append(ep.waiters, wa)
	p.stop = func() { wa.done = true }
	w.at(e.Until, func() {
		if wa.done {
			return
		}
		wa.done = true
		w.answer(j, e.Op, core.Event{Kind: core.EvAdmit, Status: core.Expired})
	})
}

// grant gives p's job a slot (or Paused, when the breaker holds the endpoint); now
// says the job is being handled (its answer is immediate), else it is scheduled.
func (w *World) grant(j *job, p *pendingOp, now bool) {
	ep := p.ep
	ev := core.Event{Kind: core.EvAdmit, Op: p.op, Status: core.OK}
	if ok, wait := ep.brk.Allow(w.now); !ok {
		_, code := ep.brk.Pause(w.now)
		ev.Status, ev.Wait, ev.Code = core.Paused, wait, code
	} else {
		ep.inUse++
		j.slots++
	}
	if now {
		j.removeOp(p)
		w.answerNow(j, ev)
		return
	}
	p.grant = ev.Status == core.OK
	w.after(0, func() { w.answer(j, p.op, ev) })
}

// free gives a slot back and grants it to the first admit waiting.
func (ep *endpoint) free(w *World) {
	ep.inUse--
	for len(ep.waiters) > 0 && ep.inUse < ep.max {
		wa := ep.waiters[0]
		ep.waiters = ep.waiters[1:]
		if wa.done || !wa.j.alive() {
			continue
		}
		wa.done = true
		w.grant(wa.j, wa.p, false)
	}
}

// unadmit carries out j's Unadmit, and gives back what a job ending or panicking holds:
// a slot no call used goes back, and the breaker forgets the admission.
func (w *World) unadmit(j *job) {
	if j.slots == 0 {
		w.failf("%s: EffUnadmit without an endpoint slot", j.owner)
		return
	}
	j.slots--
	j.inc.ep.brk.Abandon()
	j.inc.ep.free(w)
}
