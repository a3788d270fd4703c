package e2e_test

import (
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// checkPartialStream checks the events of a stream that did not complete: contiguous from
// 0, exactly want events, and an output aggregate that agrees.
func checkPartialStream(t *testing.T, res *events.Result, evs []*events.EventData, want int, truncated bool) {
	t.Helper()
	if len(evs) != want {
		t.Fatalf("%d events, want exactly %d", len(evs), want)
	}
	for i, e := range evs {
		if e.Sequence != int64(i) {
			t.Fatalf("event %d has sequence %d", i, e.Sequence)
		}
	}
	out := output(t, res)
	if out == nil {
		t.Fatalf("no output aggregate on the failed stream result")
	}
	if got := jint(out, "event_count"); got != int64(want) {
		t.Errorf("output event_count %d, want %d", got, want)
	}
	if jpath(out, "terminal") != false || jpath(out, "truncated") != truncated {
		t.Errorf("output terminal=%v truncated=%v, want false/%v", jpath(out, "terminal"), jpath(out, "truncated"), truncated)
	}
}

// TestStreamFailures: max_events truncation, a connection dropped before the terminal
// event, and a stream ending with a failure.
func TestStreamFailures(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent)))

	t.Run("chat_stream_truncated", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("chat_stream", `{"prompt":"one two three four five six seven","max_events":3}`)
		e := requireFailed(t, res, "stream_truncated")
		if e.Retryable {
			t.Errorf("truncation is retryable")
		}
		wantEq(t, detail(e, "max_events"), "3", "details.max_events %q, want 3")
		checkPartialStream(t, res, evs, 3, true)
	})

	t.Run("responses_stream_truncated", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("responses_stream", `{"input":"truncate the responses stream","max_events":1}`)
		requireFailed(t, res, "stream_truncated")
		checkPartialStream(t, res, evs, 1, true)
	})

	t.Run("session_chat_stream_truncated", func(t *testing.T) {
		h := h.at(t)
		h.callOK("session_create", `{"body":{"id":"trunc-session"}}`, withKey("trunc-create"))
		res, evs := h.call("session_chat_stream", `{"session_id":"trunc-session","message":"a b c d e","max_events":2}`)
		requireFailed(t, res, "stream_truncated")
		checkPartialStream(t, res, evs, 2, true)
	})

	t.Run("chat_stream_dropped", func(t *testing.T) {
		h := h.at(t)
		h.fake.InjectFault(hermestest.Fault{Route: "chat_stream", Drop: true, AfterEvents: 2})
		before := h.fake.Calls("chat_stream")
		res, evs := h.call("chat_stream", `{"prompt":"dropped after two events please"}`)
		e := requireFailed(t, res, "stream_incomplete")
		if !e.UncertainOutcome {
			t.Errorf("uncertain_outcome false: Hermes had started the turn")
		}
		if e.Retryable {
			t.Errorf("an incomplete unsafe stream is retryable")
		}
		checkPartialStream(t, res, evs, 2, false)
		wantEq(t, h.fake.Calls("chat_stream")-before, 1, "chat_stream calls %d, want 1 (an unsafe stream is never resent)")
	})

	t.Run("chat_stream_agent_failed", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("chat_stream", `{"prompt":"fail: in the stream"}`)
		requireFailed(t, res, "stream_failed")
		if len(evs) == 0 {
			t.Fatalf("no events")
		}
		for i, e := range evs {
			if e.Sequence != int64(i) {
				t.Fatalf("event %d has sequence %d", i, e.Sequence)
			}
		}
		if out := output(t, res); jint(out, "event_count") != int64(len(evs)) {
			t.Errorf("output %s, %d events", res.Output, len(evs))
		}
	})

	t.Run("stream_after_failures", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("chat_stream", `{"prompt":"healthy again"}`)
		checkStream(t, res, evs, "chat_stream", "stub reply: healthy again")
	})
}
