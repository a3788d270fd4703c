package bridge

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// breaker pauses one endpoint that keeps failing. It is closed until threshold
// consecutive failures; then open for a cooldown, during which no call is made; then
// half-open: one probe call decides whether it closes again or reopens with twice the
// cooldown (bounded by maxCooldown). Safe for concurrent use.
type breaker struct {
	threshold         int
	base, maxCooldown time.Duration

	mu        sync.Mutex
	lastCode  string // code of the last endpoint failure
	failures  int
	cooldown  time.Duration
	openUntil time.Time
	probing   bool
	onOpen    func() // called (under mu) each time the breaker opens; may be nil
}

func newBreaker(threshold int, base, maxCooldown time.Duration) *breaker {
	return &breaker{threshold: threshold, base: base, maxCooldown: maxCooldown, cooldown: base}
}

// allow reports whether a call may go out now. When it may not, wait is how long until
// the endpoint may be tried again. A true answer while half-open makes the caller the
// probe: it must report the outcome with done.
func (b *breaker) allow(now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() {
		return true, 0
	}
	if now.Before(b.openUntil) {
		return false, b.openUntil.Sub(now)
	}
	if b.probing {
		return false, b.base
	}
	b.probing = true
	return true, 0
}

// abandon gives back a permission from allow that was not used: no call was made, so
// nothing is learned about the endpoint (a half-open breaker admits another probe).
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// done records the outcome of a call that allow let through.
func (b *breaker) done(now time.Time, err error) {
	failed := endpointFailure(err)
	b.mu.Lock()
	defer b.mu.Unlock()
	wasProbe := b.probing
	b.probing = false
	if !failed {
		b.failures, b.cooldown, b.openUntil = 0, b.base, time.Time{}
		return
	}
	var he *hermes.Error
	if errors.As(err, &he) {
		b.lastCode = he.Code
	}
	b.failures++
	switch {
	case wasProbe:
		b.cooldown = min(2*b.cooldown, b.maxCooldown)
		b.openUntil = now.Add(b.cooldown)
	case b.failures >= b.threshold && b.openUntil.IsZero():
		b.openUntil = now.Add(b.cooldown)
	default:
		return
	}
	if b.onOpen != nil {
		b.onOpen()
	}
}

// Breaker states, as the breaker state gauge reports them.
const (
	breakerClosed   = 0
	breakerOpen     = 1
	breakerHalfOpen = 2
)

// state is the breaker's state at now: closed, open (no call goes out), or half-open
// (the cooldown is over: the next call is a probe, or one is out).
func (b *breaker) state(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return breakerClosed
	case now.Before(b.openUntil):
		return breakerOpen
	}
	return breakerHalfOpen
}

// pausedFor reports whether the endpoint is paused at now, and for how long.
func (b *breaker) pausedFor(now time.Time) (bool, time.Duration) {
	ok, wait, _ := b.pause(now)
	return ok, wait
}

// pause is pausedFor plus the error code of the failures that caused the pause.
func (b *breaker) pause(now time.Time) (bool, time.Duration, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() || !now.Before(b.openUntil) {
		return false, 0, ""
	}
	return true, b.openUntil.Sub(now), b.lastCode
}

// endpointFailure reports whether err says the endpoint itself is failing: it could
// not be reached or answered 5xx. Rejections, 429 (back-pressure), client-side input
// errors and the caller's own cancellation are not endpoint failures.
func endpointFailure(err error) bool {
	var he *hermes.Error
	if !errors.As(err, &he) {
		return false
	}
	switch he.Code {
	case hermes.CodeTransport:
		return true
	case hermes.CodeRemoteUnavailable:
		return he.HTTPStatus >= http.StatusInternalServerError
	}
	return false
}
