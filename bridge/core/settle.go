package core

import (
	"encoding/json"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// settle ends the action with r: it appends r as the action's terminal result message
// (a compare-and-set on the subject's last sequence, so at most one is ever stored),
// then frees what the action held (its key when r frees it, its park index entry) and
// acknowledges.
//
// A claim that never dispatched, or whose result says that nothing ran (FreesKey: a
// certain, retryable failure or cancellation), first proves that it still holds the
// record, with a compare-and-set that marks it settling (the fence): without it, a delivery paused past the lease could append a result that says
// the action never ran while the delivery that took the record over runs it (a taker
// of a dispatched, unbound run posts it again under its durable key). From the fence
// on, whoever takes the record over never sends (Dispatch refuses a fenced claim). A
// dispatched claim whose result is the call's answer, or uncertain, needs no fence (of
// its result and a taker's outcome_unknown or followed run, the first appended stands,
// and each is true), nor does a safe one (a read may run twice). A replay is fenced:
// its record must not stay claimed once the key and the original's result are gone.
func (j *Job) settle(r *events.Result) {
	if j.lost {
		j.lostClaim()
		return
	}
	if j.unboundRun && r.Error != nil {
		// An earlier delivery may have started the run: nothing is certain, and the
		// key stays held.
		e := *r.Error
		e.UncertainOutcome, e.Retryable = true, false
		r.Error = &e
	}
	if len(r.Output) == 0 {
		r.Output = json.RawMessage("null")
	}
	j.settling, j.result = true, r
	j.statusFrom(r, "")
	j.settleUntil = j.now.Add(j.cfg.SettleFor)
	if j.act.Deadline.After(j.settleUntil) {
		j.settleUntil = j.act.Deadline
	}
	j.tries = 0
	if j.claimed && !j.act.Op.Safe && j.rec.State != kvstore.StateSettling &&
		(j.rec.State != kvstore.StateDispatched || FreesKey(r)) {
		j.claim(kFenced, change{kind: chFence})
		return
	}
	j.appendResult(j.expect())
}

// expect is the sequence of the result message the terminal result follows: the
// action's pending message, if the job knows of one.
func (j *Job) expect() uint64 {
	if j.claimed {
		return max(j.rec.PendingSeq, j.pendingSeq)
	}
	return j.seen.Record.PendingSeq
}

func (j *Job) onFenced(ev Event) {
	switch ev.Status {
	case OK:
		j.appendResult(j.expect())
	case Lost:
		j.lostClaim()
	default:
		j.retrySettle(ev, kFenceRetry)
	}
}

func (j *Job) onFenceRetry(ev Event) {
	if ev.Status == Aborted && j.lost {
		j.lostClaim()
		return
	}
	j.claim(kFenced, change{kind: chFence})
}

func (j *Job) appendResult(expect uint64) {
	j.appendAfter = expect
	j.hook(PointStored)
	j.store(kAppended, Effect{Kind: EffAppend, ActionID: j.act.ID, Result: j.result,
		MsgID: j.act.ID + ":result", Expect: expect})
}

func (j *Job) onAppended(ev Event) {
	switch ev.Status {
	case OK:
		j.published()
	case Conflict:
		j.store(kAppendConflict, Effect{Kind: EffReadLog, ActionID: j.act.ID})
	default:
		j.retrySettle(ev, kAppendRetry)
	}
}

// onAppendConflict: the subject moved past the expected sequence. A terminal result
// there is this job's own (an earlier attempt whose reply was lost) or another's that
// came first. A pending message this job did not know of was appended by a delivery
// that took the claim over (it parked the action, or asked a run's approval): a job
// that holds a claim proves it (a compare-and-set on its revision) before it follows
// the message, so that a delivery paused before its append with no fence (a dispatched
// claim) stores nothing once the claim is gone.
func (j *Job) onAppendConflict(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		if ev.Log.By == j.owner {
			j.published()
			return
		}
		j.statusFrom(ev.Log.Result, "superseded:")
		j.settling = false
		j.settledByMe = false
		j.ack()
	case ev.Status == OK && j.claimed:
		j.appendAfter = ev.Log.Seq
		j.claim(kAppendProve, change{kind: chRenew})
	case ev.Status == OK:
		j.appendResult(ev.Log.Seq)
	case ev.Status == NotFound && j.appendAfter != 0:
		// The message the append expected is gone: it aged out of the stream (a record
		// outlives its messages). The log is read from the stream's leader, so the
		// subject is empty: append after nothing.
		j.appendResult(0)
	default:
		// NotFound after an append that expected nothing: the stream found a message
		// its leader no longer has (it aged out meanwhile). Read again after a backoff.
		j.retrySettle(ev, kAppendReread)
	}
}

