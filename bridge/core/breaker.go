package core

import "time"

// Breaker pauses one endpoint that keeps failing. It is closed until Threshold
// consecutive endpoint failures; then open for a cooldown (Base at first), during which
// no call is made; then half-open: one probe call decides whether it closes again or
// reopens with twice the cooldown (bounded by MaxCooldown). It reads no clock (every
// method takes now) and is not safe for concurrent use: the bridge guards it with a
// mutex, the simulator runs it on its scheduler.
type Breaker struct {
	Threshold         int
	Base, MaxCooldown time.Duration

	lastCode  string // code of the last endpoint failure
	failures  int
	cooldown  time.Duration
	openUntil time.Time
	probing   bool
}

// Allow reports whether a call may go out at now. When it may not, wait is how long
// until the endpoint may be tried again. A true answer while half-open makes the
// caller the probe: it must report the outcome with Done (or Abandon).
func (b *Breaker) Allow(now time.Time) (ok bool, wait time.Duration) {
	if b.openUntil.IsZero() {
		return true, 0
	}
	if now.Before(b.openUntil) {
		return false, b.openUntil.Sub(now)
	}
	if b.probing {
		return false, b.Base
	}
	b.probing = true
	return true, 0
}

// Abandon gives back a permission from Allow that no call used: nothing is learned
// about the endpoint (a half-open breaker admits another probe).
func (b *Breaker) Abandon() { b.probing = false }

// Done records how a call that Allow let through went: failed says that the endpoint
// itself failed (unreachable, or 5xx), code is that failure's error code. It reports
// whether the breaker opened (or reopened) because of it.
func (b *Breaker) Done(now time.Time, failed bool, code string) (opened bool) {
	wasProbe := b.probing
	b.probing = false
	if b.cooldown == 0 {
		b.cooldown = b.Base
	}
	if !failed {
		b.failures, b.cooldown, b.openUntil = 0, b.Base, time.Time{}
		return false
	}
	b.lastCode = code
	b.failures++
	switch {
	case wasProbe:
		b.cooldown = min(2*b.cooldown, b.MaxCooldown)
	case b.failures >= b.Threshold && b.openUntil.IsZero():
	default:
		return false
	}
	b.openUntil = now.Add(b.cooldown)
	return true
}

// Pause reports how long the breaker still holds the endpoint at now (0: not paused)
// and the error code of the failures that caused the pause.
func (b *Breaker) Pause(now time.Time) (time.Duration, string) {
	if b.openUntil.IsZero() || !now.Before(b.openUntil) {
		return 0, ""
	}
	return b.openUntil.Sub(now), b.lastCode
}

// Breaker states, as State reports them.
const (
	BreakerClosed   = 0
	BreakerOpen     = 1 // no call goes out
	BreakerHalfOpen = 2 // the cooldown is over: the next call is a probe, or one is out
)

// State is the breaker's state at now.
func (b *Breaker) State(now time.Time) int {
	switch {
	case b.openUntil.IsZero():
		return BreakerClosed
	case now.Before(b.openUntil):
		return BreakerOpen
	}
	return BreakerHalfOpen
}
