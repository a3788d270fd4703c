package core

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// EventKind names what happened to a job.
type EventKind uint8

// Event kinds. Every answer carries the Op of the effect it answers.
const (
	EvNone EventKind = iota
	// EvDeliver starts a job (Event.Start).
	EvDeliver
	// EvStore answers Create, Get, Update and Delete: Status, Rev, Entry.
	EvStore
	// EvLog answers ReadLog and Append: Status, Log (Seq for Append).
	EvLog
	// EvWait answers AwaitMove and WaitTerminal: Status Moved, Terminal (Log), Expired,
	// Aborted or Failed.
	EvWait
	// EvAdmit answers Admit: OK, Busy, Paused (Wait, Code), Expired, Aborted.
	EvAdmit
	// EvValidated answers Validate: Invalid.
	EvValidated
	// EvResumed answers Resume: Action, Invalid.
	EvResumed
	// EvCall answers Call: Call.
	EvCall
	// EvRun answers the run effects: Run.
	EvRun
	// EvRunApproval is a tool approval the run's events asked for (Run.Approval), while
	// its events are being read.
	EvRunApproval
	// EvTimer is a timer the core set (Timer).
	EvTimer
	// EvBeat is a heartbeat.
	EvBeat
	// EvCancel is a cancel request for the action, from this replica's registry.
	EvCancel
	// EvShutdown: the replica's work is cut off (the shutdown grace is over).
	EvShutdown
	// EvPanic: handling the job panicked (the driver recovered).
	EvPanic
	// EvDeadLettered answers DeadLetter: Status.
	EvDeadLettered
)

var eventNames = [...]string{"none", "deliver", "store", "log", "wait", "admit", "validated", "resumed", "call",
	"run", "run_approval", "timer", "beat", "cancel", "shutdown", "panic", "dead_lettered"}

func (k EventKind) String() string { return nameOf(eventNames[:], k, "event") }

// Event is one input of a job.
type Event struct {
	Kind EventKind
	// Now is when the event happened, on the driver's clock (a monotonic time in
	// production, the simulated time in the simulator). The core reads no other clock.
	Now time.Time
	// Op is the effect this event answers.
	Op     uint64
	Status Status
	// Err is the error behind Failed, for the log.
	Err error

	Rev    uint64        // EvStore: the new revision of a write
	KeyRev uint64        // EvStore answering EffClaim: the key's revision
	Entry  kvstore.Entry // EvStore: a Get's entry
	Log    LogEntry      // EvLog, EvWait: the entry read; Append: Log.Seq
	Wait   time.Duration // EvAdmit Paused: how long the breaker holds the endpoint
	Code   string        // EvAdmit Paused: the failure that opened the breaker

	Start   *Start            // EvDeliver
	Invalid *events.ErrorInfo // EvValidated, EvResumed
	Action  *Action           // EvResumed
	Call    *CallAnswer       // EvCall
	Run     *RunAnswer        // EvRun, EvRunApproval
	Timer   Timer             // EvTimer
}

// Start is what a job starts with (EvDeliver).
type Start struct {
	Kind JobKind
	// Owner names the job in the records: its replica and a nonce, unique per job.
	Owner string
	// Seed seeds the job's jitter.
	Seed uint64

	// KindAction: the action, the message's delivery count, whether JetStream will
	// deliver it again, and how long its endpoint's breaker holds it (0: not paused).
	Action    *Action
	Delivery  int
	Final     bool
	PausedFor time.Duration

	// KindDecision: the action id is Action.ID; the decision.
	Decision *Decision

	// KindCancel: whether a cancelled result may be stored for an id with no record.
	AllowTombstone bool
}

// EffectKind names what a job asks its driver to do.
type EffectKind uint8

