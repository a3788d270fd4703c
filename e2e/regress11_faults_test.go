package e2e_test

// Black-box regression tests for findings of issue 11 (2, 5, 7, 10 and 11). Each one
// states what the contract requires. They run one at a time (no t.Parallel): they
// measure latency or count goroutines, which other tests running alongside would
// disturb.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// followBy follows an action until its terminal result or the deadline (see terminalWithin).
func (h *harness) followBy(id string, deadline time.Time) (*events.Result, error) {
	return h.terminalWithin(id, time.Until(deadline))
}

// requireReplaysOf fails unless every action of dups completes, by deadline, as a
// replay of original.
func (h *harness) requireReplaysOf(dups []string, original string, deadline time.Time) {
	h.t.Helper()
	for _, id := range dups {
		r, err := h.followBy(id, deadline)
		if err != nil {
			h.t.Errorf("follow duplicate %s: %v", id, err)
			continue
		}
		requireReplayOf(h.t, r, original)
	}
}

// requireReplayOf fails unless r completed as a replay of original.
func requireReplayOf(t *testing.T, r *events.Result, original string) {
	t.Helper()
	if r.Status != events.StatusCompleted || r.ReplayOf == nil || *r.ReplayOf != original {
		t.Errorf("duplicate %s: status %q replay_of %v error %s; want completed, replay_of %q",
			r.ActionID, r.Status, r.ReplayOf, errString(r.Error), original)
	}
}

// TestRegress11KeyOutlivesLongAction (finding 2): an idempotency key must be remembered
// for as long as its action runs, however long that is compared with the bucket TTL:
// a duplicate that arrives after the TTL has passed since the key was claimed, while the
// original still runs, must wait for it and replay it, not call Hermes again.
//
// The TTL of the records bucket (which holds the keys) is cut to 3 s directly on the
// server (the bridge refuses a TTL under a minute) and the bridge binds to it without
// provisioning; the original takes 8 s, the duplicates come at 2 s and 5 s.
func TestRegress11KeyOutlivesLongAction(t *testing.T) {
	h := newHarness(t, withFake(hermestest.WithAgent(killAgent)))
	h.stopBridge(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := h.cfg.WithDefaults()
	h.setBucketTTL(ctx, cfg.Bucket, 3*time.Second)
	h.cfg.Provision = false
	h.cfg.AckWait = 3 * time.Second
	h.cfg.Heartbeat = time.Second
	h.startBridge()

	const in = `{"prompt":"wait8000: a long action"}`
	start := time.Now()
	original := h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: "long-key"})
	h.waitCalls("chat", 1)
	var dups []string
	for _, at := range []time.Duration{2 * time.Second, 5 * time.Second} {
		time.Sleep(time.Until(start.Add(at)))
		dups = append(dups, h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: "long-key"}))
	}
	deadline := start.Add(30 * time.Second)
	res, err := h.followBy(original, deadline)
	requireOK(t, err, "follow the original: %v")
	requireCompleted(t, res)
	h.requireReplaysOf(dups, original, deadline)
	wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want exactly 1: the key's record expired while its action ran (bucket TTL 3s, action 8s) and a duplicate called Hermes again")
}

// setBucketTTL sets the TTL of KV bucket b directly on the server (the bridge refuses a
// TTL under a minute; a test that needs one binds without provisioning).
func (h *harness) setBucketTTL(ctx context.Context, b string, ttl time.Duration) {
	h.t.Helper()
	s, err := h.js.Stream(ctx, "KV_"+b)
	requireOK(h.t, err)
	sc := s.CachedInfo().Config
	sc.MaxAge, sc.Duplicates = ttl, min(sc.Duplicates, ttl)
	if _, err := h.js.UpdateStream(ctx, sc); err != nil {
		h.t.Fatalf("set the TTL of bucket %s: %v", b, err)
	}
}

// TestRegress11DuplicatesDoNotHoldWorkers (finding 5): duplicates waiting for an
// original in flight must not occupy the replica's workers: an unrelated action queued
// behind six of them runs at once instead of waiting for the slow original.
func TestRegress11DuplicatesDoNotHoldWorkers(t *testing.T) {
	h := newHarness(t, withFake(hermestest.WithAgent(killAgent)), withConfig(func(c *bridge.Config) {
		c.Endpoints[0].MaxConcurrency = 4 // Workers 4
		c.MaxAckPending = 64
	}))
	requireEq(t, h.cfg.WithDefaults().Workers, 4, "workers %d, want 4")
	const in = `{"prompt":"wait6000: slow stream"}`
	original := h.publish("chat_stream", events.Action{Input: mustJSON(t, in), IdempotencyKey: "workers-key"})
	h.waitCalls("chat_stream", 1)
	var dups []string
	for range 6 {
		dups = append(dups, h.publish("chat_stream", events.Action{Input: mustJSON(t, in), IdempotencyKey: "workers-key"}))
	}
	start := time.Now()
	models := h.publish("models", events.Action{Input: mustJSON(t, `{}`)})
	res, err := h.followBy(models, start.Add(2*time.Second))
	if err != nil {
		t.Errorf("models: no result within 2s of publishing it (%v): the 4 workers are held by the original and duplicates waiting for it", err)
		res, err = h.followBy(models, start.Add(30*time.Second))
		requireOK(t, err, "models: no result within 30s: %v")
		t.Logf("models settled %s after it was published", time.Since(start).Round(10*time.Millisecond))
	}
	requireCompleted(t, res)
	deadline := time.Now().Add(30 * time.Second)
	h.requireReplaysOf(dups, original, deadline)
	wantEq(t, h.fake.Calls("chat_stream"), 1, "chat_stream calls %d, want 1")
}

