package core

import (
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// ---- the ordinary path: claim the id ----

// begin claims the action id, or decides about the record that holds it.
func (j *Job) begin() {
	if j.waitUntil.IsZero() {
		j.waitUntil = j.now.Add(j.waitLimit())
	}
	j.store(kBeginCreate, Effect{Kind: EffCreate, Key: kvstore.ActionKey(j.act.ID), Rec: recordOf(j.intentRecord(kvstore.StateClaimed))})
}

// waitLimit bounds a wait on another delivery: the action's remaining time plus two
// leases, long enough to outwait a dead owner, never forever.
func (j *Job) waitLimit() time.Duration { return max(j.remaining(), 0) + 2*j.cfg.Lease }

func (j *Job) onBeginCreate(ev Event) {
	switch ev.Status {
	case OK:
		// Created afresh: no record of the action exists, so no result of it is stored
		// either (records outlive results: see the package doc).
		j.take(ev.Rev, j.intentRecord(kvstore.StateClaimed), VerdictFresh)
		j.claimedGo()
	case Exists:
		j.examine()
	default:
		j.infra(ev, "claiming the action")
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
		if ev.Entry.Key == j.seen.Key && ev.Entry.Revision < j.seen.Revision {
			// Behind a read this job already made: it says nothing. Read again.
			j.rereadBehind()
			return
		}
		j.seen = ev.Entry
		if ev.Entry.Record.State == kvstore.StateSettled {
			// A tombstone: rewrite it before its result is appended, so that the
			// record outlives the result (records outlive results).
			j.store(kTombKept, Effect{Kind: EffUpdate, Key: ev.Entry.Key, Rec: recordOf(ev.Entry.Record), Rev: ev.Entry.Revision})
			return
		}
		// The result log is the terminal register: look there before anything else.
		j.store(kExamineLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
	default:
		j.infra(ev, "reading the action record")
	}
}

func (j *Job) onTombKept(ev Event) {
	switch ev.Status {
	case OK:
		j.settleStored(j.seen.Record)
	case Conflict:
		j.rereadBehind() // rewritten since, or expired and created anew: read it again
	case NotFound:
		j.begin() // expired: the action is forgotten, Create decides
	default:
		j.infra(ev, "keeping the cancelled action's record")
	}
}

// rereadBehind reads the action record again after a backoff, within the wait's limit.
func (j *Job) rereadBehind() {
	if !j.now.Before(j.waitUntil) {
		j.gaveUp()
		return
	}
	j.tries++
	j.sleep(kExamineReread, min(j.backoffN(j.tries), j.waitUntil.Sub(j.now)))
}

func (j *Job) onExamineReread(ev Event) {
	if ev.Status == Aborted {
		j.interrupted()
		return
	}
	j.examine()
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
		j.takeClaim(kTakeReleased, kvstore.StateClaimed)
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
		j.take(ev.Rev, j.claimOf(kvstore.StateClaimed), VerdictReleased)
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
		j.takeClaim(kTakeOver, j.seen.Record.State)
	case j.now.Before(j.waitUntil):
		j.tries++
		j.note(NoteStoreFailed, "reading the action's result after the lease")
		j.sleep(kLeaseLogRetry, min(j.backoffN(j.tries), j.waitUntil.Sub(j.now)))
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
		j.take(ev.Rev, j.claimOf(e.Record.State), VerdictTakeover)
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

// takeClaim takes the claim of the record the job read (j.seen), in state s, with a
// compare-and-set on its revision; the answer goes to k.
func (j *Job) takeClaim(k K, s kvstore.State) {
	j.store(k, Effect{Kind: EffUpdate, Key: j.seen.Key, Rec: recordOf(j.claimOf(s)), Rev: j.seen.Revision})
}

// claimOf is the record the job read (j.seen) as this job's claim in state s: its
// owner, one attempt more.
func (j *Job) claimOf(s kvstore.State) kvstore.Record {
	r := j.seen.Record
	r.State, r.Owner, r.Attempt = s, j.owner, r.Attempt+1
	return r
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
	j.setStatus(prefix+r.Status, errCode(r))
}

// errCode is r's error code, "" for none.
func errCode(r *events.Result) string {
	if r == nil || r.Error == nil {
		return ""
	}
	return r.Error.Code
}
