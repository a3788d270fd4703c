package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// The governed run (operation "run"). One action starts a Hermes run and ends with the
// run's own terminal status and output. Its states are the action record's:
//
//	claimed     -> dispatched   Dispatch: the write-ahead mark, then POST /v1/runs
//	dispatched  -> bound        Bind: the run_id Hermes answered, the owner's first write
//	bound       -> terminal     Settle: the run's terminal status and output
//
// A delivery that takes a dispatched record over (its owner died or was paused past its
// lease) gets kvstore.Uncertain, as for every unsafe call, but a run does not end there:
//
//   - bound (Record().RunID set): it follows the run (its events if Hermes still has
//     them, else its status) and settles with the real result;
//   - not bound, and the endpoint advertises durable run idempotency: it posts the run
//     again with the action's Idempotency-Key, which names the same run if the first
//     post started one, binds the answer and follows it;
//   - not bound otherwise: the post may or may not have started a run, and Hermes
//     cannot say: outcome_unknown (details.reason "run_start_unknown").
//
// While the run goes on, its events are republished in order on the action's events
// subject. A cancel request stops the run (POST /stop), waits up to runStopGrace for it
// to end and settles what it ended as; so does the action's deadline, which settles
// deadline_exceeded unless the run completed meanwhile. Shutdown leaves a bound run
// alone: the delivery is handed back unsettled, and the replica that takes the record
// over after the lease follows the run.

// runner is what the governed run needs of an endpoint's client (hermes.Client).
type runner interface {
	RunStart(ctx context.Context, req hermes.Request) (*hermes.RunStarted, error)
	RunStatus(ctx context.Context, runID string) (*hermes.RunStatus, error)
	RunEvents(ctx context.Context, runID string) (*hermes.RunEventStream, error)
	RunStop(ctx context.Context, runID string) (*hermes.RunStopResult, error)
	RunApproval(ctx context.Context, runID, choice string, all bool) (*hermes.RunApprovalResult, error)
	Capabilities(ctx context.Context) (*hermes.Capabilities, error)
}

// runnerOf returns the runs client of endpoint id; ok is false when this replica does not
// serve the endpoint (or its client cannot run runs).
func (b *Bridge) runnerOf(id string) (r runner, ok bool) {
	if ep, known := b.eps[id]; known {
		r, ok = ep.client.(runner)
	}
	return r, ok
}

const (
	// runPollMin and runPollMax bound the interval of status polls (doubling from min).
	runPollMin = 250 * time.Millisecond
	runPollMax = 2 * time.Second
	// runStopGrace is how long a stopped run may take to end (the AIP cancel grace).
	runStopGrace = 15 * time.Second
	// runCallTimeout bounds one status poll, stop or capabilities request.
	runCallTimeout = 10 * time.Second
	// runStartAttempts bounds the posts of a run with durable idempotency after an
	// uncertain failure.
	runStartAttempts = 3
)

// errRunHandBack ends a governed run without a result: the bridge shuts down and a bound
// run goes on; the replica that takes the record over follows it.
var errRunHandBack = errors.New("bridge: the run goes on; handed back for another replica to follow")

// runFollow is the state of following one run.
type runFollow struct {
	j          *job
	r          runner
	pub        *eventPublisher
	runID      string
	reattached bool // this delivery took the run over from another one
	cancelFlag bool // the record carries a cancel request (the run is stopped at once)
	approvals  *runApprovals
	events     int  // events republished by this delivery
	streamed   bool // this delivery read the run's events to their terminal event
	toolsRan   bool // a tool.started event was seen
	lastEvent  string
	status     string // the run's terminal status
	output     string
	errText    string
	usage      *hermes.RunUsage
}

// executeRun runs the governed run of a claimed, dispatched action to its result. cctx
// carries the deadline and cancellation; ctx is the job's (shutdown). It returns nil and
// errRunHandBack when the delivery must end without a result.
func (j *job) executeRun(ctx, cctx context.Context, claim *kvstore.Claim, pub *eventPublisher) (*events.Result, error) {
	r, ok := j.b.runnerOf(j.endpointID)
	if !ok {
		return failedResult(j, &events.ErrorInfo{Code: "internal", Category: "connector",
			Message: "the endpoint's client cannot run Hermes runs"}), nil
	}
	rec := claim.Record()
	f := &runFollow{j: j, r: r, pub: pub, runID: rec.RunID, cancelFlag: rec.Cancel}
	f.approvals = &runApprovals{f: f, claim: claim}
	defer f.approvals.stop()
	if f.runID != "" {
		f.reattached = true
	} else {
		res, err := f.start(cctx, claim)
		if res != nil || err != nil {
			return res, err
		}
	}
	return f.follow(ctx, cctx)
}

