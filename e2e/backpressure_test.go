package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestEndpointConcurrencyUnderGate: an endpoint limited to 3 calls at a time in front of a
// Hermes whose gate admits 3 runs: 12 slow chats all complete, Hermes never has more than 3
// runs in flight (and does reach 3), and it never answers 429 (every chat is sent once).
func TestEndpointConcurrencyUnderGate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent), hermestest.WithMaxConcurrentRuns(3)),
		withConfig(func(c *bridge.Config) { c.Endpoints[0].MaxConcurrency = 3 }))

	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if n := int64(h.fake.InFlight()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	const n = 12
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.publish("chat", events.Action{Input: mustJSON(t, fmt.Sprintf(`{"prompt":"slow: gated %d"}`, i))})
	}
	for i, id := range ids {
		res := h.followOK(id)
		if got, want := jstr(output(t, res), "choices", 0, "message", "content"), fmt.Sprintf("stub reply: slow: gated %d", i); got != want {
			t.Errorf("%s: content %q, want %q", id, got, want)
		}
	}
	close(stop)
	wg.Wait()
	h.waitIdle(10 * time.Second)

	wantEq(t, peak.Load(), 3, "peak runs in flight at Hermes %d, want 3 (the endpoint's limit, fully used)")
	if c := h.fake.Calls("chat"); c != n {
		t.Errorf("%d chat requests for %d actions: Hermes's gate answered %d times with 429", c, n, c-n)
	}
	for _, l := range h.logLines() {
		if l.str("message") == "action" && l.str("status") == "retrying" {
			t.Errorf("action %s was retried (%s): the bridge went past Hermes's gate", l.str("action_id"), l.str("code"))
		}
	}
	for _, id := range ids {
		if r := h.results(id); r != 1 {
			t.Errorf("%s: %d result messages, want 1", id, r)
		}
	}
}

// TestCircuitBreakerIsolatesEndpoint: endpoint "a" answers 500 to every models call; after
// BreakerThreshold failures it is paused, its actions wait (bounded calls: one probe per
// cooldown, not one call per delivery), while endpoint "primary" keeps serving promptly.
// When "a" recovers, its waiting actions complete.
func TestCircuitBreakerIsolatesEndpoint(t *testing.T) {
	t.Parallel()
	fakeA := hermestest.NewServer()
	t.Cleanup(fakeA.Close)
	keyA := fakeA.APIKey()
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.BreakerThreshold = 3
		c.BreakerCooldown = 300 * time.Millisecond
		c.BreakerMaxCooldown = 600 * time.Millisecond
		c.MaxAttempts = 1000 // the breaker, not the attempt budget, bounds the calls here
		c.Endpoints = append(c.Endpoints, bridge.Endpoint{ID: "a", BaseURL: fakeA.URL,
			Key: func() string { return keyA }, MaxConcurrency: 2})
	}))
	fakeA.InjectFault(hermestest.Fault{Route: "models", Status: 500, Times: 1 << 20})

	const na = 4
	var idsA []string
	for i := 0; i < na; i++ {
		idsA = append(idsA, h.publishTo("a", "models", events.Action{Input: mustJSON(t, `{}`), TimeoutMS: bpInt64(60000)}))
	}
	// Wait until the endpoint is paused: an action of "a" logged as waiting for it.
	h.eventually(10*time.Second, func() error {
		for _, id := range idsA {
			for _, l := range h.actionLogs(id) {
				if l.str("status") == "paused" {
					return nil
				}
			}
		}
		return fmt.Errorf("no action of endpoint a paused yet (%d calls)", fakeA.Calls("models"))
	})

	// While "a" is paused, "primary" serves promptly, and "a" sees few calls.
	window := time.Now()
	callsA := fakeA.Calls("models")
	for i := 0; i < 10; i++ {
		start := time.Now()
		h.callOK("chat", fmt.Sprintf(`{"prompt":"while a is paused %d"}`, i))
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a chat on the healthy endpoint took %s while the other endpoint is paused", d)
		}
	}
	if d := time.Until(window.Add(1500 * time.Millisecond)); d > 0 {
		time.Sleep(d) // a fixed observation window: the calls "a" gets in it are counted
	}
	elapsed := time.Since(window)
	probes := fakeA.Calls("models") - callsA
	t.Logf("paused endpoint: %d calls in %s", probes, elapsed.Round(time.Millisecond))
	// One probe per cooldown (300ms, then 600ms): about 3 in 1.5s. Without the breaker the
	// 4 actions would retry every 10-200ms: dozens of calls.
	if limit := int(elapsed/(300*time.Millisecond)) + 2; probes > limit {
		t.Errorf("paused endpoint got %d calls in %s, want at most %d (one probe per cooldown)", probes, elapsed.Round(time.Millisecond), limit)
	}
	for _, id := range idsA {
		if n := h.results(id); n != 0 {
			t.Errorf("%s settled (%d results) while its endpoint is paused and its deadline is far", id, n)
		}
	}

	// Recovery: the next probe succeeds and every waiting action completes.
	fakeA.ClearFaults()
	recovered := time.Now()
	for _, id := range idsA {
		h.followOK(id)
	}
	if d := time.Since(recovered); d > 5*time.Second {
		t.Errorf("the waiting actions completed %s after the endpoint recovered", d)
	}
	h.requireResults(1, 10*time.Second, idsA...)
}

