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
	ep.waiters = slices.DeleteFunc(ep.waiters, func(wa *admitWait) bool { return wa.done || !wa.j.alive() })
	var ev core.Event
	switch {
	case ep.inUse < ep.max && len(ep.waiters) == 0:
		ev = w.grant(j)
	case !e.Wait:
		ev = core.Event{Kind: core.EvAdmit, Status: core.Busy}
	case !w.now.Before(e.Until):
		ev = core.Event{Kind: core.EvAdmit, Status: core.Expired}
	default:
		wa := &admitWait{j: j, p: j.addOp(e)}
		ep.waiters = append(ep.waiters, wa)
		wa.p.stop = func() { wa.done = true }
		w.at(e.Until, func() {
			if wa.done {
				return
			}
			wa.done = true
			w.answer(j, e.Op, core.Event{Kind: core.EvAdmit, Status: core.Expired})
		})
		return
	}
	ev.Op = e.Op
	w.answerNow(j, ev)
}

// grant gives j a slot of its endpoint, and answers OK (or Paused, when the breaker
// holds the endpoint).
func (w *World) grant(j *job) core.Event {
	ep := j.inc.ep
	if ok, wait := ep.brk.Allow(w.now); !ok {
		_, code := ep.brk.Pause(w.now)
		return core.Event{Kind: core.EvAdmit, Status: core.Paused, Wait: wait, Code: code}
	}
	ep.inUse++
	j.slots++
	return core.Event{Kind: core.EvAdmit, Status: core.OK}
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
		ev := w.grant(wa.j)
		wa.p.grant = ev.Status == core.OK
		w.after(0, func() { w.answer(wa.j, wa.p.op, ev) })
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
