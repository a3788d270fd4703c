package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// twoApprovalsAgent: a run whose two tools each ask for an approval, one after the other,
// then streams its answer slowly (a window in which the run is still live).
func twoApprovalsAgent(_ context.Context, turn hermestest.Turn) hermestest.Reply {
	return hermestest.Reply{Text: "cleaned " + turn.UserText + strings.Repeat(" and more", 20), DeltaDelay: 50 * time.Millisecond,
		Tools: []hermestest.Tool{
			{Name: "terminal", Args: `{"command":"rm -rf build/"}`, Output: "removed",
				Approval: &hermestest.Approval{Command: "rm -rf build/", Description: "delete the build tree"}},
			{Name: "terminal", Args: `{"command":"rm -rf dist/"}`, Output: "removed",
				Approval: &hermestest.Approval{Command: "rm -rf dist/", Description: "delete the dist tree"}},
		}}
}

// slowApprovalAgent: a run whose one tool asks for an approval, then streams its answer
// slowly (a window in which the run is live with nothing pending).
func slowApprovalAgent(_ context.Context, turn hermestest.Turn) hermestest.Reply {
	return hermestest.Reply{Text: "cleaned " + turn.UserText + strings.Repeat(" and more", 40), DeltaDelay: 50 * time.Millisecond,
		Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command":"rm -rf build/"}`, Output: "removed",
			Approval: &hermestest.Approval{Command: "rm -rf build/", Description: "delete the build tree"}}}}
}

// pendingEntry is one element of `hermes-bridge pending --json`.
type pendingEntry struct {
	Kind        string    `json:"kind"`
	ActionID    string    `json:"action_id"`
	Endpoint    string    `json:"endpoint"`
	RunID       string    `json:"run_id"`
	RequestID   string    `json:"request_id"`
	Command     string    `json:"command"`
	Description string    `json:"description"`
	Choices     []string  `json:"choices"`
	Since       time.Time `json:"since"`
	ExpiresAt   time.Time `json:"expires_at"`
	InputSHA256 string    `json:"input_sha256"`
}

// pendingRun polls `hermes-bridge pending --json` until it lists a tool approval of
// action id that accept says is the one awaited; it fails the test after 20 s.
func (h *harness) pendingRun(id string, accept func(pendingEntry) bool) pendingEntry {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		out, errOut, code := h.cli("pending", "--json")
		if code != 0 {
			h.t.Fatalf("pending --json: exit %d\n%s\n%s", code, out, errOut)
		}
		last = out
		var list []pendingEntry
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			h.t.Fatalf("pending --json: %v\n%s", err, out)
		}
		for _, p := range list {
			if p.ActionID == id && p.Kind == "run_approval" && accept(p) {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("pending never listed the wanted tool approval of %s; last listing:\n%s", id, last)
	return pendingEntry{}
}

// TestRunApprovalRequestID (Hermes 0.21): `pending` lists a run that waits for a tool
// approval with its request_id, command, description and choices; `approve` answers
// that request by its request_id (the approval POST echoes it), and the run's second
// request is answered by its own; once the run ends, pending no longer lists it.
func TestRunApprovalRequestID(t *testing.T) {
	h := newHarness(t, withFake(hermestest.WithVersion(hermestest.Version021), hermestest.WithAgent(twoApprovalsAgent)))
	id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "two tools"}), IdempotencyKey: "k-rid"})
	seen := map[string]bool{}
	for i, want := range []struct{ cmd, desc string }{{"rm -rf build/", "delete the build tree"}, {"rm -rf dist/", "delete the dist tree"}} {
		p := h.pendingRun(id, func(p pendingEntry) bool { return p.RequestID != "" && !seen[p.RequestID] })
		seen[p.RequestID] = true
		ri, ok := h.fake.Run(p.RunID)
		if !ok || ri.Status != "waiting_for_approval" || ri.ApprovalRequestID != p.RequestID {
			t.Fatalf("approval %d: pending lists %+v; the fake's run %+v", i+1, p, ri)
		}
		if p.Endpoint != "primary" || p.Command != want.cmd || p.Description != want.desc ||
			strings.Join(p.Choices, ",") != "once,session,always,deny" || p.Since.IsZero() || p.ExpiresAt.IsZero() || len(p.InputSHA256) != 64 {
			t.Fatalf("approval %d: pending lists %+v", i+1, p)
		}
		// The table shows it too, the tool's command and description under it.
		if out, _, _ := h.cli("pending"); !strings.Contains(out, "runs waiting for a tool approval") ||
			!strings.Contains(out, p.RequestID) || !strings.Contains(out, want.cmd) || !strings.Contains(out, want.desc) {
			t.Fatalf("approval %d: pending does not show it:\n%s", i+1, out)
		}
		out, errOut, code := h.cli("approve", id, "--yes", "--no-follow")
		if code != 0 {
			t.Fatalf("approve %d: exit %d\n%s\n%s", i+1, code, out, errOut)
		}
		if !strings.Contains(out, p.RequestID) {
			t.Fatalf("approve %d does not show the request_id %s:\n%s", i+1, p.RequestID, out)
		}
		reqs := h.waitRequests("run_approval", i+1)
		if got := jstr(body(t, reqs[i]), "request_id"); got != p.RequestID {
			t.Fatalf("approval %d: Hermes got request_id %q, want %q", i+1, got, p.RequestID)
		}
	}
	res := h.followOK(id)
	if !strings.Contains(jstr(output(t, res), "output"), "cleaned two tools") {
		t.Fatalf("result %s", res.Output)
	}
	if got := h.fake.ToolRuns("terminal"); got != 2 {
		t.Fatalf("the tools ran %d times, want 2", got)
	}
	out, _, _ := h.cli("pending", "--json")
	if strings.Contains(out, id) {
		t.Fatalf("pending still lists the finished run:\n%s", out)
	}
}

