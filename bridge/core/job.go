package core

import (
	"math/rand/v2"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Job is the state of one job: a delivery of an action or of a decision, the sweeper's
// expiry of a parked action, or a cancel answered from the records. Its only method that
// changes it is Step; it does no I/O, reads no clock and starts no goroutine. It is not
// safe for concurrent use: its driver serializes the events.
type Job struct {
	cfg   Config
	kind  JobKind
	owner string
	rng   *rand.Rand
	now   time.Time

	act       Action
	delivery  int
	final     bool
	dec       *Decision
	allowTomb bool
	validated bool // EffValidate or EffResume answered, and the action is valid
	invalid   *events.ErrorInfo

	// The action record, while this job holds its claim (claimed).
	claimed  bool
	rev      uint64
	rec      kvstore.Record
	lost     bool // the claim was taken over: neither send nor settle
	verdict  Verdict
	tookOver bool // taken over from an owner that may still be alive (paused)
	// fenced: taken over from an owner that was settling a result it reached without a
	// call: nothing was sent, and this job must not send either.
	fenced bool
	// uncertain: taken over from an owner that had marked it dispatched.
	uncertain bool

	// The key record, while this job holds the key (keyRev != 0).
	keyRev      uint64
	keyRec      kvstore.Record
	keySeen     *kvstore.Entry // a key record a start found held by another action
	claimTried  bool           // the one-write start tried its atomic claim (EffClaim)
	keyRenewing bool
	// keyProven: this job wrote the key's revision keyRev (or renewed it); false when it
	// adopted the key from a read, which says nothing of whether it has lapsed since.
	keyProven bool

	seen      kvstore.Entry // the record (or key record) the flow decides about
	waitUntil time.Time     // the limit of a wait for another delivery

	settling    bool // the result is decided: a cancel comes too late
	parking     bool // a parking is under way: the records answer cancels
	unboundRun  bool // a run taken over unbound and posted again: no failure is certain
	result      *events.Result
	settleUntil time.Time
	tries       int  // attempts of the main flow's current operation
	stored      bool // the result settled was held in a settled record (no claim)

	slot      bool // an endpoint slot is held, not yet used by a call
	cancelReq bool // a cancel request came (or the record carries the flag)
	shutdown  bool
	abortWhy  abortCause

	run            *runState
	asks           []runAsk       // tool approvals being asked, in order
	lastStart      *CallAnswer    // a failed post of the run, while it may be posted again
	decided        kvstore.Record // the record a decision (or cancel) writes
	waitedParking  bool           // a decision waited once for a parking under way
	resumeFirst    bool           // the claim came from a decision: Resume before anything
	approval       string         // a decision's outcome, for its metric
	runChoice      string         // the choice a decision forwards to a run
	askUnindexedAt int            // the latest tool approval whose ask index entry the owner removed
	dlqReason      string         // why the message goes to the DLQ
	panicked       bool           // the job panicked once
	releaseDelay   time.Duration  // the nak after a release
	settledByMe    bool           // this job stored the action's terminal result
	appendAfter    uint64         // the sequence the result's append expects
	pendingSeq     uint64         // the last pending message this job appended (a run's approval)
	wasParked      bool           // this job parked, or claimed a parked, action
	parkUntil      time.Time      // the parking's expiry
	claimedHooked  bool           // PointClaimed was emitted on the ordinary path

	// The main flow awaits one answer at a time.
	await   K
	awaitOp uint64
	// Store and log operations go one at a time (the main flow's and the heartbeat's).
	busy        bool
	cur         storeReq
	queue       []storeReq
	renewQueued bool

	nextOp uint64
	done   bool

	// The job's outcome, for its log line and metrics.
	status, code, replayOf string
	attempt                int

	out  []Effect // the effects of the step under way (StepAppend's out)
	keep []Effect // Step's buffer of effects, reused from step to step

	// The first operations of the queue live here: one allocation of the Job instead of
	// a slice that grows, for every job.
	queueBuf [2]storeReq
}

// abortCause is why the main flow's operation was aborted.
type abortCause uint8

const (
	abortNone abortCause = iota
	abortCancel
	abortLost
	abortShutdown
)

// NewJob returns a job with cfg; Step it with EvDeliver first.
func NewJob(cfg Config) *Job {
	j := &Job{cfg: cfg}
	j.queue = j.queueBuf[:0]
	return j
}

// Done reports whether the job finished (it emitted EffFinish).
func (j *Job) Done() bool { return j.done }

// Outcome describes a finished (or running) job for its log line and metrics.
type Outcome struct {
	ActionID, CapabilityID string
	Status, Code, ReplayOf string
	Attempt                int
	Verdict                Verdict
	Dispatched             bool   // an unsafe call may have been sent under this job's claim
	Settled                bool   // this job stored the action's terminal result
	Claimed                bool   // the job holds (or held, until it ended) the action's claim
	Uncertain              bool   // the claim was taken over from an owner that had dispatched
	Approval               string // a decision's outcome (approve, deny, mismatch, expired, early, orphan)
}

// Outcome returns what the job did so far.
func (j *Job) Outcome() Outcome {
	return Outcome{ActionID: j.act.ID, CapabilityID: j.act.CapabilityID, Status: j.status, Code: j.code,
		ReplayOf: j.replayOf, Attempt: max(j.attempt, 1), Verdict: j.verdict,
		Dispatched: j.claimed && j.rec.State == kvstore.StateDispatched, Settled: j.settledByMe,
		Claimed: j.claimed, Uncertain: j.uncertain, Approval: j.approval}
}

// Step applies ev and returns the effects to carry out, in order. The slice is valid
// until the next Step.
func (j *Job) Step(ev Event) []Effect {
	j.keep = j.StepAppend(ev, j.keep[:0])
	return j.keep
}

// StepAppend is Step for a caller that holds the effects in a buffer of its own: it
// applies ev and appends the effects to carry out, in order, to out. The job keeps no
// reference to out.
func (j *Job) StepAppend(ev Event, out []Effect) []Effect {
	if j.done {
		return out
	}
	j.out = out
	if !ev.Now.IsZero() {
		j.now = ev.Now
	}
	switch ev.Kind {
	case EvDeliver:
		j.deliver(ev.Start)
	case EvStore, EvLog:
		j.onStore(ev)
	case EvTimer:
		j.onTimer(ev)
	case EvRunApproval:
		j.onRunApproval(ev)
	case EvBeat:
		j.onBeat()
	case EvCancel:
		j.onCancel()
	case EvShutdown:
		j.onShutdown()
	case EvPanic:
		j.onPanic()
	default:
		if j.busy && ev.Op != 0 && ev.Op == j.cur.eff.Op {
			j.onStore(ev) // a status read queued beside the store operations
			break
		}
		j.onAnswer(ev)
	}
	out, j.out = j.out, nil
	return out
}

func (j *Job) emit(e Effect) { j.out = append(j.out, e) }

func (j *Job) op() uint64 {
	j.nextOp++
	return j.nextOp
}

// ---- the main flow's answers ----

// async emits e, an operation whose answer the main flow awaits with k.
func (j *Job) async(k K, e Effect) {
	e.Op = j.op()
	if e.Run != nil && e.Run.CapabilityID == "" {
		e.Run.CapabilityID = j.act.CapabilityID
	}
	j.await, j.awaitOp = k, e.Op
	j.emit(e)
}

// timer sets the main flow's retry timer for d and awaits it with k.
func (j *Job) sleep(k K, d time.Duration) {
	j.async(k, Effect{Kind: EffTimer, Timer: Timer{Kind: TimerRetry}, Until: j.now.Add(d)})
}

// onAnswer routes the answer of the main flow's async operation.
func (j *Job) onAnswer(ev Event) {
	if ev.Op == 0 || ev.Op != j.awaitOp {
		return // the answer of an operation the flow gave up (aborted) or a stale one
	}
	k := j.await
	j.await, j.awaitOp = kNone, 0
	j.cont(k, ev)
}

// abortMain aborts the main flow's async operation, if any, for why.
func (j *Job) abortMain(why abortCause) {
	if j.abortWhy == abortNone || why == abortLost {
		j.abortWhy = why
	}
	if j.awaitOp != 0 {
		j.emit(Effect{Kind: EffAbort, Op: j.awaitOp})
	}
}

// ---- store and log operations, one at a time ----

// storeReq is one store or log operation: a plain one (eff) or an update of the claimed
// record (ch: its Effect is made when it is sent, from the record as it is then).
type storeReq struct {
	k         K
	eff       Effect
	ch        *change
	reconcile bool // the Get that follows a lost compare-and-set of ch
}

// store queues e, whose answer goes to k.
func (j *Job) store(k K, e Effect) {
	j.queue = append(j.queue, storeReq{k: k, eff: e})
	j.pump()
}

// pump sends the next queued operation when none is in flight.
func (j *Job) pump() {
	for !j.busy && len(j.queue) > 0 && !j.done {
		r := j.queue[0]
		n := copy(j.queue, j.queue[1:]) // in place: the queue keeps its buffer
		j.queue[n] = storeReq{}
		j.queue = j.queue[:n]
		if r.ch != nil {
			if j.lost || !j.claimed {
				j.cont(r.k, Event{Kind: EvStore, Status: Lost})
				continue
			}
			r.eff = Effect{Kind: EffUpdate, Key: kvstore.ActionKey(j.act.ID), Rec: recordOf(r.ch.apply(j.rec)), Rev: j.rev}
		}
		j.send(r)
	}
}

func (j *Job) send(r storeReq) {
	r.eff.Op = j.op()
	r.eff.Bound = j.storeBound()
	j.busy, j.cur = true, r
	j.emit(r.eff)
}

// onStore routes the answer of the operation in flight.
func (j *Job) onStore(ev Event) {
	if !j.busy || ev.Op != j.cur.eff.Op {
		return
	}
	j.busy = false
	r := j.cur
	if r.ch != nil {
		j.onClaimUpdate(r, ev)
	} else {
		j.cont(r.k, ev)
	}
	j.pump()
}

// ---- timers, beats, cancels, shutdown, panics ----

func (j *Job) onTimer(ev Event) {
	if ev.Timer.Kind == TimerApproval {
		j.onApprovalExpiry(ev.Timer.N)
		return
	}
	j.onAnswer(ev)
}

// onBeat keeps the message in progress and renews the claim (and the key) the job
// holds, so that no other delivery takes it over and neither record expires.
func (j *Job) onBeat() {
	if j.kind == KindAction || j.kind == KindDecision {
		j.emit(Effect{Kind: EffInProgress})
	}
	if j.claimed && !j.lost && !j.renewQueued {
		j.renewQueued = true
		j.queue = append(j.queue, storeReq{k: kRenewed, ch: &change{kind: chRenew}})
		j.pump()
	}
}

// onCancel answers a cancel request of this replica's registry: too late once the
// result is decided; from the records while the action parks, or while this job holds
// no claim (the records flag the action for whoever owns it, or store a cancelled
// result for an action not claimed yet; the job remembers the cancel and honours it if
// it claims the action); otherwise the action settles cancelled once what is in flight
// stops.
func (j *Job) onCancel() {
	switch {
	case j.kind == KindCancel || j.kind == KindExpire:
	case j.settling || j.stored:
		j.emit(Effect{Kind: EffReplyCancel, State: events.CancelAlreadySettled})
	case j.parking:
	case !j.claimed:
		j.cancelReq = true
	default:
		j.emit(Effect{Kind: EffReplyCancel, State: events.CancelCancelled})
		j.cancelled()
	}
}

// onShutdown cuts the job's waits and calls off: what was not sent is released to
// another replica, a bound run is handed back, an unsafe call cut off settles unknown.
func (j *Job) onShutdown() {
	j.shutdown = true
	j.abortMain(abortShutdown)
}

// finish ends the job.
func (j *Job) finish(a Ack, delay time.Duration, reason string) {
	j.freeSlot()
	j.done = true
	j.emit(Effect{Kind: EffFinish, Ack: a, Delay: delay, Reason: reason})
}

func (j *Job) ack()                     { j.finish(AckIt, 0, "") }
func (j *Job) nak(d time.Duration)      { j.finish(NakIt, d, "") }
func (j *Job) term(reason string)       { j.finish(TermIt, 0, reason) }
func (j *Job) setStatus(s, c string)    { j.status, j.code = s, c }
func (j *Job) hook(p Point)             { j.emit(Effect{Kind: EffHook, Point: p}) }
func (j *Job) note(n Note, r string)    { j.emit(Effect{Kind: EffNote, Note: n, Reason: r}) }
func (j *Job) remaining() time.Duration { return j.act.Deadline.Sub(j.now) }
func (j *Job) rand() float64            { return j.rng.Float64() }

// backoff is the delay before this action's next attempt.
func (j *Job) backoff(retryAfter time.Duration) time.Duration {
	return Backoff(j.cfg.RetryBase, j.cfg.RetryMax, max(j.attempt, 1), retryAfter, j.rand())
}

// freeSlot gives back the endpoint slot the job holds, if it holds one no call used.
func (j *Job) freeSlot() {
	if j.slot {
		j.unadmit()
	}
}

// backoffN is the delay before try n of an operation of the job's own.
func (j *Job) backoffN(n int) time.Duration {
	return Backoff(j.cfg.RetryBase, j.cfg.RetryMax, n, 0, j.rand())
}

// unadmit gives back an endpoint slot no call used.
func (j *Job) unadmit() {
	j.slot = false
	j.emit(Effect{Kind: EffUnadmit})
}
