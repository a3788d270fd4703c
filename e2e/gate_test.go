package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// gateAgent answers every turn after 300ms: long enough that 14 runs started together
// overlap, so a Hermes whose gate admits 10 refuses the other 4.
func gateAgent(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
	r := hermestest.StubAgent(ctx, turn)
	r.Delay = 300 * time.Millisecond
	return r
}

// TestLearnedGate14vs10: a bridge configured for 14 concurrent calls in front of a Hermes
// (v0.19) whose gate admits 10 runs. 100 run actions all complete; the gate's 429s (they
// do happen: the bridge starts at its configured 14) cost no action an attempt (every
// action settles at attempt 1); and the endpoint's learned limit settles at the gate: 10, or 9 when a run that
// had ended at Hermes was not yet given back by the bridge as a 429 came (the estimate
// counts the runs the bridge still holds), never above.
func TestLearnedGate14vs10(t *testing.T) {
	t.Parallel()
	reg := opshttp.NewRegistry()
	h := newHarness(t, withFake(hermestest.WithAgent(gateAgent), hermestest.WithMaxConcurrentRuns(10)),
		withConfig(func(c *bridge.Config) {
			c.Endpoints[0].MaxConcurrency = 14
			c.Metrics = reg
		}))

	const n = 100
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": fmt.Sprintf("gated run %d", i)}),
			IdempotencyKey: fmt.Sprintf("gate-%d", i), TimeoutMS: bpInt64(120000)})
	}
	completed := 0
	for _, id := range ids {
		res, _ := h.follow(id)
		if res.Status == events.StatusCompleted {
			completed++
		} else {
			t.Errorf("%s: %s %s", id, res.Status, errString(res.Error))
		}
	}
	requireEq(t, completed, n, "%d of 100 run actions completed")
	h.waitIdle(20 * time.Second)

	posts := h.fake.Calls("run_start")
	if posts <= n {
		t.Errorf("%d run posts for %d actions: the gate never answered 429, the test proves nothing", posts, n)
	}
	t.Logf("%d run posts for %d actions (%d gate 429s)", posts, n, posts-n)
	for _, id := range ids {
		lines := h.actionLogs(id)
		if len(lines) == 0 {
			t.Errorf("%s: no action log line", id)
			continue
		}
		if last := lines[len(lines)-1]; last["attempt"] != 1.0 {
			t.Errorf("%s: settled at attempt %v, want 1 (a gate 429 spends no attempt); log %v", id, last["attempt"], lines)
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := scraped{}
	for _, mf := range mfs {
		s[mf.GetName()] = mf
	}
	limit := s.value(bridge.MetricConcurrencyLimit, "endpoint", "primary")
	if limit < 9 || limit > 10 {
		t.Errorf("learned concurrency limit %v, want the gate (10, or 9)", limit)
	}
	if got := s.value(bridge.MetricGateRejections, "endpoint", "primary"); got != float64(posts-n) {
		t.Errorf("gate rejections metric %v, want %d (the fake's 429s)", got, posts-n)
	}
}
