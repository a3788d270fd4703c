package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestIdempotencyReplay: same key, same input -> one Hermes call, two results, the second
// replaying the first with identical output.
func TestIdempotencyReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	in := map[string]any{"prompt": "replay me", "temperature": 0.5}
	first := h.callOK("chat", in, withKey("replay-key"))
	if first.ReplayOf != nil {
		t.Errorf("first result has replay_of %q", *first.ReplayOf)
	}
	// The same input with members in another order and other spacing hashes the same.
	second := h.callOK("chat", `{ "temperature": 0.50, "prompt": "replay me" }`, withKey("replay-key"))
	if second.ActionID == first.ActionID {
		t.Fatalf("both results carry action id %q", first.ActionID)
	}
	if second.ReplayOf == nil || *second.ReplayOf != first.ActionID {
		t.Errorf("second replay_of %v, want %q", second.ReplayOf, first.ActionID)
	}
	if !sameJSON(t, first.Output, second.Output) {
		t.Errorf("replayed output differs:\n%s\n%s", first.Output, second.Output)
	}
	wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
	if h.results(first.ActionID) != 1 || h.results(second.ActionID) != 1 {
		t.Errorf("results stored: %d and %d, want 1 each", h.results(first.ActionID), h.results(second.ActionID))
	}

	// A replay of a stream replays its aggregate.
	sfirst, evs := h.call("chat_stream", `{"prompt":"stream replay"}`, withKey("replay-key"))
	checkStream(t, sfirst, evs, "chat_stream", "stub reply: stream replay")
	ssecond := h.callOK("chat_stream", `{"prompt":"stream replay"}`, withKey("replay-key"))
	if ssecond.ReplayOf == nil || *ssecond.ReplayOf != sfirst.ActionID || !sameJSON(t, sfirst.Output, ssecond.Output) {
		t.Errorf("stream replay: replay_of %v output %s, want %q and %s", ssecond.ReplayOf, ssecond.Output, sfirst.ActionID, sfirst.Output)
	}
	wantEq(t, h.fake.Calls("chat_stream"), 1, "chat_stream calls %d, want 1")
}

// TestIdempotencyConflict: same key, changed input -> idempotency_conflict naming the
// original; Hermes is not called again.
func TestIdempotencyConflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.callOK("session_create", `{"body":{"id":"conflict-1"}}`, withKey("conflict-key"))
	second, _ := h.call("session_create", `{"body":{"id":"conflict-2"}}`, withKey("conflict-key"))
	e := requireFailed(t, second, "idempotency_conflict")
	if got := detail(e, "original_action_id"); got != first.ActionID {
		t.Errorf("details.original_action_id %q, want %q", got, first.ActionID)
	}
	if e.Retryable || e.UncertainOutcome {
		t.Errorf("conflict retryable=%v uncertain=%v, want false/false", e.Retryable, e.UncertainOutcome)
	}
	if second.ReplayOf != nil {
		t.Errorf("conflict has replay_of %q", *second.ReplayOf)
	}
	wantEq(t, h.fake.Calls("session_create"), 1, "session_create calls %d, want 1")
	// The original is still what the key replays.
	third := h.callOK("session_create", `{"body":{"id":"conflict-1"}}`, withKey("conflict-key"))
	if third.ReplayOf == nil || *third.ReplayOf != first.ActionID {
		t.Errorf("third replay_of %v, want %q", third.ReplayOf, first.ActionID)
	}
}

