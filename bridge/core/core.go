package core

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Config holds the settings of a bridge replica that the core's decisions depend on.
type Config struct {
	// Lease is how long an owner's record revision must stand still before another
	// delivery takes the claim over.
	Lease time.Duration
	// Heartbeat is the interval of the beats the driver delivers (Timer BeatTimer).
	Heartbeat time.Duration
	// ApprovalTTL is the approval window of parked actions and of a run's tool approvals,
	// and the age limit of a pre-approval.
	ApprovalTTL time.Duration
	// MaxAttempts bounds the calls of one action (retries of certain failures).
	MaxAttempts int
	// RetryBase and RetryMax bound the jittered exponential backoff of retries.
	RetryBase, RetryMax time.Duration
	// SettleFor is the least time a settle retries storing a result.
	SettleFor time.Duration
	// NoPreApprovals makes every approval operation park, whatever its action carries.
	NoPreApprovals bool
	// DecisionTries is how many deliveries a decision that finds nothing to decide is
	// retried before it is dead-lettered.
	DecisionTries int
	// ParkingWait bounds how long a decision waits for a parking under way.
	ParkingWait time.Duration
	// StoreBound bounds every store and log request (its Effect.Bound), so that a
	// renewal never waits long behind one sent to a server that stopped answering
	// (bridge.StoreRequestBound); 0: lease/8, at most 5 s.
	StoreBound time.Duration
	// AtomicClaim: the store writes a key and an action record in one atomic batch
	// (EffClaim), so an unsafe keyed action's one-write start claims both at once.
	AtomicClaim bool
}

// JobKind says what started a job.
type JobKind uint8

// Job kinds.
const (
	// KindAction is a delivery of an action message.
	KindAction JobKind = iota + 1
	// KindDecision is a delivery of a decision message on <prefix>.approvals.<id>.
	KindDecision
	// KindExpire is the sweeper expiring a parked action.
	KindExpire
	// KindCancel is a cancel request answered from the records.
	KindCancel
)

var jobKindNames = [...]string{"none", "action", "decision", "expire", "cancel"}

func (k JobKind) String() string {
	if int(k) < len(jobKindNames) {
		return jobKindNames[k]
	}
	return "none"
}

// Op describes an operation as the core needs it.
type Op struct {
	Name        string
	Safe        bool // may run twice (a read): no write-ahead mark, retried on transport errors and 5xx
	Stream      bool // its events are republished
	Approval    bool // needs an approval decision
	Run         bool // the governed run
	KeyRequired bool
}

// Action is what the driver learned about an action from its message (or from a parked
// action's record).
type Action struct {
	ID string
	// CapabilityID is "" when the action could not be identified far enough to settle
	// (its subject names no capability).
	CapabilityID string
	Op           Op
	InputSHA256  string
	// IdemKey is the scoped idempotency key's record key (kvstore.IdempotencyKey), ""
	// for none.
	IdemKey  string
	Deadline time.Time
	// Invalid is the error of an identified action that cannot be valid (its envelope
	// or data); validation (Validate) finds the rest.
	Invalid *events.ErrorInfo
	// PreApproval is the action's own approval, nil for none.
	PreApproval *events.Approval
	// Input is the action's input (for a pending_approval result) and Raw the whole
	// action JSON (kept in a parked action's record).
	Input, Raw json.RawMessage
}

// Decision is a decision message as the core needs it.
type Decision struct {
	MsgID       string // its CloudEvent id: what answers a run's approval
	Decision    string // events.DecisionApprove or events.DecisionDeny
	Approver    string
	Reason      string
	InputSHA256 string
	Choice      string // a run's choice (events.Approval.RunChoice)
	RequestID   string // the run's approval request it answers ("" for the one it waits for)
}

// Status is how a store, log or wait answer came out.
type Status uint8

// Statuses of answers.
const (
	OK Status = iota
	// Exists: a Create found the key held.
	Exists
	// Conflict: an Update, Delete or Append lost its compare-and-set.
	Conflict
	// NotFound: a read found nothing (which may be a read that is behind).
	NotFound
	// TooLarge: the record or message is over the limit.
	TooLarge
	// Failed: the operation failed; a write may or may not have happened.
	Failed
	// Moved: a wait saw the record move (AwaitMove).
	Moved
	// Terminal: a wait saw a terminal result (AwaitMove, WaitTerminal).
	Terminal
	// Expired: a wait reached its end.
	Expired
	// Aborted: the core aborted the operation (Abort), or the job's end did.
	Aborted
	// Busy: no endpoint slot was free (Admit without waiting).
	Busy
	// Paused: the endpoint's circuit breaker holds it (Admit).
	Paused
	// Lost: an update of the claimed record found it taken over (no write).
	Lost
	// CancelFlag: an update that stops for a cancel found the record flagged (no write).
	CancelFlag
)

