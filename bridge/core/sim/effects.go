package sim

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// The effects of a job, carried out as bridge/core/io.go says (the store, log, wait,
// admission, call and run effects have files of their own).

// apply carries out one effect of j.
func (w *World) apply(j *job, e core.Effect) {
	switch e.Kind {
	case core.EffCreate, core.EffGet, core.EffUpdate, core.EffDelete, core.EffClaim:
		w.storeOp(j, e, w.applyKV)
	case core.EffReadLog, core.EffAppend:
		w.storeOp(j, e, w.applyLog)
	case core.EffAwaitMove, core.EffWaitTerminal:
		w.await(j, e)
	case core.EffAdmit:
		w.admit(j, e)
	case core.EffUnadmit:
		w.unadmit(j)
	case core.EffValidate:
		w.answerNow(j, core.Event{Kind: core.EvValidated, Op: e.Op, Invalid: j.act.validation()})
	case core.EffResume:
		w.resume(j, e)
	case core.EffCall:
		w.herm.call(j, e)
	case core.EffRun:
		w.herm.run(j, e)
	case core.EffTimer:
		w.timer(j, e)
	case core.EffAbort:
		w.abort(j, e.Op)
	case core.EffBeat:
		w.beat(j, e.On)
	case core.EffInProgress:
		w.js.inProgress(j)
	case core.EffYield:
		if j.worker {
			j.worker = false
			j.inc.freeWorker(w)
		}
	case core.EffHook:
	case core.EffNote:
		w.note(j, e)
	case core.EffDeadLetter:
		w.storeOp(j, e, w.deadLetter)
	case core.EffReplyCancel:
		w.replyCancel(j, e.State)
	case core.EffFinish:
		w.finish(j, e)
	default:
		w.failf("%s: unknown effect %s", j.owner, e.Kind)
	}
}

// timer sets j's timer e.Timer to fire at e.Until, replacing the one of that name.
func (w *World) timer(j *job, e core.Effect) {
	j.ops = slices.DeleteFunc(j.ops, func(p *pendingOp) bool { return p.eff.Kind == core.EffTimer && p.eff.Timer == e.Timer })
	j.addOp(e)
	w.at(e.Until, func() {
		w.answer(j, e.Op, core.Event{Kind: core.EvTimer, Timer: e.Timer, Status: core.OK})
	})
}

// abort withdraws j's operation op; its answer comes at once, Aborted.
func (w *World) abort(j *job, op uint64) {
	p := j.findOp(op)
	if p == nil {
		return // answered already (the answer may wait in the queue)
	}
	j.removeOp(p)
	var next int64
	if p.next != nil {
		next = p.next()
	}
	w.withdraw(j, p)
	ev := core.Event{Op: op, Status: core.Aborted}
	switch p.eff.Kind {
	case core.EffAwaitMove, core.EffWaitTerminal:
		ev.Kind = core.EvWait
	case core.EffAdmit:
		ev.Kind = core.EvAdmit
	case core.EffCall:
		ev.Kind = core.EvCall
		ev.Call = &core.CallAnswer{Aborted: true, Result: j.act.failed("cancelled", "the call was aborted", false, !p.safe)}
	case core.EffRun:
		ev.Kind = core.EvRun
		ev.Run = &core.RunAnswer{Next: next}
		if p.eff.Run.Op == core.RunStart {
			ev.Status = core.Failed
			ev.Run.Call = &core.CallAnswer{Aborted: true, Result: j.act.failed("cancelled", "the run's post was aborted", false, true)}
		}
	case core.EffTimer:
		ev.Kind, ev.Timer = core.EvTimer, p.eff.Timer
	case core.EffDeadLetter:
		ev.Kind = core.EvDeadLettered
	default:
		w.failf("%s: abort of %s, which io.go does not make abortable", j.owner, p.eff.Kind)
		return
	}
	w.answerNow(j, ev)
}

// beat starts or stops j's heartbeats: EvBeat every Heartbeat (plus up to a quarter of
// it, as the bridge's ticker) while j lives; none while it or its replica is paused.
func (w *World) beat(j *job, on bool) {
	j.beatOn = on
	j.beatGen++
	if on {
		w.nextBeat(j, j.beatGen)
	}
}

func (w *World) nextBeat(j *job, gen int) {
	w.after(heartbeat+w.between(0, heartbeat/4), func() {
		if !j.alive() || !j.beatOn || j.beatGen != gen {
			return
		}
		if !w.held(j) {
			w.post(j, core.Event{Kind: core.EvBeat})
		}
		w.nextBeat(j, gen)
	})
}

// resume decodes the action a parked record holds (its Raw, which names the scenario
// action) and answers it with the action's own deadline from now.
func (w *World) resume(j *job, e core.Effect) {
	var raw struct {
		Sim string `json:"sim"`
	}
	ev := core.Event{Kind: core.EvResumed, Op: e.Op}
	_ = json.Unmarshal(e.Rec.Action, &raw) // what does not decode names no action
	if a := w.scen.byID[raw.Sim]; a == nil {
		ev.Invalid = &events.ErrorInfo{Code: "invalid_action", Category: "permanent", Message: "unresumable"}
	} else {
		ev.Action = a.coreAction(w.now, w.now)
		ev.Invalid = a.validation()
	}
	w.answerNow(j, ev)
}

// note counts what the core notes.
func (w *World) note(j *job, e core.Effect) {
	switch e.Note {
	case core.NoteTakenOver:
		w.stats.LostClaims++
	case core.NoteGaveUpWaiting:
		w.stats.GaveUp++
	case core.NoteRunApprovalExpired:
		w.stats.Expiries++
	case core.NoteRunApprovalStale:
		w.stats.StaleDecisions++
	}
}

// deadLetter copies j's message to the DLQ at the server (a write that may fail), and
// counts the decisions dead-lettered.
func (w *World) deadLetter(j *job, e core.Effect) core.Event {
	ev := core.Event{Kind: core.EvDeadLettered, Status: core.OK}
	switch d := j.msg.dec; {
	case w.faults() && w.chance(w.p.pFailWrite):
		ev.Status = core.Failed
		w.stats.FailedWrites++
	case d == nil || strings.HasPrefix(e.Reason, "panic"):
	case strings.HasPrefix(d.MsgID, "stray-"):
		w.stats.StrayDeadLettered++
	case strings.Contains(d.MsgID, ":pending:"):
		w.stats.RunDecisionsDeadLettered++
	default:
		w.stats.DecisionsDeadLettered++
	}
	return ev
}
