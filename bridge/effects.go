package bridge

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// The store and log effects: each is one operation on the bucket or the result log,
// answered with how it went. Store operations run without a deadline of their own
// (nats.go bounds each request by its 5 s default, kvstore.OpTimeout) and survive
// shutdown: the job decides what to do at shutdown, not the operation.

// storeStatus maps a kvstore error to the answer's status.
func storeStatus(err error) core.Status {
	switch {
	case err == nil:
		return core.OK
	case errors.Is(err, kvstore.ErrExists):
		return core.Exists
	case errors.Is(err, kvstore.ErrConflict):
		return core.Conflict
	case errors.Is(err, kvstore.ErrNotFound):
		return core.NotFound
	case errors.Is(err, kvstore.ErrTooLarge):
		return core.TooLarge
	}
	return core.Failed
}

// boundCtx is the context of store or log request e: it ends e.Bound after now. A bound
// of kvstore.OpTimeout or more needs no context of its own: the request is bounded by
// nats.go's timeout, which is that (a timer less on every request).
func boundCtx(e *core.Effect) (context.Context, context.CancelFunc) {
	if e.Bound <= 0 || e.Bound >= kvstore.OpTimeout {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), e.Bound)
}

// storeOp carries out a Create, Get, Update, Delete or Claim.
func (d *driver) storeOp(e *core.Effect) core.Event {
	ctx, cancel := boundCtx(e)
	defer cancel()
	ev := core.Event{Kind: core.EvStore, Op: e.Op}
	var err error
	switch e.Kind {
	case core.EffCreate:
		ev.Rev, err = d.b.recs.Create(ctx, e.Key, d.b.parkable(ctx, d.id, *e.Rec))
	case core.EffGet:
		ev.Entry, err = d.b.recs.Get(ctx, e.Key)
	case core.EffUpdate:
		ev.Rev, err = d.b.recs.Update(ctx, e.Key, d.b.parkable(ctx, d.id, *e.Rec), e.Rev)
	case core.EffDelete:
		err = d.b.recs.Delete(ctx, e.Key, e.Rev)
	case core.EffClaim:
		ev.KeyRev, ev.Rev, err = d.b.recs.Claim(ctx, e.Key, *e.Rec, e.ActionID, *e.Rec2)
		if errors.Is(err, kvstore.ErrBatchRefused) {
			ev.Status, ev.Err = core.Conflict, err // nothing written: the core claims the key on its own
			return ev
		}
	}
	ev.Status, ev.Err = storeStatus(err), err
	return ev
}

// logEntry is what the core reads of a result message.
func logEntry(le kvstore.LogEntry) core.LogEntry {
	r, err := events.DecodeResult(le.Header, le.Data)
	if err != nil {
		r = nil // unreadable: it counts as terminal (whatever is stored stands)
	}
	return core.LogEntry{Seq: le.Seq, Result: r, By: le.By, MsgID: le.Header.Get(jetstream.MsgIDHeader)}
}

// readLog reads the action's last result message.
func (d *driver) readLog(e *core.Effect) core.Event {
	ctx, cancel := boundCtx(e)
	defer cancel()
	le, err := d.b.results.Last(ctx, e.ActionID)
	ev := core.Event{Kind: core.EvLog, Op: e.Op, Status: storeStatus(err), Err: err}
	if err == nil {
		ev.Log = logEntry(le)
	}
	return ev
}

// appendTimeout bounds one Append effect (its publishes retried within it); the job
// retries after that.
const appendTimeout = 5 * time.Second

