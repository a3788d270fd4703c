package sim

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// hermes is the simulated Hermes Agent API. It records the work it does (executions)
// per action id and, for unsafe operations, per scoped idempotency key. A request may be refused by the 429 concurrency gate (no work
// done), its connection refused (nothing sent), or its connection reset after the work
// (the caller cannot know whether it ran). Governed runs (runs.go) are posted, followed
// and stopped.
type hermes struct {
	w *World
	// execAt is when each execution of an action happened, keyExecAt each one under a
	// scoped key.
	execAt    map[string][]time.Duration
	keyExecAt map[string][]time.Time
	runs      map[string]*hrun
	runByKey  map[string]*hrun
}

// netLatency is one way between a replica and Hermes.
func (h *hermes) netLatency() time.Duration {
	return h.w.between(time.Millisecond, 20*time.Millisecond)
}

// executed records the work done for a, and returns how many times it was done.
func (h *hermes) executed(a *action) int {
	n := 1
	if h.w.sabotage == "double_exec" && !a.op.Safe {
		n = 2
	}
	for range n {
		h.execAt[a.id] = append(h.execAt[a.id], rel(h.w.now).Round(time.Millisecond))
		h.w.stats.Executions++
		if !a.op.Safe && a.scoped != "" {
			h.keyExecAt[a.scoped] = append(h.keyExecAt[a.scoped], h.w.now)
		}
	}
	return len(h.execAt[a.id])
}

// call carries out j's Call: the request reaches Hermes after a latency (a request
// aborted before it arrived may never arrive), which refuses it or does the work; the
// answer comes when the work ends, or Aborted at the call's deadline. The call holds an
// endpoint slot until its answer and tells the breaker how it went.
func (h *hermes) call(j *job, e core.Effect) {
	w, a := h.w, j.act
	p := j.addOp(e)
	p.ep, p.safe = j.inc.ep, a.op.Safe
	if j.slots == 0 {
		w.failf("%s: EffCall without an endpoint slot taken (io.go: the call uses the slot Admit took)", j.owner)
	} else {
		j.slots--
		p.slot = true
	}
	aborted, answered := false, false
	p.stop = func() { aborted = true }
	ep := p.ep
	respond := func(d time.Duration, c *core.CallAnswer, endpointFailed bool) {
		w.after(d, func() {
			if answered {
				return
			}
			answered = true
			ep.brk.Done(w.now, endpointFailed, "transport")
			w.answer(j, e.Op, core.Event{Kind: core.EvCall, Call: c})
		})
	}
	w.at(e.Until, func() {
		if answered {
			return
		}
		answered = true
		w.tr.printf("hermes", "%s: call of %s cut off at its deadline", a.id, j.owner)
		w.answer(j, e.Op, core.Event{Kind: core.EvCall, Call: &core.CallAnswer{Aborted: true,
			Result: a.failed("deadline_exceeded", "the action's deadline passed", false, !a.op.Safe)}})
	})
	w.after(h.netLatency(), func() {
		if aborted && w.chance(0.5) {
			w.tr.printf("hermes", "%s: the aborted request of %s never arrived", a.id, j.owner)
			return
		}
		if w.faults() && w.chance(w.p.pConnRefused) {
			w.stats.ConnRefused++
			w.tr.printf("hermes", "%s: connection of %s refused", a.id, j.owner)
			respond(0, &core.CallAnswer{NotStarted: true, Retryable: true,
				Result: a.failed("transport", "connection refused", true, false)}, true)
			return
		}
		w.stats.Sends++
		if w.faults() && w.chance(w.p.pRefuse) {
			w.stats.Refusals++
			w.tr.printf("hermes", "%s: request of %s refused (429)", a.id, j.owner)
			if w.sabotage == "lie" {
				respond(h.netLatency(), &core.CallAnswer{Responded: true, Result: &events.Result{ActionID: a.id,
					CapabilityID: a.cap, Status: events.StatusCompleted, Output: json.RawMessage(`{"lie":true}`)}}, false)
				return
			}
			ra := w.between(0, 3*time.Second)
			r := a.failed("remote_unavailable", "Hermes is at its concurrency limit", true, false)
			r.Error.HTTPStatus, r.Error.RetryAfterMS = 429, ra.Milliseconds()
			respond(h.netLatency(), &core.CallAnswer{NotStarted: true, Gated: true, Retryable: true, RetryAfter: ra, Result: r}, false)
			return
		}
		n := h.executed(a)
		w.tr.printf("hermes", "%s: request of %s executed (#%d)", a.id, j.owner, n)
		work := w.between(50*time.Millisecond, 5*time.Second)
		if w.chance(0.1) {
			work = w.between(20*time.Second, 2*time.Minute)
		}
		w.after(work, func() {
			if a.op.Stream {
				for i := range int64(3) {
					w.evs.put(a.id, i)
				}
			}
			if w.faults() && w.chance(w.p.pUncertain) {
				w.stats.HermesUncertain++
				w.tr.printf("hermes", "%s: connection of %s reset after the work", a.id, j.owner)
				respond(h.netLatency(), &core.CallAnswer{Retryable: a.op.Safe,
					Result: a.failed("transport", "connection reset", false, !a.op.Safe)}, true)
				return
			}
			out, _ := json.Marshal(map[string]any{"exec": fmt.Sprintf("%s#%d", a.id, n)})
			respond(h.netLatency(), &core.CallAnswer{Responded: true, Result: &events.Result{ActionID: a.id,
				CapabilityID: a.cap, Status: events.StatusCompleted, Output: out}}, false)
		})
	})
}

