package core

import (
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

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
	j.store(kKeyCreate, Effect{Kind: EffCreate, Key: j.act.IdemKey, Rec: recordOf(j.keyRecord())})
}

func (j *Job) onKeyCreate(ev Event) {
	switch ev.Status {
	case OK:
		j.hold(ev.Rev, j.keyRecord())
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
		j.holdRead(e.Revision, e.Record) // an earlier delivery of this action claimed it
		j.admit()
		return
	}
	if j.claimed && j.rec.State == kvstore.StateDispatched {
		// This action was dispatched (its call may have run) and its key expired while
		// it had no result: another action holds it now, and its result says nothing
		// of this one (no replay, no conflict). Carry on without the key.
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
// replay (a replay's replay names the original: an action published again after its
// records expired may so replay its own earlier life's result, which names it). The replay is fenced like every result reached without a call (settle): the
// record says settling before the result is appended. Unfenced, the record would stay
// claimed, and once the key and the holder's result had expired (both before the
// record), a re-publish would take that claim over and call Hermes for an action that
// had already ended.
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
	j.replayOf = orig
	j.settle(&c)
}
