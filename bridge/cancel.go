package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Cancellation (CONTRACT §8). A request on <prefix>.cancel.<id> reaches every replica
// twice: every replica hears it on a plain subscription and answers only if it is
// running the action (it cancels the job's context and replies "cancelled"); one replica
// also hears it on a queue subscription and answers from its own jobs as the plain
// subscription does (the two run in different goroutines, and the job may end between
// them; a replica sends one answer per request), else from the records
// (kvstore.Ledger.CancelStored): "already_settled"; "cancelled" for a parked action
// (settled here) or one that a replica it cannot reach owns (the record's cancel flag,
// which the owner, or whoever takes it over, honours); "unknown" when there is no
// record at all (it then stores a cancelled result, so that an action still queued
// never reaches Hermes).
//
// The stored path is bounded: cancelWorkers goroutines take requests from a queue of
// cancelQueue; a request that finds the queue full is not answered (the requester's
// timeout tells it to ask again) and is logged, at most once a second. The cancelled
// results stored for unknown ids are limited to tombstoneBurst at once and
// tombstoneRate after that; past the limit the answer is still "unknown", but nothing
// is stored, so such an action, if it is still queued, runs.

// errCancelRequested is the cause of a job context cancelled by a cancel request.
var errCancelRequested = errors.New("bridge: cancel requested")

const (
	cancelWorkers  = 8
	cancelQueue    = 1024
	tombstoneBurst = 1000
)

// tombstoneRate is the sustained rate of stored cancels for unknown ids: 1,000 a minute.
var tombstoneRate = rate.Every(60 * time.Millisecond)

// running is a job being served by this replica.
type running struct {
	j        *job
	cancel   context.CancelCauseFunc
	settling atomic.Bool // the result is decided; a cancel comes too late
	parked   atomic.Bool // the action is parked: the stored state answers cancels
}

type registry struct {
	mu   sync.Mutex
	jobs map[string][]*running
	// answered holds the reply subjects this replica answered in the last
	// answeredFor: both subscriptions may want to answer one request, and the
	// deploy/ roles allow a replica one reply per request.
	answered map[string]time.Time
	swept    time.Time
}

// answeredFor is how long a reply subject is remembered: far longer than the gap
// between the two subscriptions' handlers of one request.
const answeredFor = time.Minute

// firstAnswer reports whether reply has not been answered here yet, and records it.
func (g *registry) firstAnswer(reply string) bool {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.answered == nil {
		g.answered = map[string]time.Time{}
	}
	if now.Sub(g.swept) > answeredFor {
		for r, at := range g.answered {
			if now.Sub(at) > answeredFor {
				delete(g.answered, r)
			}
		}
		g.swept = now
	}
	if _, ok := g.answered[reply]; ok {
		return false
	}
	g.answered[reply] = now
	return true
}

