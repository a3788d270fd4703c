package core

import (
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

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
	case kvstore.DecisionDeny:
		j.settle(j.failed(approvalDenied(j.rec.Reason)))
	case kvstore.DecisionMismatch:
		j.settle(j.failed(approvalMismatch()))
	case kvstore.DecisionExpired:
		j.settle(j.failed(approvalExpired()))
	case kvstore.DecisionCancel:
		j.settle(cancelledResult(j, false))
	default:
		if !j.act.Op.Approval {
			j.execute()
			return
		}
		switch ok, info := j.preApproval(); {
		case info != nil:
			j.settle(j.failed(info))
		case !ok:
			j.park()
		default:
			j.execute()
		}
	}
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
	case j.fenced && (j.act.IdemKey == "" || j.keyRev != 0):
		// The owner this job took over was settling a result it reached without a call
		// (and may still append it): nothing is sent now, nor waited for.
		j.settle(j.failed(interruptedSettle()))
	case j.fenced:
		// The same, but the owner may have been replaying its key holder's result: the
		// key is resolved first, and a replay is replayed again. Every other way from
		// the key ends at dispatch, which refuses a fenced claim.
		j.claimKey()
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
		switch {
		case j.following():
			j.call() // without a slot: the run is stopped (cancel, deadline) or handed back
		case ev.Status == Expired:
			j.settle(j.failed(deadlineExceeded(false)))
		default:
			j.interrupted()
		}
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
	case j.act.IdemKey != "" && j.keyRev != 0 && !j.keyProven:
		// The key was adopted from a read (an earlier delivery of this action claimed
		// it), which may be a lease's wait or an admission old: it may have lapsed since.
		// Renewing it proves it is still this action's, for a TTL more, before the mark.
		j.store(kKeyProve, Effect{Kind: EffUpdate, Key: j.act.IdemKey, Rec: recordOf(j.keyRec), Rev: j.keyRev})
	default:
		j.claim(kDispatched, change{kind: chDispatch, stopOnCancel: true})
	}
}

// onKeyProve follows the renewal of a key adopted from a read: proven, the dispatch goes
// on; lapsed or written since, the key is claimed afresh (or found held by another).
func (j *Job) onKeyProve(ev Event) {
	switch ev.Status {
	case OK:
		j.keyRev, j.keyProven = ev.Rev, true
		j.dispatch()
	case Conflict, NotFound:
		j.keyRev = 0
		j.unadmit()
		j.claimKey()
	default:
		j.unadmit()
		j.infra(ev, "renewing the idempotency key")
	}
}

func (j *Job) onDispatched(ev Event) {
	switch ev.Status {
	case OK:
		j.sendMarked()
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

// sendMarked sends the request once its write-ahead mark is stored, unless a cancel or
// shutdown came meanwhile (marked, but nothing sent).
func (j *Job) sendMarked() {
	if j.cancelReq || j.shutdown {
		j.notSent()
		return
	}
	j.hook(PointDispatched)
	j.call()
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
			// The request was aborted on request: certain only if nothing was sent. A
			// stream keeps what it streamed.
			r := cancelledResult(j, !c.NotStarted)
			if c.Output != nil {
				r.Output = c.Output
			}
			j.settle(r)
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
		if c.Gated && c.NotStarted && !j.final && delay < j.remaining() {
			// The gate refused it, so nothing ran: waiting for the gate is not an attempt.
			j.setStatus("retrying", errCode(c.Result))
			j.release(false, delay)
			return
		}
		if !j.lastAttempt() && delay < j.remaining() {
			j.setStatus("retrying", errCode(c.Result))
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
	j.freeSlot()
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
	j.freeSlot()
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