// regress11PanicChild names the variable under which the test binary runs the panic
// scenario itself, in a child process (see TestRegress11PanicSettlesAndSurvives).
const regress11PanicChild = "HERMES_E2E_REGRESS11_PANIC_CHILD"

// TestRegress11PanicSettlesAndSurvives (finding 7): a panic while handling one action
// must not take the process down: the action settles failed with code internal
// (details.reason "panic"), a copy of its message goes to the DLQ with the reason, and
// the bridge keeps running and handling other actions.
//
// The scenario runs in a child process (this test binary re-executed with
// regress11PanicChild set), so that a panic that does crash the bridge fails this test
// instead of killing the whole e2e run.
func TestRegress11PanicSettlesAndSurvives(t *testing.T) {
	if os.Getenv(regress11PanicChild) == "1" {
		regress11PanicScenario(t)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary; skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRegress11PanicSettlesAndSurvives$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), regress11PanicChild+"=1")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		if i := strings.Index(text, "panic: "); i >= 0 {
			t.Fatalf("the bridge process crashed (%v) on a panic in one action's handler:\n%s", err, truncate(text[i:], 3000))
		}
		t.Fatalf("the scenario failed (%v):\n%s", err, truncate(text, 6000))
	}
	if !strings.Contains(text, "PASS") {
		t.Fatalf("the scenario did not report PASS:\n%s", truncate(text, 6000))
	}
}