func (j *Job) onAppendProve(ev Event) {
	switch ev.Status {
	case OK, CancelFlag:
		j.appendResult(j.appendAfter)
	case Lost:
		j.lostClaim()
	default:
		j.retrySettle(ev, kAppendReread)
	}
}

func (j *Job) onAppendRetry(Event) { j.appendResult(j.appendAfter) }

func (j *Job) onAppendReread(Event) {
	j.store(kAppendConflict, Effect{Kind: EffReadLog, ActionID: j.act.ID})
}

// retrySettle tries a failed step of the settle again after a backoff, for SettleFor
// (or until the deadline, when later); then the message is retried (the next delivery
// settles the action) or, on its last delivery, terminated.
func (j *Job) retrySettle(ev Event, k K) {
	j.note(NoteStoreFailed, "storing the result")
	if j.now.Before(j.settleUntil) {
		j.tries++
		j.sleep(k, min(Backoff(50*time.Millisecond, 2*time.Second, j.tries, 0, j.rand()), j.settleUntil.Sub(j.now)))
		return
	}
	j.settling = false
	j.setStatus("retrying", "")
	if j.final {
		j.note(NoteResultUnstored, "storing the result")
		j.term("the bridge could not store the action's result before its last delivery")
		return
	}
	j.nak(j.backoff(0))
}

// published follows the append of the terminal result: the key is freed when the
// result frees it, and the park index entry removed.
func (j *Job) published() {
	j.settledByMe = true
	j.hook(PointPublished)
	if FreesKey(j.result) && j.keyRev != 0 {
		j.store(kKeyFreed, Effect{Kind: EffDelete, Key: j.act.IdemKey, Rev: j.keyRev})
		return
	}
	j.unpark()
}

func (j *Job) onKeyFreed(ev Event) {
	if ev.Status == OK {
		j.keyRev = 0
	} else if ev.Status == Failed {
		j.note(NoteStoreFailed, "freeing the idempotency key (a later action frees it)")
	}
	j.unpark()
}

// unpark removes the action's park index entry, if it was parked (best effort: a stale
// entry is removed by the sweeper).
func (j *Job) unpark() {
	if j.rec.ApprovalSeq > j.askUnindexedAt && j.claimed {
		j.unindexAsk(j.rec.ApprovalSeq, askThenSettled) // a run's latest tool approval
		return
	}
	if j.rec.PendingSeq != 0 && len(j.rec.Action) > 0 || j.wasParked {
		j.store(kUnparkGet, Effect{Kind: EffGet, Key: kvstore.ParkKey(j.act.ID)})
		return
	}
	j.settled()
}

func (j *Job) onUnparkGet(ev Event) {
	if ev.Status == OK {
		j.store(kUnparkDel, Effect{Kind: EffDelete, Key: ev.Entry.Key, Rev: ev.Entry.Revision})
		return
	}
	j.settled()
}

func (j *Job) onUnparkDel(Event) { j.settled() }

// settled acknowledges a settled action (and answers the cancel that settled it).
func (j *Job) settled() {
	if j.kind == KindCancel && j.result != nil && j.result.Status == events.StatusCancelled {
		j.emit(Effect{Kind: EffReplyCancel, State: events.CancelCancelled})
	}
	j.ack()
}

// settleStored settles the action with the result its settled record holds (a cancel
// that came before the action): no claim is needed, since nothing can run it.
func (j *Job) settleStored(rec kvstore.Record) {
	r := new(events.Result)
	if json.Unmarshal(rec.Result, r) != nil {
		j.infra(Event{Status: Failed}, "reading the stored result")
		return
	}
	if j.act.CapabilityID != "" {
		r.CapabilityID = j.act.CapabilityID
	}
	j.stored = true
	j.settle(r)
}

