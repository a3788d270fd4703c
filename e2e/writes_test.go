package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestDurableWritesPerAction counts the durable writes of each kind of action as the
// README's "Durable writes per action" states them: the bucket's stream grows by the
// record writes, and the output stream holds one result message per action. An unsafe
// action that starts at once writes its key (if any) and its record created
// dispatched; a queued one, a duplicate and a safe read take the ordinary path.
func TestDurableWritesPerAction(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(killAgent)), withConfig(func(c *bridge.Config) {
		c.Endpoints[0].MaxConcurrency = 1 // the queued case waits for the endpoint
		c.Workers = 4                     // (with a worker of its own)
	}))
	// kvSeqs are the last sequences of the two buckets' streams (records, keys).
	kvSeqs := func() [2]uint64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var seqs [2]uint64
		for i, s := range bucketStreams(t, h) {
			info, err := s.Info(ctx)
			requireOK(t, err)
			seqs[i] = info.State.LastSeq
		}
		return seqs
	}
	steps := []struct {
		name   string
		run    func() []string // the action ids it published
		writes uint64
	}{
		{name: "unsafe keyed (start: key, record)", writes: 2, run: func() []string {
			return []string{h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"writes one"}`), IdempotencyKey: "w-1"})}
		}},
		{name: "unsafe unkeyed (start: record)", writes: 1, run: func() []string {
			return []string{h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"writes two"}`)})}
		}},
		{name: "safe unkeyed (claim)", writes: 1, run: func() []string {
			return []string{h.publish("models", events.Action{Input: mustJSON(t, `{}`)})}
		}},
		{name: "duplicate of a settled key (claim; the replay needs no fence)", writes: 1, run: func() []string {
			return []string{h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"writes one"}`), IdempotencyKey: "w-1"})}
		}},
		{name: "unkeyed start, then a keyed action queued behind it (claim, key, mark)", writes: 1 + 3, run: func() []string {
			first := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"wait1500: holds the endpoint"}`)})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			requireOK(t, h.fake.WaitInFlight(ctx, 1))
			return []string{first, h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"writes queued"}`), IdempotencyKey: "w-3"})}
		}},
	}
	for _, st := range steps {
		before := kvSeqs()
		ids := st.run()
		for _, id := range ids {
			h.followOK(id)
			if n := h.results(id); n != 1 {
				t.Errorf("%s: %d result messages for %s, want 1", st.name, n, id)
			}
		}
		h.waitIdle(20 * time.Second)
		after := kvSeqs()
		if got := after[0] - before[0] + after[1] - before[1]; got != st.writes {
			t.Errorf("%s: %d record writes, want %d: %v", st.name, got, st.writes, kvSubjects(t, h, before, after))
		} else {
			t.Logf("%s: %d record writes and %s", st.name, got, fmt.Sprintf("%d result message(s)", len(ids)))
		}
	}
}

// kvSubjects lists the subjects of the buckets' streams' messages after sequences from
// up to to, each with the message's operation header (for a failure's message).
func kvSubjects(t *testing.T, h *harness, from, to [2]uint64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	for i, s := range bucketStreams(t, h) {
		for seq := from[i] + 1; seq <= to[i]; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				out = append(out, fmt.Sprintf("%s %d: %v", s.CachedInfo().Config.Name, seq, err))
				continue
			}
			out = append(out, fmt.Sprintf("%s %d: %s %s", s.CachedInfo().Config.Name, seq, m.Subject, m.Header.Get("KV-Operation")))
		}
	}
	return out
}

// bucketStreams returns the streams of the bridge's KV buckets: the action records',
// then the idempotency keys'.
func bucketStreams(t *testing.T, h *harness) [2]jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := h.cfg.WithDefaults()
	var out [2]jetstream.Stream
	for i, b := range []string{cfg.Bucket, cfg.KeysBucket} {
		s, err := h.js.Stream(ctx, "KV_"+b)
		requireOK(t, err)
		out[i] = s
	}
	return out
}