// TestRunApprovalStale (Hermes 0.21): a decision naming a request_id the run does not
// wait for is not applied (neither approves nor denies the pending request) and is
// reported; a decision Hermes refuses as no longer pending (answered elsewhere, and the
// run goes on) is reported with the run's status re-read, and never retried.
func TestRunApprovalStale(t *testing.T) {
	h := newHarness(t, withFake(hermestest.WithVersion(hermestest.Version021), hermestest.WithAgent(slowApprovalAgent)))
	id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "stale"}), IdempotencyKey: "k-stale"})
	p := h.pendingRun(id, func(p pendingEntry) bool { return p.RequestID != "" })

	// 1. A decision for another request: reported stale, the pending request untouched.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.client.Decide(ctx, id, events.Approval{Decision: events.DecisionApprove, Approver: "ops",
		InputSHA256: p.InputSHA256, RequestID: strings.Repeat("f", 32)}); err != nil {
		t.Fatal(err)
	}
	h.waitLog(id, "stale")
	if ri, _ := h.fake.Run(p.RunID); ri.ApprovalRequestID != p.RequestID || ri.PendingApprovals != 1 {
		t.Fatalf("the stale decision touched the run: %+v", ri)
	}
	requireEq(t, len(h.requests("run_approval")), 0, "%d approval requests reached Hermes, want 0")

	// 2. The request is answered at Hermes directly; the bridge's decision then finds it
	// no longer pending: one POST, reported with the run's status.
	b, _ := json.Marshal(map[string]any{"choice": "once", "request_id": p.RequestID})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.fake.URL+"/v1/runs/"+p.RunID+"/approval", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+h.fake.APIKey())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("direct approval: %d", resp.StatusCode)
	}
	if err := h.client.Decide(ctx, id, events.Approval{Decision: events.DecisionApprove, Approver: "ops",
		InputSHA256: p.InputSHA256, RequestID: p.RequestID}); err != nil {
		t.Fatal(err)
	}
	l := h.waitLog(id, "approval_not_pending")
	if l.str("run_status") == "" || l.str("request_id") != p.RequestID {
		t.Fatalf("the report of the refused decision lacks the run's status or request: %v", l)
	}
	// Direct request + the bridge's one POST (not retried).
	requireEq(t, len(h.requests("run_approval")), 2, "%d approval requests reached Hermes, want 2 (no retry)")

	// The run, approved at Hermes, completes.
	h.followOK(id)
	if got := h.fake.ToolRuns("terminal"); got != 1 {
		t.Fatalf("the tool ran %d times, want 1", got)
	}
}

// waitRequests polls until the fake recorded at least n requests on route (20 s).
func (h *harness) waitRequests(route string, n int) []hermestest.Recorded {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		reqs := h.requests(route)
		if len(reqs) >= n {
			return reqs
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%d %s requests, want %d", len(reqs), route, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog polls the bridge's log until a line of action id names substr in any of its
// string fields (20 s), and returns it.
func (h *harness) waitLog(id, substr string) logLine {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, l := range h.logLines() {
			if l.str("action_id") != id {
				continue
			}
			for _, v := range l {
				if s, ok := v.(string); ok && strings.Contains(s, substr) {
					return l
				}
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no log line of %s names %q:\n%s", id, substr, h.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunApprovalAskedFromStatus (Hermes 0.21): a replica that takes a governed run over
// cannot read its events (Hermes gives a run's events to its first subscriber only), so
// it follows the run's status; the tool approval the run comes to wait for then is asked
// from the status, which names its request, and the run completes once it is answered.
func TestRunApprovalAskedFromStatus(t *testing.T) {
	h := newHarness(t, withFake(hermestest.WithVersion(hermestest.Version021), hermestest.WithAgent(twoApprovalsAgent)),
		withConfig(func(c *bridge.Config) {
			c.AckWait = 2 * time.Second
			c.Heartbeat = 500 * time.Millisecond
			c.Lease = 2 * time.Second
			c.ShutdownGrace = 500 * time.Millisecond
			c.ApprovalTTL = time.Minute
		}))
	id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "taken over"}), IdempotencyKey: "k-status-ask"})
	first := h.pendingRun(id, func(p pendingEntry) bool { return p.RequestID != "" })
	h.startBridge() // replica 1
	h.stopBridge(0) // the owner hands the run back; replica 1 takes it over
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.client.Decide(ctx, id, events.Approval{Decision: events.DecisionApprove, Approver: "ops",
		InputSHA256: first.InputSHA256, RequestID: first.RequestID}); err != nil {
		t.Fatal(err)
	}
	second := h.pendingRun(id, func(p pendingEntry) bool { return p.RequestID != "" && p.RequestID != first.RequestID })
	if ri, ok := h.fake.Run(second.RunID); !ok || ri.ApprovalRequestID != second.RequestID || second.Command != "rm -rf dist/" {
		t.Fatalf("pending lists %+v; the fake's run %+v", second, ri)
	}
	if err := h.client.Decide(ctx, id, events.Approval{Decision: events.DecisionApprove, Approver: "ops",
		InputSHA256: second.InputSHA256, RequestID: second.RequestID}); err != nil {
		t.Fatal(err)
	}
	res := h.followOK(id)
	if !strings.Contains(jstr(output(t, res), "output"), "cleaned taken over") {
		t.Fatalf("result %s", res.Output)
	}
	wantEq(t, h.fake.ToolRuns("terminal"), 2, "the tools ran %d times, want 2")
	wantEq(t, h.fake.RunsStartedFor("k-status-ask"), 1, "Hermes started %d runs, want 1")
}
