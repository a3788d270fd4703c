package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Steering (schemas/steer.schema.json, steer-reply.schema.json). A request on
// <prefix>.steer.<id> carries text for the running governed run of action id. Only the
// replica that follows the run can forward it, so every replica hears it on a plain
// subscription and answers only if one of its jobs follows the action's run: it checks that the
// endpoint supports steer (features.run_steer; a 404 or 405 from a Hermes without the
// route says the same), posts the text to POST /v1/runs/{run_id}/steer and answers
// accepted, or refused with a code. One replica also hears it on a queue subscription:
// it refuses a request that is not a steer request (invalid_request) and, when no job of
// its own follows the run, answers from the records what they can say for certain
// (unknown, not_a_run, not_running for a run that is not yet bound or is settled); for a
// bound run that another replica follows it stays silent and lets that one answer. A
// request nobody can answer (the run's owner is gone and not yet taken over) gets no
// reply: the requester's timeout says so.
//
// The text is user content: it is forwarded and never logged, and replies never quote it.

const (
	// steerWorkers bounds the steer requests being forwarded at once by a replica; a
	// request past it is refused failed (busy) rather than queued behind a slow Hermes.
	steerWorkers = 32
	// steerQueue bounds the queue of requests answered from the records; a request that
	// finds it full is not answered, and logged at most once a second (subscribeStored).
	steerQueue = 256
)

// steerer is what steering needs of an endpoint's client (hermes.Client).
type steerer interface {
	RunSteer(ctx context.Context, runID, text string) (*hermes.RunSteerResult, error)
	Capabilities(ctx context.Context) (*hermes.Capabilities, error)
}

// subscribeSteer starts both steer subscriptions and the records path's worker; the
// returned function stops them and waits for the goroutines.
func (b *Bridge) subscribeSteer(ctx context.Context) (func(), error) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, steerWorkers)
	owner, err := b.nc.Subscribe(b.subjects.AllSteer(), func(m *nats.Msg) {
		id, err := b.subjects.ParseSteer(m.Subject)
		if err != nil {
			return
		}
		d := b.runDriver(id)
		if d == nil {
			return
		}
		req, err := events.DecodeSteer(m.Data)
		if err != nil {
			return // the queue subscription refuses it
		}
		select {
		case sem <- struct{}{}:
		default:
			b.replySteer(m, id, events.SteerFailed, "this replica is forwarding too many steer requests; try again")
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			code, reason := d.steer(ctx, req.Text)
			b.replySteer(m, id, code, reason)
		}()
	})
	if err != nil {
		return nil, err
	}
	stopStored, err := b.subscribeStored(ctx, "steer", b.subjects.AllSteer(), b.cfg.Consumer+"-steer",
		steerQueue, 1, b.steerFromStore)
	if err != nil {
		_ = owner.Unsubscribe()
		return nil, err
	}
	return func() {
		_ = owner.Unsubscribe()
		stopStored()
		wg.Wait()
	}, nil
}

// runDriver returns the job of this replica that follows the governed run of action id
// (a delivery of the action that has bound the run and reads its events or status), nil
// when none does. Another delivery of the action waiting here (a redelivery waiting out
// the owner's lease) does not count: the owner answers, wherever it runs.
func (b *Bridge) runDriver(id string) *driver {
	for _, d := range b.drivers(id) {
		if d.kind == core.KindAction && d.steerRun.Load() != nil {
			return d
		}
	}
	return nil
}

// steerFromStore refuses a request that is not a steer request, and answers for an
// action no job of this replica runs what the records say for certain.
func (b *Bridge) steerFromStore(ctx context.Context, m *nats.Msg) {
	id, err := b.subjects.ParseSteer(m.Subject)
	if err != nil {
		return
	}
	if _, err := events.DecodeSteer(m.Data); err != nil {
		var ae *events.ActionError
		reason := "not a steer request"
		if errors.As(err, &ae) {
			reason = ae.Error()
		}
		b.replySteer(m, id, events.SteerInvalid, reason)
		return
	}
	if b.runDriver(id) != nil {
		return // the plain subscription answers
	}
	rctx, cancel := context.WithTimeout(ctx, runCallTimeout)
	defer cancel()
	ent, recErr := b.store.Get(rctx, kvstore.ActionKey(id))
	le, logErr := b.results.Last(rctx, id)
	recMissing, logMissing := errors.Is(recErr, kvstore.ErrNotFound), errors.Is(logErr, kvstore.ErrNotFound)
	if (recErr != nil && !recMissing) || (logErr != nil && !logMissing) {
		return // the records cannot be read now: no certain answer
	}
	if recMissing && logMissing {
		b.replySteer(m, id, events.SteerUnknown, "the bridge has no record of this action")
		return
	}
	capID := ""
	if !recMissing {
		capID = ent.Record.CapabilityID
	}
	if capID == "" && !logMissing {
		var r struct {
			CapabilityID string `json:"capability_id"`
		}
		_ = json.Unmarshal(le.Data, &r)
		capID = r.CapabilityID
	}
	if _, op, ok := events.ParseCapabilityID(capID); ok && op != RunOperation {
		b.replySteer(m, id, events.SteerNotARun, "the action is a "+op+", not a governed run (operation run)")
		return
	}
	switch {
	case !logMissing && le.Terminal, !recMissing && ent.Record.State == kvstore.StateSettled:
		b.replySteer(m, id, events.SteerNotRunning, "the action has settled; its run is over")
	case recMissing:
		// A result that is not terminal and no record: nothing certain to say.
	case ent.Record.RunID == "":
		b.replySteer(m, id, events.SteerNotRunning, "the run has not started yet (no run_id is bound to the action)")
	}
	// Bound and not settled: the replica that follows the run answers.
}

