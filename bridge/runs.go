package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// The run effects of the governed run (operation "run"; its states are bridge/core's
// run.go): each is one exchange with the endpoint's /v1/runs API, except RunEvents,
// which reads the run's events and republishes them until the run's end.

// runner is what the governed run needs of an endpoint's client (hermes.Client).
type runner interface {
	RunStart(ctx context.Context, req hermes.Request) (*hermes.RunStarted, error)
	RunStatus(ctx context.Context, runID string) (*hermes.RunStatus, error)
	RunEvents(ctx context.Context, runID string) (*hermes.RunEventStream, error)
	RunStop(ctx context.Context, runID string) (*hermes.RunStopResult, error)
	RunApprovalFor(ctx context.Context, runID, choice, requestID string) (*hermes.RunApprovalResult, error)
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

// runCallTimeout bounds one status poll, stop, approval or capabilities request.
const runCallTimeout = 10 * time.Second

// runOp carries out a run effect.
func (d *driver) runOp(ctx context.Context, r *core.RunRequest) core.Event {
	ev := core.Event{Kind: core.EvRun, Run: &core.RunAnswer{}, Status: core.OK}
	epID := d.act.endpointID
	if epID == "" {
		epID, _, _ = events.ParseCapabilityID(r.CapabilityID) // a decision's job
	}
	rn, ok := d.b.runnerOf(epID)
	if !ok {
		d.b.log.Warn().Str("action_id", d.id).Str("endpoint", epID).Msg("a run operation names an endpoint this replica does not serve")
		ev.Status = core.Failed
		if r.Op == core.RunStart {
			ev.Run.Call = &core.CallAnswer{Result: failedOf(d, &events.ErrorInfo{Code: "internal", Category: "connector",
				Message: "the endpoint's client cannot run Hermes runs"})}
		}
		return ev
	}
	switch r.Op {
	case core.RunEvents, core.RunStatus:
		runID := r.RunID
		d.steerRun.Store(&runID)
	case core.RunStop:
		d.runStopping.Store(true)
	}
	switch r.Op {
	case core.RunStart:
		return d.runStart(ctx, rn)
	case core.RunCapabilities:
		cctx, cancel := context.WithTimeout(ctx, runCallTimeout)
		caps, err := rn.Capabilities(cctx)
		cancel()
		if err != nil {
			d.b.log.Warn().Str("action_id", d.id).Str("endpoint", epID).Str("error_code", errorCode(err)).
				Msg("could not read the endpoint's capabilities; its runs count as not idempotent")
			ev.Status = core.Failed
			return ev
		}
		ev.Run.Durable = caps.DurableRunIdempotency()
		d.b.noteRunsDurable(epID, ev.Run.Durable)
	case core.RunEvents:
		d.runEvents(ctx, rn, r, ev.Run)
	case core.RunStatus:
		cctx, cancel := context.WithTimeout(ctx, runCallTimeout)
		st, err := rn.RunStatus(cctx, r.RunID)
		cancel()
		switch {
		case errors.Is(err, hermes.ErrRunNotFound):
			ev.Status = core.NotFound
		case err != nil:
			ev.Status = waitEnd(ctx, err).Status
			if ev.Status == core.Expired {
				ev.Status = core.Failed
			}
		case st.Status == hermes.RunWaitingForApproval:
			if len(st.Approval) > 0 {
				if ap, err := hermes.ParseRunEvent(st.Approval); err == nil && ap.Name == "approval.request" {
					ev.Run.WaitsFor = approvalAsk(ap)
				}
			}
		case st.Terminal():
			a := ev.Run
			a.Status, a.LastEvent = st.Status, st.LastEvent
			if st.Output != nil {
				a.Output = *st.Output
			}
			if st.Error != nil {
				a.ErrText = *st.Error
			}
			a.Usage = usageJSON(st.Usage)
			a.PendingSteer = st.PendingSteer
		}
	case core.RunStop:
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runCallTimeout)
		_, err := rn.RunStop(cctx, r.RunID)
		cancel()
		switch {
		case errors.Is(err, hermes.ErrRunNotFound):
			// Hermes 0.19 answers a finished run 404: its status tells how it ended.
			ev.Status = core.NotFound
		case remoteCode(err) == "run_not_active":
			// Hermes 0.21: another gateway process owns the run; its status is followed.
			d.b.log.Info().Str("action_id", d.id).Msg("the run is not active in the gateway process that answered; following its status")
			ev.Status = core.Failed
		case err != nil:
			d.b.log.Warn().Str("action_id", d.id).Str("error_code", errorCode(err)).Msg("stopping the run failed")
			ev.Status = core.Failed
		}
		// A 200 is "stopping", or (Hermes 0.21) a finished run's status object: either
		// way the poll that follows reads how the run ends.
	case core.RunApprove:
		switch err := forwardChoice(context.WithoutCancel(ctx), d.b, rn, d.id, r); {
		case errors.Is(err, errApprovalStale):
			ev.Status = core.Conflict
		case err != nil:
			ev.Status = core.Failed
		}
	case core.RunStoredEvents:
		ev.Run.Next = d.storedEvents(ctx)
	}
	return ev
}

