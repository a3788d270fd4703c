package bridge

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// breaker is an endpoint's circuit breaker (core.Breaker, whose doc says how it
// pauses an endpoint that keeps failing), safe for concurrent use.
type breaker struct {
	mu     sync.Mutex
	b      core.Breaker
	onOpen func() // called (under mu) each time the breaker opens; may be nil
}

func newBreaker(threshold int, base, maxCooldown time.Duration) *breaker {
	return &breaker{b: core.Breaker{Threshold: threshold, Base: base, MaxCooldown: maxCooldown}}
}

// allow reports whether a call may go out now (core.Breaker.Allow).
func (b *breaker) allow(now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Allow(now)
}

// abandon gives back a permission from allow that was not used.
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Abandon()
}

// done records the outcome of a call that allow let through.
func (b *breaker) done(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Done(now, endpointFailure(err), errorCode(err)) && b.onOpen != nil {
		b.onOpen()
	}
}

// state is the breaker's state at now (core.Breaker*), for the state gauge.
func (b *breaker) state(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.State(now)
}

// pause reports whether the endpoint is paused at now, for how long, and the error
// code of the failures that caused the pause.
func (b *breaker) pause(now time.Time) (bool, time.Duration, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wait, code := b.b.Pause(now)
	return wait > 0, wait, code
}

// endpointFailure reports whether err says the endpoint itself is failing: it could
// not be reached or answered 5xx. Rejections, 429 (back-pressure), client-side input
// errors and the caller's own cancellation are not endpoint failures.
func endpointFailure(err error) bool {
	he, ok := errors.AsType[*hermes.Error](err)
	if !ok {
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
