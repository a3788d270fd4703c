package core

import (
	"encoding/json"
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// change is an update of the claimed action record. Each is one compare-and-set on the
// revision the job holds; a lost compare-and-set is reconciled (onClaimUpdate).
type change struct {
	kind chKind
	// stopOnCancel: a cancel flag found in the record stops the change (it reports
	// CancelFlag and writes nothing); other changes adopt the flag and go on.
	stopOnCancel bool

	counted    bool            // chRelease: this delivery spent an attempt
	runID      string          // chBind
	action     json.RawMessage // chPark
	expires    time.Time       // chPark, chAsk
	pendingSeq uint64          // chPark, chAsk
	n          int             // chAsk, chExpire: the tool approval
	sha        string          // chAsk
	requestID  string          // chAsk: Hermes's request_id of approval n ("" when none)
	won        bool            // chExpire: set by apply, the expiry answered approval n
}

type chKind uint8

const (
	chRenew    chKind = iota + 1 // a heartbeat: the owner moves the revision
	chDispatch                   // the write-ahead mark: from its success on the request may reach Hermes
	chFence                      // settling a result reached without a call
	chRelease                    // certain non-execution: a later delivery retries
	chProve                      // Park's first write: proves the claim before the index and the pending message
	chPark                       // parked, waiting for a decision
	chBind                       // a durable run's id
	chAsk                        // a run's tool approval n is asked
	chExpire                     // a run's tool approval n expired unanswered
)

// apply returns r with the change.
func (c *change) apply(r kvstore.Record) kvstore.Record {
	switch c.kind {
	case chDispatch:
		r.State = kvstore.StateDispatched
	case chFence:
		r.State = kvstore.StateSettling
	case chRelease:
		r.State, r.Owner = kvstore.StateReleased, ""
		if !c.counted {
			r.Attempt = max(r.Attempt-1, 0)
		}
	case chPark:
		r.State, r.Owner, r.Action, r.ExpiresAt, r.PendingSeq = kvstore.StateParked, "", c.action, c.expires.UTC(), c.pendingSeq
	case chBind:
		r.RunID = c.runID
	case chAsk:
		r.PendingSeq, r.ApprovalSeq, r.ApprovalSHA256, r.ExpiresAt = c.pendingSeq, c.n, c.sha, c.expires.UTC()
		r.ApprovalRequestID = c.requestID
	case chExpire:
		c.won = r.ApprovalSeq == c.n && r.ApprovalAnswered < c.n
		if c.won {
			r.ApprovalAnswered, r.ApprovalDecision = c.n, ""
		}
	}
	return r
}

// claim queues ch, whose outcome goes to k: OK (written; the job holds the new
// revision), CancelFlag, Lost, TooLarge or Failed (which may or may not have written).
func (j *Job) claim(k K, ch change) {
	j.queue = append(j.queue, storeReq{k: k, ch: &ch})
	j.pump()
}

// landed reports whether r, the record as read after an update whose answer was a
// conflict or a failure, shows the change written (a write of this job whose reply was
// lost): cur is the record the job held when it wrote.
func (c *change) landed(r, cur kvstore.Record) bool {
	same := r.Owner == cur.Owner
	switch c.kind {
	case chRenew, chProve:
		return same && r.State == cur.State
	case chDispatch:
		return same && r.State == kvstore.StateDispatched
	case chFence:
		return same && r.State == kvstore.StateSettling
	case chRelease:
		return r.State == kvstore.StateReleased && r.Owner == ""
	case chPark:
		return r.State == kvstore.StateParked && r.Owner == "" && r.PendingSeq == c.pendingSeq
	case chBind:
		return same && r.State == cur.State && r.RunID == c.runID
	case chAsk:
		return same && r.State == cur.State && r.ApprovalSeq >= c.n
	case chExpire:
		if same && r.State == cur.State && r.ApprovalAnswered >= c.n {
			c.won = r.ApprovalAnswered == c.n && r.ApprovalDecision == ""
			return true
		}
	}
	return false
}

// onClaimUpdate reconciles a claim update whose compare-and-set was lost or whose reply
// did not come: it reads the record. If it shows the change written (the job's own write
// whose reply was lost), the job adopts it. If it is still this job's as it was (a cancel
// request flagged it), the job adopts it and writes its change again (or stops for the
// cancel flag). Otherwise the claim was taken over.
func (j *Job) onClaimUpdate(r storeReq, ev Event) {
	if !r.reconcile {
		switch ev.Status {
		case OK:
			j.rev, j.rec = ev.Rev, *r.eff.Rec
			j.cont(r.k, Event{Kind: EvStore, Status: OK})
		case Conflict, Failed:
			r.reconcile = true
			r.eff = Effect{Kind: EffGet, Key: kvstore.ActionKey(j.act.ID)}
			j.send(r)
		default:
			j.cont(r.k, ev)
		}
		return
	}
	if ev.Status != OK {
		// NotFound: a record does not vanish while its action runs, so this is a read
		// that is behind. Unknown, not lost: the caller retries.
		j.cont(r.k, Event{Kind: EvStore, Status: Failed, Err: ev.Err})
		return
	}
	e := ev.Entry
	cur := j.rec
	if e.Revision < j.rev {
		// A read that is behind the revision this job holds: it says nothing. Unknown,
		// not lost: the caller retries.
		j.cont(r.k, Event{Kind: EvStore, Status: Failed})
		return
	}
	landed := r.ch.landed(e.Record, cur)
	if !landed && (e.Record.Owner != cur.Owner || e.Record.State != cur.State) {
		j.setLost()
		j.cont(r.k, Event{Kind: EvStore, Status: Lost})
		return
	}
	j.rev, j.rec = e.Revision, e.Record
	if e.Record.Cancel {
		j.cancelled()
		// A change written over a flag the job held already adopted it: it goes on.
		if r.ch.stopOnCancel && !(landed && cur.Cancel) {
			j.cont(r.k, Event{Kind: EvStore, Status: CancelFlag})
			return
		}
	}
	if landed {
		j.cont(r.k, Event{Kind: EvStore, Status: OK})
		return
	}
	r.reconcile = false
	r.eff = Effect{Kind: EffUpdate, Key: kvstore.ActionKey(j.act.ID), Rec: recordOf(r.ch.apply(j.rec)), Rev: j.rev}
	j.send(r)
}

// setLost records that the claim was taken over and cuts the main flow's operation off.
func (j *Job) setLost() {
	if !j.lost {
		j.lost = true
		j.abortMain(abortLost)
	}
}

// cancelled records a cancel request (from the record's flag or this replica) and cuts
// the main flow's operation off.
func (j *Job) cancelled() {
	if !j.cancelReq {
		j.cancelReq = true
		j.abortMain(abortCancel)
	}
}

// onRenewed ends a heartbeat's renewal of the claim, then renews the key record the
// job holds, so that neither expires while the action runs.
func (j *Job) onRenewed(ev Event) {
	j.renewQueued = false
	if ev.Status == OK && j.keyRev != 0 && !j.keyRenewing {
		j.keyRenewing = true
		j.store(kKeyRenewed, Effect{Kind: EffUpdate, Key: j.act.IdemKey, Rec: recordOf(j.keyRec), Rev: j.keyRev})
	}
}

// onKeyRenewed adopts the key record's new revision; when the write was refused or its
// reply lost, it reads the key back and adopts it if it still names this action.
func (j *Job) onKeyRenewed(ev Event) {
	switch ev.Status {
	case OK:
		j.keyRev, j.keyProven = ev.Rev, true
		j.keyRenewing = false
	default:
		j.store(kKeyReread, Effect{Kind: EffGet, Key: j.act.IdemKey})
	}
}

func (j *Job) onKeyReread(ev Event) {
	j.keyRenewing = false
	switch {
	case ev.Status == OK && ev.Entry.Record.ActionID == j.act.ID:
		j.holdRead(ev.Entry.Revision, ev.Entry.Record)
	case ev.Status == OK || ev.Status == NotFound:
		// Another action holds the key, or it is gone (expired, or freed by a result):
		// not this job's to renew.
		j.keyRev = 0
		j.note(NoteKeyLost, "")
	}
	// Failed: keep the revision; the next beat tries again and reads back again.
}

// storeBound bounds each store and log request: a renewal waits behind at most one, and
// the lease must hold heartbeat + dead-server detection + reconnect + this (see
// bridge.NATSLiveness).
func (j *Job) storeBound() time.Duration {
	if j.cfg.StoreBound > 0 {
		return j.cfg.StoreBound
	}
	return min(5*time.Second, j.cfg.Lease/8)
}

// hold records that the job holds the key, at revision rev, which it wrote.
func (j *Job) hold(rev uint64, r kvstore.Record) { j.keyRev, j.keyRec, j.keyProven = rev, r, true }

// holdRead records that the job holds the key, at revision rev, as a read found it
// naming this action: dispatch proves it with a write before anything is sent.
func (j *Job) holdRead(rev uint64, r kvstore.Record) { j.keyRev, j.keyRec, j.keyProven = rev, r, false }

// take records the claim the job took.
func (j *Job) take(rev uint64, r kvstore.Record, v Verdict) {
	j.claimed, j.rev, j.rec, j.verdict, j.attempt = true, rev, r, v, max(r.Attempt, 1)
}
