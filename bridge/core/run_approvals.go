package core

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// ---- tool approvals ----

// RunApprovalAsk is a run's approval.request event.
type RunApprovalAsk struct {
	Data        json.RawMessage // the event's data, verbatim
	SHA256      string          // InputSHA256 of Data ("" if it is not a JSON object)
	Command     string
	Description string
	PatternKey  string
	Choices     []string
	RequestID   string // the event's request_id (Hermes 0.21 and later; "" before)
}

// onRunApproval queues an approval.request the run's events showed (queueAsk).
func (j *Job) onRunApproval(ev Event) {
	if j.run == nil || ev.Run == nil || ev.Run.Approval == nil || j.lost || j.done {
		return
	}
	j.queueAsk(ev.Run.Approval, false)
}

// queueAsk asks a tool approval of the run, one ask after another. A request Hermes
// names that this action already asked (the record holds it) or has queued is not asked
// again. An ask read from the run's events is checked against the run's status first
// (checked false; startAsk): events are read from where the action's stored events end,
// from the first when none are stored, so they may be history answered long ago (an
// action published again after its records expired follows the run Hermes's durable
// idempotency names, from its first event).
//
// Asking tool approval k (one more than the last) is then: first the approval's index,
// hash and expiry in the record (a compare-and-set, so that a delivery that lost its
// claim asks nothing), where any replica's decision finds it; then its pending_approval
// result <id>:pending:<k> after the action's last result message; then its expiry is
// armed. A failure is logged: the run then waits for the approval's expiry (or its
// deadline). A crash between the record and the message leaves an approval nobody
// sees: the delivery that takes the run over arms its expiry, which denies it.
func (j *Job) queueAsk(ask *RunApprovalAsk, checked bool) {
	if ask.SHA256 == "" {
		j.note(NoteRunApprovalAsked, "an approval request of the run is not a JSON object; it waits for the deadline")
		return
	}
	if id := ask.RequestID; id != "" && (id == j.rec.ApprovalRequestID ||
		slices.ContainsFunc(j.asks, func(a runAsk) bool { return a.ask.RequestID == id })) {
		return
	}
	j.asks = append(j.asks, runAsk{ask: ask, checked: checked})
	if len(j.asks) == 1 {
		j.startAsk()
	}
}

// startAsk checks asks[0] against the run's status unless that is done, then asks it.
func (j *Job) startAsk() {
	if !j.asks[0].checked {
		j.store(kRunAskCheck, Effect{Kind: EffRun, Run: &RunRequest{Op: RunStatus, CapabilityID: j.act.CapabilityID,
			RunID: j.run.runID}})
		return
	}
	a := &j.asks[0]
	j.run.asked++
	a.n = j.run.asked
	a.expires = j.now.Add(j.cfg.ApprovalTTL)
	out, _ := json.Marshal(map[string]any{
		"capability_id": j.act.CapabilityID, "run_id": j.run.runID, "input": a.ask.Data, "input_sha256": a.ask.SHA256,
		"expires_at": a.expires.UTC(),
		"approval":   approvalOut(a.n, a.ask),
	})
	a.pending = &events.Result{ActionID: j.act.ID, CapabilityID: j.act.CapabilityID,
		Status: events.StatusPendingApproval, Output: out}
	j.sendAsk()
}

// onRunAskCheck asks asks[0] unless the run's status shows it no longer waits for it.
func (j *Job) onRunAskCheck(ev Event) {
	if why := askSkipped(ev, j.asks[0].ask.RequestID); why != "" {
		j.note(NoteRunApprovalSkipped, why)
		j.nextAsk()
		return
	}
	j.asks[0].checked = true
	j.startAsk()
}

// askSkipped says how the run's status (ev) shows that the run no longer waits for the
// approval request requestID: it ended, the endpoint forgot it, or it waits for another
// request; "" when it may wait for it. Only such evidence skips an ask: a status that
// could not be read, one that names no request (Hermes before 0.21), or one that says
// running (it may not have caught up with the event) lets the ask go ahead.
func askSkipped(ev Event, requestID string) string {
	switch {
	case ev.Status == NotFound:
		return "the endpoint no longer knows the run"
	case ev.Status != OK || ev.Run == nil:
		return ""
	case ev.Run.Status != "":
		return "the run has ended"
	case ev.Run.WaitsFor != nil && ev.Run.WaitsFor.RequestID != "" && requestID != "" && ev.Run.WaitsFor.RequestID != requestID:
		return "the run waits for another approval request"
	}
	return ""
}