func regress11PanicScenario(t *testing.T) {
	// One action panics once claimed; a stream panics while its call publishes an
	// event (the call runs on the delivery's goroutine).
	const id, streamID = "regress11-panic", "regress11-panic-stream"
	var panicked, streamPanicked atomic.Bool
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.Hook = func(p bridge.Point, actionID string) {
			if p == bridge.PointClaimed && actionID == id && panicked.CompareAndSwap(false, true) {
				panic("regress11: injected panic at claimed")
			}
			if p == bridge.PointEvent && actionID == streamID && streamPanicked.CompareAndSwap(false, true) {
				panic("regress11: injected panic in a stream's call")
			}
		}
	}))
	h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"this one panics"}`)}, client.WithActionID(id))
	h.publish("chat_stream", events.Action{Input: mustJSON(t, `{"prompt":"this stream panics"}`)}, client.WithActionID(streamID))
	for _, id := range []string{id, streamID} {
		res, err := h.followBy(id, time.Now().Add(30*time.Second))
		requireOK(t, err, "follow the panicking action: %v")
		e := requireFailed(t, res, "internal")
		if got := detail(e, "reason"); got != "panic" {
			t.Errorf("%s: details.reason %q, want panic (error %s)", id, got, errString(e))
		}
	}
	if !panicked.Load() || !streamPanicked.Load() {
		t.Fatalf("the hook never panicked (claimed %v, stream %v)", panicked.Load(), streamPanicked.Load())
	}
	var found int
	for _, m := range h.dlq(2, 10*time.Second) {
		if strings.Contains(m.Header.Get("Hermes-Dlq-Reason"), "panic") {
			found++
		}
	}
	if found != 2 {
		t.Errorf("%d DLQ messages with a Hermes-Dlq-Reason naming the panic, want 2", found)
	}
	// The bridge is still running and handles the next action.
	h.callOK("models", `{}`)
	h.state.mu.Lock()
	rb := h.state.bridges[0]
	h.state.mu.Unlock()
	select {
	case err := <-rb.done:
		rb.done <- err
		t.Errorf("bridge.Run returned (%v) after the panic", err)
	default:
	}
	wantEq(t, h.fake.Calls("chat"), 0, "chat calls %d: the panicking action reached Hermes")
}

// TestRegress11CancelBounded (finding 10): cancel requests are a public subject; a burst
// of them for unknown actions must cost bounded goroutines and bounded KV records (the
// tombstones that keep a still-queued action from running are capped).
func TestRegress11CancelBounded(t *testing.T) {
	h := newHarness(t)
	cfg := h.cfg.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Settle the baseline: the harness and bridge goroutines are up.
	time.Sleep(500 * time.Millisecond)
	base := runtime.NumGoroutine()

	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	const burst = 2000
	for i := range burst {
		if err := h.nc.Publish(fmt.Sprintf("%s.cancel.regress11-unknown-%04d", cfg.Prefix, i), nil); err != nil {
			t.Fatalf("publish cancel %d: %v", i, err)
		}
	}
	requireOK(t, h.nc.FlushWithContext(ctx))
	// Sample until the bridge has caught up: the tombstone count stops moving.
	kv, err := h.js.KeyValue(ctx, cfg.Bucket)
	requireOK(t, err)
	countActs := func() int {
		kl, err := kv.ListKeysFiltered(ctx, "act.>")
		requireOK(t, err, "list keys: %v")
		n := 0
		for range kl.Keys() {
			n++
		}
		return n
	}
	last, stableSince := -1, time.Now()
	for time.Since(stableSince) < time.Second {
		if ctx.Err() != nil {
			t.Fatalf("the bridge did not catch up with the burst: %v", ctx.Err())
		}
		if n := countActs(); n != last {
			last, stableSince = n, time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if p := int(peak.Load()); p > base+200 {
		t.Errorf("goroutines peaked at %d during a burst of %d cancel requests, baseline %d: want at most %d", p, burst, base, base+200)
	}
	if last > 1100 {
		t.Errorf("%d act.* records after %d cancel requests for unknown actions, want at most 1100 (tombstones are capped)", last, burst)
	}
	t.Logf("baseline %d goroutines, peak %d; %d act.* records", base, peak.Load(), last)
}

// TestRegress11ShutdownDrainsPrefetched (finding 11): on shutdown, deliveries the
// replica has fetched but not started must be handled within the grace or handed back
// at once (nak), not left to wait for the ack wait to pass before another replica sees
// them.
func TestRegress11ShutdownDrainsPrefetched(t *testing.T) {
	h := newHarness(t, withFake(hermestest.WithAgent(killAgent)), withConfig(func(c *bridge.Config) {
		c.AckWait = 30 * time.Second
		c.ShutdownGrace = 10 * time.Second
		// Four workers for two endpoint slots: four handlers take six deliveries (two wait
		// for a slot), and the iterator (PullMaxMessages = workers) buffers the other two;
		// MaxAckPending 64 lets it. With workers = slots = 2 nothing is fetched ahead.
		c.Endpoints[0].MaxConcurrency = 2
		c.Workers = 4
		c.MaxAckPending = 64
	}))
	const n = 6
	var ids []string
	for i := range n {
		ids = append(ids, h.publish("chat", events.Action{Input: mustJSON(t, fmt.Sprintf(`{"prompt":"wait1000: prefetched %d"}`, i)),
			IdempotencyKey: fmt.Sprintf("prefetch-%d", i)}))
	}
	h.waitCalls("chat", 2)
	cfg := h.cfg.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons, err := h.js.Consumer(ctx, cfg.ActionsStream, cfg.Consumer)
	requireOK(t, err)
	info, err := cons.Info(ctx)
	requireOK(t, err)
	t.Logf("before the stop: %d actions delivered and unacknowledged, %d not delivered, %d calls running",
		info.NumAckPending, info.NumPending, h.fake.InFlight())
	stopped := time.Now()
	h.stopBridge(0)
	if info, err := cons.Info(ctx); err == nil {
		t.Logf("bridge A stopped after %s: %d actions delivered and unacknowledged, %d not delivered",
			time.Since(stopped).Round(10*time.Millisecond), info.NumAckPending, info.NumPending)
	}
	h.startBridge()
	deadline := stopped.Add(8 * time.Second)
	var late []string
	for _, id := range ids {
		res, err := h.followBy(id, deadline)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				late = append(late, id)
				continue
			}
			t.Fatalf("follow %s: %v", id, err)
		}
		requireCompleted(t, res)
	}
	if len(late) > 0 {
		t.Errorf("%d of %d actions not settled within 8s of bridge A's stop: prefetched deliveries were dropped and wait for the %s ack wait",
			len(late), n, cfg.AckWait)
		for _, id := range late {
			if _, err := h.followBy(id, time.Now().Add(45*time.Second)); err == nil {
				t.Logf("%s settled %s after bridge A's stop", id, time.Since(stopped).Round(100*time.Millisecond))
			}
		}
	}
	perKey := map[string]int{}
	for _, r := range h.requests("chat") {
		perKey[r.IdempotencyKey]++
	}
	for i := range n {
		if k := fmt.Sprintf("prefetch-%d", i); perKey[k] != 1 {
			t.Errorf("key %s: %d chat calls, want 1", k, perKey[k])
		}
	}
}
