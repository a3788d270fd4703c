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
// kvstore package doc states them: the records bucket's stream grows by the record
// writes (an atomic batch, whatever it holds, is one write), and the output stream
// holds one result message per action. An unsafe action that starts at once claims its
// key (if any) and creates its record dispatched: in one atomic batch where the bucket
// takes batches (memory storage here, or replicated), in two writes on a
// single-replica file bucket (nats-server stages each batch of one in a file store of
// its own). A queued one, a duplicate and a safe read take the ordinary path.
func TestDurableWritesPerAction(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		storage jetstream.StorageType
		keyed   uint64 // the record writes of an unsafe keyed action's start
	}{{jetstream.MemoryStorage, 1}, {jetstream.FileStorage, 2}} {
		t.Run(c.storage.String(), func(t *testing.T) {
			t.Parallel()
			durableWrites(t, c.storage, c.keyed)
		})
	}
}

func durableWrites(t *testing.T, storage jetstream.StorageType, keyed uint64) {
	h := newHarness(t, withFake(hermestest.WithAgent(killAgent)), withConfig(func(c *bridge.Config) {
		c.Storage = storage
		c.Endpoints[0].MaxConcurrency = 1 // the queued case waits for the endpoint
		c.Workers = 4                     // (with a worker of its own)
	}))
	recs := recordsStream(t, h)
	lastSeq := func() uint64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		info, err := recs.Info(ctx)
		requireOK(t, err)
		return info.State.LastSeq
	}
	steps := []struct {
		name   string
		run    func() []string // the action ids it published
		writes uint64
	}{
		{name: "unsafe keyed (start: key and record)", writes: keyed, run: func() []string {
			return []string{h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"writes one"}`), IdempotencyKey: "w-1"})}
		}},
		{name: "unsafe unkeyed (start: record)", writes: 1, run: func() []string {
			return []string{h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"writes two"}`)})}
		}},
		{name: "safe unkeyed (claim)", writes: 1, run: func() []string {
			return []string{h.publish("models", events.Action{Input: mustJSON(t, `{}`)})}
		}},
		{name: "duplicate of a settled key (claim, then the fence before its replay)", writes: 2, run: func() []string {
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
		before := lastSeq()
		ids := st.run()
		for _, id := range ids {
			h.followOK(id)
			if n := h.results(id); n != 1 {
				t.Errorf("%s: %d result messages for %s, want 1", st.name, n, id)
			}
		}
		h.waitIdle(20 * time.Second)
		writes, subjects := recordWrites(t, recs, before, lastSeq())
		if writes != st.writes {
			t.Errorf("%s: %d record writes, want %d: %v", st.name, writes, st.writes, subjects)
		} else {
			t.Logf("%s: %d record writes (%v) and %d result message(s)", st.name, writes, subjects, len(ids))
		}
	}
}

// recordWrites counts the writes of the records stream's messages after sequence from
// up to to (the messages of one atomic batch are one write) and lists their subjects,
// each with its operation header and batch.
func recordWrites(t *testing.T, s jetstream.Stream, from, to uint64) (uint64, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var writes uint64
	var out []string
	batches := map[string]bool{}
	for seq := from + 1; seq <= to; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			out = append(out, fmt.Sprintf("%d: %v", seq, err))
			writes++
			continue
		}
		b := m.Header.Get("Nats-Batch-Id")
		if b == "" || !batches[b] {
			writes++
		}
		if b != "" {
			batches[b] = true
			b = " batch " + b
		}
		out = append(out, fmt.Sprintf("%d: %s %s%s", seq, m.Subject, m.Header.Get("KV-Operation"), b))
	}
	return writes, out
}

// recordsStream returns the stream of the bridge's records bucket (which holds the
// idempotency keys too).
func recordsStream(t *testing.T, h *harness) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, "KV_"+h.cfg.WithDefaults().Bucket)
	requireOK(t, err)
	return s
}
