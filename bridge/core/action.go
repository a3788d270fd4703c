package core

import (
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// deliver starts a job.
func (j *Job) deliver(s *Start) {
	j.kind, j.owner, j.begun = s.Kind, s.Owner, j.now
	j.rng = newRand(s.Seed)
	if s.Action != nil {
		j.act = *s.Action
	}
	j.delivery, j.final, j.dec, j.allowTomb = s.Delivery, s.Final, s.Decision, s.AllowTombstone
	j.emit(Effect{Kind: EffBeat, On: true})
	switch s.Kind {
	case KindAction:
		j.hook(PointDelivered)
		j.startAction(s.PausedFor)
	case KindDecision, KindExpire:
		j.decide()
	case KindCancel:
		j.cancelFromRecords()
	default:
		j.term("unknown job kind")
	}
}

// startAction decides how a delivered action begins. A paused endpoint's action waits
// without touching any record while the pause ends before its deadline. An unsafe
// action with nothing to decide first is validated and started at once (one write
// before the send); any other action is claimed first and validated after its claim, so
// that a duplicate that finds its result does no validation.
func (j *Job) startAction(pausedFor time.Duration) {
	a := &j.act
	j.invalid = a.Invalid
	if a.Invalid == nil && pausedFor > 0 && pausedFor < j.remaining() && !j.final {
		j.setStatus("paused", "")
		j.nak(j.pauseDelay(pausedFor))
		return
	}
	if a.Invalid == nil && j.startsAtOnce() {
		j.async(kValidateStart, Effect{Kind: EffValidate})
		return
	}
	j.begin()
}

// startsAtOnce reports whether the action takes the one-write start: an unsafe call
// with nothing to decide first (no approval, not a governed run) whose deadline has not
// passed and that no cancel stopped.
func (j *Job) startsAtOnce() bool {
	op := j.act.Op
	return !op.Safe && !op.Approval && !op.Run && j.remaining() > 0 && !j.cancelReq
}

// pauseDelay is how long an action waits for a paused endpoint: until the pause ends,
// with jitter so that the waiting actions do not all come back at once, never past the
// action's deadline.
func (j *Job) pauseDelay(wait time.Duration) time.Duration {
	d := wait + time.Duration(j.rand()*float64(wait/4+time.Millisecond))
	if r := j.remaining(); r > 0 && d > r {
		d = r
	}
	return max(d, time.Millisecond)
}

// ---- the one-write start ----

func (j *Job) onValidateStart(ev Event) {
	if ev.Status == Aborted || j.shutdown || j.cancelReq {
		j.stopStart()
		return
	}
	if ev.Invalid != nil {
		j.invalid = ev.Invalid // claimed first, then settled invalid
		j.begin()
		return
	}
	j.validated = true
	j.async(kAdmitStart, Effect{Kind: EffAdmit})
}

// onAdmitStart starts the action under a free endpoint slot, or takes the ordinary path
// (claimed first, visible in the records while it waits for a slot or the breaker).
func (j *Job) onAdmitStart(ev Event) {
	if ev.Status == OK {
		j.slot = true
	}
	if ev.Status != OK || j.shutdown || j.cancelReq {
		j.stopStart()
		return
	}
	j.hook(PointClaimed)
	j.startKey()
}

// startKey claims the key first, so that a crash between the key and the record leaves
// a key whose holder's own message runs it, never a mark with no key.
func (j *Job) startKey() {
	if j.act.IdemKey == "" {
		j.startLog()
		return
	}
	j.store(kStartKeyCreate, Effect{Kind: EffCreate, Key: j.act.IdemKey, Rec: keyRecord(&j.act, j.owner)})
}

func (j *Job) onStartKeyCreate(ev Event) {
	switch ev.Status {
	case OK:
		j.hold(ev.Rev, keyRecord(&j.act, j.owner))
		j.startLog()
	case Exists:
		j.store(kStartKeyGet, Effect{Kind: EffGet, Key: j.act.IdemKey})
	default:
		j.giveWay()
		j.infra(ev, "claiming the idempotency key")
	}
}

func (j *Job) onStartKeyGet(ev Event) {
	switch ev.Status {
	case NotFound:
		j.startKey() // gone since: create it afresh
	case OK:
		if e := ev.Entry; e.Record.ActionID == j.act.ID {
			j.hold(e.Revision, e.Record) // an earlier delivery claimed it and stopped
			j.startLog()
			return
		}
		seen := ev.Entry
		j.keySeen = &seen
		j.giveWay()
		j.begin()
	default:
		j.giveWay()
		j.infra(ev, "reading the idempotency key")
	}
}

// startLog looks for a terminal result of the action before its record is created: a
// record expires (the bucket TTL) while its result may still be in the output stream.
func (j *Job) startLog() {
	j.store(kStartLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
}

func (j *Job) onStartLog(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.giveWay()
		j.doneWith(ev.Log)
	case ev.Status == OK, ev.Status == NotFound:
		j.startRecord()
	default:
		j.giveWay()
		j.infra(ev, "reading the action's result")
	}
}

// startRecord creates the record already dispatched, unless a cancel or shutdown came
// meanwhile (the ordinary path then decides under a claim).
func (j *Job) startRecord() {
	if j.cancelReq || j.shutdown {
		j.stopStart()
		return
	}
	r := j.intentRecord()
	r.State = kvstore.StateDispatched
	j.store(kStartRecord, Effect{Kind: EffCreate, Key: kvstore.ActionKey(j.act.ID), Rec: r})
}

// onStartRecord: the Create of the record already dispatched is the claim and the
// write-ahead mark at once; it fails wherever any delivery claimed the id (or a cancel
// came first), and the ordinary path then decides.
func (j *Job) onStartRecord(ev Event) {
	switch ev.Status {
	case OK:
		r := j.intentRecord()
		r.State = kvstore.StateDispatched
		j.take(ev.Rev, r, VerdictFresh)
		if j.cancelReq || j.shutdown {
			j.notSent() // marked, but nothing sent
			return
		}
		j.hook(PointDispatched)
		j.call()
	case Exists:
		j.giveWay()
		j.begin()
	default:
		// A lost reply may have left the record dispatched: the next delivery then
		// settles outcome_unknown, as after a lost reply of the mark.
		j.giveWay()
		j.infra(ev, "creating the action record")
	}
}

// stopStart ends a start that does not go on: at shutdown the message goes back to
// another replica (nothing was claimed); otherwise (busy, paused, a cancel) the
// ordinary path claims the action first and decides.
func (j *Job) stopStart() {
	j.giveWay()
	if j.shutdown {
		j.nak(j.cfg.RetryBase)
		return
	}
	j.begin()
}

// giveWay gives back the slot of a start that does not go on.
func (j *Job) giveWay() {
	if j.slot {
		j.unadmit()
	}
}

// intentRecord is the action record a claim of this job creates.
func (j *Job) intentRecord() kvstore.Record {
	return kvstore.Record{State: kvstore.StateClaimed, ActionID: j.act.ID, CapabilityID: j.act.CapabilityID,
		InputSHA256: j.act.InputSHA256, Owner: j.owner, Attempt: 1, IdemKey: j.act.IdemKey}
}

// ---- the ordinary path: claim the id ----

// begin claims the action id, or decides about the record that holds it.
func (j *Job) begin() {
	if j.waitUntil.IsZero() {
		j.waitUntil = j.now.Add(j.waitLimit())
	}
	j.store(kBeginCreate, Effect{Kind: EffCreate, Key: kvstore.ActionKey(j.act.ID), Rec: j.intentRecord()})
}

// waitLimit bounds a wait on another delivery: the action's remaining time plus two
// leases, long enough to outwait a dead owner, never forever.
func (j *Job) waitLimit() time.Duration { return max(j.remaining(), 0) + 2*j.cfg.Lease }

func (j *Job) onBeginCreate(ev Event) {
	switch ev.Status {
	case OK:
		j.take(ev.Rev, j.intentRecord(), VerdictFresh)
		j.store(kFreshLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
	case Exists:
		j.examine()
	default:
		j.infra(ev, "claiming the action")
	}
}

// onFreshLog: a record created afresh may be that of an action whose earlier record
// expired while its result is still kept.
func (j *Job) onFreshLog(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.doneWith(ev.Log)
	case ev.Status == OK, ev.Status == NotFound:
		j.claimedGo()
	default:
		j.infra(ev, "reading the action's result")
	}
}

// examine reads the record that holds the id.
func (j *Job) examine() {
	j.store(kExamineGet, Effect{Kind: EffGet, Key: kvstore.ActionKey(j.act.ID)})
}

func (j *Job) onExamineGet(ev Event) {
	switch ev.Status {
	case NotFound:
		j.begin() // gone since (expired, or a read that is behind): Create decides
	case OK:
		j.seen = ev.Entry
		if ev.Entry.Record.State == kvstore.StateSettled {
			j.settleStored(ev.Entry.Record)
			return
		}
		// The result log is the terminal register: look there before anything else.
		j.store(kExamineLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
	default:
		j.infra(ev, "reading the action record")
	}
}

func (j *Job) onExamineLog(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.doneWith(ev.Log)
		return
	case ev.Status != OK && ev.Status != NotFound:
		j.infra(ev, "reading the action's result")
		return
	}
	e := j.seen
	switch e.Record.State {
	case kvstore.StateParked:
		j.setStatus("duplicate:"+events.StatusPendingApproval, "")
		j.ack()
	case kvstore.StateReleased:
		r := e.Record
		r.State, r.Owner, r.Attempt = kvstore.StateClaimed, j.owner, e.Record.Attempt+1
		j.store(kTakeReleased, Effect{Kind: EffUpdate, Key: e.Key, Rec: r, Rev: e.Revision})
	default:
		// Claimed, dispatched or settling by another delivery: wait for it to end, or
		// for its revision to stand still for a lease.
		if !j.now.Before(j.waitUntil) {
			j.gaveUp()
			return
		}
		j.emit(Effect{Kind: EffYield})
		until := j.now.Add(j.cfg.Lease)
		if until.After(j.waitUntil) {
			until = j.waitUntil
		}
		j.async(kOwnerWait, Effect{Kind: EffAwaitMove, Key: e.Key, Rev: e.Revision, ActionID: j.act.ID, Until: until})
	}
}

func (j *Job) onTakeReleased(ev Event) {
	switch ev.Status {
	case OK:
		r := j.seen.Record
		r.State, r.Owner, r.Attempt = kvstore.StateClaimed, j.owner, j.seen.Record.Attempt+1
		j.take(ev.Rev, r, VerdictReleased)
		j.claimedGo()
	case Conflict:
		j.examine()
	default:
		j.infra(ev, "taking the released action")
	}
}

func (j *Job) onOwnerWait(ev Event) {
	switch ev.Status {
	case Moved:
		j.examine()
	case Terminal:
		j.doneWith(ev.Log)
	case Expired:
		if !j.now.Before(j.waitUntil) {
			j.gaveUp()
			return
		}
		// The revision stood still for a lease: one more look at the log (the owner's
		// last act is its append, not a record write), then take the claim over.
		j.tries = 0
		j.store(kLeaseLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
	case Aborted:
		j.interrupted()
	default:
		j.infra(ev, "waiting for the action's owner")
	}
}

// onLeaseLog: a read that fails after the lease was waited out is retried (within the
// wait limit); the wait is not thrown away.
func (j *Job) onLeaseLog(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.doneWith(ev.Log)
	case ev.Status == OK, ev.Status == NotFound:
		e := j.seen
		r := e.Record
		r.Owner, r.Attempt = j.owner, e.Record.Attempt+1
		j.store(kTakeOver, Effect{Kind: EffUpdate, Key: e.Key, Rec: r, Rev: e.Revision})
	case j.now.Before(j.waitUntil):
		j.tries++
		j.note(NoteStoreFailed, "reading the action's result after the lease")
		j.sleep(kLeaseLogRetry, min(Backoff(j.cfg.RetryBase, j.cfg.RetryMax, j.tries, 0, j.rand()), j.waitUntil.Sub(j.now)))
	default:
		j.gaveUp()
	}
}

func (j *Job) onLeaseLogRetry(ev Event) {
	if ev.Status == Aborted {
		j.interrupted()
		return
	}
	j.store(kLeaseLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
}

// onTakeOver takes the claim over with a compare-and-set on the revision watched, which
// fails if the owner moved after all.
func (j *Job) onTakeOver(ev Event) {
	switch ev.Status {
	case OK:
		e := j.seen
		r := e.Record
		r.Owner, r.Attempt = j.owner, e.Record.Attempt+1
		j.take(ev.Rev, r, VerdictTakeover)
		j.tookOver = true
		j.uncertain = e.Record.State == kvstore.StateDispatched
		j.fenced = e.Record.State == kvstore.StateSettling
		j.claimedGo()
	case Conflict:
		j.examine()
	default:
		j.infra(ev, "taking the action over")
	}
}

// gaveUp ends a wait for another delivery that reached its limit: that delivery keeps
// renewing its claim and settles the action; this message is retried, or, on its last
// delivery, terminated (never settled without the claim).
func (j *Job) gaveUp() {
	j.note(NoteGaveUpWaiting, "")
	j.setStatus("retrying", "")
	if j.final {
		j.term("gave up waiting for the delivery that owns the action; it settles the action")
		return
	}
	j.nak(j.backoff(0))
}

// doneWith acknowledges a delivery whose action has its terminal result le.
func (j *Job) doneWith(le LogEntry) {
	j.statusFrom(le.Result, "duplicate:")
	j.ack()
}

// statusFrom sets the log status from a stored result, prefixed.
func (j *Job) statusFrom(r *events.Result, prefix string) {
	if r == nil {
		j.setStatus(prefix+"unreadable", "")
		return
	}
	code := ""
	if r.Error != nil {
		code = r.Error.Code
	}
	j.setStatus(prefix+r.Status, code)
}

// ---- claimed: decide what the action does ----

// claimedGo carries on an action whose claim this job holds: an action whose request
// may have reached Hermes is never sent again; a cancel settles it; otherwise it is
// validated (if it was not) and proceeds.
func (j *Job) claimedGo() {
	if j.resumeFirst {
		j.resume() // a decision's claim: read the action first
		return
	}
	if !j.claimedHooked {
		j.claimedHooked = true
		j.hook(PointClaimed)
	}
	switch {
	case j.uncertain && j.act.Op.Run:
		j.resumeRun()
	case j.uncertain && (j.rec.Cancel || j.cancelReq):
		j.settle(cancelledResult(j, true))
	case j.uncertain:
		j.settle(j.failed(outcomeUnknown()))
	case j.rec.Cancel || j.cancelReq:
		j.cancelReq = true
		j.settle(cancelledResult(j, false))
	case j.invalid != nil:
		j.settle(j.failed(j.invalid))
	case !j.validated:
		j.async(kValidateClaimed, Effect{Kind: EffValidate})
	default:
		j.proceed()
	}
}

func (j *Job) onValidateClaimed(ev Event) {
	if ev.Invalid != nil {
		j.settle(j.failed(ev.Invalid))
		return
	}
	j.validated = true
	j.proceed()
}

// proceed runs a claimed, valid action: its decision or approval first, then the call.
func (j *Job) proceed() {
	switch j.rec.Decision {
	case kvstore.DecisionApprove:
		j.execute()
		return
	case kvstore.DecisionDeny:
		j.settle(j.failed(approvalDenied(j.rec.Reason)))
		return
	case kvstore.DecisionMismatch:
		j.settle(j.failed(approvalMismatch()))
		return
	case kvstore.DecisionExpired:
		j.settle(j.failed(approvalExpired()))
		return
	case kvstore.DecisionCancel:
		j.settle(cancelledResult(j, false))
		return
	}
	if j.act.Op.Approval {
		ok, info := j.preApproval()
		switch {
		case info != nil:
			j.settle(j.failed(info))
			return
		case !ok:
			j.park()
			return
		}
	}
	j.execute()
}

// preApproval checks an action's own approval: ok means run now; a non-nil info is the
// failure to settle with; neither means park.
func (j *Job) preApproval() (ok bool, info *events.ErrorInfo) {
	a := j.act.PreApproval
	if a == nil || j.cfg.NoPreApprovals {
		return false, nil
	}
	if a.DecidedAt == nil || j.now.Sub(*a.DecidedAt) > j.cfg.ApprovalTTL || a.DecidedAt.After(j.now.Add(time.Minute)) {
		return false, nil // stale or from the future: ask again
	}
	if a.Decision == events.DecisionDeny {
		return false, approvalDenied(a.Reason)
	}
	if a.InputSHA256 != j.act.InputSHA256 {
		return false, approvalMismatch()
	}
	return true, nil
}

// execute resolves the idempotency key, then takes an endpoint slot and calls.
func (j *Job) execute() {
	switch {
	case j.fenced:
		// The owner this job took over was settling a result it reached without a call
		// (and may still append it): nothing is sent now, nor waited for.
		j.settle(j.failed(interruptedSettle()))
	case j.following():
		j.admit()
	case j.remaining() <= 0:
		j.settle(j.failed(deadlineExceeded(false)))
	case j.act.IdemKey != "" && j.keyRev == 0:
		j.claimKey()
	default:
		j.admit()
	}
}

// ---- the idempotency key ----

// claimKey claims the action's key, or finds who holds it. A holder's result decides:
// one that frees the key (certain non-execution) is replaced; otherwise a different
// input is a conflict and the same input a replay. While the holder runs, the job
// waits for its result, so that nothing is decided on a key record that may be behind.
func (j *Job) claimKey() {
	if j.keySeen != nil {
		e := *j.keySeen
		j.keySeen = nil
		j.examineKey(e)
		return
	}
	j.store(kKeyCreate, Effect{Kind: EffCreate, Key: j.act.IdemKey, Rec: keyRecord(&j.act, j.owner)})
}

func (j *Job) onKeyCreate(ev Event) {
	switch ev.Status {
	case OK:
		j.hold(ev.Rev, keyRecord(&j.act, j.owner))
		j.admit()
	case Exists:
		j.store(kKeyGet, Effect{Kind: EffGet, Key: j.act.IdemKey})
	default:
		j.infra(ev, "claiming the idempotency key")
	}
}

func (j *Job) onKeyGet(ev Event) {
	switch ev.Status {
	case NotFound:
		j.claimKey()
	case OK:
		j.examineKey(ev.Entry)
	default:
		j.infra(ev, "reading the idempotency key")
	}
}

func (j *Job) examineKey(e kvstore.Entry) {
	j.seen = e
	if e.Record.ActionID == j.act.ID {
		j.hold(e.Revision, e.Record) // an earlier delivery of this action claimed it
		j.admit()
		return
	}
	j.store(kKeyHolderLog, Effect{Kind: EffReadLog, ActionID: e.Record.ActionID})
}

func (j *Job) onKeyHolderLog(ev Event) {
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.decideKey(ev.Log)
	case ev.Status == OK, ev.Status == NotFound:
		j.emit(Effect{Kind: EffYield})
		j.async(kKeyHolderWait, Effect{Kind: EffWaitTerminal, ActionID: j.seen.Record.ActionID, Until: j.act.Deadline})
	default:
		j.infra(ev, "reading the key holder's result")
	}
}

func (j *Job) onKeyHolderWait(ev Event) {
	switch ev.Status {
	case Terminal:
		j.decideKey(ev.Log)
	case Expired:
		j.settle(j.failed(deadlineExceeded(false)))
	case Aborted:
		j.interrupted()
	default:
		j.infra(ev, "waiting for the original action")
	}
}

func (j *Job) decideKey(le LogEntry) {
	holder := j.seen.Record
	switch {
	case FreesKey(le.Result):
		j.store(kKeyFree, Effect{Kind: EffDelete, Key: j.act.IdemKey, Rev: j.seen.Revision})
	case holder.InputSHA256 != j.act.InputSHA256:
		j.settle(j.failed(idempotencyConflict(holder.ActionID)))
	default:
		j.replayHolder(holder.ActionID, le.Result)
	}
}

func (j *Job) onKeyFree(ev Event) {
	if ev.Status == OK || ev.Status == Conflict {
		j.claimKey() // freed (by this job or another): claim it afresh
		return
	}
	j.infra(ev, "freeing the idempotency key")
}

// replayHolder settles the action with the terminal result r of action orig, marked as its
// replay (CONTRACT §5). A replay needs no fence: it is chosen only when the holder's
// result keeps the key, so whoever takes this claim over replays the same result.
func (j *Job) replayHolder(orig string, r *events.Result) {
	if r == nil {
		j.settle(j.failed(&events.ErrorInfo{Code: "internal", Category: "connector",
			Message: "the original action's result is unreadable", Details: map[string]any{"original_action_id": orig}}))
		return
	}
	c := *r
	if c.ReplayOf != nil {
		orig = *c.ReplayOf
	}
	c.ActionID = j.act.ID
	c.ReplayOf = &orig
	j.replayOf, j.replay = orig, true
	j.settle(&c)
}

// ---- the endpoint, the mark, the call ----

func (j *Job) admit() {
	if (j.cancelReq || j.shutdown) && !j.following() {
		j.notSent()
		return
	}
	j.async(kAdmit, Effect{Kind: EffAdmit, Wait: true, Until: j.act.Deadline})
}

func (j *Job) onAdmit(ev Event) {
	switch ev.Status {
	case OK:
		j.slot = true
		switch {
		case (j.cancelReq || j.shutdown) && !j.following():
			j.notSent()
		case j.act.Op.Safe:
			j.call()
		default:
			j.dispatch()
		}
	case Paused:
		if ev.Wait >= j.remaining() || j.final {
			j.settle(j.failed(endpointPaused(ev.Code)))
			return
		}
		j.setStatus("paused", "")
		j.release(false, j.pauseDelay(ev.Wait))
	case Expired, Aborted:
		if j.following() {
			j.call() // without a slot: the run is stopped (cancel, deadline) or handed back
			return
		}
		if ev.Status == Expired {
			j.settle(j.failed(deadlineExceeded(false)))
			return
		}
		j.interrupted()
	default:
		j.interrupted()
	}
}

// following reports whether the job follows a run that exists (a bound run taken over).
func (j *Job) following() bool { return j.run != nil && j.run.reattached }

// dispatch writes the write-ahead mark: from its success on the request may reach
// Hermes and is never sent again. It is fenced by the claim's revision: a delivery that
// lost its claim cannot write it.
func (j *Job) dispatch() {
	switch {
	case j.following():
		j.call() // a bound run taken over: it exists, and is followed (and stopped on a cancel)
	case j.fenced:
		j.unadmit()
		j.settle(j.failed(interruptedSettle()))
	case j.rec.Cancel || j.cancelReq:
		j.notSent()
	case j.rec.State == kvstore.StateDispatched:
		// A run taken over unbound, posted again (durable run idempotency): marked already.
		j.hook(PointDispatched)
		j.call()
	default:
		j.claim(kDispatched, change{kind: chDispatch, stopOnCancel: true})
	}
}

func (j *Job) onDispatched(ev Event) {
	switch ev.Status {
	case OK:
		if j.cancelReq || j.shutdown {
			j.notSent() // marked, but nothing sent
			return
		}
		j.hook(PointDispatched)
		j.call()
	case CancelFlag:
		j.notSent()
	case Lost:
		j.unadmit()
		j.lostClaim()
	default:
		j.unadmit()
		j.infra(ev, "marking the action dispatched")
	}
}

// call sends the request under the slot taken (the call gives it back; a run holds it
// until it ends).
func (j *Job) call() {
	if j.act.Op.Run {
		j.startRun()
		return
	}
	j.slot = false
	j.async(kCall, Effect{Kind: EffCall, Until: j.act.Deadline})
}

// onCall maps the answer of a Hermes call to the delivery's end: the result, a retry,
// or an interruption.
func (j *Job) onCall(ev Event) { j.onCallAnswer(ev.Call) }

// onCallAnswer settles, retries or stops after c (a call's answer, or a run's post's).
func (j *Job) onCallAnswer(c *CallAnswer) {
	if c.Aborted && !c.Responded {
		switch j.abortWhy {
		case abortLost:
			j.lostClaim()
			return
		case abortCancel:
			// The request was aborted on request: certain only if nothing was sent.
			j.settle(cancelledResult(j, !c.NotStarted))
			return
		case abortShutdown:
			if j.act.Op.Safe || c.NotStarted {
				j.release(false, j.cfg.RetryBase)
				return
			}
			info := outcomeUnknown()
			info.Details = map[string]any{"reason": "the bridge shut down while the call was in flight"}
			j.settle(j.failed(info))
			return
		}
	}
	if !c.Responded && c.Retryable && !j.unboundRun {
		delay := j.backoff(c.RetryAfter)
		if !j.lastAttempt() && delay < j.remaining() {
			code := ""
			if c.Result != nil && c.Result.Error != nil {
				code = c.Result.Error.Code
			}
			j.setStatus("retrying", code)
			j.release(true, delay)
			return
		}
	}
	if c.Auth && c.Result != nil && c.Result.Error != nil {
		j.note(NoteAuth, c.Result.Error.Message) // the message says where the key comes from, never the key
	}
	j.settle(c.Result)
}

// lastAttempt reports whether this delivery is the action's last attempt at Hermes.
func (j *Job) lastAttempt() bool { return j.attempt >= j.cfg.MaxAttempts || j.final }

// ---- ending a delivery without a result ----

// notSent ends an action that a cancel or shutdown stopped before its request was sent:
// a cancel settles it cancelled (certain); shutdown releases it to another replica.
func (j *Job) notSent() {
	if j.slot {
		j.unadmit()
	}
	if j.cancelReq {
		j.settle(cancelledResult(j, false))
		return
	}
	j.interrupted()
}

// release gives the claim up with certain non-execution, for a retry by a later
// delivery, and naks after delay. counted says whether this delivery spent an attempt.
func (j *Job) release(counted bool, delay time.Duration) {
	if !j.claimed || j.lost || j.fenced || j.rec.State == kvstore.StateSettling {
		// A fenced claim keeps its fence (the next delivery takes it over and settles).
		j.nak(delay)
		return
	}
	j.releaseDelay = delay
	j.claim(kReleased, change{kind: chRelease, counted: counted})
}

func (j *Job) onReleased(ev Event) {
	if ev.Status == Failed {
		j.note(NoteStoreFailed, "releasing the action (the next delivery waits out the lease)")
	}
	j.claimed = false
	j.nak(j.releaseDelay)
}

// lostClaim ends a job whose claim another delivery took over: it neither sends nor
// settles. Its message is acknowledged once the new owner's terminal result is stored
// (it may be this very message, redelivered), or handed back when that takes too long.
func (j *Job) lostClaim() {
	j.lost = true
	j.setStatus("taken_over", "")
	j.note(NoteTakenOver, "")
	if j.slot {
		j.unadmit()
	}
	j.emit(Effect{Kind: EffYield})
	j.abortWhy = abortNone
	j.async(kLostWait, Effect{Kind: EffWaitTerminal, ActionID: j.act.ID, Until: j.now.Add(j.waitLimit())})
}

func (j *Job) onLostWait(ev Event) {
	if ev.Status == Terminal {
		j.ack()
		return
	}
	j.nak(j.cfg.RetryBase)
}

// interrupted ends a wait or a slot the main flow gave up: a cancel, a lost claim or
// shutdown.
func (j *Job) interrupted() {
	switch {
	case j.abortWhy == abortLost || j.lost:
		j.lostClaim()
	case j.abortWhy == abortCancel && j.claimed:
		j.settle(cancelledResult(j, false))
	case j.abortWhy == abortShutdown || j.shutdown:
		j.release(false, j.cfg.RetryBase) // (a nak when nothing is claimed)
	default:
		j.infra(Event{Status: Failed}, "an interrupted wait")
	}
}

// infra ends a delivery after a failure of the bridge's own storage: a claim that did
// not send is released and the message retried; on its last delivery the action is
// settled under the claim (never without it), else the message is terminated.
func (j *Job) infra(ev Event, what string) {
	j.note(NoteStoreFailed, what)
	j.setStatus("retrying", "")
	if j.final {
		j.lastResort(what)
		return
	}
	delay := j.backoff(0)
	if j.claimed && !j.lost && j.rec.State == kvstore.StateClaimed && j.kind != KindCancel {
		j.release(false, delay)
		return
	}
	j.nak(delay)
}

// lastResort settles an action on its final delivery when the bridge's own storage
// failed, so that it still ends: under the claim this job holds (fenced like any
// settle), uncertain if the call may have been sent. Without the claim it settles
// nothing: another delivery owns the action, or nothing can be written; the message is
// terminated and the failure logged.
func (j *Job) lastResort(what string) {
	if !j.claimed || j.lost || j.settling || j.act.CapabilityID == "" {
		j.note(NoteResultUnstored, what)
		j.term("the bridge could not record the action before its last delivery")
		return
	}
	info := &events.ErrorInfo{Code: "internal", Category: "connector",
		UncertainOutcome: j.rec.State == kvstore.StateDispatched && !j.act.Op.Safe,
		Message:          "the bridge could not record the action before its last delivery",
		Details:          map[string]any{"while": what}}
	j.settle(j.failed(info))
}