// run carries out j's run operation.
func (h *hermes) run(j *job, e core.Effect) {
	w := h.w
	p := j.addOp(e)
	p.safe = j.act.op.Safe
	req := *e.Run
	switch req.Op {
	case core.RunStart:
		h.postRun(j, e, p)
	case core.RunEvents:
		h.readRun(j, e, p)
	default:
		w.after(h.netLatency(), func() {
			ev := core.Event{Kind: core.EvRun, Status: core.OK, Run: &core.RunAnswer{}}
			r := h.runs[req.RunID]
			switch {
			case req.Op == core.RunCapabilities:
				ev.Run.Durable = w.p.durableRuns
			case req.Op == core.RunStoredEvents:
				ev.Run.Next = w.evs.next(j.act.id)
			case r == nil: // RunStatus, RunStop, RunApprove
				ev.Status = core.NotFound
			case req.Op == core.RunStatus:
				ev.Run.Status, ev.Run.Output, ev.Run.ErrText, ev.Run.PendingSteer = r.status, r.output, r.errText, r.pending
				ev.Run.LastEvent, ev.Run.ToolsRan = r.lastEvent, r.toolsRan
				if r.status == "" && r.waiting > 0 {
					ev.Run.WaitsFor = approvalAsk(r, r.waiting)
				}
			case req.Op == core.RunStop:
				h.stop(r)
			case req.Op == core.RunApprove:
				if !h.approve(r, req.Choice, req.RequestID) {
					ev.Status = core.Conflict
				}
			}
			w.after(h.netLatency(), func() { w.answer(j, e.Op, ev) })
		})
	}
}

// postRun carries out RunStart: a new run (an execution), or, where runs are durably
// idempotent, the run its key started before; refused (429) or with its connection
// refused, nothing starts; a lost reply leaves the caller uncertain.
func (h *hermes) postRun(j *job, e core.Effect, p *pendingOp) {
	w, a := h.w, j.act
	ep := j.inc.ep
	aborted := false
	p.stop = func() { aborted = true }
	reply := func(st core.Status, ra *core.RunAnswer, endpointFailed bool) {
		w.after(h.netLatency(), func() {
			ep.brk.Done(w.now, endpointFailed, "transport")
			w.answer(j, e.Op, core.Event{Kind: core.EvRun, Status: st, Run: ra})
		})
	}
	fail := func(c *core.CallAnswer, endpointFailed bool) {
		reply(core.Failed, &core.RunAnswer{Call: c}, endpointFailed)
	}
	w.after(h.netLatency(), func() {
		if aborted && w.chance(0.5) {
			return
		}
		if w.faults() && w.chance(w.p.pConnRefused) {
			w.stats.ConnRefused++
			fail(&core.CallAnswer{NotStarted: true, Retryable: true, Result: a.failed("transport", "connection refused", true, false)}, true)
			return
		}
		w.stats.Sends++
		if w.faults() && w.chance(w.p.pRefuse) {
			w.stats.Refusals++
			r := a.failed("remote_unavailable", "Hermes is at its concurrency limit", true, false)
			r.Error.HTTPStatus, r.Error.RetryAfterMS = 429, 1000
			fail(&core.CallAnswer{NotStarted: true, Gated: true, Retryable: true, RetryAfter: time.Second, Result: r}, false)
			return
		}
		r := h.runByKey[a.scoped]
		switch {
		case r != nil && w.p.durableRuns && r.act.input != a.input:
			// reference/hermes-runs-v0.21.md §2: same key, another payload: 409.
			w.tr.printf("hermes", "%s: post of %s conflicts with run %s (409 idempotency_key_conflict)", a.id, j.owner, r.id)
			// The driver maps it to the bridge's idempotency_conflict (bridge/runs.go).
			res := a.failed("idempotency_conflict", "Hermes already holds this idempotency key for a run with a different request payload", false, false)
			res.Error.HTTPStatus, res.Error.Category = 409, "policy"
			res.Error.Details = map[string]any{"remote_code": "idempotency_key_conflict"}
			fail(&core.CallAnswer{Responded: true, NotStarted: true, Result: res}, false)
			return
		case r != nil && w.p.durableRuns:
			w.tr.printf("hermes", "%s: post of %s names run %s again (durable idempotency)", a.id, j.owner, r.id)
		default:
			r = h.startRun(a)
			w.tr.printf("hermes", "%s: post of %s started run %s", a.id, j.owner, r.id)
		}
		if w.faults() && w.chance(w.p.pUncertain) {
			w.stats.HermesUncertain++
			w.tr.printf("hermes", "%s: reply to the post of %s lost", a.id, j.owner)
			fail(&core.CallAnswer{Result: a.failed("transport", "connection reset", false, true)}, true)
			return
		}
		reply(core.OK, &core.RunAnswer{RunID: r.id}, false)
	})
}
