package bridge

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// Cancellation (schemas/README.md, "Cancellation and deadlines"). A request on <prefix>.cancel.<id> reaches every replica
// twice: every replica hears it on a plain subscription and answers only if it is
// running the action (it cancels the job's context and replies "cancelled"); one replica
// also hears it on a queue subscription and answers from its own jobs as the plain
// subscription does (the two run in different goroutines, and the job may end between
// them; a replica sends one answer per request), else from the records
// (a KindCancel job, bridge/core): "already_settled"; "cancelled" for a parked action
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

const (
	cancelWorkers  = 8
	cancelQueue    = 1024
	tombstoneBurst = 1000
)

// tombstoneRate is the sustained rate of stored cancels for unknown ids: 1,000 a minute.
var tombstoneRate = rate.Every(60 * time.Millisecond)

// registry holds the jobs this replica runs, by action id, for cancel requests.
type registry struct {
	mu   sync.Mutex
	jobs map[string][]*driver
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

// register records d as running until unregister.
func (b *Bridge) register(d *driver) {
	b.inflight.mu.Lock()
	defer b.inflight.mu.Unlock()
	if b.inflight.jobs == nil {
		b.inflight.jobs = map[string][]*driver{}
	}
	b.inflight.jobs[d.id] = append(b.inflight.jobs[d.id], d)
}

// unregister takes d off the registry.
func (b *Bridge) unregister(d *driver) {
	b.inflight.mu.Lock()
	defer b.inflight.mu.Unlock()
	list := slices.DeleteFunc(b.inflight.jobs[d.id], func(x *driver) bool { return x == d })
	if len(list) == 0 {
		delete(b.inflight.jobs, d.id)
	} else {
		b.inflight.jobs[d.id] = list
	}
}

// drivers returns the jobs of id running here (all of them when id is "").
func (b *Bridge) drivers(id string) []*driver {
	b.inflight.mu.Lock()
	defer b.inflight.mu.Unlock()
	if id != "" {
		return slices.Clone(b.inflight.jobs[id])
	}
	return slices.Concat(slices.Collect(maps.Values(b.inflight.jobs))...)
}

// cancelLocal passes a cancel request to this replica's jobs of id. It returns the
// state to answer, or "" when none of them answers (none runs here, or the records
// answer: a parking, or a delivery waiting for another one).
func (b *Bridge) cancelLocal(id string) string {
	state := ""
	for _, d := range b.drivers(id) {
		if d.kind == core.KindCancel || d.kind == core.KindExpire {
			continue
		}
		switch s := d.cancelRequest(); {
		case s == events.CancelCancelled:
			state = s
		case s != "" && state == "":
			state = s
		}
	}
	return state
}

// cancelRequest steps a cancel request and returns the job's answer ("" for none).
func (d *driver) cancelRequest() string {
	d.replyMu.Lock()
	defer d.replyMu.Unlock()
	state := ""
	d.onReply = func(s string) { state = s }
	d.deliver(core.Event{Kind: core.EvCancel}, false)
	d.onReply = nil
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
	limiter := rate.NewLimiter(tombstoneRate, tombstoneBurst)
	stopStored, err := b.subscribeStored(ctx, "cancel", b.subjects.AllCancel(), b.cfg.Consumer+"-cancel",
		cancelQueue, cancelWorkers, func(ctx context.Context, m *nats.Msg) { b.cancelFromStore(ctx, m, limiter) })
	if err != nil {
		_ = owner.Unsubscribe()
		return nil, err
	}
	return func() {
		_ = owner.Unsubscribe()
		stopStored()
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
	d := b.newDriver(core.KindCancel, id, nil, nil)
	d.onReply = func(state string) {
		if state == events.CancelUnknown {
			limiter.Allow() // a cancelled result was stored for an unknown id (or none was allowed)
		}
		b.replyCancel(m, id, state)
	}
	d.run(ctx, &core.Start{Kind: core.KindCancel, Action: &core.Action{ID: id}, AllowTombstone: limiter.Tokens() >= 1})
}