// appendResult appends a result message, marked with the job's owner (how a retry whose
// first attempt landed recognises it). A terminal result of an action delivery carries
// the time since the action was published (HeaderDurationMs).
func (d *driver) appendResult(e *core.Effect) core.Event {
	timeout := appendTimeout
	if e.Bound > 0 {
		timeout = min(timeout, e.Bound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ev := core.Event{Kind: core.EvLog, Op: e.Op}
	hdr, raw, err := d.encodeResult(ctx, e.Result)
	if err != nil {
		ev.Status, ev.Err = core.Failed, err
		return ev
	}
	// The values set here share one slice: one allocation, not one per header. The
	// message id is set unless the encoding already gave it (a result's or a pending
	// result's own id).
	vals := make([]string, 0, 4)
	set := func(k, v string) {
		vals = append(vals, v)
		hdr[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if hdr.Get(events.HeaderID) != e.MsgID || hdr.Get(jetstream.MsgIDHeader) != e.MsgID {
		set(events.HeaderID, e.MsgID)
		set(jetstream.MsgIDHeader, e.MsgID)
	}
	set(kvstore.HeaderOwner, d.owner)
	if dur, ok := d.sincePublish(); ok && e.Result.Status != events.StatusPendingApproval {
		set(events.HeaderDurationMs, strconv.FormatInt(dur.Milliseconds(), 10))
	}
	m := &nats.Msg{Subject: d.b.out.results(d.id), Header: hdr, Data: raw}
	ev.Log.Seq, err = d.b.results.Append(ctx, d.id, m, e.Expect)
	ev.Status, ev.Err = storeStatus(err), err
	if r := e.Result; err == nil && r.Usage != nil && r.ReplayOf == nil && events.Terminal(r.Status) {
		d.usage.Store(r.Usage)
	}
	if ev.Status == core.Conflict || ev.Status == core.TooLarge || err == nil {
		return ev
	}
	ev.Status = core.Failed
	return ev
}

// sincePublish is the time since the job's action message was published (its JetStream
// timestamp), when the job is a delivery of the action itself.
func (d *driver) sincePublish() (time.Duration, bool) {
	if d.kind != core.KindAction || d.md == nil || d.md.Timestamp.IsZero() {
		return 0, false
	}
	return max(time.Since(d.md.Timestamp), 0), true
}

// awaitMove waits until key holds a revision after rev, or the action's log has its
// terminal result (an owner's last act is that append, not a record write), or ctx
// ends: at its deadline (Expired) or aborted.
func (d *driver) awaitMove(ctx context.Context, key string, rev uint64) core.Event {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type terminal struct {
		le  kvstore.LogEntry
		err error
	}
	tc := make(chan terminal, 1)
	go func() {
		le, err := d.b.results.WaitTerminal(wctx, d.id)
		if err == nil {
			cancel() // ends the record watch
		}
		tc <- terminal{le, err}
	}()
	_, err := d.b.recs.Wait(wctx, key, rev)
	cancel()
	t := <-tc
	switch {
	case t.err == nil:
		return core.Event{Kind: core.EvWait, Status: core.Terminal, Log: logEntry(t.le)}
	case err == nil, errors.Is(err, kvstore.ErrNotFound):
		return core.Event{Kind: core.EvWait, Status: core.Moved}
	}
	return waitEnd(ctx, err)
}

// waitTerminal waits until the action id has a terminal result, or ctx ends.
func (d *driver) waitTerminal(ctx context.Context, id string) core.Event {
	le, err := d.b.results.WaitTerminal(ctx, id)
	if err == nil {
		return core.Event{Kind: core.EvWait, Status: core.Terminal, Log: logEntry(le)}
	}
	return waitEnd(ctx, err)
}

// waitEnd is the answer of a wait that ended without its event: Expired at its deadline,
// Aborted when aborted, else Failed.
func waitEnd(ctx context.Context, err error) core.Event {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return core.Event{Kind: core.EvWait, Status: core.Expired}
	case ctx.Err() != nil:
		return core.Event{Kind: core.EvWait, Status: core.Aborted}
	}
	return core.Event{Kind: core.EvWait, Status: core.Failed, Err: err}
}

// deadLetter copies the job's message to the DLQ with reason (the original headers
// kept, the reason, subject and stream position added).
func (d *driver) deadLetter(reason string) core.Status {
	if d.msg == nil || d.md == nil {
		return core.OK
	}
	if err := d.b.publishDLQ(d.msg, d.md, reason); err != nil {
		d.b.log.Warn().Err(err).Uint64("stream_seq", d.md.Sequence.Stream).Msg("dead-lettering failed; will retry")
		return core.Failed
	}
	return core.OK
}

// note writes what the job noted: a log line (never content, keys or session ids).
func (d *driver) note(e *core.Effect) {
	l := d.b.log
	switch e.Note {
	case core.NoteGaveUpWaiting:
		l.Warn().Str("action_id", d.id).Msg("gave up waiting for the action's owner; the delivery is retried")
	case core.NoteTakenOver:
		l.Warn().Str("action_id", d.id).Msg("the claim was taken over by another delivery; this one stops")
	case core.NoteStoreFailed:
		l.Warn().Str("action_id", d.id).Str("while", e.Reason).Msg("a store operation failed")
	case core.NoteAuth:
		// Every action of the endpoint fails the same way until its key is fixed: say
		// where the key comes from (never the key).
		ev := l.Warn().Str("endpoint", d.act.endpointID).Str("action_id", d.id).Str("code", hermes.CodeAuthentication)
		if d.act.ep != nil && d.act.ep.cfg.KeySource != "" {
			ev = ev.Str("key", d.act.ep.cfg.KeySource)
		}
		ev.Msg("Hermes endpoint " + d.act.endpointID + " refused the request: " + e.Reason)
	case core.NoteRunApprovalAsked:
		l.Info().Str("action_id", d.id).Str("approval", e.Reason).Msg("the run waits for a tool approval")
	case core.NoteRunApprovalExpired:
		d.b.metrics.approvalOutcome("expired")
		l.Info().Str("action_id", d.id).Str("approval", e.Reason).Msg("no decision within the approval window: denying the tool")
	case core.NoteRunNotFollowed:
		l.Warn().Str("action_id", d.id).Msg("could not store the run's id; the run is followed, but a replica that takes the action over cannot")
	case core.NoteRunLost:
		l.Warn().Str("action_id", d.id).Msg("the endpoint no longer knows the run")
	case core.NoteUnresumable:
		l.Error().Str("action_id", d.id).Msg("a parked action record cannot be resumed")
	case core.NoteKeyLost:
		l.Warn().Str("action_id", d.id).Msg("the action's idempotency key record no longer names it; it is not renewed")
	case core.NoteRunApprovalStale:
		l.Warn().Str("action_id", d.id).Str("request_id", e.Reason).
			Msg("stale approval decision: the run does not wait for the tool approval request it names (answered, or never asked); not applied")
	case core.NoteResultUnstored:
		l.Error().Str("action_id", d.id).Str("while", e.Reason).Msg("the last delivery could not store the action's result")
	default:
		l.Info().Str("action_id", d.id).Str("note", e.Note.String()).Msg(e.Reason)
	}
}

// parkable returns r, with a parked action too large for the bucket replaced by a
// reference to its copy in the object store (read back by resume).
func (b *Bridge) parkable(ctx context.Context, id string, r kvstore.Record) kvstore.Record {
	if len(r.Action) == 0 || b.recordLimit == 0 || len(r.Action)+recordMargin <= b.recordLimit {
		return r
	}
	ref, err := b.putObject(ctx, id+"/action", r.Action)
	if err != nil {
		return r // the write then fails too large: the job settles payload_too_large
	}
	r.Action = ref.JSON()
	return r
}

// recordMargin is left free in a record for its fields besides a parked action.
const recordMargin = 8 << 10
