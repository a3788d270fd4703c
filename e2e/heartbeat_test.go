package e2e_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// longAgent makes "long:" turns last about 4 s: nine words streamed 500 ms apart (a stream),
// or a 4 s wait before the answer (JSON chat).
func longAgent(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
	r := hermestest.StubAgent(ctx, turn)
	if strings.HasPrefix(turn.UserText, "long:") {
		if turn.Route == "chat" {
			r.Delay = 4 * time.Second
		} else {
			r.DeltaDelay = 500 * time.Millisecond
		}
	}
	return r
}

// TestHeartbeatKeepsLongCallsDelivered: with AckWait 1s and heartbeats every 300ms, a
// 4-second stream and a 4-second JSON call (each four AckWaits) are delivered once: one
// action log line with delivery 1, no redelivery seen by the consumer, one Hermes call
// and one result each.
func TestHeartbeatKeepsLongCallsDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(longAgent)), withConfig(func(c *bridge.Config) {
		c.AckWait = time.Second
		c.Heartbeat = 300 * time.Millisecond
	}))
	cfg := h.cfg.WithDefaults()
	cons, err := h.js.Consumer(context.Background(), cfg.ActionsStream, cfg.Consumer)
	requireOK(t, err, "consumer: %v")
	if info, err := cons.Info(context.Background()); err != nil || info.Config.AckWait != time.Second {
		t.Fatalf("consumer ack wait: %v (err %v), want 1s", info, err)
	}

	// Watch the consumer for redeliveries while the calls run.
	var redelivered atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if info, err := cons.Info(context.Background()); err == nil && int64(info.NumRedelivered) > redelivered.Load() {
				redelivered.Store(int64(info.NumRedelivered))
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	start := time.Now()
	streamID := h.publish("chat_stream", events.Action{Input: mustJSON(t, `{"prompt":"long: one two three four five six seven"}`)})
	chatID := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"long: a slow answer"}`)})
	res, evs := h.follow(streamID)
	checkStream(t, res, evs, "chat_stream", "stub reply: long: one two three four five six seven")
	h.followOK(chatID)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if took < 3500*time.Millisecond {
		t.Fatalf("the calls took %s; the test needs them to outlast several ack waits", took)
	}
	h.waitIdle(10 * time.Second)

	wantEq(t, redelivered.Load(), 0, "the consumer redelivered %d actions during the long calls")
	for _, c := range []struct{ id, route string }{{streamID, "chat_stream"}, {chatID, "chat"}} {
		if n := h.fake.Calls(c.route); n != 1 {
			t.Errorf("%s: %d Hermes calls, want 1", c.route, n)
		}
		if n := h.results(c.id); n != 1 {
			t.Errorf("%s: %d result messages, want 1", c.route, n)
		}
		lines := h.actionLogs(c.id)
		if len(lines) != 1 || lines[0]["delivery"] != 1.0 || lines[0].str("status") != "completed" {
			t.Errorf("%s: action log lines %v, want one completed line with delivery 1", c.route, lines)
		}
	}
}
