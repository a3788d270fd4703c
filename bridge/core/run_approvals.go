package core

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
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
}

// onRunApproval asks tool approval k of the run (one more than the last): first the
// approval's index, hash and expiry in the record (a compare-and-set, so that a
// delivery that lost its claim asks nothing), where any replica's decision finds it;
// then its pending_approval result <id>:pending:<k> after the action's last result
// message; then its expiry is armed. A failure is logged: the run then waits for the
// approval's expiry (or its deadline). A crash between the record and the message
// leaves an approval nobody sees: the delivery that takes the run over arms its expiry,
// which denies it.
func (j *Job) onRunApproval(ev Event) {
	f := j.run
	if f == nil || ev.Run == nil || ev.Run.Approval == nil || j.lost || j.done {
		return
	}
	ask := ev.Run.Approval
	if ask.SHA256 == "" {
		j.note(NoteRunApprovalAsked, "an approval request of the run is not a JSON object; it waits for the deadline")
		return
	}
	f.asked++
	k := f.asked
	expires := j.now.Add(j.cfg.ApprovalTTL)
	out, _ := json.Marshal(map[string]any{
		"capability_id": j.act.CapabilityID, "run_id": f.runID, "input": ask.Data, "input_sha256": ask.SHA256,
		"expires_at": expires.UTC(),
		"approval": map[string]any{"index": k, "command": ask.Command, "description": ask.Description,
			"pattern_key": ask.PatternKey, "choices": ask.Choices},
	})
	pending := &events.Result{ActionID: j.act.ID, CapabilityID: j.act.CapabilityID,
		Status: events.StatusPendingApproval, Output: out}
	j.asks = append(j.asks, runAsk{n: k, sha: ask.SHA256, expires: expires, pending: pending})
	if len(j.asks) == 1 {
		j.sendAsk()
	}
}

// runAsk is a tool approval being asked (asks are written one after another).
type runAsk struct {
	n       int
	sha     string
	expires time.Time
	pending *events.Result
	expect  uint64 // the result message its pending message follows
}

func (j *Job) askID(a runAsk) string { return j.act.ID + ":pending:" + strconv.Itoa(a.n) }

// sendAsk records asks[0] in the action record.
func (j *Job) sendAsk() {
	a := j.asks[0]
	j.claim(kRunAsked, change{kind: chAsk, n: a.n, sha: a.sha, expires: a.expires, pendingSeq: j.expect()})
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
	j.appendAsk()
}

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
		j.sendAsk()
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
		RunID: j.run.runID, Choice: events.ChoiceDeny}})
}
