package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// waitCalls waits until the fake has received at least n requests on route.
func (h *harness) waitCalls(route string, n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.fake.WaitCalls(ctx, route, n); err != nil {
		h.t.Fatalf("%s: %d calls, want %d: %v", route, h.fake.Calls(route), n, err)
	}
}

// TestShutdown sends SIGTERM to the real binary in each situation the issue names and
// checks through NATS and the fake that nothing is lost or done twice.
func TestShutdown(t *testing.T) {
	t.Parallel()

	// In-flight actions that finish within HERMES_BRIDGE_SHUTDOWN_GRACE complete; the
	// process exits 0 and leaves nothing unsettled.
	t.Run("in_flight_finish_within_grace", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
		h.fake.InjectFault(hermestest.Fault{Route: "models", Delay: 1500 * time.Millisecond})
		p := h.startProc() // grace 5s
		var ids []string
		for i := 0; i < 4; i++ {
			ids = append(ids, h.publish("chat", events.Action{Input: mustJSON(t, fmt.Sprintf(`{"prompt":"wait1500: chat %d"}`, i))}))
		}
		for i := 0; i < 2; i++ {
			ids = append(ids, h.publish("chat_stream", events.Action{Input: mustJSON(t, fmt.Sprintf(`{"prompt":"wait1500: stream %d"}`, i))}))
		}
		ids = append(ids, h.publish("models", events.Action{Input: mustJSON(t, `{}`)}))
		h.waitCalls("chat", 4)
		h.waitCalls("chat_stream", 2)
		h.waitCalls("models", 1)
		settledBefore := 0
		for _, id := range ids {
			settledBefore += h.results(id)
		}
		if settledBefore == len(ids) {
			t.Fatalf("every action settled before SIGTERM; nothing was in flight")
		}
		if code := p.terminate(30 * time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		if p.logIndex("shutdown grace over") >= 0 {
			t.Errorf("the grace ran out although every call takes 1.5s of a 5s grace")
		}
		// No bridge runs any more: everything was settled by the stopped process.
		h.waitIdle(5 * time.Second)
		for _, id := range ids {
			if n := h.results(id); n != 1 {
				t.Fatalf("%s: %d result messages after the shutdown, want 1 (%d were settled before SIGTERM)", id, n, settledBefore)
			}
			res, evs := h.follow(id)
			requireCompleted(t, res)
			if res.CapabilityID == events.CapabilityID("primary", "chat_stream") {
				checkStream(t, res, evs, "chat_stream", "")
			}
		}
		if h.fake.Calls("chat") != 4 || h.fake.Calls("chat_stream") != 2 || h.fake.Calls("models") != 1 {
			t.Errorf("calls chat/chat_stream/models = %d/%d/%d, want 4/2/1",
				h.fake.Calls("chat"), h.fake.Calls("chat_stream"), h.fake.Calls("models"))
		}
	})

	// A safe call longer than the grace is released; the next replica runs it again and
	// it completes once.
	t.Run("safe_call_outlives_grace", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
		h.fake.InjectFault(hermestest.Fault{Route: "models", Delay: time.Minute})
		p := h.startProc(withEnv("HERMES_BRIDGE_SHUTDOWN_GRACE", "300ms"))
		id := h.publish("models", events.Action{Input: mustJSON(t, `{}`)})
		h.waitCalls("models", 1)
		if code := p.terminate(30 * time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		if p.logIndex("shutdown grace over") < 0 {
			t.Errorf("no log line says the grace ran out")
		}
		// Issue 13: the signal is logged when it arrives, naming it, the grace with its
		// unit and what happens next; every duration in the log carries its unit.
		iSignal := p.logIndex(`"message":"SIGTERM received`)
		if iSignal < 0 || iSignal > p.logIndex("shutdown grace over") {
			t.Errorf("no log line says SIGTERM arrived, before the grace ran out:\n%s", strings.Join(p.log(), "\n"))
		} else {
			var l logLine
			_ = json.Unmarshal([]byte(p.log()[iSignal]), &l)
			if l.str("signal") != "SIGTERM" || l.str("grace") != "300ms" || !strings.Contains(l.str("message"), "300ms") {
				t.Errorf("signal line %v: want signal SIGTERM and grace 300ms", l)
			}
		}
		for _, ln := range p.log() {
			if regexp.MustCompile(`"(grace|timeout|retry_in|quiet)":[0-9]`).MatchString(ln) {
				t.Errorf("a duration without its unit: %s", ln)
			}
		}
		requireEq(t, h.results(id), 0, "%d result messages after the shutdown, want 0 (the safe call is handed over)")
		rec, ok := h.actionRecord(id)
		if !ok || rec.State != kvstore.StateReleased {
			t.Errorf("after the shutdown the record is %+v (present %v); want an unsettled claim released for another replica", rec, ok)
		}
		h.startProc()
		h.followOK(id)
		h.waitIdle(30 * time.Second)
		wantEq(t, h.fake.Calls("models"), 2, "models calls %d, want 2 (cut off once, run again once)")
		wantEq(t, h.results(id), 1, "%d result messages, want 1")
	})

	// Unsafe calls longer than the grace settle outcome_unknown in the stopping process
	// and are never resent by the next replica.
	t.Run("unsafe_call_outlives_grace", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
		p := h.startProc(withEnv("HERMES_BRIDGE_SHUTDOWN_GRACE", "300ms"))
		chat := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"hold: shutdown"}`)})
		stream := h.publish("chat_stream", events.Action{Input: mustJSON(t,
			`{"prompt":"drip: one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"}`)})
		h.waitCalls("chat", 1)
		h.eventually(20*time.Second, func() error {
			if n := len(h.storedEvents(stream)); n < 2 {
				return fmt.Errorf("%d events", n)
			}
			return nil
		})
		if code := p.terminate(30 * time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		before := h.storedEvents(stream)
		for _, id := range []string{chat, stream} {
			if n := h.results(id); n != 1 {
				t.Fatalf("%s: %d result messages after the shutdown, want 1 (settled by the stopping process)", id, n)
			}
			res, _ := h.follow(id)
			if e := requireFailed(t, res, "outcome_unknown"); !e.UncertainOutcome {
				t.Errorf("%s: outcome_unknown without uncertain_outcome", id)
			}
		}
		h.startProc()
		h.waitIdle(30 * time.Second)
		if h.fake.Calls("chat") != 1 || h.fake.Calls("chat_stream") != 1 {
			t.Errorf("calls chat/chat_stream = %d/%d, want 1/1", h.fake.Calls("chat"), h.fake.Calls("chat_stream"))
		}
		for _, id := range []string{chat, stream} {
			if n := h.results(id); n != 1 {
				t.Errorf("%s: %d result messages, want 1", id, n)
			}
		}
		evs := h.storedEvents(stream)
		checkEventsContiguous(t, stream, evs, len(before))
		if len(evs) != len(before) {
			t.Errorf("stream events %d after the next replica ran, %d before: it was resumed or resent", len(evs), len(before))
		}
	})

	// Actions not yet fetched at SIGTERM are left in the stream; the next replica handles
	// each of them once.
	t.Run("queued_actions_go_to_next_replica", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
		p := h.startProc(withEnv("HERMES_BRIDGE_WORKERS", "1"))
		var ids []string
		for i := 0; i < 4; i++ {
			in := fmt.Sprintf(`{"prompt":"wait1000: queued %d"}`, i)
			ids = append(ids, h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: fmt.Sprintf("q-%d", i)}))
		}
		h.waitCalls("chat", 1)
		if code := p.terminate(30 * time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		// The stopping process finished its one action and fetched no other.
		requireEq(t, h.fake.Calls("chat"), 1, "chat calls %d after the shutdown, want 1 (no new action is fetched once SIGTERM arrived)")
		settled := 0
		for _, id := range ids {
			settled += h.results(id)
		}
		requireEq(t, settled, 1, "%d actions settled by the stopping process, want 1")
		h.startProc()
		for _, id := range ids {
			h.followOK(id)
		}
		h.waitIdle(30 * time.Second)
		perKey := map[string]int{}
		for _, r := range h.requests("chat") {
			perKey[r.IdempotencyKey]++
		}
		for i, id := range ids {
			if n := h.results(id); n != 1 {
				t.Errorf("%s: %d result messages, want 1", id, n)
			}
			if k := fmt.Sprintf("q-%d", i); perKey[k] != 1 {
				t.Errorf("key %s: %d chat calls, want 1", k, perKey[k])
			}
		}
	})

	// Embedded mode: the bridge finishes its in-flight action and stops before the
	// embedded NATS server, which stops last.
	t.Run("embedded_server_stops_last", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
		p := h.startProc(withoutEnv("NATS_URL"), withEnv("HERMES_BRIDGE_DATA_DIR", t.TempDir()),
			withEnv("HERMES_BRIDGE_NATS_PORT", "-1"))
		var url string
		re := regexp.MustCompile(`embedded NATS server listening on (nats://\S+)`)
		for _, ln := range p.log() {
			if m := re.FindStringSubmatch(ln); m != nil {
				url = m[1]
			}
		}
		if url == "" {
			t.Fatalf("the embedded server's URL is not in the log")
		}
		nc, err := nats.Connect(url, nats.MaxReconnects(0))
		requireOK(t, err, "connect to the embedded server: %v")
		defer nc.Close()
		js, err := jetstream.New(nc)
		requireOK(t, err)
		client := client.New(js)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		id, err := client.Publish(ctx, "primary", "chat", events.Action{Input: mustJSON(t, `{"prompt":"wait1500: embedded"}`)})
		requireOK(t, err, "publish: %v")
		type followed struct {
			res *events.Result
			err error
		}
		done := make(chan followed, 1)
		go func() {
			res, err := client.Follow(ctx, id, nil, nil)
			done <- followed{res, err}
		}()
		h.waitCalls("chat", 1)
		if code := p.terminate(30 * time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		f := <-done
		if f.err != nil {
			t.Fatalf("follow the in-flight action: %v (its result never reached the embedded server before it stopped)", f.err)
		}
		requireCompleted(t, f.res)
		stopped := p.logIndex(`"message":"bridge stopped"`)
		drained := p.logIndex(`"message":"bridge stopped; draining the NATS connection"`)
		server := p.logIndex(`"message":"embedded NATS server stopped"`)
		if stopped < 0 || drained < 0 || server < 0 {
			t.Fatalf("log lines: bridge stopped #%d, draining #%d, embedded server stopped #%d; want all three", stopped, drained, server)
		}
		if !(stopped < drained && drained < server) {
			t.Errorf("shutdown order: bridge stopped #%d, draining #%d, embedded server stopped #%d; want the server last", stopped, drained, server)
		}
		wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
	})
}