// resumeRun settles, or follows to its end, a run taken over from a delivery that
// dispatched it (Verdict Uncertain). done is false when the job is to go on as a
// claimed, dispatched run (execute with the claim it holds).
func (j *job) resumeRun(ctx context.Context, claim *kvstore.Claim) (decision, bool) {
	rec := claim.Record()
	if rec.Cancel && rec.RunID == "" {
		return j.settleCancelled(ctx, true), true
	}
	if rec.RunID != "" {
		return decision{}, false
	}
	if j.durableRuns(ctx) {
		j.unboundRun = true // until its run is posted again and bound
		return decision{}, false
	}
	info := outcomeUnknown()
	info.Message = "the replica that posted the run stopped before it stored the run's id, and the endpoint " +
		"does not advertise durable run idempotency: a run may have started. Reconcile before acting again"
	info.Details = map[string]any{"reason": "run_start_unknown"}
	return j.settle(ctx, failedResult(j, info)), true
}

// durableRuns reports whether the job's endpoint advertises durable run idempotency
// (runs_idempotency in /v1/capabilities): a repeated POST /v1/runs with the same
// Idempotency-Key then names the first run. Unknown (an error) counts as no.
func (j *job) durableRuns(ctx context.Context) bool {
	r, ok := j.b.runnerOf(j.endpointID)
	if !ok {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, runCallTimeout)
	defer cancel()
	caps, err := r.Capabilities(cctx)
	if err != nil {
		j.b.log.Warn().Str("action_id", j.actionID).Str("endpoint", j.endpointID).Str("error_code", errorCode(err)).
			Msg("could not read the endpoint's capabilities; its runs count as not idempotent")
		return false
	}
	return caps.DurableRunIdempotency()
}

// start posts the run and binds its id. A non-nil result or error ends the action there.
func (f *runFollow) start(cctx context.Context, claim *kvstore.Claim) (*events.Result, error) {
	j := f.j
	req := j.request()
	var st *hermes.RunStarted
	var err error
	for attempt := 1; ; attempt++ {
		st, err = f.r.RunStart(cctx, req)
		var he *hermes.Error
		if err == nil || !errors.As(err, &he) || he.NotStarted || cctx.Err() != nil ||
			attempt >= runStartAttempts || !f.j.durableRuns(cctx) {
			break
		}
		// The post may have started a run, and the endpoint names it again for the same
		// key: ask again rather than leave the outcome unknown.
		j.b.log.Info().Str("action_id", j.actionID).Str("error_code", he.Code).Int("attempt", attempt).
			Msg("posting the run again with its idempotency key (the endpoint's runs are idempotent)")
		if !sleepCtx(cctx, backoff(j.b.cfg.RetryBase, j.b.cfg.RetryMax, attempt, he.RetryAfter)) {
			break
		}
	}
	if err != nil {
		return nil, err // execute maps it like any call's error (retry if certainly not started)
	}
	j.b.hook(PointRunStarted, j.actionID)
	f.runID = st.RunID
	if err := f.bind(claim); err != nil {
		return nil, err
	}
	j.unboundRun = false // the run's own end decides from here
	j.b.hook(PointRunBound, j.actionID)
	return nil, nil
}

// bind stores the run id with a context of its own: the run exists, so its id must be
// kept even when the action was cancelled or the bridge shuts down a moment later.
func (f *runFollow) bind(claim *kvstore.Claim) error {
	j := f.j
	bctx, cancel := detached(j.b.workCtx)
	defer cancel()
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if err = claim.Bind(bctx, f.runID); err == nil || errors.Is(err, kvstore.ErrLostClaim) {
			return err
		}
		if !sleepCtx(bctx, backoff(j.b.cfg.RetryBase, j.b.cfg.RetryMax, attempt, 0)) {
			break
		}
	}
	// The run goes on and this delivery follows it; only a takeover would not know it.
	j.b.log.Warn().Err(err).Str("action_id", j.actionID).
		Msg("could not store the run's id; the run is followed, but a replica that takes the action over cannot")
	return nil
}