// Effect kinds. An effect with an answer gets an Op; its answer event carries it.
const (
	EffNone EffectKind = iota
	// EffCreate creates Key with Rec (answer EvStore: OK Rev, Exists, TooLarge, Failed).
	EffCreate
	// EffGet reads Key (EvStore: OK Entry, NotFound, Failed). The read may be behind.
	EffGet
	// EffUpdate writes Rec to Key if its revision is Rev (EvStore: OK Rev, Conflict,
	// TooLarge, Failed).
	EffUpdate
	// EffDelete deletes Key if its revision is Rev (EvStore: OK, Conflict, Failed).
	EffDelete
	// EffClaim creates Key with Rec and the action record of ActionID with Rec2 in one
	// atomic batch: both are written or neither (EvStore: OK Rev, the record's, and
	// KeyRev; Exists: the key or the record held a value, nothing written; Conflict: the
	// store refused the batch as a whole, nothing written; TooLarge; Failed: it may have
	// been written).
	EffClaim
	// EffReadLog reads the last result message of ActionID (EvLog: OK Log, NotFound,
	// Failed), from the stream's leader: it is never behind what the stream
	// acknowledged (the output stream has no direct gets), so a NotFound means that no
	// result is stored.
	EffReadLog
	// EffAppend appends Result as ActionID's result message with id MsgID after the
	// message with sequence Expect (0: none), marked as written by the job's owner
	// (EvLog: OK Log.Seq, Conflict, TooLarge, Failed).
	EffAppend
	// EffAwaitMove waits until Key moves past Rev, ActionID has a terminal result, or
	// Until (EvWait: Moved, Terminal Log, Expired, Aborted, Failed).
	EffAwaitMove
	// EffWaitTerminal waits until ActionID has a terminal result or Until (EvWait:
	// Terminal Log, Expired, Aborted, Failed).
	EffWaitTerminal
	// EffAdmit takes one of the endpoint's concurrency slots and the circuit breaker's
	// admission, waiting for a slot until Until when Wait (EvAdmit). A slot taken is given
	// back by the Call that uses it or by EffUnadmit.
	EffAdmit
	// EffUnadmit gives back a slot that no call used (the breaker forgets the admission).
	EffUnadmit
	// EffValidate validates the delivered action (EvValidated).
	EffValidate
	// EffResume decodes and validates the action a parked record holds, Rec (EvResumed).
	EffResume
	// EffCall sends the validated request under the slot taken, with the deadline Until;
	// a streaming operation's events are republished while it runs (EvCall). It gives the
	// slot back and tells the breaker how it went.
	EffCall
	// EffRun is a run operation, Run (EvRun).
	EffRun
	// EffTimer sets Timer to fire at Until (EvTimer); setting it again replaces it.
	EffTimer
	// EffAbort aborts the async operation Op (its answer comes, Aborted).
	EffAbort
	// EffBeat starts (On) or stops the job's heartbeats (EvBeat every heartbeat).
	EffBeat
	// EffInProgress tells JetStream that the message is being worked on.
	EffInProgress
	// EffYield gives the dispatcher's worker slot back before a long wait.
	EffYield
	// EffHook is a named point of the flow (Point), for fault injection.
	EffHook
	// EffNote is something worth a log line or a metric (Note).
	EffNote
	// EffDeadLetter copies the job's message to the DLQ with Reason (EvDeadLettered).
	EffDeadLetter
	// EffReplyCancel answers the cancel request with State.
	EffReplyCancel
	// EffFinish ends the job: Ack (ack, nak after Delay, term with Reason). Every
	// operation still running is aborted; no answer comes.
	EffFinish
)

var effectNames = [...]string{"none", "create", "get", "update", "delete", "claim", "read_log", "append", "await_move",
	"wait_terminal", "admit", "unadmit", "validate", "resume", "call", "run", "timer", "abort", "beat",
	"in_progress", "yield", "hook", "note", "dead_letter", "reply_cancel", "finish"}

func (k EffectKind) String() string { return nameOf(effectNames[:], k, "effect") }

// Effect is one thing a job asks its driver to do.
type Effect struct {
	Kind EffectKind
	Op   uint64

	Key      string
	Rec      *kvstore.Record // EffCreate, EffUpdate, EffResume, EffClaim (a pointer: an Effect is copied often)
	Rec2     *kvstore.Record // EffClaim: the action record
	Rev      uint64
	ActionID string

	Result *events.Result // EffAppend
	MsgID  string         // EffAppend
	Expect uint64         // EffAppend

	// Until is the deadline of a wait, a waiting Admit, a Call or a timer.
	Until time.Time
	// Bound is how long a store or log request may take once the driver sends it
	// (Config.StoreBound): a duration, not a deadline, so that a request the process
	// sends late (after a pause, or starved of CPU) still gets its whole bound.
	Bound time.Duration
	Wait  bool // EffAdmit: wait for a slot
	On    bool // EffBeat

	Run   *RunRequest // EffRun
	Timer Timer       // EffTimer

	Point  Point  // EffHook
	Note   Note   // EffNote
	State  string // EffReplyCancel
	Ack    Ack    // EffFinish
	Delay  time.Duration
	Reason string // EffFinish term, EffDeadLetter, EffNote
}

// Ack is what becomes of a job's message.
type Ack uint8