var statusNames = [...]string{"ok", "exists", "conflict", "not_found", "too_large", "failed", "moved",
	"terminal", "expired", "aborted", "busy", "paused", "lost", "cancel_flag"}

func (s Status) String() string { return nameOf(statusNames[:], s, "status") }

// nameOf returns names[v], or kind(v) for a value past the names.
func nameOf[T ~uint8](names []string, v T, kind string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, v)
}

// LogEntry is one result message of an action in the result log, as the core reads it.
type LogEntry struct {
	Seq uint64
	// Result is the decoded message; nil when it is not readable (such a message counts
	// as terminal: whatever is stored stands).
	Result *events.Result
	// By is the owner (Job owner name) that appended it, "" when unknown.
	By string
	// MsgID is its message id (<id>:result, <id>:pending or <id>:pending:<k>).
	MsgID string
}

// Terminal reports whether e is a terminal result: read from its status, never from its
// message id (a governed run's pending messages are <id>:pending:<k>).
func (e LogEntry) Terminal() bool {
	return e.Result == nil || e.Result.Status != events.StatusPendingApproval
}

// FreesKey reports whether a result frees its idempotency key, so that a later action
// with the key runs: its error is retryable and certain, Hermes never started the work
// (schemas/README.md, "Delivery guarantees"). A cancellation before anything was sent is such a result.
func FreesKey(r *events.Result) bool {
	return r != nil && r.Error != nil && r.Error.Retryable && !r.Error.UncertainOutcome
}

// CallAnswer is what a call to Hermes ended with, mapped by the driver.
type CallAnswer struct {
	// Result is the result the answer settles with (resultOf: the output, or the error
	// mapped to the contract's error object).
	Result *events.Result
	// Responded: Hermes answered (a response was read), even if with an error.
	Responded bool
	// Aborted: the call was cut off by Abort or the job's end (the core knows why), or
	// its deadline passed without a response.
	Aborted bool
	// Output is what a stream cut off mid-way had produced (the aggregate of the events
	// read until then), nil otherwise: the cancelled result of an aborted call carries it.
	Output json.RawMessage
	// NotStarted: certain that Hermes did not start the work (a refused connection, the
	// 429 concurrency gate).
	NotStarted bool
	// Gated: Hermes's concurrency gate refused the call (429 rate_limit_exceeded; implies
	// NotStarted). Waiting for the gate spends none of the action's attempts: the action
	// is retried while its deadline allows, whatever MaxAttempts says.
	Gated bool
	// Retryable: the failure may be retried for this operation's safety.
	Retryable  bool
	RetryAfter time.Duration
	// Auth: Hermes refused the endpoint's key (every action fails until it is fixed).
	Auth bool
}

// Verdict is how a claim was taken, for metrics and the log.
type Verdict uint8

// Verdicts.
const (
	VerdictNone Verdict = iota
	// VerdictFresh: the record was created (Begin's Create, or a start).
	VerdictFresh
	// VerdictReleased: a released record was taken (a retry).
	VerdictReleased
	// VerdictTakeover: an owner's record stood still for a lease and was taken over.
	VerdictTakeover
	// VerdictDecided: a decision (or an expiry, or a cancel) ended a parking.
	VerdictDecided
)

// newRand returns the job's deterministic source of jitter.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// Backoff is bounded exponential backoff with full jitter on attempt (1-based), never
// shorter than retryAfter; u is a uniform draw in [0, 1).
func Backoff(base, maxDelay time.Duration, attempt int, retryAfter time.Duration, u float64) time.Duration {
	d := base << min(max(attempt, 1)-1, 20)
	if d > maxDelay || d <= 0 {
		d = maxDelay
	}
	return max(d/2+time.Duration(u*float64(d/2+1)), retryAfter)
}

// keyRecord is the key record naming the job's action as the holder of its key.
func (j *Job) keyRecord() kvstore.Record {
	return kvstore.Record{State: kvstore.StateClaimed, ActionID: j.act.ID, CapabilityID: j.act.CapabilityID,
		InputSHA256: j.act.InputSHA256, Owner: j.owner}
}

// recordOf returns a pointer to a copy of r, for an Effect.
func recordOf(r kvstore.Record) *kvstore.Record { return &r }