// follow reads the run's events until its end, then polls its status if the events
// did not show the end, stopping the run on cancellation or at the deadline.
func (f *runFollow) follow(ctx, cctx context.Context) (*events.Result, error) {
	if f.reattached {
		f.pub.seq = f.storedEvents(cctx)
		f.approvals.rearm()
	}
	if f.cancelFlag {
		f.stop()
		return f.result(cctx), nil
	}
	if err := f.readEvents(cctx); err != nil {
		return nil, err
	}
	if f.status == "" && cctx.Err() == nil {
		if err := f.poll(cctx); err != nil {
			return nil, err
		}
	}
	if f.status == "" {
		switch {
		case lostClaim(cctx):
			return nil, errLostClaimRun
		case ctx.Err() != nil && !cancelRequested(cctx):
			return nil, errRunHandBack
		}
		// Cancelled or past the deadline: stop the run and see how it ends.
		f.stop()
	}
	return f.result(cctx), nil
}

// errLostClaimRun ends a run whose claim another delivery took over: that one follows.
var errLostClaimRun = errors.New("bridge: the run's claim was taken over")

// storedEvents returns the number of events already stored for the action (the next
// sequence), read from the output stream's last event. A read that is behind only makes
// this delivery reuse sequences that deduplication then drops.
func (f *runFollow) storedEvents(ctx context.Context) int64 {
	j := f.j
	if j.b.output == nil {
		return 0
	}
	gctx, cancel := context.WithTimeout(ctx, runCallTimeout)
	defer cancel()
	m, err := j.b.output.GetLastMsgForSubject(gctx, j.b.subjects.Events(j.actionID))
	if err != nil {
		return 0
	}
	var d struct {
		Sequence int64 `json:"sequence"`
	}
	if json.Unmarshal(m.Data, &d) != nil {
		return 0
	}
	return d.Sequence + 1
}

// readEvents republishes the run's events until its terminal event, the end of the
// events stream (gone, broken), or cctx. It returns only publishing errors.
func (f *runFollow) readEvents(cctx context.Context) error {
	j := f.j
	s, err := f.r.RunEvents(cctx, f.runID)
	if err != nil {
		if !errors.Is(err, hermes.ErrRunNotFound) && cctx.Err() == nil {
			j.b.log.Info().Str("action_id", j.actionID).Str("error_code", errorCode(err)).
				Msg("the run's events cannot be read; following its status instead")
		}
		return nil
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if cctx.Err() == nil {
				j.b.log.Info().Str("action_id", j.actionID).Str("error_code", errorCode(err)).
					Msg("the run's events stream ended early; following its status instead")
			}
			return nil
		}
		f.observe(ev)
		if perr := f.pub.publish(runEventOut(ev)); perr != nil {
			return perr
		}
		f.events++
		if ev.Name == "approval.request" {
			f.approvals.ask(ev)
		}
		if ev.Terminal {
			f.streamed = true
			return nil
		}
	}
}

// observe records what an event says about the run.
func (f *runFollow) observe(ev hermes.RunEvent) {
	f.lastEvent = ev.Name
	switch ev.Name {
	case "tool.started":
		f.toolsRan = true
	case "run.completed":
		f.status, f.output, f.usage = hermes.RunCompleted, ev.Output, ev.Usage
	case "run.failed":
		f.status, f.errText = hermes.RunFailed, ev.Error
	case "run.cancelled":
		f.status = hermes.RunCancelled
	case "run.interrupted":
		f.status = hermes.RunInterrupted
	}
}

// runEventOut is the event the bridge republishes for a run event: the data verbatim,
// its kind, and as text only the answer's deltas (reasoning.available repeats the
// assistant's text, it is not more of it).
func runEventOut(ev hermes.RunEvent) hermes.Event {
	out := hermes.Event{Data: ev.Data, Name: ev.Name, Kind: ev.Kind, Terminal: ev.Terminal}
	if ev.Name == "message.delta" {
		out.Text = ev.Delta
	}
	return out
}

// poll reads the run's status until it is terminal or cctx ends. A run Hermes no longer
// knows (restarted, or ended more than an hour ago) ends it with status "" and lost set.
func (f *runFollow) poll(cctx context.Context) error {
	delay := runPollMin
	for cctx.Err() == nil {
		st, err := f.status1(cctx)
		switch {
		case err == nil && st.Terminal():
			f.fromStatus(st)
			return nil
		case errors.Is(err, hermes.ErrRunNotFound):
			f.status = runLost
			return nil
		}
		if !sleepCtx(cctx, delay) {
			return nil
		}
		delay = min(2*delay, runPollMax)
	}
	return nil
}

// runLost is the follow status of a run its endpoint no longer knows.
const runLost = "lost"