// ---- parking ----

// park parks the claimed action until a decision: first it proves the claim (a
// compare-and-set, so that a claim taken over fails before it writes anything), then
// its park index entry, then its pending_approval message (appended at most once: a
// later parking finds it), then the record with the action and the expiry.
func (j *Job) park() {
	if j.fenced {
		// Taken over from an owner that was settling a result it reached without a
		// call (it may still append it): not parked, never sent.
		j.settle(j.failed(interruptedSettle()))
		return
	}
	j.parking = true
	j.parkUntil = j.now.Add(j.cfg.ApprovalTTL)
	j.claim(kParkProved, change{kind: chProve, stopOnCancel: true})
}

func (j *Job) onParkProved(ev Event) {
	switch ev.Status {
	case OK:
		idx := kvstore.Record{State: kvstore.StateParked, ActionID: j.act.ID, CapabilityID: j.act.CapabilityID,
			InputSHA256: j.act.InputSHA256, ExpiresAt: j.parkUntil.UTC()}
		j.store(kParkIndex, Effect{Kind: EffCreate, Key: kvstore.ParkKey(j.act.ID), Rec: recordOf(idx)})
	default:
		j.parkFailed(ev, "proving the claim before parking")
	}
}

func (j *Job) onParkIndex(ev Event) {
	if ev.Status != OK && ev.Status != Exists {
		j.parkFailed(ev, "creating the park index entry")
		return
	}
	j.wasParked = true
	j.store(kParkPending, Effect{Kind: EffAppend, ActionID: j.act.ID, Result: j.pendingResult(),
		MsgID: j.act.ID + ":pending"})
}

func (j *Job) onParkPending(ev Event) {
	switch ev.Status {
	case OK:
		j.parkRecord(ev.Log.Seq)
	case Conflict:
		j.store(kParkPendingLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
	default:
		j.parkFailed(ev, "publishing the pending_approval result")
	}
}

func (j *Job) onParkPendingLog(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.parking = false
		j.doneWith(ev.Log) // settled before it parked
	case ev.Status == OK:
		j.parkRecord(ev.Log.Seq) // an earlier parking published it
	default:
		j.parkFailed(ev, "reading the pending_approval result")
	}
}

func (j *Job) parkRecord(seq uint64) {
	j.claim(kParked, change{kind: chPark, stopOnCancel: true, action: j.act.Raw, expires: j.parkUntil, pendingSeq: seq})
}

func (j *Job) onParked(ev Event) {
	if ev.Status != OK {
		j.parkFailed(ev, "parking the action record")
		return
	}
	j.claimed = false
	j.setStatus(events.StatusPendingApproval, "")
	j.ack()
}

// parkFailed ends a parking that did not finish: a cancel settles the action
// cancelled; a record too large fails it with payload_too_large.
func (j *Job) parkFailed(ev Event, what string) {
	j.parking = false
	switch ev.Status {
	case CancelFlag:
		j.settle(cancelledResult(j, false))
	case Lost:
		j.lostClaim()
	case TooLarge:
		j.settle(j.failed(&events.ErrorInfo{Code: "payload_too_large", Category: "permanent",
			Message: "the action is too large to be kept while it waits for its approval"}))
	default:
		j.infra(ev, what)
	}
}

// pendingResult is the pending_approval result of the parked action (id <id>:pending).
func (j *Job) pendingResult() *events.Result {
	input := j.act.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	out, err := json.Marshal(struct {
		CapabilityID string          `json:"capability_id"`
		Input        json.RawMessage `json:"input"`
		InputSHA256  string          `json:"input_sha256"`
		ExpiresAt    time.Time       `json:"expires_at"`
	}{j.act.CapabilityID, input, j.act.InputSHA256, j.parkUntil.UTC()})
	if err != nil {
		out = json.RawMessage("null")
	}
	return &events.Result{ActionID: j.act.ID, CapabilityID: j.act.CapabilityID, Status: events.StatusPendingApproval,
		Output: out}
}
