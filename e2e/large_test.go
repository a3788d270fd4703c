package e2e_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestLargeOutputsGoToTheObjectStore: a result and an event larger than the server's
// max payload (1 MiB) are stored in the object store; the messages carry a reference
// and the follower resolves it, so nothing is dropped.
func TestLargeOutputsGoToTheObjectStore(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("findings ", 300_000) // 2.7 MB of assistant text
	h := newHarness(t, withFake(hermestest.WithAgent(func(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
		if strings.Contains(turn.UserText, "big") {
			return hermestest.Reply{Text: big, Deltas: 1}
		}
		return hermestest.StubAgent(ctx, turn)
	})))

	t.Run("result", func(t *testing.T) {
		h := h.at(t)
		id := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"big report"}`), IdempotencyKey: "big-report"})
		res := h.followOK(id)
		if got := jstr(output(t, res), "choices", 0, "message", "content"); got != big {
			t.Fatalf("resolved output has %d bytes of content, want %d", len(got), len(big))
		}
		// On the wire the result is small and carries a reference.
		raw := h.lastOutput("hermes.results." + id)
		if len(raw.Data) > 64<<10 {
			t.Errorf("result message is %d bytes; the output was not offloaded", len(raw.Data))
		}
		wire, err := events.DecodeResult(raw.Header, raw.Data)
		requireOK(t, err)
		ref, ok := events.ParseRef(wire.Output)
		if !ok || ref.Bucket != "HERMES_OUTPUT_OBJECTS" || ref.Size < int64(len(big)) {
			t.Fatalf("wire output is not a reference: %.200s", wire.Output)
		}
		// A replay with the same key replays the reference and resolves the same output.
		again := h.callOK("chat", `{"prompt":"big report"}`, withKey("big-report"))
		if again.ReplayOf == nil || *again.ReplayOf != id {
			t.Errorf("replay_of %v, want %s", again.ReplayOf, id)
		}
		if got := jstr(output(t, again), "choices", 0, "message", "content"); got != big {
			t.Errorf("replayed output has %d bytes of content, want %d", len(got), len(big))
		}
		wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
	})

	t.Run("event", func(t *testing.T) {
		h := h.at(t)
		h.fake.InjectFault(hermestest.Fault{Route: "chat_stream", AfterEvents: 1, Oversized: 1_000_000})
		res, evs := h.call("chat_stream", `{"prompt":"small answer"}`)
		requireCompleted(t, res)
		var found bool
		for i, e := range evs {
			if e.Sequence != int64(i) {
				t.Fatalf("event %d has sequence %d", i, e.Sequence)
			}
			if s, ok := jsonValue(t, e.Event.Data).(string); ok && len(s) == 1_000_000 {
				found = true
			}
		}
		if !found {
			t.Fatalf("the 1 MB event was not delivered whole among %d events", len(evs))
		}
		wantEq(t, jstr(output(t, res), "text"), "stub reply: small answer", "text %q")
	})
}
