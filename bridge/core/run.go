package core

import (
	"encoding/json"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// The governed run (operation "run"). One action starts a Hermes run and ends with the
// run's own terminal status and output. Its record goes claimed → dispatched (the mark,
// then POST /v1/runs) → bound (the run_id Hermes answered: the owner's first write
// after the post) → terminal (the run's result).
//
// A delivery that takes a dispatched run over (its owner died or was paused past its
// lease) does not settle outcome_unknown as for other unsafe calls: bound, it follows
// the run to its real result; unbound where the endpoint advertises durable run
// idempotency, it posts the run again with the action's key (which names the same run
// if the first post started one), binds the answer and follows it; unbound otherwise,
// the post may or may not have started a run: outcome_unknown (run_start_unknown).
//
// While the run goes on, its events are republished in order (the driver's RunEvents),
// and each tool approval it asks becomes a pending_approval result <id>:pending:<k>
// whose answer (a decision, or the expiry after ApprovalTTL) is recorded in the action
// record and forwarded to Hermes. A cancel request stops the run (POST /stop), waits up
// to RunStopGrace for it to end and settles what it ended as; so does the deadline.
// Shutdown leaves a bound run alone: the delivery is handed back unsettled, and the
// replica that takes the record over after the lease follows the run.

// RunOp names a run operation of the driver.
type RunOp uint8

// Run operations.
const (
	// RunStart posts the run with the validated request (EvRun: OK RunID; Failed Call,
	// the answer as a call's). It tells the breaker how the post went.
	RunStart RunOp = iota + 1
	// RunCapabilities reads whether the endpoint's runs are durably idempotent (OK
	// Durable; Failed counts as not).
	RunCapabilities
	// RunEvents reads the run's events from Hermes and republishes them from event
	// number From on, until the run's terminal event, the end of the stream, or Abort.
	// Each tool approval asked comes as EvRunApproval meanwhile; the answer (OK) says
	// what the events showed.
	RunEvents
	// RunStatus reads the run's status (OK; NotFound: the endpoint no longer knows it).
	RunStatus
	// RunStop asks the run to stop (OK, NotFound, Failed).
	RunStop
	// RunApprove forwards a tool approval choice to the run (with a few retries).
	RunApprove
	// RunStoredEvents reads how many events of the action are stored (Next).
	RunStoredEvents
)

var runOpNames = [...]string{"", "start", "capabilities", "events", "status", "stop", "approve", "stored_events"}

func (o RunOp) String() string { return runOpNames[o] }

// RunRequest is an EffRun.
type RunRequest struct {
	Op RunOp
	// CapabilityID names the endpoint (a decision's job knows it only from the record).
	CapabilityID string
	RunID        string
	Choice       string // RunApprove
	// RequestID is, for RunApprove, the request_id of the approval.request answered
	// ("" when Hermes sent none: the run's oldest pending request is answered).
	RequestID string
	From      int64 // RunEvents: the number of the first event to publish
}

// RunAnswer answers an EffRun (EvRun) or asks a tool approval (EvRunApproval).
type RunAnswer struct {
	RunID   string      // RunStart
	Call    *CallAnswer // RunStart failed
	Durable bool        // RunCapabilities
	Next    int64       // RunStoredEvents, RunEvents: the number of the next event
	// RunEvents and RunStatus: what the run showed.
	Status    string // its terminal status ("" if not seen)
	LastEvent string
	Output    string
	ErrText   string
	Usage     json.RawMessage // {input_tokens, output_tokens, total_tokens, cost_usd?} (events.Usage)
	// PendingSteer is steer text the run's agent never read (its terminal event or
	// status; "" when none).
	PendingSteer string
	ToolsRan     bool // a tool.started event was seen
	Streamed     bool // the events were read to the run's terminal event
	// PublishFailed: an event could not be stored (RunEvents).
	PublishFailed bool
	// Approval is a tool approval the run asks (EvRunApproval).
	Approval *RunApprovalAsk
	// WaitsFor is, for RunStatus of a run waiting for a tool approval, the
	// approval.request it waits for, where the status carries it (Hermes 0.21 and
	// later; nil before).
	WaitsFor *RunApprovalAsk
}

// Run timing.
const (
	runPollMin = 250 * time.Millisecond
	runPollMax = 2 * time.Second
	// RunStopGrace is how long a stopped run may take to end (the AIP cancel grace).
	RunStopGrace = 15 * time.Second
	// runStartAttempts bounds the posts of a run with durable idempotency after an
	// uncertain failure; runBindAttempts the tries to store its id.
	runStartAttempts = 3
	runBindAttempts  = 5
)

// Run statuses as the core reads them (hermes.Run*).
const (
	runCompleted   = "completed"
	runFailed      = "failed"
	runCancelled   = "cancelled"
	runInterrupted = "interrupted"
	runLost        = "lost" // the endpoint no longer knows the run
)

// runState is the state of following one run.
type runState struct {
	runID      string
	reattached bool // this delivery took the run over from another one
	next       int64
	streamed   bool
	toolsRan   bool
	lastEvent  string
	status     string
	output     string
	errText    string
	usage      json.RawMessage
	pending    string // steer text the agent never read
	stopping   bool
	stopUntil  time.Time
	poll       time.Duration
	asked      int // the last tool approval this job asked
}

func (j *Job) runS() *runState {
	if j.run == nil {
		j.run = &runState{}
	}
	return j.run
}

// resumeRun decides about a run taken over from a delivery that dispatched it.
func (j *Job) resumeRun() {
	switch {
	case j.rec.Cancel && j.rec.RunID == "":
		j.settle(cancelledResult(j, true))
	case j.rec.RunID != "":
		// The run exists: it is followed to its end, also when a cancel or the deadline
		// came (following stops it), under the key and a slot like any run.
		j.runS().reattached = true
		j.uncertain, j.validated = false, true
		if j.act.IdemKey != "" && j.keyRev == 0 {
			j.claimKey()
			return
		}
		j.admit()
	default:
		j.async(kRunCapsResume, Effect{Kind: EffRun, Run: &RunRequest{Op: RunCapabilities}})
	}
}

func (j *Job) onRunCapsResume(ev Event) {
	if ev.Status == OK && ev.Run != nil && ev.Run.Durable {
		j.unboundRun = true // until its run is posted again and bound
		j.uncertain = false
		j.claimedGo()
		return
	}
	info := outcomeUnknown()
	info.Message = "the replica that posted the run stopped before it stored the run's id, and the endpoint " +
		"does not advertise durable run idempotency: a run may have started. Reconcile before acting again"
	info.Details = map[string]any{"reason": "run_start_unknown"}
	j.settle(j.failed(info))
}

// startRun posts the run (or follows the one the record names) under the slot taken
// and the mark written.
func (j *Job) startRun() {
	f := j.runS()
	if j.rec.RunID != "" {
		f.runID, f.reattached = j.rec.RunID, true
		j.follow()
		return
	}
	j.async(kRunStarted, Effect{Kind: EffRun, Run: &RunRequest{Op: RunStart}})
}

func (j *Job) onRunStarted(ev Event) {
	if ev.Status == OK && ev.Run != nil {
		j.run.runID = ev.Run.RunID
		j.hook(PointRunStarted)
		j.tries = 0
		j.bind()
		return
	}
	c := &CallAnswer{Result: j.failed(&events.ErrorInfo{Code: "internal", Category: "connector",
		UncertainOutcome: true, Message: "the run could not be posted"})}
	if ev.Run != nil && ev.Run.Call != nil {
		c = ev.Run.Call
	}
	if !c.Gated || !c.NotStarted {
		j.tries++ // a post the gate refused is no try: nothing ran
	}
	if !c.NotStarted {
		// This post may have started a run: from here no failure is certain, and the
		// record is never released (a later post that certainly did not start says
		// nothing about this one).
		j.unboundRun = true
	}
	if j.unboundRun && c.NotStarted && c.Retryable && j.tries < runStartAttempts {
		// Posted again after a takeover, and this post certainly did not start: an
		// earlier one may have, so the record is not released (that would say nothing
		// was sent); post again here, with the same key.
		if d := Backoff(j.cfg.RetryBase, j.cfg.RetryMax, j.tries, c.RetryAfter, j.rand()); d < j.remaining() {
			j.lastStart = c
			j.sleep(kRunRepost, d)
			return
		}
	}
	if !c.NotStarted && !(c.Aborted && !c.Responded) && j.tries < runStartAttempts && j.remaining() > 0 {
		// The post may have started a run: where the endpoint names it again for the
		// same key, ask again rather than leave the outcome unknown.
		j.lastStart = c
		j.async(kRunCapsRepost, Effect{Kind: EffRun, Run: &RunRequest{Op: RunCapabilities}})
		return
	}
	j.onCallAnswer(c)
}

func (j *Job) onRunCapsRepost(ev Event) {
	if ev.Status == OK && ev.Run != nil && ev.Run.Durable && j.remaining() > 0 {
		j.sleep(kRunRepost, Backoff(j.cfg.RetryBase, j.cfg.RetryMax, j.tries, j.lastStart.RetryAfter, j.rand()))
		return
	}
	j.onCallAnswer(j.lastStart)
}

func (j *Job) onRunRepost(ev Event) {
	if ev.Status == Aborted {
		j.onCallAnswer(j.lastStart)
		return
	}
	j.async(kRunStarted, Effect{Kind: EffRun, Run: &RunRequest{Op: RunStart}})
}

// bind stores the run id: the run exists, so its id must be kept even when the action
// was cancelled a moment later (the change adopts a cancel flag).
func (j *Job) bind() {
	j.claim(kRunBound, change{kind: chBind, runID: j.run.runID})
}

func (j *Job) onRunBound(ev Event) {
	switch ev.Status {
	case OK:
		j.unboundRun = false // the run's own end decides from here
		j.hook(PointRunBound)
		j.follow()
	case Lost:
		j.lostClaim() // the taker follows the run
	default:
		j.tries++
		if j.tries < runBindAttempts {
			j.sleep(kRunBindRetry, j.backoffN(j.tries))
			return
		}
		// The run goes on and this delivery follows it; only a takeover would not know it.
		j.note(NoteRunNotFollowed, "")
		j.unboundRun = false
		j.follow()
	}
}

func (j *Job) onRunBindRetry(Event) { j.bind() }

// follow reads the run's events until its end, then polls its status if the events did
// not show the end, stopping the run on cancellation or at the deadline.
func (j *Job) follow() {
	if j.run.reattached {
		j.async(kRunStored, Effect{Kind: EffRun, Run: &RunRequest{Op: RunStoredEvents}})
		return
	}
	j.readEvents()
}

func (j *Job) onRunStored(ev Event) {
	f := j.run
	if ev.Status == OK && ev.Run != nil {
		f.next = ev.Run.Next
	}
	f.asked = j.rec.ApprovalSeq
	// A tool approval the run still waits for gets its expiry again.
	if r := j.rec; r.ApprovalSeq > r.ApprovalAnswered {
		j.armApproval(r.ApprovalSeq, r.ExpiresAt)
	}
	j.readEvents()
}

func (j *Job) readEvents() {
	if j.rec.Cancel || j.cancelReq {
		j.cancelReq = true
		j.stopRun()
		return
	}
	j.async(kRunEvents, Effect{Kind: EffRun, Run: &RunRequest{Op: RunEvents, RunID: j.run.runID, From: j.run.next},
		Until: j.act.Deadline})
}

// observe records what the run showed.
func (f *runState) observe(a *RunAnswer) {
	if a == nil {
		return
	}
	f.next = max(f.next, a.Next)
	f.toolsRan = f.toolsRan || a.ToolsRan
	f.streamed = f.streamed || a.Streamed
	if a.LastEvent != "" {
		f.lastEvent = a.LastEvent
	}
	if a.Status != "" {
		f.status, f.output, f.errText = a.Status, a.Output, a.ErrText
		if len(a.Usage) > 0 {
			f.usage = a.Usage
		}
		if a.PendingSteer != "" {
			f.pending = a.PendingSteer
		}
	}
}

func (j *Job) onRunEvents(ev Event) {
	f := j.run
	f.observe(ev.Run)
	if ev.Run != nil && ev.Run.PublishFailed {
		info := &events.ErrorInfo{Code: "internal", Category: "connector", UncertainOutcome: true,
			Message: "the run's events could not be stored", Details: map[string]any{"run_id": f.runID}}
		j.settle(j.failed(info))
		return
	}
	if f.status != "" {
		j.settle(j.runResult())
		return
	}
	j.afterRunWait()
}

// afterRunWait decides what follows a wait on the run that did not show its end.
func (j *Job) afterRunWait() {
	f := j.run
	switch {
	case j.lost || j.abortWhy == abortLost:
		j.lostClaim()
	case j.shutdown && !j.cancelReq:
		// The run goes on: another replica takes the record over after the lease and
		// follows it.
		j.setStatus("handed_back", "")
		j.nak(j.cfg.Lease)
	case f.stopping:
		if !j.now.Before(f.stopUntil) {
			j.pollNow() // one last look: the poll settles (graceOver)
			return
		}
		j.pollLater()
	case j.cancelReq || !j.now.Before(j.act.Deadline):
		j.stopRun()
	default:
		j.pollNow()
	}
}

func (j *Job) pollNow() {
	j.async(kRunPolled, Effect{Kind: EffRun, Run: &RunRequest{Op: RunStatus, RunID: j.run.runID}})
}

func (j *Job) pollLater() {
	f := j.run
	f.poll = min(max(2*f.poll, runPollMin), runPollMax)
	// Polling stops at the deadline, or at the end of the stop's grace.
	end := j.act.Deadline
	if f.stopping {
		end = f.stopUntil
	}
	j.sleep(kRunPollWait, max(min(f.poll, end.Sub(j.now)), 0))
}

func (j *Job) onRunPollWait(ev Event) {
	if ev.Status == Aborted {
		j.afterRunWait()
		return
	}
	if !j.run.stopping && (j.cancelReq || !j.now.Before(j.act.Deadline)) {
		j.stopRun()
		return
	}
	j.pollNow()
}

func (j *Job) onRunPolled(ev Event) {
	f := j.run
	switch {
	case ev.Status == NotFound:
		f.status = runLost
		j.note(NoteRunLost, "")
		j.settle(j.runResult())
	case ev.Status == OK && ev.Run != nil && ev.Run.Status != "":
		f.observe(ev.Run)
		j.settle(j.runResult())
	case ev.Status == Aborted:
		j.afterRunWait()
	case f.stopping && !j.now.Before(f.stopUntil):
		// The stop's grace is over, and this poll (made after it) saw no end.
		j.settle(j.runResult())
	default:
		if (j.lost || j.shutdown) && !f.stopping {
			j.afterRunWait()
			return
		}
		if w := ev.Run; ev.Status == OK && w != nil && w.WaitsFor != nil && w.WaitsFor.RequestID != "" && !f.stopping {
			// The run waits for an approval its events did not show (they ended
			// early): asked from its status, where Hermes names the request.
			j.queueAsk(w.WaitsFor, true)
		}
		j.pollLater()
	}
}

// stopRun asks the run to stop and waits up to RunStopGrace for it to end.
func (j *Job) stopRun() {
	f := j.run
	f.stopping = true
	f.stopUntil = j.now.Add(RunStopGrace)
	j.abortWhy = abortNone
	j.async(kRunStopped, Effect{Kind: EffRun, Run: &RunRequest{Op: RunStop, RunID: f.runID}})
}

func (j *Job) onRunStopped(Event) { j.pollNow() }

// runResult is the action's result for how the run ended.
func (j *Job) runResult() *events.Result {
	f := j.run
	out := map[string]any{"run_id": f.runID, "status": f.status, "last_event": f.lastEvent,
		"event_count": f.next, "events_complete": f.streamed && !f.reattached, "reattached": f.reattached,
		"tools_ran": f.toolsRan}
	if f.pending != "" {
		out["pending_steer"] = f.pending
	}
	details := map[string]any{"run_id": f.runID, "run_status": f.status, "reattached": f.reattached}
	r := &events.Result{ActionID: j.act.ID, CapabilityID: j.act.CapabilityID}
	if len(f.usage) > 0 {
		out["usage"] = f.usage
		var u events.Usage
		if json.Unmarshal(f.usage, &u) == nil {
			r.Usage = &u
		}
	}
	var info *events.ErrorInfo
	switch f.status {
	case runCompleted:
		out["output"] = f.output
		r.Status = events.StatusCompleted
	case runCancelled:
		// A run taken over saw only the events from where it took over: tools may have
		// run before.
		mayHaveRun := f.toolsRan || f.reattached
		info = cancelledInfo(mayHaveRun, "the run was cancelled")
		if !j.cancelReq {
			info = deadlineExceeded(mayHaveRun)
			info.Message = "the action's deadline passed; the run was stopped"
		}
		details["tools_ran"] = f.toolsRan
	case runFailed:
		info = &events.ErrorInfo{Code: "run_failed", Category: "permanent", Message: "the run ended failed"}
		if f.errText != "" {
			details["hermes_error"] = f.errText
		}
	case runInterrupted:
		// The gateway restarted under the run (Hermes 0.21): it will not go on, and what
		// it did before is unknown. It is never posted again under another key here: that
		// would be a second run of work that may have had its effects.
		info = &events.ErrorInfo{Code: "run_interrupted", Category: "permanent", UncertainOutcome: true,
			Message: "the Hermes gateway restarted before the run settled; tools may have run. " +
				"Inspect its side effects before resubmitting it as a new action with a new idempotency key"}
		if f.errText != "" {
			details["hermes_error"] = f.errText
		}
		details["tools_ran"] = f.toolsRan
	case runLost:
		info = outcomeUnknown()
		info.Message = "the endpoint no longer knows the run (it restarted, or the run ended more than an hour ago); " +
			"whether it finished is unknown. Reconcile before acting again"
		details["reason"] = "run_lost"
	default:
		// Stopped, and it did not end within the grace.
		info = outcomeUnknown()
		info.Message = "the run was asked to stop and had not ended within " + RunStopGrace.String() + "; how it ends is unknown"
		details["reason"] = "run_stop_timeout"
		if !j.cancelReq {
			info.Code = "deadline_exceeded"
			info.Message = "the action's deadline passed; the run was asked to stop and had not ended within " + RunStopGrace.String()
		}
	}
	r.Output, _ = json.Marshal(out)
	if info != nil {
		info.Details = details
		r.Error = info
		r.Status = events.StatusFailed
		if info.Code == "cancelled" {
			r.Status = events.StatusCancelled
		}
	}
	return r
}