// approvalOut is the approval object of tool approval k's pending_approval output.
func approvalOut(k int, ask *RunApprovalAsk) map[string]any {
	o := map[string]any{"index": k, "command": ask.Command, "description": ask.Description,
		"pattern_key": ask.PatternKey, "choices": ask.Choices}
	if ask.RequestID != "" {
		o["request_id"] = ask.RequestID
	}
	return o
}

// runAsk is a tool approval being asked (asks are written one after another).
type runAsk struct {
	ask     *RunApprovalAsk
	checked bool // the run's status was read (or the ask came from it)
	n       int  // its index, from its check on
	expires time.Time
	pending *events.Result
	expect  uint64 // the result message its pending message follows
}

func (j *Job) askID(a runAsk) string { return j.act.ID + ":pending:" + strconv.Itoa(a.n) }

// sendAsk records asks[0] in the action record.
func (j *Job) sendAsk() {
	a := j.asks[0]
	j.claim(kRunAsked, change{kind: chAsk, n: a.n, sha: a.ask.SHA256, requestID: a.ask.RequestID, expires: a.expires, pendingSeq: j.expect()})
}

func (j *Job) onRunAsked(ev Event) {
	if ev.Status != OK {
		j.note(NoteStoreFailed, "recording the run's approval request; the run waits for its expiry")
		j.nextAsk()
		return
	}
	a := &j.asks[0]
	a.expect = j.expect()
	j.armApproval(a.n, a.expires)
	idx := kvstore.Record{State: kvstore.StateDispatched, ActionID: j.act.ID, CapabilityID: j.act.CapabilityID,
		RunID: j.run.runID, InputSHA256: a.ask.SHA256, ApprovalSeq: a.n, ApprovalRequestID: a.ask.RequestID, ExpiresAt: a.expires.UTC()}
	j.store(kRunAskIndex, Effect{Kind: EffCreate, Key: kvstore.AskKey(j.act.ID, a.n), Rec: recordOf(idx)})
}

// onRunAskIndex follows the ask index entry's creation: a failure only keeps the run
// out of `pending`'s listing.
func (j *Job) onRunAskIndex(ev Event) {
	if ev.Status != OK && ev.Status != Exists {
		j.note(NoteStoreFailed, "indexing the run's approval request (pending does not list it)")
	}
	j.appendAsk()
}

// What follows the removal of an ask index entry: each path has its own continuations,
// since the owner's expiry may come while its settling removes the entry.
type askThen uint8

const (
	askThenNothing askThen = iota // the owner's expiry: the run goes on
	askThenAck                    // a decision: acknowledge it
	askThenSettled                // a settled action: unpark, then acknowledge
)

// askKs are the Get and Delete continuations of each askThen.
var askKs = [...][2]K{askThenNothing: {kExpAskUnGet, kExpAskUnDel}, askThenAck: {kDecAskUnGet, kDecAskUnDel},
	askThenSettled: {kAskUnGet, kAskUnDel}}

// unindexAsk removes the ask index entry of tool approval k (best effort: a stale entry
// is skipped by its readers), then goes on as then says.
func (j *Job) unindexAsk(k int, then askThen) {
	if then != askThenAck {
		j.askUnindexedAt = max(j.askUnindexedAt, k) // the owner's: settling need not remove it again
	}
	j.store(askKs[then][0], Effect{Kind: EffGet, Key: kvstore.AskKey(j.act.ID, k)})
}

// askUnGot deletes the entry read (then continues as then says when there is none).
func (j *Job) askUnGot(ev Event, then askThen) {
	if ev.Status == OK {
		j.store(askKs[then][1], Effect{Kind: EffDelete, Key: ev.Entry.Key, Rev: ev.Entry.Revision})
		return
	}
	j.askUnindexed(then)
}

