package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Tool approvals of a governed run. When the run's events show an approval.request, the
// owner asks for it (kvstore.Claim.AskApproval): a pending_approval result message naming
// the command and the choices (id <action_id>:pending:<k>), then the approval's index,
// hash and expiry in the action record. A decision on <prefix>.approvals.<action_id>,
// consumed by whichever replica, answers it with one compare-and-set on the record
// (kvstore.Ledger.AnswerApproval: the first answer of approval k wins, so a redelivered
// or second decision is not forwarded again) and is then forwarded to
// POST /v1/runs/{run_id}/approval. The owner's timer answers an approval nobody decided
// within ApprovalTTL with deny, by the same compare-and-set. A decision to approve must
// carry the pending result's input_sha256 (the hash of the approval.request data);
// another hash is forwarded as deny (approval outcome "mismatch").

// runApprovals is the owner's side: the approvals its run asked and their timers.
type runApprovals struct {
	f      *runFollow
	claim  *kvstore.Claim
	mu     sync.Mutex
	timers []*time.Timer
	wg     sync.WaitGroup
}

// ask publishes and records approval request ev (the run's k-th) and arms its expiry.
// A failure is logged: the run then waits for a decision until its deadline.
func (a *runApprovals) ask(ev hermes.RunEvent) {
	j := a.f.j
	b := j.b
	k := a.claim.Record().ApprovalSeq + 1
	sha, err := events.InputSHA256(ev.Data)
	if err != nil {
		b.log.Warn().Str("action_id", j.actionID).Msg("an approval request of the run is not a JSON object; it waits for the deadline")
		return
	}
	expires := b.now().Add(b.cfg.ApprovalTTL)
	m, err := a.pendingMsg(ev, k, sha, expires)
	if err == nil {
		ctx, cancel := detached(b.workCtx)
		err = a.claim.AskApproval(ctx, k, sha, expires, m)
		cancel()
	}
	if err != nil {
		b.log.Warn().Err(err).Str("action_id", j.actionID).Int("approval", k).
			Msg("could not publish the run's approval request; the run waits until its deadline")
		return
	}
	b.log.Info().Str("action_id", j.actionID).Int("approval", k).Time("expires_at", expires).
		Msg("the run waits for a tool approval")
	a.arm(k, expires)
}

// arm denies approval k at expires unless a decision answers it first (see expire).
func (a *runApprovals) arm(k int, expires time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wg.Add(1)
	a.timers = append(a.timers, time.AfterFunc(max(time.Until(expires), 0), func() {
		defer a.wg.Done()
		a.expire(k)
	}))
}

// pendingMsg is approval k's pending_approval result message.
func (a *runApprovals) pendingMsg(ev hermes.RunEvent, k int, sha string, expires time.Time) (*nats.Msg, error) {
	j := a.f.j
	ap := ev.Approval
	if ap == nil {
		ap = &hermes.RunApprovalRequest{}
	}
	out, err := json.Marshal(map[string]any{
		"capability_id": j.capID, "run_id": a.f.runID, "input": ev.Data, "input_sha256": sha,
		"expires_at": expires.UTC(),
		"approval": map[string]any{"index": k, "command": ap.Command, "description": ap.Description,
			"pattern_key": ap.PatternKey, "choices": ap.Choices},
	})
	if err != nil {
		return nil, err
	}
	h, body, err := events.EncodeResult(j.b.cfg.Source, &events.Result{ActionID: j.actionID, CapabilityID: j.capID,
		Status: events.StatusPendingApproval, Output: out}, j.trace)
	if err != nil {
		return nil, err
	}
	id := j.actionID + ":pending:" + strconv.Itoa(k) // one message per approval
	h.Set(events.HeaderID, id)
	h.Set(jetstream.MsgIDHeader, id)
	return &nats.Msg{Subject: j.resultSubject(), Header: h, Data: body}, nil
}

// expire denies approval k on Hermes if no decision answered it first.
func (a *runApprovals) expire(k int) {
	f, j := a.f, a.f.j
	ctx, cancel := detached(j.b.workCtx)
	defer cancel()
	won, err := a.claim.ExpireApproval(ctx, k)
	if err != nil || !won {
		return
	}
	j.b.metrics.approvalOutcome("expired")
	j.b.log.Info().Str("action_id", j.actionID).Int("approval", k).Msg("no decision within the approval window: denying the tool")
	forwardChoice(ctx, j.b, f.r, j.actionID, f.runID, events.ChoiceDeny)
}