// TestMaxAttemptsExhausted: a safe read that keeps failing with 500 is called exactly
// MaxAttempts times, with exponential backoff between calls (not a hot loop), and settles
// failed remote_unavailable, retryable and certain.
func TestMaxAttemptsExhausted(t *testing.T) {
	t.Parallel()
	const base = 200 * time.Millisecond
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.MaxAttempts = 3
		c.RetryBase = base
		c.RetryMax = 2 * time.Second
	}))
	h.fake.InjectFault(hermestest.Fault{Route: "models", Status: 500, Times: 1000})
	res, _ := h.call("models", `{}`)
	e := requireFailed(t, res, "remote_unavailable")
	if !e.Retryable || e.UncertainOutcome || e.HTTPStatus != 500 {
		t.Errorf("error %s, want 500, retryable, certain", errString(e))
	}
	h.waitIdle(10 * time.Second)
	rs := h.requests("models")
	requireEq(t, len(rs), 3, "%d calls, want MaxAttempts = 3")
	// Full jitter over base<<(attempt-1): the first wait is in [base/2, base], the second
	// in [base, 2*base].
	if g := rs[1].Time.Sub(rs[0].Time); g < base/2 {
		t.Errorf("first retry after %s, want at least %s", g, base/2)
	}
	if g := rs[2].Time.Sub(rs[1].Time); g < base {
		t.Errorf("second retry after %s, want at least %s (exponential)", g, base)
	}
	wantEq(t, h.results(res.ActionID), 1, "%d result messages, want 1")
	lines := h.actionLogs(res.ActionID)
	if len(lines) != 3 || lines[2]["attempt"] != 3.0 || lines[2].str("decision") != "ack" {
		t.Errorf("action log lines %v, want 2 retries then attempt 3 acknowledged", lines)
	}
}

// TestMaxDeliverExhausted: with a finite consumer MaxDeliver below MaxAttempts, the last
// delivery still settles the action with its terminal result instead of leaving it
// without one (schemas/README.md, "Hermes faults: what each one ends with": every action ends with exactly one terminal result).
func TestMaxDeliverExhausted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.MaxDeliver = 2
		c.MaxAttempts = 5
	}))
	h.fake.InjectFault(hermestest.Fault{Route: "models", Status: 500, Times: 1000})
	id := h.publish("models", events.Action{Input: mustJSON(t, `{}`), TimeoutMS: bpInt64(20000)})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	res, err := h.client.Follow(ctx, id, nil, nil)
	if err != nil {
		t.Fatalf("no terminal result within 8s (%d calls, log %v): %v", h.fake.Calls("models"), h.actionLogs(id), err)
	}
	e := requireFailed(t, res, "remote_unavailable")
	if e.UncertainOutcome {
		t.Errorf("error %s: a safe read is certain", errString(e))
	}
	wantEq(t, h.fake.Calls("models"), 2, "%d calls, want 2 (one per delivery)")
	wantEq(t, h.results(id), 1, "%d result messages, want 1")
}

func bpInt64(v int64) *int64 { return &v }