func (j *Job) askUnindexed(then askThen) {
	switch then {
	case askThenAck:
		j.ack()
	case askThenSettled:
		j.unpark()
	}
}

func (j *Job) onAskUnGet(ev Event)    { j.askUnGot(ev, askThenSettled) }
func (j *Job) onAskUnDel(Event)       { j.askUnindexed(askThenSettled) }
func (j *Job) onDecAskUnGet(ev Event) { j.askUnGot(ev, askThenAck) }
func (j *Job) onDecAskUnDel(Event)    { j.askUnindexed(askThenAck) }
func (j *Job) onExpAskUnGet(ev Event) { j.askUnGot(ev, askThenNothing) }
func (j *Job) onExpAskUnDel(Event)    { j.askUnindexed(askThenNothing) }

// appendAsk publishes asks[0]'s pending message.
func (j *Job) appendAsk() {
	a := j.asks[0]
	j.store(kRunAskAppended, Effect{Kind: EffAppend, ActionID: j.act.ID, Result: a.pending,
		MsgID: j.askID(a), Expect: a.expect})
}

func (j *Job) onRunAskAppended(ev Event) {
	switch ev.Status {
	case OK:
		j.asked(ev.Log.Seq)
	case Conflict:
		j.store(kRunAskLog, Effect{Kind: EffReadLog, ActionID: j.act.ID})
	default:
		j.askUnpublished()
	}
}

// onRunAskLog follows a pending message's append that found the log moved on: its own
// earlier append (a lost reply), a message it did not know of (appended after), or the
// terminal result (nothing more is asked).
func (j *Job) onRunAskLog(ev Event) {
	a := &j.asks[0]
	switch {
	case ev.Status == OK && ev.Log.Terminal():
		j.nextAsk()
	case ev.Status == OK && ev.Log.MsgID == j.askID(*a) && ev.Log.By == j.owner:
		j.asked(ev.Log.Seq)
	case ev.Status == OK && ev.Log.Seq != a.expect && ev.Log.MsgID != j.askID(*a):
		a.expect = ev.Log.Seq
		j.appendAsk()
	default:
		j.askUnpublished()
	}
}

// asked follows asks[0]'s pending message, stored with sequence seq.
func (j *Job) asked(seq uint64) {
	j.pendingSeq = seq
	j.note(NoteRunApprovalAsked, strconv.Itoa(j.asks[0].n))
	j.nextAsk()
}

// askUnpublished gives asks[0]'s pending message up: the run waits for its expiry.
func (j *Job) askUnpublished() {
	j.note(NoteStoreFailed, "publishing the run's approval request; the run waits for its expiry")
	j.nextAsk()
}

func (j *Job) nextAsk() {
	j.asks = j.asks[1:]
	if len(j.asks) > 0 && !j.done {
		j.startAsk()
	}
}

// armApproval denies approval n at expires unless a decision answers it first.
func (j *Job) armApproval(n int, expires time.Time) {
	j.emit(Effect{Kind: EffTimer, Op: j.op(), Timer: Timer{Kind: TimerApproval, N: n}, Until: expires})
}

// onApprovalExpiry answers approval n as expired, unless a decision answered it first
// (the condition is checked in the compare-and-set); the winner denies it on Hermes.
func (j *Job) onApprovalExpiry(n int) {
	if j.run == nil || j.lost || !j.claimed {
		return
	}
	j.claim(kRunExpired, change{kind: chExpire, n: n})
}

func (j *Job) onRunExpired(ev Event) {
	ch := j.cur.ch
	if ev.Status != OK || ch == nil || !ch.won {
		return
	}
	j.note(NoteRunApprovalExpired, strconv.Itoa(ch.n))
	j.emit(Effect{Kind: EffRun, Op: j.op(), Run: &RunRequest{Op: RunApprove, CapabilityID: j.act.CapabilityID,
		RunID: j.run.runID, Choice: events.ChoiceDeny, RequestID: j.rec.ApprovalRequestID}})
	j.unindexAsk(ch.n, askThenNothing)
}
