package sim

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// origin is simulated time zero: every world starts its clock here.
var origin = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// sched is the world's only clock and its only source of randomness: a queue of
// closures ordered by (time, insertion sequence), and one PCG source seeded by the
// seed. Nothing else in the world reads a clock, starts a goroutine or draws a random
// number, so a seed replays bit for bit.
type sched struct {
	now    time.Time
	seq    uint64
	q      eventHeap
	rnd    *rand.Rand
	events int // closures run so far
}

func newSched(seed uint64) sched {
	return sched{now: origin, rnd: rand.New(rand.NewPCG(seed, 0x5eed5eed))}
}

// event is one scheduled closure.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*h = old[:len(old)-1]
	return e
}

// at schedules fn at t (at now if t is in the past); closures scheduled for the same
// time run in the order they were scheduled.
func (s *sched) at(t time.Time, fn func()) {
	if t.Before(s.now) {
		t = s.now
	}
	s.seq++
	heap.Push(&s.q, event{at: t, seq: s.seq, fn: fn})
}

// after schedules fn d from now.
func (s *sched) after(d time.Duration, fn func()) { s.at(s.now.Add(d), fn) }

// next runs the earliest closure, advancing the clock to its time, unless it is later
// than limit. It reports whether it ran one.
func (s *sched) next(limit time.Time) bool {
	if len(s.q) == 0 || s.q[0].at.After(limit) {
		return false
	}
	e := heap.Pop(&s.q).(event)
	s.now = e.at
	s.events++
	e.fn()
	return true
}

// chance reports true with probability p.
func (s *sched) chance(p float64) bool { return p > 0 && s.rnd.Float64() < p }

// intN is a uniform draw in [0, n).
func (s *sched) intN(n int) int { return s.rnd.IntN(n) }

// between is a uniform duration in [lo, hi], at millisecond resolution.
func (s *sched) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rnd.Int64N(int64((hi-lo)/time.Millisecond)+1))*time.Millisecond
}

// pick returns one of xs at random.
func pick[T any](s *sched, xs ...T) T { return xs[s.intN(len(xs))] }

// rel is t relative to the origin, for traces.
func rel(t time.Time) time.Duration { return t.Sub(origin) }
