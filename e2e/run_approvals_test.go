package e2e_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// approvalRunAgent: a run whose one tool asks for an approval before it runs.
func approvalRunAgent(_ context.Context, turn hermestest.Turn) hermestest.Reply {
	return hermestest.Reply{Text: "cleaned " + turn.UserText, Tools: []hermestest.Tool{{Name: "terminal",
		Args: `{"command":"rm -rf build/"}`, Output: "removed", Approval: &hermestest.Approval{Command: "rm -rf build/"}}}}
}

// followDeciding follows a run and answers each pending_approval result with decide
// (nil: leave it); it returns the result, the events and the pending results seen.
func (h *harness) followDeciding(id string, decide func(p *events.Result) *events.Approval) (*events.Result, []*events.EventData, []*events.Result) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var evs []*events.EventData
	var pend []*events.Result
	res, err := h.client.Follow(ctx, id, func(e *events.EventData) error {
		mu.Lock()
		evs = append(evs, e)
		mu.Unlock()
		return nil
	}, func(p *events.Result) {
		mu.Lock()
		pend = append(pend, p)
		mu.Unlock()
		if decide == nil {
			return
		}
		if ap := decide(p); ap != nil {
			if err := h.client.Decide(ctx, id, *ap); err != nil {
				h.t.Errorf("decide: %v", err)
			}
		}
	})
	if err != nil {
		h.t.Fatalf("follow %s: %v", id, err)
	}
	return res, evs, pend
}

// TestGovernedRunApprovals: a run's tool approval goes out as a pending_approval result
// naming the command and the choices, and comes back from the approvals subject: approve
// runs the tool, deny does not, an approval with another input_sha256 counts as deny, and
// no decision within the approval window denies it. Each pending result is answered once.
func TestGovernedRunApprovals(t *testing.T) {
	h := newHarness(t, withFake(hermestest.WithAgent(approvalRunAgent)),
		withConfig(func(c *bridge.Config) { c.ApprovalTTL = 2 * time.Second }))

	sha := func(p *events.Result) string { return jstr(output(t, p), "input_sha256") }
	cases := []struct {
		name     string
		decide   func(p *events.Result) *events.Approval
		toolRuns int
	}{
		{"approve", func(p *events.Result) *events.Approval {
			return &events.Approval{Decision: events.DecisionApprove, Approver: "ops", InputSHA256: sha(p), Choice: events.ChoiceOnce}
		}, 1},
		{"deny", func(p *events.Result) *events.Approval {
			return &events.Approval{Decision: events.DecisionDeny, Approver: "ops", Reason: "not today"}
		}, 0},
		{"mismatch", func(p *events.Result) *events.Approval {
			return &events.Approval{Decision: events.DecisionApprove, Approver: "ops", InputSHA256: strings.Repeat("0", 64)}
		}, 0},
		{"expiry", nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := h.fake.ToolRuns("terminal")
			id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": tc.name}), IdempotencyKey: "k-" + tc.name})
			res, evs, pend := h.followDeciding(id, tc.decide)
			requireCompleted(t, res)
			if got := h.fake.ToolRuns("terminal") - before; got != tc.toolRuns {
				t.Fatalf("the tool ran %d times, want %d", got, tc.toolRuns)
			}
			requireEq(t, len(pend), 1, "%d pending results, want 1")
			po := output(t, pend[0])
			if jstr(po, "approval", "command") != "rm -rf build/" || len(jpath(po, "approval", "choices").([]any)) != 4 ||
				len(sha(pend[0])) != 64 || jstr(po, "expires_at") == "" || !strings.HasPrefix(jstr(po, "run_id"), "run_") {
				t.Fatalf("pending output %s", pend[0].Output)
			}
			var kinds []string
			for _, e := range evs {
				kinds = append(kinds, jstr(jsonValue(t, e.Event.Data), "event")+"/"+e.Kind)
			}
			joined := strings.Join(kinds, " ")
			if !strings.Contains(joined, "approval.request/pending_approval") || !strings.Contains(joined, "approval.responded/progress") {
				t.Fatalf("events %s", joined)
			}
			requireEq(t, len(h.requests("run_approval")), 1, "%d approval requests reached Hermes, want 1")
			choice := jstr(body(t, h.lastRequest("run_approval", 1)), "choice")
			if want := map[bool]string{true: "once", false: "deny"}[tc.toolRuns == 1]; choice != want {
				t.Fatalf("Hermes got choice %q, want %q", choice, want)
			}
			h.fake.ResetCounters()
		})
	}
}

// TestCLIApproveRun: `hermes-bridge approve <id> --yes` answers a governed run's tool
// approval (once) and follows the run to its result; `deny` denies the next one.
func TestCLIApproveRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(approvalRunAgent)))
	for _, tc := range []struct {
		cmd, choice string
		toolRuns    int
	}{{"approve", "", 1}, {"approve", "session", 1}, {"deny", "", 0}} {
		before := h.fake.ToolRuns("terminal")
		id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "cli " + tc.cmd + tc.choice}), IdempotencyKey: "k-cli-" + tc.cmd + tc.choice})
		h.pendingOf(id)
		args := []string{tc.cmd, id, "--yes", "--reason", "ticket OPS-7"}
		if tc.choice != "" {
			args = append(args, "--choice", tc.choice)
		}
		out, errOut, code := h.cli(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", tc.cmd, code, out, errOut)
		}
		h.followOK(id)
		if got := h.fake.ToolRuns("terminal") - before; got != tc.toolRuns {
			t.Fatalf("%s: the tool ran %d times, want %d", tc.cmd, got, tc.toolRuns)
		}
		want := map[string]string{"approve": "once", "deny": "deny"}[tc.cmd]
		if tc.choice != "" {
			want = tc.choice
		}
		reqs := h.requests("run_approval")
		if got := jstr(body(t, reqs[len(reqs)-1]), "choice"); got != want {
			t.Fatalf("%s %s: Hermes got choice %q", tc.cmd, tc.choice, got)
		}
		// Hermes 0.19 sends no request_id, and none is sent back.
		if _, ok := body(t, reqs[len(reqs)-1])["request_id"]; ok {
			t.Fatalf("%s %s: a request_id was sent to Hermes 0.19: %s", tc.cmd, tc.choice, reqs[len(reqs)-1].Body)
		}
	}
	_, errOut, code := h.cli("approve", "x", "--choice", "maybe")
	if code != 2 || !strings.Contains(errOut, "--choice") {
		t.Fatalf("approve --choice maybe: exit %d: %s", code, errOut)
	}
}