// runStart posts the run (with the action's Idempotency-Key) and tells the breaker.
func (d *driver) runStart(ctx context.Context, rn runner) core.Event {
	ev := core.Event{Kind: core.EvRun, Run: &core.RunAnswer{}, Status: core.OK}
	sctx, cancel := context.WithDeadline(ctx, d.act.deadline)
	defer cancel()
	d.sent = time.Now()
	st, err := rn.RunStart(sctx, d.request())
	d.act.ep.brk.done(d.b.now(), err)
	d.gateFeedback(err)
	if err != nil {
		d.b.metrics.observeCall(d, d.sent, nil, err)
		ev.Status, ev.Run.Call = core.Failed, d.callAnswer(sctx, nil, err)
		if isKeyConflict(err) {
			ev.Run.Call.Result.Error = hermesKeyConflict()
			ev.Run.Call.Retryable = false
		}
		return ev
	}
	d.b.metrics.observeCall(d, d.sent, &hermes.Result{HTTPStatus: 200}, nil)
	ev.Run.RunID = st.RunID
	return ev
}

// isKeyConflict reports Hermes's 409 idempotency_key_conflict on POST /v1/runs (0.21):
// the key already names a run whose request payload differs.
func isKeyConflict(err error) bool {
	var he *hermes.Error
	return errors.As(err, &he) && he.HTTPStatus == http.StatusConflict && he.RemoteCode == "idempotency_key_conflict"
}

// hermesKeyConflict is the bridge's idempotency_conflict for a 409 idempotency_key_conflict:
// permanent, certain that this post started nothing (Hermes checks the key before it
// starts a run). Retrying cannot help: the key stays bound to the other payload for
// Hermes's retention (24 h).
func hermesKeyConflict() *events.ErrorInfo {
	return &events.ErrorInfo{Code: "idempotency_conflict", Category: "policy", HTTPStatus: http.StatusConflict,
		Message: "Hermes already holds this idempotency key for a run with a different request payload; " +
			"use a new idempotency key for different work",
		Details: map[string]any{"remote_code": "idempotency_key_conflict"}}
}

// runEvents republishes the run's events from event number r.From on, until its terminal
// event, the end of the events stream (gone, broken) or ctx; each approval.request is
// stepped as EvRunApproval meanwhile. a says what the events showed.
func (d *driver) runEvents(ctx context.Context, rn runner, r *core.RunRequest, a *core.RunAnswer) {
	pub := newEventPublisher(d.b.js, d)
	pub.seq = r.From
	defer func() {
		if err := pub.flush(context.Background()); err != nil {
			a.PublishFailed = true
		}
		a.Next = pub.seq
	}()
	s, err := rn.RunEvents(ctx, r.RunID)
	if err != nil {
		if !errors.Is(err, hermes.ErrRunNotFound) && ctx.Err() == nil {
			d.b.log.Info().Str("action_id", d.id).Str("error_code", errorCode(err)).
				Msg("the run's events cannot be read; following its status instead")
		}
		return
	}
	defer s.Close()
	cost := runCost{whole: r.From == 0}
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				d.b.log.Info().Str("action_id", d.id).Str("error_code", errorCode(err)).
					Msg("the run's events stream ended early; following its status instead")
			}
			return
		}
		cost.observe(&ev)
		observeRun(a, ev)
		if err := pub.publish(runEventOut(ev)); err != nil {
			a.PublishFailed = true
			return
		}
		if ev.Name == "approval.request" {
			d.deliver(core.Event{Kind: core.EvRunApproval, Run: &core.RunAnswer{Approval: approvalAsk(ev)}}, false)
		}
		if ev.Terminal {
			a.Streamed = true
			return
		}
	}
}

// observeRun records what a run event says about the run.
func observeRun(a *core.RunAnswer, ev hermes.RunEvent) {
	a.LastEvent = ev.Name
	if ev.Terminal {
		a.PendingSteer = ev.PendingSteer
	}
	switch ev.Name {
	case "tool.started":
		a.ToolsRan = true
	case "run.completed":
		a.Status, a.Output, a.Usage = hermes.RunCompleted, ev.Output, usageJSON(ev.Usage)
	case "run.failed":
		a.Status, a.ErrText = hermes.RunFailed, ev.Error
	case "run.cancelled":
		a.Status = hermes.RunCancelled
	case "run.interrupted":
		a.Status = hermes.RunInterrupted
	}
}

// runCost sums the cost_usd of a run's subagent.complete events (Hermes 0.21) into the
// usage of its run.completed. The sum is the run's cost only when every event was read,
// from the first (whole): a delivery that took the run over misses those before, and its
// usage then has the tokens without a cost. A cost Hermes put in the usage itself is kept.
type runCost struct {
	whole bool
	sum   float64
	seen  bool
}

