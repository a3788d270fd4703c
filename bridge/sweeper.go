package bridge

import (
	"context"
	"sync"
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Approvals (schemas/README.md, "Approvals") are decided by the jobs (bridge/core): an operation that
// needs approval runs at once only with a valid pre-approval; otherwise it is parked
// (its park index entry, its one pending_approval result, its record with the action)
// and a decision on <prefix>.approvals.<id>, consumed by the same durable consumer,
// ends the parking and carries the action on. The sweeper in every replica settles
// expired parked actions approval_expired, also when every bridge was down at expiry,
// and finishes the expiries and cancels of parked actions whose replica stopped half way.

// sweeper expires parked actions and finishes the ones whose expiry or cancel a
// replica left half done. Every replica runs one; compare-and-set on the records makes
// exactly one of them settle each action.
type sweeper struct {
	b *Bridge
	// busy holds the ids a takeover is running for (at most maxTakeovers at once).
	mu   sync.Mutex
	busy map[string]bool
	wg   sync.WaitGroup
}

const maxTakeovers = 4

// sweepEvery is how often the sweeper looks: a tenth of the approval window, between
// 100 ms and 10 s. A parked action settles approval_expired at most sweepEvery after its
// expiry while any replica runs.
func (b *Bridge) sweepEvery() time.Duration {
	return min(max(b.cfg.ApprovalTTL/10, 100*time.Millisecond), 10*time.Second)
}

// run sweeps until ctx ends, then waits for the takeovers it started.
func (s *sweeper) run(ctx context.Context) {
	defer s.wg.Wait()
	t := time.NewTicker(s.b.sweepEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweep(ctx)
		}
	}
}

func (s *sweeper) sweep(ctx context.Context) {
	b := s.b
	keys, err := b.store.Keys(ctx, "park.>")
	if err != nil {
		b.log.Warn().Err(err).Msg("listing parked actions failed")
		return
	}
	for _, k := range keys {
		idx, err := b.store.Get(ctx, k)
		if err != nil || b.now().Before(idx.Record.ExpiresAt) {
			continue
		}
		id := idx.Record.ActionID
		e, err := b.store.Get(ctx, kvstore.ActionKey(id))
		if err != nil {
			// Not found may be a stale read (a direct get answered by a replica that is
			// behind): never drop the index on it. An index whose action record expired
			// expires with it (same bucket TTL).
			continue
		}
		r := e.Record
		if le, err := b.results.Last(ctx, id); err == nil && le.Terminal {
			_ = b.store.Delete(ctx, k, idx.Revision) // settled; the index entry is stale
			continue
		}
		switch {
		case r.State == kvstore.StateParked:
		case r.Decision == kvstore.DecisionExpired || r.Decision == kvstore.DecisionCancel:
			// An expiry or cancel whose replica stopped before settling: no message
			// will come back for it, so the sweeper takes it over (after its lease).
		default:
			continue // parking ended by a decision: the decision's message owns it
		}
		s.start(ctx, id)
	}
}

// start settles action id in its own goroutine (a takeover waits out a lease), unless
// one runs for it already or maxTakeovers do.
func (s *sweeper) start(ctx context.Context, id string) {
	s.mu.Lock()
	if s.busy == nil {
		s.busy = map[string]bool{}
	}
	if s.busy[id] || len(s.busy) >= maxTakeovers {
		s.mu.Unlock()
		return
	}
	s.busy[id] = true
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { s.mu.Lock(); delete(s.busy, id); s.mu.Unlock() }()
		s.b.expire(ctx, id)
	}()
}
