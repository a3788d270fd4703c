package core

import (
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// deliver starts a job.
func (j *Job) deliver(s *Start) {
	j.kind, j.owner = s.Kind, s.Owner
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

// startKey claims the key and creates the record already dispatched: in one atomic
// batch where the store takes one, otherwise the key first, so that a crash between the
// key and the record leaves a key whose holder's own message runs it, never a mark with
// no key.
func (j *Job) startKey() {
	switch {
	case j.act.IdemKey == "":
		j.startRecord()
	case j.cfg.AtomicClaim && !j.claimTried:
		j.claimTried = true
		if j.stopBeforeRecord() {
			return
		}
		j.store(kStartClaim, Effect{Kind: EffClaim, Key: j.act.IdemKey, Rec: recordOf(j.keyRecord()),
			ActionID: j.act.ID, Rec2: recordOf(j.intentRecord(kvstore.StateDispatched))})
	default:
		j.store(kStartKeyCreate, Effect{Kind: EffCreate, Key: j.act.IdemKey, Rec: recordOf(j.keyRecord())})
	}
}

// onStartClaim: the batch is the key's claim, the record's claim and the write-ahead
// mark at once. Refused as a whole (the key or the record held a value, or the store
// refused the batch), it wrote nothing: the key is claimed on its own, and that path
// decides who holds what. A batch whose answer did not come may have been written:
// checkClaim looks for it.
func (j *Job) onStartClaim(ev Event) {
	switch ev.Status {
	case OK:
		j.hold(ev.KeyRev, j.keyRecord())
		j.take(ev.Rev, j.intentRecord(kvstore.StateDispatched), VerdictFresh)
		j.sendMarked()
	case Exists, Conflict, TooLarge:
		j.startKey()
	default:
		j.tries = 0
		j.checkClaim(ev)
	}
}

// claimChecks bounds the reads with which a job looks for its claim whose answer did not
// come; the reads are spaced by the backoff.
const claimChecks = 4

// checkClaim reads the action record after a claim whose answer did not come: the batch
// may have been written, or may still be, by a server electing a leader. The record with
// this job's owner (unique to the job) proves it was; the job then reads its key's
// revision and sends. Another owner's record, or no proof within claimChecks reads (a
// read that finds nothing may be behind: it proves nothing), ends the start as a failed
// store request: the message is retried, and a batch written after that is found by the
// next delivery (outcome_unknown after a lease, never a second send).
func (j *Job) checkClaim(ev Event) {
	if j.tries >= claimChecks || j.shutdown || j.cancelReq {
		j.freeSlot()
		j.infra(ev, "claiming the idempotency key and the action")
		return
	}
	j.tries++
	j.store(kStartClaimCheck, Effect{Kind: EffGet, Key: kvstore.ActionKey(j.act.ID)})
}

func (j *Job) onStartClaimCheck(ev Event) {
	r := ev.Entry.Record
	switch {
	case ev.Status == OK && r.Owner == j.owner && r.State == kvstore.StateDispatched:
		j.take(ev.Entry.Revision, r, VerdictFresh)
		j.store(kStartClaimKey, Effect{Kind: EffGet, Key: j.act.IdemKey})
	case ev.Status == OK:
		j.freeSlot()
		j.begin() // another delivery's record: the ordinary path decides
	default:
		j.sleep(kStartClaimWait, j.backoffN(j.tries))
	}
}

func (j *Job) onStartClaimWait(ev Event) {
	if ev.Status == Aborted {
		j.freeSlot()
		j.interrupted()
		return
	}
	j.checkClaim(Event{Status: Failed})
}

// onStartClaimKey adopts the key the claim wrote (same batch as the record) and sends.
// A read of the key that fails or finds it held otherwise (behind) is tried again: the
// job holds a dispatched record, and its key is its own.
func (j *Job) onStartClaimKey(ev Event) {
	if ev.Status == OK && ev.Entry.Record.ActionID == j.act.ID {
		j.hold(ev.Entry.Revision, ev.Entry.Record)
		j.sendMarked()
		return
	}
	j.tries++
	if j.tries > 2*claimChecks {
		j.sendMarked() // unproven key revision: the send proceeds without renewing it
		return
	}
	j.store(kStartClaimKey, Effect{Kind: EffGet, Key: j.act.IdemKey})
}

func (j *Job) onStartKeyCreate(ev Event) {
	switch ev.Status {
	case OK:
		j.hold(ev.Rev, j.keyRecord())
		j.startRecord()
	case Exists:
		j.store(kStartKeyGet, Effect{Kind: EffGet, Key: j.act.IdemKey})
	default:
		j.freeSlot()
		j.infra(ev, "claiming the idempotency key")
	}
}

func (j *Job) onStartKeyGet(ev Event) {
	switch ev.Status {
	case NotFound:
		j.startKey() // gone since: create it afresh
	case OK:
		// Another action holds the key, or an earlier delivery of this one claimed it
		// and stopped (its revision, read, may lapse before a send): the ordinary path
		// decides, from this read.
		seen := ev.Entry
		j.keySeen = &seen
		j.freeSlot()
		j.begin()
	default:
		j.freeSlot()
		j.infra(ev, "reading the idempotency key")
	}
}

// startRecord creates the record already dispatched, unless a cancel or shutdown came
// meanwhile (the ordinary path then decides under a claim).
func (j *Job) startRecord() {
	if j.stopBeforeRecord() {
		return
	}
	r := j.intentRecord(kvstore.StateDispatched)
	j.store(kStartRecord, Effect{Kind: EffCreate, Key: kvstore.ActionKey(j.act.ID), Rec: recordOf(r)})
}

// stopBeforeRecord stops a start that must not create its record dispatched: cancelled,
// cut off, or past the deadline (the start waited on the store, or its process was
// paused). Nothing is sent; the ordinary path settles it.
func (j *Job) stopBeforeRecord() bool {
	if j.cancelReq || j.shutdown || j.remaining() <= 0 {
		j.stopStart()
		return true
	}
	return false
}

// onStartRecord: the Create of the record already dispatched is the claim and the
// write-ahead mark at once; it fails wherever any delivery claimed the id (or a cancel
// came first), and the ordinary path then decides.
func (j *Job) onStartRecord(ev Event) {
	switch ev.Status {
	case OK:
		j.take(ev.Rev, j.intentRecord(kvstore.StateDispatched), VerdictFresh)
		j.sendMarked()
	case Exists:
		j.freeSlot()
		j.begin()
	default:
		// A lost reply may have left the record dispatched: the next delivery then
		// settles outcome_unknown, as after a lost reply of the mark.
		j.freeSlot()
		j.infra(ev, "creating the action record")
	}
}

// stopStart ends a start that does not go on: at shutdown the message goes back to
// another replica (nothing was claimed); otherwise (busy, paused, a cancel) the
// ordinary path claims the action first and decides.
func (j *Job) stopStart() {
	j.freeSlot()
	if j.shutdown {
		j.nak(j.cfg.RetryBase)
		return
	}
	j.begin()
}

// intentRecord is the action record in state s that a claim of this job creates.
func (j *Job) intentRecord(s kvstore.State) kvstore.Record {
	return kvstore.Record{State: s, ActionID: j.act.ID, CapabilityID: j.act.CapabilityID,
		InputSHA256: j.act.InputSHA256, Owner: j.owner, Attempt: 1, IdemKey: j.act.IdemKey}
}