// observe adds ev's cost, or sets the sum as the cost of ev's usage when ev is run.completed.
func (c *runCost) observe(ev *hermes.RunEvent) {
	if ev.CostUSD != nil {
		c.sum, c.seen = c.sum+*ev.CostUSD, true
	}
	if ev.Name == "run.completed" && ev.Usage != nil && ev.Usage.CostUSD == nil && c.seen && c.whole {
		u := *ev.Usage
		sum := c.sum
		u.CostUSD = &sum
		ev.Usage = &u
	}
}

// approvalAsk is what the job needs of an approval.request event.
func approvalAsk(ev hermes.RunEvent) *core.RunApprovalAsk {
	ask := &core.RunApprovalAsk{Data: ev.Data}
	if sha, err := events.InputSHA256(ev.Data); err == nil {
		ask.SHA256 = sha
	}
	if ap := ev.Approval; ap != nil {
		ask.Command, ask.Description, ask.PatternKey, ask.Choices = ap.Command, ap.Description, ap.PatternKey, ap.Choices
		ask.RequestID = ap.RequestID
	}
	return ask
}

func usageJSON(u *hermes.RunUsage) json.RawMessage {
	if u == nil {
		return nil
	}
	b, err := json.Marshal(u)
	if err != nil {
		return nil
	}
	return b
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

// storedEvents returns the number of events already stored for the action (the next
// sequence), read from the output stream's last event. A read that is behind only makes
// this delivery reuse sequences that deduplication then drops.
func (d *driver) storedEvents(ctx context.Context) int64 {
	if d.b.output == nil {
		return 0
	}
	gctx, cancel := context.WithTimeout(ctx, runCallTimeout)
	defer cancel()
	m, err := d.b.output.GetLastMsgForSubject(gctx, d.b.subjects.Events(d.id))
	if err != nil {
		return 0
	}
	var e struct {
		Sequence int64 `json:"sequence"`
	}
	if json.Unmarshal(m.Data, &e) != nil {
		return 0
	}
	return e.Sequence + 1
}

// errApprovalStale: Hermes answered that the run does not wait for the approval request
// a decision answers (409 approval_not_pending or approval_not_active).
var errApprovalStale = errors.New("the run does not wait for this approval request")

// forwardChoice sends a decided choice to the run, naming the approval's request_id where
// Hermes gave one, and retrying a few times when the answer is lost. An answer that says
// the run does not wait for that request (409 approval_not_pending or approval_not_active)
// is never retried: the run's status is read again and reported, and errApprovalStale
// returned. Other refusals (4xx) are logged.
func forwardChoice(ctx context.Context, b *Bridge, r runner, actionID string, req *core.RunRequest) error {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, runCallTimeout)
		_, err = r.RunApprovalFor(cctx, req.RunID, req.Choice, req.RequestID)
		cancel()
		var he *hermes.Error
		if err == nil || (errors.As(err, &he) && he.HTTPStatus >= 400 && he.HTTPStatus < 500) {
			break
		}
		t := time.NewTimer(core.Backoff(b.cfg.RetryBase, b.cfg.RetryMax, attempt, 0, 0.5))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			attempt = 3
		}
	}
	var he *hermes.Error
	if errors.As(err, &he) && (he.RemoteCode == "approval_not_pending" || he.RemoteCode == "approval_not_active") {
		code := he.RemoteCode
		// Re-read what the run does now (never retry blindly): the report names it.
		status := "unknown"
		cctx, cancel := context.WithTimeout(ctx, runCallTimeout)
		st, serr := r.RunStatus(cctx, req.RunID)
		cancel()
		switch {
		case serr == nil:
			status = st.Status
		case errors.Is(serr, hermes.ErrRunNotFound):
			status = "not_found"
		}
		b.log.Warn().Str("action_id", actionID).Str("choice", req.Choice).Str("request_id", req.RequestID).
			Str("error_code", code).Str("run_status", status).
			Msg("stale approval decision: the run no longer waits for this tool approval request; not applied, not retried")
		return errApprovalStale
	}
	if err != nil {
		b.log.Warn().Str("action_id", actionID).Str("choice", req.Choice).Str("error_code", errorCode(err)).
			Msg("the run did not take the approval decision")
	}
	return err
}

// remoteCode is Hermes's own error.code of err ("" when none).
func remoteCode(err error) string {
	var he *hermes.Error
	if errors.As(err, &he) {
		return he.RemoteCode
	}
	return ""
}

// noteRunsDurable logs when an endpoint's advertised durable runs idempotency changes
// (it was upgraded or downgraded under the running bridge), so that the change in how
// takeovers of its unbound runs settle can be traced.
func (b *Bridge) noteRunsDurable(epID string, durable bool) {
	ep, ok := b.eps[epID]
	if !ok {
		return
	}
	v := int32(1)
	if durable {
		v = 2
	}
	if old := ep.runsDurable.Swap(v); old != 0 && old != v {
		b.log.Info().Str("endpoint", epID).Bool("durable_runs_idempotency", durable).
			Msg("the endpoint's advertised runs idempotency changed")
	}
}

// errorCode is the Hermes error code of err ("" when it is not a Hermes error): logs name
// the code, never the error text, which may carry content.
func errorCode(err error) string {
	if he, ok := errors.AsType[*hermes.Error](err); ok {
		return he.Code
	}
	return ""
}