// stop stops every timer and waits for the expiries already running.
func (a *runApprovals) stop() {
	a.mu.Lock()
	for _, t := range a.timers {
		if t.Stop() {
			a.wg.Done()
		}
	}
	a.timers = nil
	a.mu.Unlock()
	a.wg.Wait()
}

// rearm arms the expiry of an approval that a taken-over run still waits for.
func (a *runApprovals) rearm() {
	if r := a.claim.Record(); r.ApprovalSeq > r.ApprovalAnswered {
		a.arm(r.ApprovalSeq, r.ExpiresAt)
	}
}

// forwardChoice sends a decided choice to the run, retrying a few times when the
// answer is lost; an answer that says the run does not wait (409, 404) is logged.
func forwardChoice(ctx context.Context, b *Bridge, r runner, actionID, runID, choice string) {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, runCallTimeout)
		_, err = r.RunApproval(cctx, runID, choice, false)
		cancel()
		var he *hermes.Error
		if err == nil || (errors.As(err, &he) && he.HTTPStatus >= 400 && he.HTTPStatus < 500) {
			break
		}
		if !sleepCtx(ctx, backoff(b.cfg.RetryBase, b.cfg.RetryMax, attempt, 0)) {
			break
		}
	}
	if err != nil {
		b.log.Warn().Str("action_id", actionID).Str("choice", choice).Str("error_code", errorCode(err)).
			Msg("the run did not take the approval decision")
	}
}

// decideRun answers a bound run's tool approval with decision ap (message id). ok is
// false when the action is not a bound run: the decision is then a parked action's.
func (j *job) decideRun(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, env *events.Envelope, ap *events.Approval) (decision, bool) {
	b := j.b
	e, err := b.store.Get(ctx, kvstore.ActionKey(j.actionID))
	if err != nil || e.Record.RunID == "" || e.Record.State != kvstore.StateDispatched {
		return decision{}, false // not a run (or not yet readable): the parked-action path decides
	}
	rec := e.Record
	if rec.ApprovalSeq == 0 || rec.ApprovalAnswered >= rec.ApprovalSeq {
		if rec.ApprovalDecision == env.ID {
			j.setStatus("decision_applied", "")
			return ackIt(), true // a redelivery of the decision that answered it
		}
		return j.earlyDecision(ctx, msg, md), true
	}
	choice, outcome := ap.RunChoice(), ap.Decision
	if choice != events.ChoiceDeny && ap.InputSHA256 != rec.ApprovalSHA256 {
		choice, outcome = events.ChoiceDeny, "mismatch"
	}
	if _, err := b.ledger.AnswerApproval(ctx, j.actionID, rec.ApprovalSeq, env.ID); err != nil {
		switch {
		case errors.Is(err, kvstore.ErrAnswered):
			j.setStatus("decision_late", "")
			return ackIt(), true
		case errors.Is(err, kvstore.ErrNotPending):
			return j.earlyDecision(ctx, msg, md), true
		}
		return j.infra(err), true
	}
	j.approval = outcome
	epID, _, _ := events.ParseCapabilityID(rec.CapabilityID)
	r, ok := b.runnerOf(epID)
	if !ok {
		b.log.Warn().Str("action_id", j.actionID).Str("endpoint", epID).Msg("a run decision names an endpoint this replica does not serve")
		return ackIt(), true
	}
	forwardChoice(ctx, b, r, j.actionID, rec.RunID, choice)
	j.setStatus("decision_"+outcome, "")
	return ackIt(), true
}

// earlyDecision handles a decision that found nothing waiting for it: it may have
// overtaken its action (or its approval request); look again shortly, for a while, then
// dead-letter it.
func (j *job) earlyDecision(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata) decision {
	if md.NumDelivered < decisionTries {
		j.setStatus("decision_early", "")
		j.approval = "early"
		return nakAfter(time.Second)
	}
	j.setStatus("decision_orphan", "")
	j.approval = "orphan"
	return j.b.deadLetter(ctx, msg, md, errors.New("no parked action or waiting run approval with this id"))
}
