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
	until    time.Time  // the answer (caps or err) is reused until then
	inflight *capsFetch // the read in flight; nil when none
}

// capsFetch is one read of the capabilities; caps and err are set before done is closed.
type capsFetch struct {
	done chan struct{}
	caps *Capabilities
	err  error
}

// Capabilities returns the endpoint's capabilities (GET /v1/capabilities, parsed), read at
// most DefaultCapabilitiesTTL (WithCapabilitiesTTL) ago: it is the one entry point every
// reader of the endpoint's capabilities uses. At most one read is in flight per client;
// concurrent callers wait for it and get its answer (each bounded by its own ctx), and
// every read is bounded by CapabilitiesFetchTimeout, independently of the caller that
// started it. A failed read is reused for at most a second, so a caller that comes later
// asks again. The returned value is shared: callers must not modify it.
func (c *Client) Capabilities(ctx context.Context) (*Capabilities, error) {
	cc := c.caps
	cc.mu.Lock()
	if (cc.caps != nil || cc.err != nil) && time.Now().Before(cc.until) {
		caps, err := cc.caps, cc.err
		cc.mu.Unlock()
		return caps, err
	}
	f := cc.inflight
	if f == nil {
		f = &capsFetch{done: make(chan struct{})}
		cc.inflight = f
		go c.fetchCapabilities(f)
	}
	cc.mu.Unlock()
	select {
	case <-f.done:
		return f.caps, f.err
	case <-ctx.Done():
		return nil, transportError(ctx, "capabilities", ctx.Err(), 0)
	}
}

// fetchCapabilities carries out the read f, stores its answer and closes f.done.
func (c *Client) fetchCapabilities(f *capsFetch) {
	ctx, cancel := context.WithTimeout(context.Background(), CapabilitiesFetchTimeout)
	defer cancel()
	res, err := c.Call(ctx, Request{Operation: "capabilities"}, nil)
	if err == nil {
		f.caps, err = ParseCapabilities(res.Output)
	}
	f.err = err
	cc := c.caps
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.caps, cc.err = f.caps, f.err
	ttl := c.o.capsTTL
	if err != nil {
		ttl = min(ttl, capsErrorTTL)
	}
	cc.until = time.Now().Add(ttl)
	cc.inflight = nil
	close(f.done)
}
