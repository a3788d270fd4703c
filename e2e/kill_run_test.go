package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// killRunAgent: a run with one tool and five answer deltas 80 ms apart, so that a kill
// lands mid-stream and the run goes on without the bridge.
func killRunAgent(_ context.Context, turn hermestest.Turn) hermestest.Reply {
	return hermestest.Reply{Text: "one two three four five", DeltaDelay: 80 * time.Millisecond,
		Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command":"ls"}`, Output: "a b"}}}
}

// killPoint is one place where the bridge process SIGKILLs itself.
type killPoint struct {
	name  string
	point string
	n     int  // the n-th time the point is reached (0: the stream's last event)
	lost  bool // the one uncertain window: the run may have started and its id is not stored
}

// runKillPoints are the kills of issue 15 in flow order: before the post, between the
// write-ahead mark and the post, between the post's answer and storing the run id, after
// storing it, mid-stream, and after the terminal event (before the result).
var runKillPoints = []killPoint{
	{"before the post", "claimed", 1, false},
	{"marked, not posted", "dispatched", 1, true},
	{"posted, id not stored", "run_started", 1, true},
	{"id stored", "run_bound", 1, false},
	{"mid-stream", "event", 3, false},
	{"after the terminal event", "event", 0, false},
}

// killTally counts how the killed actions settled, for the closing note's comparison.
type killTally struct {
	mu   sync.Mutex
	rows []string
}

func (k *killTally) add(format string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rows = append(k.rows, fmt.Sprintf(format, args...))
}

// killProfile is a Hermes profile of the kill matrix.
type killProfile struct {
	name    string
	durable bool // the endpoint advertises durable runs idempotency
	opts    []hermestest.Option
}

// killProfiles: v0.19 without runs idempotency, v0.19 with durable runs idempotency
// (WithRunsIdempotency), and v0.21.3, which advertises it.
var killProfiles = []killProfile{
	{"v0.19", false, nil},
	{"v0.19+idem", true, []hermestest.Option{hermestest.WithRunsIdempotency()}},
	{"v0.21", true, []hermestest.Option{hermestest.WithVersion(hermestest.Version021)}},
}

// TestKillRun: the real binary SIGKILLs itself at each point of a governed run; a fresh
// process settles the redelivered action. Every kill ends with the run's real result
// (completed, with the run's output) except the uncertain window (marked or posted, id
// not stored), which ends outcome_unknown, unless the endpoint has durable run
// idempotency (v0.19 with it, v0.21), where it too ends with the real result. Never two
// runs for one action, exactly one result message. The same kills on chat_stream end
// outcome_unknown from the write-ahead mark on.
func TestKillRun(t *testing.T) {
	t.Parallel()
	var tally killTally
	t.Cleanup(func() {
		for _, r := range tally.rows {
			t.Log(r)
		}
	})
	for _, prof := range killProfiles {
		for _, op := range []string{"run", "chat_stream"} {
			if prof.durable && op == "chat_stream" {
				continue
			}
			for _, kp := range runKillPoints {
				if op == "chat_stream" && strings.HasPrefix(kp.point, "run_") {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", op, prof.name, kp.name), func(t *testing.T) {
					t.Parallel()
					killRunAt(t, &tally, op, prof, kp)
				})
			}
		}
	}
}

func killRunAt(t *testing.T, tally *killTally, op string, prof killProfile, kp killPoint) {
	durable := prof.durable
	fakeOpts := append([]hermestest.Option{hermestest.WithAgent(killRunAgent)}, prof.opts...)
	h := newHarness(t, withoutBridge(), withFake(fakeOpts...))
	input := map[string]any{"input": "go"}
	if op == "chat_stream" {
		input = map[string]any{"prompt": "go"}
	}
	n := kp.n
	if n == 0 {
		n = referenceEvents(t, h, op, input)
	}
	p := h.startProc(crashAt(kp.point, n), fastRecovery())
	key := "k-" + strings.ReplaceAll(kp.name, " ", "-")
	id := h.publish(op, events.Action{Input: mustJSON(t, input), IdempotencyKey: key})
	if killed, _ := p.waitExit(30 * time.Second); !killed {
		t.Fatalf("the bridge was not killed at %s:%d", kp.point, n)
	}
	h.startProc(fastRecovery())
	res, evs := h.follow(id)
	h.waitIdle(20 * time.Second)
	requireEq(t, h.results(id), 1, "%d result messages, want 1")
	checkEventsContiguous(t, id, h.storedEvents(id), 0)

	uncertain := res.Error != nil && res.Error.Code == "outcome_unknown"
	wantLost := kp.lost && !durable
	if op == "chat_stream" {
		wantLost = kp.point != "claimed"
	}
	switch {
	case wantLost && !uncertain:
		t.Fatalf("%s: %s %s, want failed outcome_unknown", kp.name, res.Status, errString(res.Error))
	case !wantLost:
		requireCompleted(t, res)
		if op == "run" {
			out := output(t, res)
			if jstr(out, "output") != "one two three four five" || jstr(out, "status") != "completed" {
				t.Fatalf("%s: output %s", kp.name, res.Output)
			}
		}
	}
	started := h.fake.RunsStartedFor(key)
	if op == "chat_stream" {
		started = h.fake.Calls("chat_stream")
	}
	if started > 1 {
		t.Fatalf("%s: %d runs started for one action", kp.name, started)
	}
	outcome := "real result"
	if uncertain {
		outcome = "outcome_unknown"
	}
	tally.add("kill %-11s %-10s %-26s -> %-15s (events %d, runs started %d)", op, prof.name, kp.name, outcome, len(evs), started)
}

// referenceEvents runs the action once in a process of its own and returns how many
// events it had (the kill "after the terminal event" is at the last one).
func referenceEvents(t *testing.T, h *harness, op string, input map[string]any) int {
	t.Helper()
	p := h.startProc()
	defer p.terminate(10 * time.Second)
	res, evs := h.follow(h.publish(op, events.Action{Input: mustJSON(t, input), IdempotencyKey: "k-reference"}))
	requireCompleted(t, res)
	h.fake.ResetCounters()
	return len(evs)
}
