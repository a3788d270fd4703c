package e2e_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// The governed run against Hermes 0.21.3 (reference/hermes-runs-v0.21.md): interrupted
// runs, the 409 idempotency_key_conflict, and stop on a finished run.

// runOfKey waits until the fake has a run started with key in one of statuses and returns
// its id.
func runOfKey(t *testing.T, h *harness, key string, statuses ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, id := range h.fake.RunIDs() {
			if ri, ok := h.fake.Run(id); ok && ri.IdempotencyKey == key {
				for _, s := range statuses {
					if ri.Status == s {
						return id
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no run of key %s in %v", key, statuses)
	return ""
}

// TestRunInterrupted: a run in flight when the Hermes gateway restarts ends interrupted;
// the action settles failed run_interrupted with uncertain_outcome (tools may have run),
// exactly one result, and the bridge never starts the run again by itself. So it does
// when the bridge that follows the run (its events stream breaks, its status says
// interrupted), and when a bridge process that takes the action over after a kill, with
// the run's id stored (it polls the run) or not (it posts again under the same key,
// Hermes replays the interrupted run, and it follows that).
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, crash string }{
		{"following", ""},
		{"takeover, id stored", "run_bound"},
		{"takeover, id not stored", "run_started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			defer close(release)
			opts := []harnessOption{withFake(hermestest.WithVersion(hermestest.Version021), runAgent(release))}
			if tc.crash != "" {
				opts = append(opts, withoutBridge())
			}
			h := newHarness(t, opts...)
			key := "k-interrupted"
			var p *proc
			if tc.crash != "" {
				p = h.startProc(crashAt(tc.crash, 1), fastRecovery())
			}
			id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "slow work"}), IdempotencyKey: key})
			runOfKey(t, h, key, "running")
			if p != nil {
				if killed, _ := p.waitExit(30 * time.Second); !killed {
					t.Fatalf("the bridge was not killed at %s", tc.crash)
				}
			}
			h.fake.Restart()
			if p != nil {
				h.startProc(fastRecovery())
			}
			res, _ := h.follow(id)
			h.waitIdle(20 * time.Second)
			e := requireFailed(t, res, "run_interrupted")
			if !e.UncertainOutcome || e.Retryable || detail(e, "run_status") != "interrupted" || detail(e, "run_id") == "" {
				t.Fatalf("interrupted run: %s", errString(e))
			}
			requireEq(t, h.results(id), 1, "%d result messages, want 1")
			requireEq(t, h.fake.RunsStarted(), 1, "%d runs started, want 1 (never re-run by the bridge)")
			if tc.crash == "run_started" {
				// The taker posted again under the key and Hermes replayed the run.
				requireEq(t, h.fake.Calls("run_start"), 2, "%d posts, want 2")
			}
			if out := output(t, res); jstr(out, "status") != "interrupted" {
				t.Fatalf("output %s", res.Output)
			}
		})
	}
}

// TestRunIdempotencyKeyConflict: Hermes answers 409 idempotency_key_conflict (its key was
// used with another payload: here a run started directly over HTTP before the action);
// the action settles failed idempotency_conflict, permanent, after one post.
func TestRunIdempotencyKeyConflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithVersion(hermestest.Version021), runAgent(nil)))
	const key = "k-hermes-conflict"
	req, err := http.NewRequest(http.MethodPost, h.fake.URL+"/v1/runs", bytes.NewReader([]byte(`{"input":"something else"}`)))
	requireOK(t, err)
	req.Header.Set("Authorization", "Bearer "+h.fake.APIKey())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	requireOK(t, err)
	_ = resp.Body.Close()
	requireEq(t, resp.StatusCode, http.StatusAccepted, "direct post: %d, want 202")
	h.fake.ResetCounters()

	res, _ := h.call("run", map[string]any{"input": "list files"}, withKey(key))
	h.waitIdle(20 * time.Second)
	e := requireFailed(t, res, "idempotency_conflict")
	if e.Retryable || e.UncertainOutcome || detail(e, "remote_code") != "idempotency_key_conflict" {
		t.Fatalf("conflict: %s", errString(e))
	}
	requireEq(t, h.fake.Calls("run_start"), 1, "%d posts, want 1 (not retried)")
	requireEq(t, h.results(res.ActionID), 1, "%d result messages, want 1")
}

// TestRunCancelRacesCompletion: a cancel that reaches a run which has already finished
// (the bridge had not seen its end yet) settles with the run's real result, whether
// Hermes answers the stop 404 (0.19) or 200 with the finished status (0.21); a stop
// answered 409 run_not_active (another gateway process owns the run, 0.21) is followed
// by polling until the run ends.
func TestRunCancelRacesCompletion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, version string
		detach        bool
	}{
		{"v0.19 stop 404", hermestest.Version019, false},
		{"v0.21 stop 200 status", hermestest.Version021, false},
		{"v0.21 stop 409 run_not_active", hermestest.Version021, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			h := newHarness(t, withFake(hermestest.WithVersion(tc.version), hermestest.WithRunsIdempotency(), runAgent(release)))
			// The events stream stalls: the bridge does not see the run's end there.
			h.fake.InjectFault(hermestest.Fault{Route: "run_events", Stall: true})
			key := "k-race"
			id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "slow work"}), IdempotencyKey: key})
			runID := runOfKey(t, h, key, "running")
			if tc.detach {
				if !h.fake.Detach(runID) {
					t.Fatal("detach: the run is not live")
				}
				h.cancel(id)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				requireOK(t, h.fake.WaitCalls(ctx, "run_stop", 1))
				close(release)
			} else {
				close(release)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				requireOK(t, h.fake.WaitRunStatus(ctx, runID, "completed"))
				h.cancel(id)
			}
			res, _ := h.follow(id)
			h.waitIdle(20 * time.Second)
			requireCompleted(t, res)
			if out := output(t, res); jstr(out, "status") != "completed" || jstr(out, "output") != "slow done" {
				t.Fatalf("output %s", res.Output)
			}
			if h.fake.Calls("run_stop") < 1 {
				t.Fatal("the run was never asked to stop")
			}
			requireEq(t, h.results(id), 1, "%d result messages, want 1")
		})
	}
}
