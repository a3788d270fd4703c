package e2e_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// steerAgent scripts the fake's runs by their user text: "follow" waits (bounded) for
// steer text and answers with it; "ignore" waits for release and never reads steer text;
// "ask" runs a tool that waits for an approval; anything else answers at once.
func steerAgent(release <-chan struct{}) hermestest.Option {
	return hermestest.WithAgent(func(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
		switch {
		case strings.HasPrefix(turn.UserText, "follow"):
			deadline := time.After(20 * time.Second)
			for {
				if turn.Steered != nil {
					if got := turn.Steered(); len(got) > 0 {
						return hermestest.Reply{Text: "steered: " + strings.Join(got, "|")}
					}
				}
				select {
				case <-ctx.Done():
					return hermestest.Reply{Text: "stopped"}
				case <-deadline:
					return hermestest.Reply{Text: "never steered"}
				case <-time.After(10 * time.Millisecond):
				}
			}
		case strings.HasPrefix(turn.UserText, "ignore"):
			select {
			case <-release:
			case <-ctx.Done():
			}
			return hermestest.Reply{Text: "ignored"}
		case strings.HasPrefix(turn.UserText, "ask"):
			return approvalRunAgent(ctx, turn)
		}
		return hermestest.Reply{Text: "done"}
	})
}

// waitFollowed waits until the bridge follows the run with key (it reads its events)
// and the run is in status, and returns the run's id.
func (h *harness) waitFollowed(key, status string) string {
	h.t.Helper()
	runID := h.waitRunStatus(key, status)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	requireOK(h.t, h.fake.WaitRun(ctx, runID, func(ri hermestest.RunInfo) bool { return ri.Subscribed }))
	return runID
}

// steer sends a steer request and returns the reply (a failed request fails the test).
func (h *harness) steer(id, text string) *events.SteerReply {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := h.client.Steer(ctx, id, text)
	if err != nil {
		h.t.Fatalf("steer %s: %v", id, err)
	}
	if r.ActionID != id {
		h.t.Fatalf("steer reply names action %q, want %q", r.ActionID, id)
	}
	return r
}

func requireRefused(t *testing.T, r *events.SteerReply, code string) {
	t.Helper()
	if r.State != events.SteerRefused || r.Code != code || r.Reason == "" {
		t.Fatalf("steer reply %+v, want refused with code %s and a reason", r, code)
	}
}