func (f *runFollow) status1(ctx context.Context) (*hermes.RunStatus, error) {
	sctx, cancel := context.WithTimeout(ctx, runCallTimeout)
	defer cancel()
	return f.r.RunStatus(sctx, f.runID)
}

func (f *runFollow) fromStatus(st *hermes.RunStatus) {
	f.status = st.Status
	if st.LastEvent != "" {
		f.lastEvent = st.LastEvent
	}
	if st.Output != nil {
		f.output = *st.Output
	}
	if st.Error != nil {
		f.errText = *st.Error
	}
	f.usage = st.Usage
}

// stop asks the run to stop and waits up to runStopGrace for it to end, with a context
// of its own (the action's has ended).
func (f *runFollow) stop() {
	j := f.j
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.b.workCtx), runStopGrace)
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, runCallTimeout)
	_, err := f.r.RunStop(sctx, f.runID)
	scancel()
	if err != nil && !errors.Is(err, hermes.ErrRunNotFound) {
		j.b.log.Warn().Str("action_id", j.actionID).Str("error_code", errorCode(err)).Msg("stopping the run failed")
	}
	if err := f.poll(ctx); err == nil && f.status == "" {
		j.b.log.Warn().Str("action_id", j.actionID).Dur("grace", runStopGrace).Msg("the stopped run did not end within its grace")
	}
}

// result is the action's result for how the run ended.
func (f *runFollow) result(cctx context.Context) *events.Result {
	j := f.j
	out := map[string]any{"run_id": f.runID, "status": f.status, "last_event": f.lastEvent,
		"event_count": f.pub.seq, "events_complete": f.streamed && !f.reattached, "reattached": f.reattached,
		"tools_ran": f.toolsRan}
	if f.usage != nil {
		out["usage"] = f.usage
	}
	details := map[string]any{"run_id": f.runID, "run_status": f.status, "reattached": f.reattached}
	switch f.status {
	case hermes.RunCompleted:
		out["output"] = f.output
		return &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: events.StatusCompleted,
			Output: mustJSON(out)}
	case hermes.RunCancelled:
		info := cancelledInfo(f.toolsRan, "the run was cancelled")
		if !f.cancelled(cctx) {
			info = deadlineExceeded(f.toolsRan)
			info.Message = "the action's deadline passed; the run was stopped"
		}
		info.Details = details
		details["tools_ran"] = f.toolsRan
		return &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: statusOf(info),
			Output: mustJSON(out), Error: info}
	case hermes.RunFailed, hermes.RunInterrupted:
		info := &events.ErrorInfo{Code: "run_failed", Category: "permanent", UncertainOutcome: f.status == hermes.RunInterrupted,
			Message: "the run ended " + f.status, Details: details}
		if f.errText != "" {
			details["hermes_error"] = f.errText
		}
		return &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: events.StatusFailed,
			Output: mustJSON(out), Error: info}
	case runLost:
		info := outcomeUnknown()
		info.Message = "the endpoint no longer knows the run (it restarted, or the run ended more than an hour ago); " +
			"whether it finished is unknown. Reconcile before acting again"
		details["reason"] = "run_lost"
		info.Details = details
		return &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: events.StatusFailed,
			Output: mustJSON(out), Error: info}
	}
	// Stopped, and it did not end within the grace.
	info := outcomeUnknown()
	info.Message = "the run was asked to stop and had not ended within " + runStopGrace.String() + "; how it ends is unknown"
	details["reason"] = "run_stop_timeout"
	info.Details = details
	if !f.cancelled(cctx) {
		info.Code, info.Message = "deadline_exceeded", "the action's deadline passed; the run was asked to stop and had not ended within "+runStopGrace.String()
	}
	return &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: events.StatusFailed,
		Output: mustJSON(out), Error: info}
}

// cancelled reports whether the run was stopped on request (else at the deadline).
func (f *runFollow) cancelled(cctx context.Context) bool {
	return f.cancelFlag || cancelRequested(cctx)
}

// statusOf is the result status of an error: cancelled for a cancellation, else failed.
func statusOf(info *events.ErrorInfo) string {
	if info.Code == "cancelled" {
		return events.StatusCancelled
	}
	return events.StatusFailed
}

// errorCode is the Hermes error code of err ("" when it is not a Hermes error): logs name
// the code, never the error text, which may carry content.
func errorCode(err error) string {
	var he *hermes.Error
	if errors.As(err, &he) {
		return he.Code
	}
	return ""
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// mustJSON encodes a result output built from plain values.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of strings, numbers, booleans and hermes.RunUsage
	}
	return b
}
