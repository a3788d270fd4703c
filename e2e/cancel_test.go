package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

func (h *harness) cancel(id string) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := h.client.Cancel(ctx, id)
	if err != nil {
		h.t.Fatalf("cancel %s: %v", id, err)
	}
	if r.ActionID != id {
		h.t.Errorf("cancel reply names %q, want %q", r.ActionID, id)
	}
	return r.State
}

// slowAgent blocks replies whose prompt contains "slow" until the request ends.
func slowAgent(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
	if strings.Contains(turn.UserText, "slow") {
		return hermestest.Reply{Text: "late words arrive slowly", Deltas: 20, DeltaDelay: 200 * time.Millisecond, Delay: 300 * time.Millisecond}
	}
	return hermestest.StubAgent(ctx, turn)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(slowAgent)), withConfig(func(c *bridge.Config) {
		c.Endpoints[0].MaxConcurrency = 1 // a second action waits for the first
		c.Workers = 4
	}))

	t.Run("in flight and queued", func(t *testing.T) {
		h := h.at(t)
		running := h.publish("chat_stream", events.Action{Input: mustJSON(t, `{"prompt":"slow story"}`)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		requireOK(t, h.fake.WaitCalls(ctx, "chat_stream", 1))
		queued := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"waits for the endpoint"}`)})
		// The queued one is claimed, then held by the endpoint's limit: cancel it first.
		store, err := kvstore.Open(context.Background(), h.js, kvstore.Config{Bucket: "HERMES_IDEMPOTENCY"})
		requireOK(t, err)
		h.eventually(10*time.Second, func() error {
			_, err := store.Get(context.Background(), kvstore.ActionKey(queued))
			return err
		})
		if s := h.cancel(queued); s != events.CancelCancelled {
			t.Fatalf("cancel queued: %s", s)
		}
		res, _ := h.follow(queued)
		if res.Status != events.StatusCancelled || res.Error == nil || res.Error.Code != "cancelled" || res.Error.UncertainOutcome {
			t.Fatalf("queued: %s %s", res.Status, errString(res.Error))
		}
		if s := h.cancel(running); s != events.CancelCancelled {
			t.Fatalf("cancel running: %s", s)
		}
		res, evs := h.follow(running)
		if res.Status != events.StatusCancelled || res.Error == nil || !res.Error.UncertainOutcome {
			t.Fatalf("running: %s %s", res.Status, errString(res.Error))
		}
		for i, e := range evs {
			if e.Sequence != int64(i) {
				t.Fatalf("event %d has sequence %d", i, e.Sequence)
			}
		}
		// The HTTP stream was closed: Hermes has nothing in flight.
		h.until(10*time.Second, "nothing in flight at Hermes", func() bool { return h.fake.InFlight() == 0 })
		wantEq(t, h.fake.Calls("chat"), 0, "cancelled queued chat reached Hermes %d times")
		// A late cancel changes nothing.
		if s := h.cancel(running); s != events.CancelAlreadySettled {
			t.Errorf("late cancel: %s", s)
		}
		h.requireResults(1, 10*time.Second, running)
	})

	t.Run("mid-stream keeps the text streamed", func(t *testing.T) {
		h := h.at(t)
		id := h.publish("chat_stream", events.Action{Input: mustJSON(t, `{"prompt":"slow story"}`)})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var text strings.Builder
		var n int
		res, err := h.client.Follow(ctx, id, func(e *events.EventData) error {
			text.WriteString(e.Text)
			if n++; n == 3 {
				if s := h.cancel(id); s != events.CancelCancelled {
					t.Errorf("cancel: %s", s)
				}
			}
			return nil
		}, nil)
		requireOK(t, err, "follow: %v")
		if res.Status != events.StatusCancelled || res.Error == nil || res.Error.Code != "cancelled" {
			t.Fatalf("status %s %s, want cancelled", res.Status, errString(res.Error))
		}
		var out struct {
			Text       string `json:"text"`
			EventCount int    `json:"event_count"`
			Terminal   bool   `json:"terminal"`
		}
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatalf("output %s: %v", res.Output, err)
		}
		// The output is what was streamed before the cancel, event for event.
		if n < 3 || out.EventCount != n || out.Text != text.String() || out.Text == "" || out.Terminal {
			t.Fatalf("output %s; want the %d events streamed, text %q, not terminal", res.Output, n, text.String())
		}
	})

	t.Run("unknown then published", func(t *testing.T) {
		h := h.at(t)
		if s := h.cancel("never-seen-1"); s != events.CancelUnknown {
			t.Fatalf("cancel unknown: %s", s)
		}
		before := h.fake.Calls("chat")
		h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"too late"}`)}, client.WithActionID("never-seen-1"))
		res, _ := h.follow("never-seen-1")
		requireEq(t, res.Status, events.StatusCancelled, "status %s")
		if c := h.fake.Calls("chat") - before; c != 0 {
			t.Errorf("an action cancelled before it arrived reached Hermes")
		}
	})

	t.Run("parked", func(t *testing.T) {
		h := h.at(t)
		h.callOK("session_create", map[string]any{"body": map[string]any{"id": "cancel-parked"}}, withKey("cp-create"))
		id := h.publish("session_delete", events.Action{Input: mustJSON(t, `{"session_id":"cancel-parked"}`), IdempotencyKey: "cp"})
		p := h.pendingOf(id)
		if s := h.cancel(id); s != events.CancelCancelled {
			t.Fatalf("cancel parked: %s", s)
		}
		final, _ := h.follow(id)
		requireEq(t, final.Status, events.StatusCancelled, "status %s")
		var out pendingOutput
		_ = jsonUnmarshal(p.Output, &out)
		h.decide(id, events.DecisionApprove, out.InputSHA256) // too late: ignored
		h.waitIdle(10 * time.Second)
		if c := h.fake.Calls("session_delete"); c != 0 {
			t.Errorf("a cancelled parked action reached Hermes")
		}
	})
}