// TestIdempotencyConcurrentDuplicates: five actions with one key and input published at
// once against a slow agent -> one Hermes call, five completed results, four replays.
func TestIdempotencyConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent)))
	const n = 5
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			id, err := h.client.Publish(ctx, "primary", "chat", events.Action{
				Input: mustJSON(t, `{"prompt":"slow: concurrent"}`), IdempotencyKey: "concurrent-key"})
			if err != nil {
				t.Errorf("publish: %v", err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	results := make([]*events.Result, n)
	for i, id := range ids {
		results[i], _ = h.follow(id)
	}
	var original *events.Result
	for _, r := range results {
		requireCompleted(t, r)
		if r.ReplayOf == nil {
			if original != nil {
				t.Fatalf("two originals: %s and %s", original.ActionID, r.ActionID)
			}
			original = r
		}
	}
	if original == nil {
		t.Fatal("no original result (every result is a replay)")
	}
	for _, r := range results {
		if r == original {
			continue
		}
		if *r.ReplayOf != original.ActionID {
			t.Errorf("%s replay_of %q, want %q", r.ActionID, *r.ReplayOf, original.ActionID)
		}
		if !sameJSON(t, r.Output, original.Output) {
			t.Errorf("%s output differs from the original's", r.ActionID)
		}
	}
	wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want exactly 1")
	h.requireResults(1, 10*time.Second, ids...)
}

// TestActionIDPublishedTwice: the action id is a dedup unit: published twice (with and
// without JetStream's Nats-Msg-Id dedup, after and while it runs) -> one call, one result.
func TestActionIDPublishedTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent)))

	t.Run("client_twice", func(t *testing.T) {
		h := h.at(t)
		a := events.Action{Input: mustJSON(t, `{"prompt":"twice"}`)}
		id := h.publish("chat", a, client.WithActionID("dup-client-1"))
		h.publish("chat", a, client.WithActionID("dup-client-1"))
		h.followOK(id)
		h.waitIdle(10 * time.Second)
		wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
		wantEq(t, h.results(id), 1, "%d result messages, want 1")
	})

	t.Run("raw_after_settle", func(t *testing.T) {
		h := h.at(t)
		data := []byte(`{"input":{"prompt":"raw twice"}}`)
		// No Nats-Msg-Id: JetStream stores both copies; the bridge must dedup by action id.
		h.publishRaw("hermes.actions.primary.chat", binaryHeader("dup-raw-1", events.TypeAction, ""), data)
		h.followOK("dup-raw-1")
		h.publishRaw("hermes.actions.primary.chat", binaryHeader("dup-raw-1", events.TypeAction, ""), data)
		h.until(10*time.Second, "two action log lines", func() bool { return len(h.actionLogs("dup-raw-1")) >= 2 })
		h.waitIdle(10 * time.Second)
		if c := h.fake.Calls("chat"); c != 2 { // one from client_twice
			t.Errorf("chat calls %d, want 2 (one per distinct action)", c)
		}
		wantEq(t, h.results("dup-raw-1"), 1, "%d result messages, want 1")
	})

	t.Run("raw_while_running", func(t *testing.T) {
		h := h.at(t)
		data := []byte(`{"input":{"prompt":"slow: raw in flight"}}`)
		h.publishRaw("hermes.actions.primary.chat", binaryHeader("dup-raw-2", events.TypeAction, ""), data)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		requireOK(t, h.fake.WaitCalls(ctx, "chat", 3), "first copy did not reach Hermes: %v")
		h.publishRaw("hermes.actions.primary.chat", binaryHeader("dup-raw-2", events.TypeAction, ""), data)
		h.followOK("dup-raw-2")
		h.until(10*time.Second, "two action log lines", func() bool { return len(h.actionLogs("dup-raw-2")) >= 2 })
		h.waitIdle(10 * time.Second)
		wantEq(t, h.fake.Calls("chat"), 3, "chat calls %d, want 3")
		wantEq(t, h.results("dup-raw-2"), 1, "%d result messages, want 1")
	})
}