// Acks.
const (
	AckIt Ack = iota
	NakIt
	TermIt
)

func (a Ack) String() string { return [...]string{"ack", "nak", "term"}[a] }

// Point names a place in the flow of an action where the driver calls its hook. The
// points are stable: fault-injection tests stop or kill the process at each of them.
type Point string

// Points, in flow order.
const (
	// PointDelivered: the message was decoded as an action; nothing is claimed yet.
	PointDelivered Point = "delivered"
	// PointClaimed: the action record is claimed, or, for an action that starts at
	// once, about to be (a start that gives way to the ordinary path passes it twice);
	// Hermes was not called.
	PointClaimed Point = "claimed"
	// PointDispatched: an unsafe call is recorded as dispatched; the request goes next.
	PointDispatched Point = "dispatched"
	// PointRunStarted: Hermes answered a governed run's POST /v1/runs with its run_id,
	// which is not stored yet.
	PointRunStarted Point = "run_started"
	// PointRunBound: the run_id is stored in the action record.
	PointRunBound Point = "run_bound"
	// PointEvent: one streamed event was handed to the publisher (called by the driver).
	PointEvent Point = "event"
	// PointStored: the terminal result is about to be appended.
	PointStored Point = "stored"
	// PointPublished: the terminal result is stored; the message is not acked yet.
	PointPublished Point = "published"
)

// Points lists every Point in flow order.
func Points() []Point {
	return []Point{PointDelivered, PointClaimed, PointDispatched, PointRunStarted, PointRunBound, PointEvent,
		PointStored, PointPublished}
}

// Note is something the driver logs or counts.
type Note uint8

// Notes.
const (
	NoteNone Note = iota
	// NoteGaveUpWaiting: a wait for another delivery reached its limit.
	NoteGaveUpWaiting
	// NoteTakenOver: this job's claim was taken over by another delivery.
	NoteTakenOver
	// NoteStoreFailed: a store or log operation failed (Reason says while doing what).
	NoteStoreFailed
	// NoteAuth: Hermes refused the endpoint's key.
	NoteAuth
	// NoteRunApprovalAsked: a run waits for a tool approval (Reason: its index).
	NoteRunApprovalAsked
	// NoteRunApprovalExpired: nobody decided a tool approval in time; it is denied.
	NoteRunApprovalExpired
	// NoteRunNotFollowed: the run's id could not be stored; a takeover cannot follow it.
	NoteRunNotFollowed
	// NoteRunLost: the endpoint no longer knows the run.
	NoteRunLost
	// NoteUnresumable: a parked action's record cannot be resumed.
	NoteUnresumable
	// NoteKeyLost: the key record no longer names this action.
	NoteKeyLost
	// NoteResultUnstored: the last delivery could not store the action's result.
	NoteResultUnstored
	// NoteRunApprovalStale: a decision names a tool approval request (Reason: its
	// request_id) the run does not wait for (answered, or never asked); it is not applied.
	NoteRunApprovalStale
	// NoteRunApprovalSkipped: an approval.request the events showed is not asked: the
	// run's status says it no longer waits for it (Reason: why).
	NoteRunApprovalSkipped
)

var noteNames = [...]string{"none", "gave_up_waiting", "taken_over", "store_failed", "auth",
	"run_approval_asked", "run_approval_expired", "run_not_followed", "run_lost", "unresumable", "key_lost",
	"result_unstored", "run_approval_stale", "run_approval_skipped"}

func (n Note) String() string { return nameOf(noteNames[:], n, "note") }

// Timer names a timer of a job.
type Timer struct {
	Kind TimerKind
	N    int // the tool approval a TimerApproval expires
}

// TimerKind names what a timer is for.
type TimerKind uint8

// Timer kinds.
const (
	TimerNone TimerKind = iota
	// TimerRetry: the main flow's backoff before it tries a failed operation again.
	TimerRetry
	// TimerApproval: a run's tool approval N expires.
	TimerApproval
)

func (t Timer) String() string {
	s := [...]string{"none", "retry", "approval"}[t.Kind]
	if t.Kind == TimerApproval {
		s += fmt.Sprintf("/%d", t.N)
	}
	return s
}

// resultOf is a shorthand for a failed result of the job's action.
func (j *Job) failed(info *events.ErrorInfo) *events.Result {
	return &events.Result{ActionID: j.act.ID, CapabilityID: j.act.CapabilityID, Status: events.StatusFailed,
		Output: json.RawMessage("null"), Error: info}
}
