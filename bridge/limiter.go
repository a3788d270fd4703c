package bridge

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// The learned concurrency gate. Hermes admits at most max_concurrent_runs runs (and
// chats) at a time and answers a new one beyond that with 429 rate_limit_exceeded,
// certainly not run. The bridge cannot read that number, so each endpoint learns it:
// its limiter admits at most limit calls at a time, limit in [1, MaxConcurrency]
// (the configured value is the ceiling and the start), and moves it by what Hermes
// admits, in the spirit of TCP congestion control (AIMD):
//
//   - Multiplicative decrease: a gate 429 for a call admitted under the current limit
//     sets limit = max(1, floor(limit*gateBeta)). A burst of 429s from one window
//     counts once: a 429 of a call admitted before the last decrease does not decrease
//     again (one decrease per round trip, as TCP's).
//   - The gate's estimate: at each 429 of the decreasing window (and of the window
//     before it) the limiter notes the calls it holds that Hermes has not refused,
//     other than the refused one (in flight − 1 − already refused); the smallest of
//     them is the estimate of what Hermes admits.
//   - Additive increase: after limit successes (calls Hermes answered without error,
//     a run's post 202) observed while the limit is used (every slot taken or callers
//     waiting), limit grows by one, up to the estimate; beyond the estimate (or the
//     ceiling) only once gateProbeAfter has passed since the last decrease, so that a
//     gate that grew is found again while a steady gate is not probed every few calls
//     (the sawtooth of plain AIMD settles on the gate instead).
//
// Lowering the limit loses no slot: calls in flight end normally, and new ones wait
// until fewer than limit are in flight. Waiters are served in order, each bounded by
// its own context (the action's deadline).
const (
	gateBeta       = 0.7
	gateProbeAfter = 30 * time.Second
)

// limiter is an endpoint's adaptive concurrency limit, safe for concurrent use.
type limiter struct {
	mu          sync.Mutex
	ceiling     int // Endpoint.MaxConcurrency
	limit       int // in [1, ceiling]
	inflight    int // slots held
	refusedHeld int // slots held by calls Hermes refused with a gate 429
	epoch       uint64
	estimate    int // what Hermes admits, learned at the last decrease (0: unknown)
	decreasedAt time.Time
	successes   int // since the limit last changed
	waiters     list.List
	rejections  uint64 // gate 429s seen
	now         func() time.Time
	probeAfter  time.Duration
}

// slot is a held admission of the limiter; its zero value holds none.
type slot struct {
	held    bool
	epoch   uint64 // the limiter's epoch when it was taken
	refused bool   // its call was refused by the gate
}

type limitWaiter struct {
	ready chan struct{}
	s     slot
}

func newLimiter(ceiling int) *limiter {
	ceiling = max(ceiling, 1)
	return &limiter{ceiling: ceiling, limit: ceiling, now: time.Now, probeAfter: gateProbeAfter}
}

// tryAcquire takes a slot if one is free under the limit and nobody waits for one.
func (l *limiter) tryAcquire() (slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight < l.limit && l.waiters.Len() == 0 {
		l.inflight++
		return slot{held: true, epoch: l.epoch}, true
	}
	return slot{}, false
}

// acquire waits, in order, for a slot under the limit until ctx ends.
func (l *limiter) acquire(ctx context.Context) (slot, error) {
	if s, ok := l.tryAcquire(); ok {
		return s, nil
	}
	l.mu.Lock()
	w := &limitWaiter{ready: make(chan struct{})}
	e := l.waiters.PushBack(w)
	l.grantLocked() // the limit may have moved since tryAcquire
	l.mu.Unlock()
	select {
	case <-w.ready:
		return w.s, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	select {
	case <-w.ready: // granted meanwhile: give it back
		l.releaseLocked(&w.s)
	default:
		l.waiters.Remove(e)
	}
	l.mu.Unlock()
	return slot{}, ctx.Err()
}

// grantLocked hands free slots to the waiters in order.
func (l *limiter) grantLocked() {
	for l.inflight < l.limit && l.waiters.Len() > 0 {
		w := l.waiters.Remove(l.waiters.Front()).(*limitWaiter)
		l.inflight++
		w.s = slot{held: true, epoch: l.epoch}
		close(w.ready)
	}
}

// release gives s back (once; a slot not held is ignored).
func (l *limiter) release(s *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(s)
}

func (l *limiter) releaseLocked(s *slot) {
	if !s.held {
		return
	}
	s.held = false
	l.inflight--
	if s.refused {
		l.refusedHeld--
	}
	l.grantLocked()
}

// succeeded records that Hermes admitted the call under s (additive increase).
func (l *limiter) succeeded(s *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.held && s.refused { // a run posted again under the same slot, admitted this time
		s.refused = false
		l.refusedHeld--
	}
	if !s.held || (l.inflight < l.limit && l.waiters.Len() == 0) {
		return // the limit is not being used: a success says nothing about it
	}
	l.successes++
	if l.successes < l.limit || l.limit >= l.ceiling {
		return
	}
	if l.estimate > 0 && l.limit >= l.estimate && l.now().Sub(l.decreasedAt) < l.probeAfter {
		return // at the learned gate: probe beyond it only now and then
	}
	l.limit++
	l.successes = 0
	l.grantLocked()
}

// refused records that Hermes's gate refused the call under s (429, not run):
// multiplicative decrease, once per window.
func (l *limiter) refused(s *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rejections++
	if !s.held || s.refused {
		return
	}
	s.refused = true
	l.refusedHeld++
	est := max(l.inflight-l.refusedHeld, 1) // held calls Hermes has not refused, without this one
	switch s.epoch {
	case l.epoch:
		l.limit = max(1, int(float64(l.limit)*gateBeta))
		l.epoch++
		l.estimate = est
		l.decreasedAt = l.now()
		l.successes = 0
	case l.epoch - 1:
		l.estimate = min(l.estimate, est)
	}
}

// current returns the limit.
func (l *limiter) current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// gateRejections returns the count of gate 429s seen.
func (l *limiter) gateRejections() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rejections
}