// TestRedeliveryAfterBridgeStops stops a bridge replica while a call is in flight and
// starts another one. An unsafe call must never be resent and settles outcome_unknown; a
// safe call is redelivered to the other replica, which runs it again.
func TestRedeliveryAfterBridgeStops(t *testing.T) {
	t.Parallel()
	t.Run("unsafe_in_flight", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent)), withConfig(func(c *bridge.Config) {
			c.AckWait = time.Second
			c.ShutdownGrace = 100 * time.Millisecond
		}))
		id := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"block: never answers"}`), IdempotencyKey: "redeliver-key"})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		requireOK(t, h.fake.WaitCalls(ctx, "chat", 1), "chat never reached Hermes: %v")
		h.stopBridge(0)
		h.startBridge()
		res, _ := h.follow(id)
		wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1: an unsafe call was resent")
		h.requireResults(1, 10*time.Second, id)
		e := requireFailed(t, res, "outcome_unknown")
		if !e.UncertainOutcome {
			t.Errorf("uncertain_outcome false")
		}
		// The key remembers the uncertain outcome: a retry with the same key is not sent.
		again, _ := h.call("chat", `{"prompt":"block: never answers"}`, withKey("redeliver-key"))
		if again.ReplayOf == nil || *again.ReplayOf != id || again.Error == nil || !again.Error.UncertainOutcome {
			t.Errorf("same key after the uncertain outcome: replay_of %v error %s", again.ReplayOf, errString(again.Error))
		}
		wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d after the same-key retry, want 1")
	})

	t.Run("safe_redelivered", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withConfig(func(c *bridge.Config) {
			c.AckWait = time.Second
			c.ShutdownGrace = 100 * time.Millisecond
		}))
		h.fake.InjectFault(hermestest.Fault{Route: "models", Delay: 30 * time.Second})
		id := h.publish("models", events.Action{Input: mustJSON(t, `{}`)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		requireOK(t, h.fake.WaitCalls(ctx, "models", 1), "models never reached Hermes: %v")
		h.stopBridge(0)
		h.startBridge()
		h.followOK(id)
		wantEq(t, h.fake.Calls("models"), 2, "models calls %d, want 2 (the safe read runs again after redelivery)")
		h.requireResults(1, 10*time.Second, id)
		deliveries := 0.0
		for _, l := range h.actionLogs(id) {
			d, ok := l["delivery"].(float64) // JetStream delivery count, when logged apart
			if !ok {
				d, _ = l["attempt"].(float64)
			}
			deliveries = max(deliveries, d)
		}
		if deliveries < 2 {
			t.Errorf("action logs show %v deliveries, want a second delivery", deliveries)
		}
	})
}

// TestIdempotencyKeyRequired: the five operations that need a key fail without one and
// never reach Hermes.
func TestIdempotencyKeyRequired(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for op, in := range map[string]string{
		"session_create":  `{"body":{"id":"needs-key"}}`,
		"session_patch":   `{"session_id":"needs-key","body":{"title":"t"}}`,
		"session_fork":    `{"session_id":"needs-key","body":{"id":"child"}}`,
		"session_delete":  `{"session_id":"needs-key"}`,
		"response_delete": `{"response_id":"resp_x"}`,
	} {
		res, _ := h.call(op, in)
		e := requireFailed(t, res, "idempotency_key_required")
		if e.Retryable || e.UncertainOutcome {
			t.Errorf("%s: retryable=%v uncertain=%v", op, e.Retryable, e.UncertainOutcome)
		}
	}
	if rs := h.fake.Requests(); len(rs) != 0 {
		t.Errorf("%d requests reached Hermes, first %s %s", len(rs), rs[0].Method, rs[0].Path)
	}
}

// TestIdempotencyKeyScopedToCapability: one raw key on different operations and endpoints
// does not collide.
func TestIdempotencyKeyScopedToCapability(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.Endpoints = append(c.Endpoints, bridge.Endpoint{ID: "secondary", BaseURL: c.Endpoints[0].BaseURL,
			Key: c.Endpoints[0].Key, MaxConcurrency: 2})
	}))
	const key = "shared-raw-key"
	r1, _ := h.call("chat", `{"prompt":"scoped"}`, withKey(key))
	r2, _ := h.call("responses", `{"input":"scoped"}`, withKey(key))
	r3, _ := h.callOn("secondary", "chat", `{"prompt":"scoped"}`, withKey(key))
	r4, _ := h.call("session_create", `{"body":{"id":"scoped"}}`, withKey(key))
	r5, _ := h.call("session_fork", `{"session_id":"scoped","body":{"id":"scoped-child"}}`, withKey(key))
	for _, r := range []*events.Result{r1, r2, r3, r4, r5} {
		requireCompleted(t, r)
		if r.ReplayOf != nil {
			t.Errorf("%s (%s) is a replay of %s", r.ActionID, r.CapabilityID, *r.ReplayOf)
		}
	}
	wantEq(t, r3.CapabilityID, "cap:hermes_agent:secondary:chat", "capability %q")
	for route, want := range map[string]int{"chat": 2, "responses": 1, "session_create": 1, "session_fork": 1} {
		if c := h.fake.Calls(route); c != want {
			t.Errorf("%s calls %d, want %d", route, c, want)
		}
	}
}

// TestIdempotencyRetryableFailureNotStored: a failure certain not to have started work
// (the 429 concurrency gate, past the retries the deadline allows) does not keep the key;
// an uncertain one (500 on chat) does.
func TestIdempotencyRetryableFailureNotStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.fake.InjectFault(hermestest.Fault{Route: "chat", Status: 429, Times: 1000})
	const in = `{"prompt":"gated"}`
	first, _ := h.call("chat", in, withKey("gate-key"), withTimeoutMS(1800))
	e := requireFailed(t, first, "remote_unavailable")
	if !e.Retryable || e.UncertainOutcome || e.HTTPStatus != 429 || detail(e, "remote_code") != "rate_limit_exceeded" {
		t.Errorf("error %s, want retryable, certain, 429 rate_limit_exceeded", errString(e))
	}
	wantEq(t, e.RetryAfterMS, 1000, "retry_after_ms %d, want 1000")
	calls := h.requests("chat")
	if len(calls) < 2 {
		t.Fatalf("chat calls %d, want at least 2 (the gate is retried within the deadline)", len(calls))
	}
	if gap := calls[1].Time.Sub(calls[0].Time); gap < 900*time.Millisecond {
		t.Errorf("retry after %s; Retry-After: 1 was not honoured", gap)
	}
	n := len(calls)
	h.fake.ClearFaults()
	second := h.callOK("chat", in, withKey("gate-key"))
	if second.ReplayOf != nil {
		t.Errorf("second action replays %s: a certain retryable failure was stored", *second.ReplayOf)
	}
	if c := h.fake.Calls("chat"); c != n+1 {
		t.Errorf("chat calls %d, want %d", c, n+1)
	}
	third, _ := h.call("chat", in, withKey("gate-key"))
	if third.ReplayOf == nil || *third.ReplayOf != second.ActionID {
		t.Errorf("third replay_of %v, want %s", third.ReplayOf, second.ActionID)
	}

	// 500 on an unsafe call is uncertain: stored, replayed, never resent.
	h.fake.InjectFault(hermestest.Fault{Route: "chat", Status: 500})
	u1, _ := h.call("chat", `{"prompt":"uncertain"}`, withKey("uncertain-key"))
	ue := requireFailed(t, u1, "remote_unavailable")
	if !ue.UncertainOutcome || ue.Retryable {
		t.Errorf("500 on chat: %s, want uncertain and not retryable", errString(ue))
	}
	u2, _ := h.call("chat", `{"prompt":"uncertain"}`, withKey("uncertain-key"))
	if u2.ReplayOf == nil || *u2.ReplayOf != u1.ActionID || u2.Status != "failed" {
		t.Errorf("same key after an uncertain failure: status %q replay_of %v", u2.Status, u2.ReplayOf)
	}
	if c := h.fake.Calls("chat"); c != n+2 {
		t.Errorf("chat calls %d, want %d", c, n+2)
	}
}