// replySteer answers a steer request once per replica: accepted when code is "", else
// refused with code and reason.
func (b *Bridge) replySteer(m *nats.Msg, id, code, reason string) {
	if m.Reply == "" || !b.inflight.firstAnswer(m.Reply) {
		return
	}
	r := events.SteerReply{ActionID: id, State: events.SteerAccepted}
	outcome := events.SteerAccepted
	if code != "" {
		r.State, r.Code, r.Reason = events.SteerRefused, code, reason
		outcome = code
	}
	body, _ := json.Marshal(r)
	_ = m.Respond(body)
	if mt := b.metrics; mt != nil {
		mt.steers.WithLabelValues(outcome).Inc()
	}
}

// steer forwards text to the run this job follows and returns the refusal code and
// reason ("" when Hermes accepted the text).
func (d *driver) steer(ctx context.Context, text string) (code, reason string) {
	runID := d.steerRun.Load() // set by runDriver's caller's check: d follows a run
	if d.runStopping.Load() {
		return events.SteerNotRunning, "the run is being stopped"
	}
	c, ok := d.b.eps[d.act.endpointID]
	var s steerer
	if ok {
		s, ok = c.client.(steerer)
	}
	if !ok {
		return events.SteerUnsupported, "the endpoint's client cannot steer runs"
	}
	cctx, cancel := context.WithTimeout(ctx, runCallTimeout)
	defer cancel()
	if caps, err := s.Capabilities(cctx); err == nil && !caps.RunSteer {
		return d.steerRefused(events.SteerUnsupported, "the endpoint does not support steer (its capabilities do not list run_steer; Hermes v0.21 or later does)", "")
	}
	// Capabilities that cannot be read do not decide: the post's answer does.
	res, err := s.RunSteer(cctx, *runID, text)
	if err == nil {
		if !res.Accepted {
			return d.steerRefused(events.SteerNotAccepted, "Hermes did not accept the text", "")
		}
		d.b.log.Info().Str("action_id", d.id).Msg("steer text forwarded to the run")
		return "", ""
	}
	code, reason = steerRefusal(err)
	return d.steerRefused(code, reason, errorCode(err))
}

// steerRefusal maps a failed POST /v1/runs/{run_id}/steer to a refusal code and reason.
// A 404 or 405 from a Hermes without the steer route is steer_unsupported, as is a
// missing run_steer capability.
func steerRefusal(err error) (code, reason string) {
	var he *hermes.Error
	errors.As(err, &he)
	switch {
	case errors.Is(err, hermes.ErrRunNotFound):
		return events.SteerNotRunning, "Hermes no longer knows the run"
	case errors.Is(err, hermes.ErrRouteNotFound), he != nil && he.HTTPStatus == http.StatusMethodNotAllowed:
		return events.SteerUnsupported, "the endpoint does not support steer (it has no steer route)"
	case he != nil && he.RemoteCode == "steer_not_accepted":
		return events.SteerNotAccepted, "the run's agent did not accept the text"
	case he != nil && he.HTTPStatus == http.StatusConflict:
		return events.SteerNotRunning, "the run is not running now (Hermes accepts steer only while it runs, " +
			"not while it waits for a tool approval, stops or has ended)"
	case he != nil && he.RemoteCode == "invalid_steer_input":
		return events.SteerInvalid, "Hermes found no text to steer with"
	case he != nil && he.HTTPStatus == http.StatusNotFound:
		return events.SteerUnsupported, "the endpoint does not support steer (404)"
	}
	return events.SteerFailed, "the steer request to Hermes failed; the text may or may not have reached the run"
}

// steerRefused logs a refusal that Hermes or the endpoint caused (never the text) and
// returns code and reason.
func (d *driver) steerRefused(code, reason, remote string) (string, string) {
	d.b.log.Info().Str("action_id", d.id).Str("endpoint", d.act.endpointID).Str("steer_code", code).
		Str("error_code", remote).Msg("steer refused")
	return code, reason
}
