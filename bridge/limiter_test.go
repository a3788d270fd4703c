package bridge

import (
	"context"
	"sync"
	"testing"
	"time"
)

func take(t *testing.T, l *limiter, n int) []slot {
	t.Helper()
	s := make([]slot, n)
	for i := range s {
		var ok bool
		if s[i], ok = l.tryAcquire(); !ok {
			t.Fatalf("slot %d of %d not admitted (limit %d)", i+1, n, l.current())
		}
	}
	return s
}

// TestLimiterDecreaseOncePerWindow: a burst of 429s from calls admitted under one limit
// decreases it once (×0.7), learns the gate from the calls not refused, and a 429 of a
// call admitted after the decrease decreases it again.
func TestLimiterDecreaseOncePerWindow(t *testing.T) {
	l := newLimiter(14)
	s := take(t, l, 14)
	if _, ok := l.tryAcquire(); ok {
		t.Fatal("a 15th slot under a limit of 14")
	}
	for i := 10; i < 14; i++ {
		l.refused(&s[i])
	}
	if got := l.current(); got != 9 {
		t.Fatalf("limit %d after one window of 4 refusals from 14, want 9 (floor(14*0.7))", got)
	}
	if l.estimate != 10 {
		t.Errorf("gate estimate %d, want 10 (the calls not refused)", l.estimate)
	}
	if got := l.gateRejections(); got != 4 {
		t.Errorf("rejections %d, want 4", got)
	}
	for i := range s {
		l.release(&s[i])
	}
	n := take(t, l, 9)
	l.refused(&n[0])
	if got := l.current(); got != 6 {
		t.Errorf("limit %d after a refusal in the next window, want 6", got)
	}
}

// TestLimiterFloorAndCeiling: the limit never goes below 1 nor above the configured ceiling.
func TestLimiterFloorAndCeiling(t *testing.T) {
	l := newLimiter(2)
	for range 5 {
		s := take(t, l, 1)
		l.refused(&s[0])
		l.release(&s[0])
	}
	if got := l.current(); got != 1 {
		t.Fatalf("limit %d after repeated refusals, want the floor 1", got)
	}
	l.probeAfter = 0
	for range 50 {
		s := take(t, l, l.current())
		for i := range s {
			l.succeeded(&s[i])
		}
		for i := range s {
			l.release(&s[i])
		}
	}
	if got := l.current(); got != 2 {
		t.Errorf("limit %d after many successes, want the ceiling 2", got)
	}
}

// TestLimiterAdditiveIncrease: +1 per limit successes while the limit is used, up to the
// learned gate; beyond it only after probeAfter; never while the limit is not used.
func TestLimiterAdditiveIncrease(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(20)
	l.now = func() time.Time { return now }
	s := take(t, l, 20)
	for i := 12; i < 20; i++ {
		l.refused(&s[i]) // estimate 12, limit 14
	}
	for i := range s {
		l.release(&s[i])
	}
	if l.current() != 14 || l.estimate != 12 {
		t.Fatalf("limit %d estimate %d, want 14 and 12", l.current(), l.estimate)
	}
	// Idle successes (the limit not used) change nothing.
	one := take(t, l, 1)
	for range 100 {
		l.succeeded(&one[0])
	}
	l.release(&one[0])
	if got := l.current(); got != 14 {
		t.Fatalf("limit %d after successes with the limit unused, want 14", got)
	}
	full := func() {
		s := take(t, l, l.current())
		for i := range s {
			l.succeeded(&s[i])
		}
		for i := range s {
			l.release(&s[i])
		}
	}
	full()
	if got := l.current(); got != 14 {
		t.Fatalf("limit %d: above the learned gate 12 no increase before probeAfter, want 14", got)
	}
	now = now.Add(gateProbeAfter)
	full()
	if got := l.current(); got != 15 {
		t.Fatalf("limit %d after %d successes past probeAfter, want 15", got, 14)
	}
	// Below the estimate it grows by one per limit successes.
	l2 := newLimiter(10)
	s2 := take(t, l2, 10)
	for i := 9; i < 10; i++ {
		l2.refused(&s2[i]) // estimate 9, limit 7
	}
	for i := range s2 {
		l2.release(&s2[i])
	}
	for want := 8; want <= 9; want++ {
		s := take(t, l2, l2.current())
		for i := range s {
			l2.succeeded(&s[i])
		}
		for i := range s {
			l2.release(&s[i])
		}
		if got := l2.current(); got != want {
			t.Fatalf("limit %d, want %d", got, want)
		}
	}
}

// TestLimiterWaitersAndLowering: lowering the limit loses no slot; waiters are served in
// order as slots free under the new limit, and a waiter whose context ends leaves.
func TestLimiterWaitersAndLowering(t *testing.T) {
	l := newLimiter(4)
	s := take(t, l, 4)
	l.refused(&s[0]) // limit 2, 4 held
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := l.acquire(ctx); err == nil {
		t.Fatal("admitted with 4 held under a limit of 2")
	}
	cancel()
	got := make(chan slot, 1)
	go func() {
		s, err := l.acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	l.release(&s[0])
	l.release(&s[1])
	l.release(&s[2]) // 1 held: the waiter gets a slot
	select {
	case w := <-got:
		l.release(&w)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not admitted after the slots were given back")
	}
	l.succeeded(&s[3])
	l.refused(&s[3]) // a run posted again under its slot: refused, then admitted
	l.succeeded(&s[3])
	if l.refusedHeld != 0 {
		t.Errorf("refusedHeld %d after the refused slot's call was admitted, want 0", l.refusedHeld)
	}
	l.release(&s[3])
	l.release(&s[3]) // twice: ignored
	if l.inflight != 0 || l.refusedHeld != 0 {
		t.Errorf("inflight %d refusedHeld %d, want 0 0", l.inflight, l.refusedHeld)
	}
}

// TestLimiterConcurrent: many goroutines acquiring, succeeding, being refused and
// releasing never hold more than the limit allows (checked under -race).
func TestLimiterConcurrent(t *testing.T) {
	l := newLimiter(8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held, peak := 0, 0
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				s, err := l.acquire(ctx)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				held++
				peak = max(peak, held)
				mu.Unlock()
				if (g+i)%17 == 0 {
					l.refused(&s)
				} else {
					l.succeeded(&s)
				}
				mu.Lock()
				held--
				mu.Unlock()
				l.release(&s)
			}
		}()
	}
	wg.Wait()
	if peak > 8 {
		t.Errorf("peak %d slots held, above the ceiling 8", peak)
	}
	if lim := l.current(); lim < 1 || lim > 8 || l.inflight != 0 || l.waiters.Len() != 0 {
		t.Errorf("limit %d inflight %d waiters %d", lim, l.inflight, l.waiters.Len())
	}
}
