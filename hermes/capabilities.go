package hermes

import (
	"context"
	"sync"
	"time"
)

// Capabilities caching. An endpoint's capabilities decide how the bridge treats its runs
// (durable runs idempotency, steer): they are read from GET /v1/capabilities, and kept for
// a bounded time so that an endpoint upgraded under a running client is noticed without a
// restart.
const (
	// DefaultCapabilitiesTTL is how long Capabilities reuses an answer it read.
	DefaultCapabilitiesTTL = 30 * time.Second
	// capsErrorTTL bounds how long a failed read is answered again without asking (at
	// most the TTL): a burst of callers shares one failure, and the next read asks again.
	capsErrorTTL = time.Second
	// CapabilitiesFetchTimeout bounds every read of /v1/capabilities, whatever the
	// callers' contexts allow.
	CapabilitiesFetchTimeout = 10 * time.Second
)

// capsCache holds the last capabilities read, with at most one read in flight.
type capsCache struct {
	mu       sync.Mutex
	caps     *Capabilities
	err      error
	until    time.Time     // the answer (caps or err) is reused until then
	inflight chan struct{} // closed when the read in flight ends; nil when none
}

// Capabilities returns the endpoint's capabilities (GET /v1/capabilities, parsed), read at
// most DefaultCapabilitiesTTL (WithCapabilitiesTTL) ago: it is the one entry point every
// reader of the endpoint's capabilities uses. At most one read is in flight per client;
// concurrent callers wait for it (each bounded by its own ctx), and every read is bounded by
// CapabilitiesFetchTimeout, independently of the caller that started it. A failed read is
// reused for at most a second, so a caller that comes later asks again. The returned value
// is shared: callers must not modify it.
func (c *Client) Capabilities(ctx context.Context) (*Capabilities, error) {
	cc := c.caps
	for {
		cc.mu.Lock()
		now := time.Now()
		if (cc.caps != nil || cc.err != nil) && now.Before(cc.until) {
			caps, err := cc.caps, cc.err
			cc.mu.Unlock()
			return caps, err
		}
		ch := cc.inflight
		if ch == nil {
			ch = make(chan struct{})
			cc.inflight = ch
			go c.fetchCapabilities(ch)
		}
		cc.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, transportError(ctx, "capabilities", ctx.Err(), 0)
		}
	}
}

// fetchCapabilities reads the capabilities once, stores the answer and closes done.
func (c *Client) fetchCapabilities(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), CapabilitiesFetchTimeout)
	defer cancel()
	var caps *Capabilities
	res, err := c.Call(ctx, Request{Operation: "capabilities"}, nil)
	if err == nil {
		caps, err = ParseCapabilities(res.Output)
	}
	cc := c.caps
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.caps, cc.err = caps, err
	ttl := c.o.capsTTL
	if err != nil {
		ttl = min(ttl, capsErrorTTL)
	}
	cc.until = time.Now().Add(ttl)
	cc.inflight = nil
	close(done)
}
