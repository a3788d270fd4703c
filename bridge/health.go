package bridge

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Health errors, matched with errors.Is.
var (
	ErrNotStarted   = errors.New("bridge: not consuming yet")
	ErrDraining     = errors.New("bridge: shutting down")
	ErrDisconnected = errors.New("bridge: not connected to NATS")
)

// healthTTL is how long one JetStream check answers Health.
const healthTTL = time.Second

// healthTimeout bounds the JetStream check.
const healthTimeout = 2 * time.Second

// healthCache remembers the last JetStream check.
type healthCache struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

// Health returns nil when the bridge can take actions: Run has bound the consumer and
// consumes, its context is not done (a shutdown makes Health fail at once), the NATS
// connection is up, and JetStream answers an account info request. The JetStream
// answer is cached for a second, so probes cost at most one request a second; a
// check takes at most two seconds or ctx's deadline.
func (b *Bridge) Health(ctx context.Context) error {
	select {
	case <-b.ready:
	default:
		return ErrNotStarted
	}
	if b.draining.Load() {
		return ErrDraining
	}
	if !b.nc.IsConnected() {
		return ErrDisconnected
	}
	b.health.mu.Lock()
	defer b.health.mu.Unlock()
	if now := time.Now(); now.Sub(b.health.at) >= healthTTL {
		cctx, cancel := context.WithTimeout(ctx, healthTimeout)
		_, err := b.js.AccountInfo(cctx)
		cancel()
		b.health.at, b.health.err = time.Now(), err
	}
	return b.health.err
}