// TestGovernedRunSteer (Hermes v0.21): a steer request reaches the running run (the
// agent reads it and the run's answer shows it); text the agent never read comes back
// as output.pending_steer; a run waiting for a tool approval, a settled run, an action
// that is not a run and an unknown action are refused with their codes; a request that
// is not a steer request is refused invalid_request, once. Two replicas run: whichever
// follows the run answers for it. The text never reaches the logs.
func TestGovernedRunSteer(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, withFake(hermestest.WithVersion(hermestest.Version021), steerAgent(release)),
		withConfig(func(c *bridge.Config) { c.ApprovalTTL = 30 * time.Second }))
	// Two replicas: the one that follows a run answers, the other stays silent about it.
	h.startBridge()
	const secret = "focus on the failing tests, secret-steer-7f3a"

	// Accepted: the agent reads the text and answers with it.
	id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "follow me"}), IdempotencyKey: "k-steer-1"})
	runID := h.waitFollowed("k-steer-1", "running")
	if r := h.steer(id, secret); r.State != events.SteerAccepted || r.Code != "" {
		t.Fatalf("steer a running run: %+v", r)
	}
	res, _ := h.follow(id)
	out := output(t, res)
	if jstr(out, "output") != "steered: "+secret || jpath(out, "pending_steer") != nil {
		t.Fatalf("steered run output %s", res.Output)
	}
	if ri, _ := h.fake.Run(runID); !slices.Equal(ri.Steers, []string{secret}) {
		t.Fatalf("the fake's run took steers %q", ri.Steers)
	}
	// Settled: refused, and nothing more reaches Hermes.
	requireRefused(t, h.steer(id, "too late"), events.SteerNotRunning)
	if ri, _ := h.fake.Run(runID); len(ri.Steers) != 1 {
		t.Fatalf("the fake's run took steers %q after it settled", ri.Steers)
	}

	// Never read: pending_steer in the result.
	id2 := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "ignore me"}), IdempotencyKey: "k-steer-2"})
	h.waitFollowed("k-steer-2", "running")
	if r := h.steer(id2, "use the staging database"); r.State != events.SteerAccepted {
		t.Fatalf("steer a running run: %+v", r)
	}
	release <- struct{}{}
	res, _ = h.follow(id2)
	requireCompleted(t, res)
	if got := jstr(output(t, res), "pending_steer"); got != "use the staging database" {
		t.Fatalf("pending_steer %q in %s", got, res.Output)
	}

	// Waiting for a tool approval: Hermes does not accept steer (409), refused not_running.
	id3 := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "ask first"}), IdempotencyKey: "k-steer-3"})
	h.waitFollowed("k-steer-3", "waiting_for_approval")
	requireRefused(t, h.steer(id3, "hurry"), events.SteerNotRunning)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := h.client.Cancel(ctx, id3); err != nil || r.State != events.CancelCancelled {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	h.follow(id3)

	// Not a run, unknown.
	chat := h.callOK("chat", map[string]any{"prompt": "hello"})
	requireRefused(t, h.steer(chat.ActionID, "x"), events.SteerNotARun)
	requireRefused(t, h.steer("no-such-action", "x"), events.SteerUnknown)

	// Not a steer request: refused before anything is looked up.
	for _, body := range []string{``, `{}`, `{"text":"   "}`, `{"text":1}`, `{"text":"a","extra":1}`, `[1]`} {
		m, err := h.nc.Request(events.Subjects{}.Steer(id2), []byte(body), 10*time.Second)
		requireOK(t, err)
		requireOK(t, schemas.ValidateSteerReply(m.Data))
		var r events.SteerReply
		requireOK(t, json.Unmarshal(m.Data, &r))
		requireRefused(t, &r, events.SteerInvalid)
	}
	// Exactly one reply per request (each with its own reply subject), whichever replica
	// answers.
	for _, tc := range []struct{ id, body string }{{id2, `{}`}, {id2, `{"text":"x"}`}, {"no-such-action", `{"text":"x"}`}} {
		inbox := nats.NewInbox()
		replies, err := h.nc.SubscribeSync(inbox)
		requireOK(t, err)
		requireOK(t, h.nc.PublishRequest(events.Subjects{}.Steer(tc.id), inbox, []byte(tc.body)))
		if _, err := replies.NextMsg(10 * time.Second); err != nil {
			t.Fatalf("no reply to %s on %s: %v", tc.body, tc.id, err)
		}
		if m, err := replies.NextMsg(300 * time.Millisecond); err == nil {
			t.Fatalf("a second reply to %s on %s: %s", tc.body, tc.id, m.Data)
		}
		requireOK(t, replies.Unsubscribe())
	}

	if strings.Contains(h.logs.String(), secret) || strings.Contains(h.logs.String(), "staging database") {
		t.Fatal("steer text in the bridge's log")
	}
}

// TestGovernedRunSteerUnsupported: an endpoint that does not advertise steer (Hermes
// v0.19) refuses with steer_unsupported, sends Hermes nothing, and the run goes on.
func TestGovernedRunSteerUnsupported(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, withFake(hermestest.WithVersion(hermestest.Version019), steerAgent(release)))
	id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "ignore me"}), IdempotencyKey: "k-steer-old"})
	h.waitFollowed("k-steer-old", "running")
	requireRefused(t, h.steer(id, "focus"), events.SteerUnsupported)
	for _, r := range h.fake.Requests() {
		if strings.HasSuffix(r.Path, "/steer") {
			t.Fatalf("a steer request reached Hermes: %s %s", r.Method, r.Path)
		}
	}
	release <- struct{}{}
	res, _ := h.follow(id)
	requireCompleted(t, res)
	if jpath(output(t, res), "pending_steer") != nil {
		t.Fatalf("pending_steer in %s", res.Output)
	}
}