// register records j as running until the returned function is called.
func (b *Bridge) register(j *job, cancel context.CancelCauseFunc) func() {
	r := &running{j: j, cancel: cancel}
	j.running = r
	b.inflight.mu.Lock()
	if b.inflight.jobs == nil {
		b.inflight.jobs = map[string][]*running{}
	}
	b.inflight.jobs[j.actionID] = append(b.inflight.jobs[j.actionID], r)
	b.inflight.mu.Unlock()
	return func() {
		b.inflight.mu.Lock()
		defer b.inflight.mu.Unlock()
		list := b.inflight.jobs[j.actionID]
		for i, x := range list {
			if x == r {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(b.inflight.jobs, j.actionID)
		} else {
			b.inflight.jobs[j.actionID] = list
		}
	}
}

// cancelLocal cancels this replica's jobs of id. It returns the state to answer, or ""
// when this replica is not running the action.
func (b *Bridge) cancelLocal(id string) string {
	b.inflight.mu.Lock()
	defer b.inflight.mu.Unlock()
	state := ""
	for _, r := range b.inflight.jobs[id] {
		switch {
		case r.parked.Load():
		case r.settling.Load():
			if state == "" {
				state = events.CancelAlreadySettled
			}
		default:
			r.cancel(errCancelRequested)
			state = events.CancelCancelled
		}
	}
	return state
}

// subscribeCancel starts both cancel subscriptions and the stored path's workers; the
// returned function stops them and waits for the workers.
func (b *Bridge) subscribeCancel(ctx context.Context) (func(), error) {
	owner, err := b.nc.Subscribe(b.subjects.AllCancel(), func(m *nats.Msg) {
		id, err := b.subjects.ParseCancel(m.Subject)
		if err != nil {
			return
		}
		if state := b.cancelLocal(id); state != "" {
			b.replyCancel(m, id, state)
		}
	})
	if err != nil {
		return nil, err
	}
	queue := make(chan *nats.Msg, cancelQueue)
	limiter := rate.NewLimiter(tombstoneRate, tombstoneBurst)
	var dropped atomic.Int64
	var lastWarn atomic.Int64
	store, err := b.nc.QueueSubscribe(b.subjects.AllCancel(), b.cfg.Consumer+"-cancel", func(m *nats.Msg) {
		select {
		case queue <- m:
		default:
			n := dropped.Add(1)
			if now := time.Now().UnixNano(); now-lastWarn.Load() > int64(time.Second) {
				lastWarn.Store(now)
				b.log.Warn().Int64("dropped", n).Msg("cancel requests arrive faster than they can be answered; some are not answered")
			}
		}
	})
	if err != nil {
		_ = owner.Unsubscribe()
		return nil, err
	}
	var wg sync.WaitGroup
	quit := make(chan struct{})
	for range cancelWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				case <-ctx.Done():
					return
				case m := <-queue:
					b.cancelFromStore(ctx, m, limiter)
				}
			}
		}()
	}
	return func() {
		_ = owner.Unsubscribe()
		_ = store.Unsubscribe()
		close(quit)
		wg.Wait()
	}, nil
}

// replyCancel answers a cancel request, once per replica whichever subscription asks.
func (b *Bridge) replyCancel(m *nats.Msg, id, state string) {
	if m.Reply == "" || !b.inflight.firstAnswer(m.Reply) {
		return
	}
	body, _ := json.Marshal(events.CancelReply{ActionID: id, State: state})
	_ = m.Respond(body)
	if mt := b.metrics; mt != nil {
		mt.cancels.WithLabelValues(state).Inc()
	}
}

// cancelFromStore answers a cancel request from the records when no job of this
// replica runs the action.
func (b *Bridge) cancelFromStore(ctx context.Context, m *nats.Msg, limiter *rate.Limiter) {
	id, err := b.subjects.ParseCancel(m.Subject)
	if err != nil {
		return
	}
	// A job of this replica answers from its own state. The plain subscription would
	// answer too, but it runs in another goroutine and may find the job already gone
	// after this check: so this worker answers as well, and replyCancel sends the
	// first of the two answers only.
	if state := b.cancelLocal(id); state != "" {
		b.replyCancel(m, id, state)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tomb, _ := json.Marshal(&events.Result{ActionID: id, Status: events.StatusCancelled, Output: json.RawMessage("null"),
		Error: cancelledInfo(false, "cancelled before the bridge received the action")})
	j := b.newJob(nil, nil, id)
	state, claim, err := b.ledger.CancelStored(ctx, id, j.owner, tomb, limiter.Allow)
	if err != nil {
		b.log.Warn().Err(err).Str("action_id", id).Msg("a cancel request could not be answered from the records")
		return // no authoritative answer; the requester times out
	}
	if claim != nil { // a parked action: settle it cancelled, through the one way in
		b.serve(ctx, j, func(ctx context.Context) decision {
			return j.runDecided(ctx, kvstore.Outcome{Verdict: kvstore.Run, Claim: claim})
		})
		if j.status != events.StatusCancelled {
			return
		}
	}
	b.replyCancel(m, id, state)
}

func cancelledInfo(uncertain bool, msg string) *events.ErrorInfo {
	return &events.ErrorInfo{Code: "cancelled", Category: "policy", UncertainOutcome: uncertain, Message: msg}
}

// cancelRequested reports whether ctx was cancelled by a cancel request.
func cancelRequested(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errCancelRequested)
}
