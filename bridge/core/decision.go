package core

import (
	"encoding/json"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// ---- decisions and expiries ----

// decide ends the parking of the job's action with its decision (a decision message),
// or with an expiry (the sweeper). A bound run's tool approval is answered instead. A
// record that is no longer parked was decided before (a redelivered decision, or a
// second one): it is treated as a delivery treats a record, so that the first decision
// is carried out, once. A decision that finds nothing to decide is retried a few times
// (it may have overtaken its action) and then dead-lettered.
func (j *Job) decide() {
	j.store(kDecGet, Effect{Kind: EffGet, Key: kvstore.ActionKey(j.act.ID)})
}

func (j *Job) onDecGet(ev Event) {
	switch ev.Status {
	case NotFound:
		j.decisionEarly()
		return
	case OK:
	default:
		j.decisionRetry("reading the action record")
		return
	}
	j.seen = ev.Entry
	if ev.Entry.Record.State == kvstore.StateSettled {
		j.decisionMoot()
		return
	}
	// The log first: the action may have been settled already (a takeover of a
	// settling owner, a cancel, a run that ended), and is then not carried on.
	j.store(kDecLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
}

func (j *Job) onDecLog(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.decisionMoot()
		return
	case ev.Status != OK && ev.Status != NotFound:
		j.decisionRetry("reading the action's result")
		return
	}
	e := j.seen
	r := e.Record
	switch {
	case j.kind == KindDecision && r.State == kvstore.StateDispatched && r.RunID != "":
		j.answerRunApproval(e)
	case j.kind == KindExpire && r.State != kvstore.StateParked &&
		r.Decision != kvstore.DecisionExpired && r.Decision != kvstore.DecisionCancel:
		// Decided (approve, deny, mismatch) or never parked: the decision's message, or
		// the action's, carries it on.
		j.ack()
	case r.State == kvstore.StateParked:
		nr := j.choose(r)
		nr.State, nr.Owner, nr.Attempt = kvstore.StateClaimed, j.owner, 1
		j.decided = nr
		j.store(kDecided, Effect{Kind: EffUpdate, Key: e.Key, Rec: recordOf(nr), Rev: e.Revision})
	case r.Decision != "":
		// Decided before: carry the first decision on, as a delivery would.
		j.fromRecord(r)
		j.waitUntil = j.now.Add(j.waitLimit())
		j.onExamineLog(ev)
	case j.kind == KindExpire:
		j.nak(0) // not parked: the next sweep looks again
	case r.State == kvstore.StateClaimed && !j.waitedParking:
		// A parking may be under way: wait for the record to move, briefly.
		j.waitedParking = true
		j.emit(Effect{Kind: EffYield})
		j.async(kDecParkWait, Effect{Kind: EffAwaitMove, Key: e.Key, Rev: e.Revision, ActionID: j.act.ID,
			Until: j.now.Add(j.cfg.ParkingWait)})
	case r.State == kvstore.StateClaimed:
		j.decisionEarly() // the parking may still come: look again shortly
	default:
		// Dispatched, released or settling, never parked: no decision can apply.
		j.decisionOrphan()
	}
}

func (j *Job) onDecParkWait(ev Event) {
	switch ev.Status {
	case Moved:
		j.decide()
	case Terminal:
		j.decisionMoot()
	case Expired:
		j.decisionEarly()
	default:
		j.nak(j.cfg.RetryBase)
	}
}

// choose returns the parked record r with the decision the job's decision (or
// expiry) makes of it: Decision, and the Approver and Reason where they apply.
func (j *Job) choose(r kvstore.Record) kvstore.Record {
	d := j.dec
	r.Approver, r.Reason = "", ""
	switch {
	case j.kind == KindExpire || j.now.After(r.ExpiresAt):
		j.approval = "expired"
		r.Decision = kvstore.DecisionExpired
	case d.Decision == events.DecisionDeny:
		j.approval = "deny"
		r.Decision, r.Approver, r.Reason = kvstore.DecisionDeny, d.Approver, d.Reason
	case d.InputSHA256 != r.InputSHA256:
		j.approval = "mismatch"
		r.Decision, r.Approver = kvstore.DecisionMismatch, d.Approver
	default:
		j.approval = "approve"
		r.Decision, r.Approver = kvstore.DecisionApprove, d.Approver
	}
	return r
}

func (j *Job) onDecided(ev Event) {
	switch ev.Status {
	case OK:
		j.fromRecord(j.decided)
		j.take(ev.Rev, j.decided, VerdictDecided)
		j.resume()
	case Conflict:
		j.decide()
	default:
		j.decisionRetry("recording the decision")
	}
}

// fromRecord fills the job's action in from its record, until Resume reads the action.
func (j *Job) fromRecord(r kvstore.Record) {
	j.act.CapabilityID, j.act.InputSHA256, j.act.IdemKey = r.CapabilityID, r.InputSHA256, r.IdemKey
	j.act.Deadline = j.now.Add(j.cfg.Lease) // until Resume tells the action's own deadline
	j.resumeFirst = true
}

// resume reads the action from the record the job claimed (a formerly parked action).
func (j *Job) resume() {
	j.async(kResumed, Effect{Kind: EffResume, Rec: recordOf(j.rec)})
}

func (j *Job) onResumed(ev Event) {
	j.resumeFirst = false
	if ev.Action != nil {
		id := j.act.ID
		j.act = *ev.Action
		j.act.ID = id
	}
	if ev.Invalid != nil {
		j.note(NoteUnresumable, "")
		j.settle(j.failed(ev.Invalid))
		return
	}
	j.validated = true
	j.claimedGo()
}

// decisionMoot acknowledges a decision (or expiry) for an action that has its result.
func (j *Job) decisionMoot() {
	j.setStatus("decision_late", "")
	if j.kind == KindExpire {
		j.store(kUnparkGet, Effect{Kind: EffGet, Key: kvstore.ParkKey(j.act.ID)})
		return
	}
	j.ack()
}

// decisionEarly handles a decision that found nothing waiting for it: it may have
// overtaken its action (or its approval request); it is looked at again shortly, a
// bounded number of times, then dead-lettered.
func (j *Job) decisionEarly() {
	if j.kind == KindExpire {
		j.nak(0)
		return
	}
	if j.delivery < j.cfg.DecisionTries {
		j.setStatus("decision_early", "")
		j.approval = "early"
		j.nak(time.Second)
		return
	}
	j.decisionOrphan()
}

// decisionOrphan dead-letters a decision that nothing waits for.
func (j *Job) decisionOrphan() {
	j.setStatus("decision_orphan", "")
	j.approval = "orphan"
	j.deadLetter("no parked action or waiting run approval with this id")
}

// decisionRetry naks a decision (or an expiry) whose store operation failed.
func (j *Job) decisionRetry(what string) {
	j.note(NoteStoreFailed, what)
	j.setStatus("retrying", "")
	j.nak(j.backoff(0))
}

// deadLetter copies the job's message to the DLQ with reason, then terminates it.
func (j *Job) deadLetter(reason string) {
	j.dlqReason = reason
	j.async(kDeadLettered, Effect{Kind: EffDeadLetter, Reason: reason})
}

func (j *Job) onDeadLettered(ev Event) {
	if ev.Status != OK {
		j.nak(j.cfg.RetryBase)
		return
	}
	j.term("dead-lettered: " + j.dlqReason)
}

// answerRunApproval answers the bound run's pending tool approval with the job's
// decision: one compare-and-set on the action record, which any replica may do; only
// the first answer of an approval wins, and is then forwarded to Hermes, naming the
// approval's request_id where Hermes gave one. (The owner records an approval before it
// publishes its pending message, so a decision always finds the approval it answers.) A
// decision that names a request_id the run does not wait for (answered, or never asked)
// is stale: it is reported and acknowledged, and answers nothing.
func (j *Job) answerRunApproval(e kvstore.Entry) {
	r, d := e.Record, j.dec
	waiting := r.ApprovalSeq > 0 && r.ApprovalAnswered < r.ApprovalSeq
	switch {
	case !waiting && r.ApprovalDecision == d.MsgID:
		j.setStatus("decision_applied", "")
		j.ack() // a redelivery of the decision that answered it
		return
	case d.RequestID != "" && r.ApprovalSeq > 0 && (!waiting || d.RequestID != r.ApprovalRequestID):
		j.runApprovalStale()
		return
	case !waiting:
		j.decisionEarly()
		return
	}
	choice, outcome := d.Choice, d.Decision
	if choice != events.ChoiceDeny && d.InputSHA256 != r.ApprovalSHA256 {
		choice, outcome = events.ChoiceDeny, "mismatch"
	}
	j.runChoice, j.approval = choice, outcome
	j.act.CapabilityID = r.CapabilityID
	nr := r
	nr.ApprovalAnswered, nr.ApprovalDecision = r.ApprovalSeq, d.MsgID
	j.store(kRunAnswered, Effect{Kind: EffUpdate, Key: e.Key, Rec: recordOf(nr), Rev: e.Revision})
}

func (j *Job) onRunAnswered(ev Event) {
	switch ev.Status {
	case OK:
		j.async(kRunForwarded, Effect{Kind: EffRun, Run: &RunRequest{Op: RunApprove, RunID: j.seen.Record.RunID,
			Choice: j.runChoice, RequestID: j.seen.Record.ApprovalRequestID}})
	case Conflict:
		j.decide() // answered meanwhile (by another decision, or expired): read again
	default:
		j.decisionRetry("recording the approval answer")
	}
}

// onRunForwarded acknowledges the decision once forwarded; Conflict: Hermes answered
// that the run no longer waits for that request (the driver re-read and reported the
// run's status), so the decision is stale.
func (j *Job) onRunForwarded(ev Event) {
	if ev.Status == Conflict {
		j.approval = "stale"
	}
	j.setStatus("decision_"+j.approval, "")
	j.unindexAsk(j.seen.Record.ApprovalSeq, askThenAck)
}

// runApprovalStale acknowledges a decision naming a request the run does not wait for.
func (j *Job) runApprovalStale() {
	j.note(NoteRunApprovalStale, j.dec.RequestID)
	j.approval = "stale"
	j.setStatus("decision_stale", "")
	j.ack()
}

// ---- cancel requests answered from the records ----

// cancelFromRecords answers a cancel request for an action that no job of this replica
// runs: no record: a settled record holding the cancelled result, so that the action,
// if it comes, settles cancelled without reaching Hermes ("unknown"); a terminal result
// or settled record: "already_settled"; parked: the parking ends with a cancel and the
// action settles cancelled here ("cancelled"); otherwise the record's cancel flag, which
// its owner (or whoever takes it over) honours ("cancelled"). A failure answers nothing:
// the requester's timeout tells it to ask again.
func (j *Job) cancelFromRecords() {
	j.store(kCanGet, Effect{Kind: EffGet, Key: kvstore.ActionKey(j.act.ID)})
}

func (j *Job) reply(state string) {
	j.emit(Effect{Kind: EffReplyCancel, State: state})
	j.setStatus("cancel:"+state, "")
	j.ack()
}

func (j *Job) onCanGet(ev Event) {
	switch {
	case ev.Status == NotFound && j.allowTomb:
		tomb, _ := json.Marshal(&events.Result{ActionID: j.act.ID, Status: events.StatusCancelled,
			Output: json.RawMessage("null"), Error: notSentCancel(false, "cancelled before the bridge received the action")})
		j.store(kCanTomb, Effect{Kind: EffCreate, Key: kvstore.ActionKey(j.act.ID),
			Rec: recordOf(kvstore.Record{State: kvstore.StateSettled, ActionID: j.act.ID, Result: tomb})})
	case ev.Status == NotFound:
		j.reply(events.CancelUnknown)
	case ev.Status != OK:
		j.ack()
	case ev.Entry.Record.State == kvstore.StateSettled:
		j.reply(events.CancelAlreadySettled)
	default:
		j.seen = ev.Entry
		j.store(kCanLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
	}
}

func (j *Job) onCanTomb(ev Event) { j.cancelWritten(ev, events.CancelUnknown) }

func (j *Job) onCanLog(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.reply(events.CancelAlreadySettled)
		return
	case ev.Status != OK && ev.Status != NotFound:
		j.ack()
		return
	}
	e := j.seen
	r := e.Record
	switch {
	case r.State == kvstore.StateParked:
		nr := r
		nr.State, nr.Owner, nr.Decision, nr.Attempt = kvstore.StateClaimed, j.owner, kvstore.DecisionCancel, 1
		j.decided = nr
		j.store(kCanPark, Effect{Kind: EffUpdate, Key: e.Key, Rec: recordOf(nr), Rev: e.Revision})
	case r.Cancel:
		j.reply(events.CancelCancelled)
	default:
		nr := r
		nr.Cancel = true
		j.store(kCanFlag, Effect{Kind: EffUpdate, Key: e.Key, Rec: recordOf(nr), Rev: e.Revision})
	}
}

func (j *Job) onCanPark(ev Event) {
	switch ev.Status {
	case OK:
		j.act.CapabilityID, j.act.InputSHA256, j.act.IdemKey = j.decided.CapabilityID, j.decided.InputSHA256, j.decided.IdemKey
		j.act.Deadline = j.now.Add(j.cfg.Lease)
		j.take(ev.Rev, j.decided, VerdictDecided)
		j.settle(cancelledResult(j, false))
	case Conflict:
		j.cancelFromRecords()
	default:
		j.ack()
	}
}

func (j *Job) onCanFlag(ev Event) { j.cancelWritten(ev, events.CancelCancelled) }

// cancelWritten answers state once a cancel's write of the record is stored; a write
// that lost its race (the record was created or moved meanwhile) looks again; a failure
// answers nothing.
func (j *Job) cancelWritten(ev Event, state string) {
	switch ev.Status {
	case OK:
		j.reply(state)
	case Exists, Conflict:
		j.cancelFromRecords()
	default:
		j.ack()
	}
}

// ---- panics ----

// onPanic ends a job whose handling panicked (the driver recovered it): whatever was in
// flight is gone. The action settles failed with code internal (details.reason panic;
// uncertain if an unsafe call may have been sent), a copy of its message goes to the DLQ
// and the message is acknowledged, so that one bad message cannot crash replica after
// replica.
func (j *Job) onPanic() {
	j.busy, j.queue, j.await, j.awaitOp = false, nil, kNone, 0
	if j.panicked {
		j.term("panic")
		return
	}
	j.panicked = true
	if j.kind == KindAction || j.kind == KindDecision {
		j.async(kPanicDLQ, Effect{Kind: EffDeadLetter, Reason: "panic while handling the message"})
		return
	}
	j.settlePanic()
}

func (j *Job) onPanicDLQ(Event) { j.settlePanic() }

// settlePanic settles the action failed internal (reason panic) under its claim: a job
// that holds none claims it first (the ordinary path, which may find the action settled,
// or owned by another delivery that settles it); a decision that holds none is only
// dead-lettered.
func (j *Job) settlePanic() {
	j.freeSlot()
	info := &events.ErrorInfo{Code: "internal", Category: "connector",
		UncertainOutcome: j.claimed && j.rec.State == kvstore.StateDispatched && !j.act.Op.Safe,
		Message:          "the bridge failed while handling the action", Details: map[string]any{"reason": "panic"}}
	switch {
	case j.lost || j.act.CapabilityID == "" || j.settledByMe:
		j.ack()
	case j.claimed:
		j.settling, j.parking = false, false
		j.settle(j.failed(info))
	case j.kind == KindAction:
		j.invalid, j.validated = info, true
		j.begin()
	default:
		j.ack()
	}
}
