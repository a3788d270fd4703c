package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// settle ends the job's action with res: it appends the result message to the result
// log under the job's claim (kvstore.Claim.Settle: at most one terminal result is ever
// stored, and a delivery that lost its claim appends nothing), which frees the key of a
// result that is retryable and certain, and acks.
//
// A transient NATS failure (a stream leader change, a reconnect, a lost ack) does not
// lose the result: the append is retried with backoff (kvstore.JetStreamLog.Append)
// while this replica keeps its claim (the job's heartbeats go on) for settleFor, or
// until the action's deadline when that is later. Only then is the message naked, and
// the next delivery settles the action (outcome_unknown when the call was unsafe and
// dispatched: what Hermes answered is then lost).
func (j *job) settle(ctx context.Context, res *events.Result) (d decision) {
	b := j.b
	ctx, span := b.tracing.startSettle(ctx, j, res)
	defer func() { endSettle(span, d) }()
	// Settling must finish even when shutdown has cancelled the work context.
	ctx, cancel := settleContext(ctx, j.deadline)
	defer cancel()
	if j.running != nil {
		j.running.settling.Store(true) // a cancel request now comes too late
	}
	if j.unboundRun && res.Error != nil {
		// An earlier delivery may have started the run: nothing is certain, and the
		// key stays held (see run.go).
		res.Error.UncertainOutcome, res.Error.Retryable = true, false
	}
	if res.Error != nil {
		j.setStatus(res.Status, res.Error.Code)
	} else {
		j.setStatus(res.Status, "")
	}
	hdr, raw, err := j.encodeResult(ctx, res)
	if err != nil {
		return j.infra(err)
	}
	if d, ok := j.sincePublish(); ok && hdr != nil && res.Status != events.StatusPendingApproval {
		hdr.Set(events.HeaderDurationMs, strconv.FormatInt(d.Milliseconds(), 10))
	}
	m := &nats.Msg{Subject: j.resultSubject(), Header: hdr, Data: raw}
	frees := res.Error != nil && res.Error.Retryable && !res.Error.UncertainOutcome
	b.hook(PointStored, j.actionID)
	var le kvstore.LogEntry
	if c := j.claim.Load(); c != nil {
		le, err = c.Settle(ctx, m, frees)
	} else {
		le, err = b.ledger.SettleUnclaimed(ctx, j.actionID, m, 0)
	}
	switch {
	case errors.Is(err, kvstore.ErrLostClaim):
		return j.lost(ctx)
	case errors.Is(err, kvstore.ErrSettled):
		// Another delivery's result was stored first (a takeover raced a paused owner):
		// that one is the action's result.
		j.statusFrom(le.Data, "superseded:")
		return ackIt()
	case err != nil:
		return j.retryLater(err, "storing the result")
	}
	b.hook(PointPublished, j.actionID)
	if m := b.metrics; m != nil {
		m.settledAction(j, j.status, j.code)
		if j.replayOf != "" {
			m.replays.Inc()
		}
		if j.code == "idempotency_conflict" {
			m.conflicts.Inc()
		}
	}
	return ackIt()
}

// sincePublish is the time since the job's action message was published (its JetStream
// timestamp), when the job is a delivery of the action itself; not for an approval
// decision's delivery, the sweeper or a cancel.
func (j *job) sincePublish() (time.Duration, bool) {
	if j.msg == nil || j.md == nil || j.md.Timestamp.IsZero() {
		return 0, false
	}
	if _, err := j.b.subjects.ParseApprovals(j.msg.Subject()); err == nil {
		return 0, false
	}
	d := time.Since(j.md.Timestamp)
	if d < 0 {
		d = 0
	}
	return d, true
}

// settleFor is the least time settle retries storing a result.
const settleFor = 30 * time.Second

// settleContext bounds the writes that end an action: they survive the cancellation of
// ctx (shutdown) and last settleFor, or until deadline when that is later.
func settleContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	end := time.Now().Add(settleFor)
	if deadline.After(end) {
		end = deadline
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}

// settleStored settles the action with the result its record holds (a cancel that came
// before the action).
func (j *job) settleStored(ctx context.Context, rec kvstore.Record) decision {
	r, err := storedResult(rec.Result, j.actionID)
	if err != nil {
		return j.infra(err)
	}
	if j.capID != "" {
		r.CapabilityID = j.capID
	}
	return j.settle(ctx, r)
}

// storedResult decodes a stored result of action id.
func storedResult(raw []byte, id string) (*events.Result, error) {
	var r events.Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, errors.New("the stored result of " + id + " is unreadable: " + err.Error())
	}
	return &r, nil
}

// replay settles this action with the terminal result (raw) of action origID, marked
// as its replay (CONTRACT §5).
func (j *job) replay(ctx context.Context, origID string, raw []byte) decision {
	r, err := storedResult(raw, origID)
	if err != nil {
		return j.infra(err)
	}
	if r.ReplayOf != nil {
		origID = *r.ReplayOf
	}
	r.ActionID = j.actionID
	r.ReplayOf = &origID
	j.replayOf = origID
	return j.settle(ctx, r)
}

// statusFrom sets the log status from a stored result's JSON, prefixed.
func (j *job) statusFrom(raw []byte, prefix string) {
	var r struct {
		Status string `json:"status"`
		Error  *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &r)
	code := ""
	if r.Error != nil {
		code = r.Error.Code
	}
	j.setStatus(prefix+r.Status, code)
}

// settleCancelled ends the job's action cancelled; uncertain when an unsafe call may
// have reached Hermes.
func (j *job) settleCancelled(ctx context.Context, mayHaveStarted bool) decision {
	return j.settle(ctx, &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: events.StatusCancelled,
		Output: json.RawMessage("null"), Error: cancelledInfo(mayHaveStarted && !j.safe(), "cancelled on request")})
}
