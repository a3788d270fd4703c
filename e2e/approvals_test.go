package e2e_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// pendingOf follows an action until its pending_approval result and returns it.
func (h *harness) pendingOf(id string) *events.Result {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan *events.Result, 1)
	go func() {
		_, _ = h.client.Follow(ctx, id, nil, func(r *events.Result) {
			select {
			case got <- r:
			default:
			}
			cancel()
		})
	}()
	select {
	case r := <-got:
		return r
	case <-time.After(20 * time.Second):
		h.t.Fatalf("no pending_approval result for %s", id)
		return nil
	}
}

type pendingOutput struct {
	CapabilityID string          `json:"capability_id"`
	Input        json.RawMessage `json:"input"`
	InputSHA256  string          `json:"input_sha256"`
	ExpiresAt    time.Time       `json:"expires_at"`
}

func (h *harness) decide(id, decision, hash string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.client.Decide(ctx, id, events.Approval{Decision: decision, Approver: "e2e", Reason: "test", InputSHA256: hash}); err != nil {
		h.t.Fatalf("decide %s: %v", id, err)
	}
}

// parkedDelete creates a session through the bridge and publishes its deletion
// without an approval (opts may choose its action id); it returns the action id and the
// pending output.
func parkedDelete(t *testing.T, h *harness, sid, key string, opts ...client.PublishOption) (string, pendingOutput) {
	t.Helper()
	res, _ := h.call("session_create", map[string]any{"body": map[string]any{"id": sid}}, withKey("create-"+key))
	requireCompleted(t, res)
	input := mustJSON(t, map[string]any{"session_id": sid})
	before := h.fake.Calls("session_delete")
	id := h.publish("session_delete", events.Action{Input: input, IdempotencyKey: key}, opts...)
	p := h.pendingOf(id)
	if p.Status != events.StatusPendingApproval || p.Error != nil {
		t.Fatalf("pending result %+v", p)
	}
	var out pendingOutput
	requireOK(t, json.Unmarshal(p.Output, &out))
	want, _ := events.InputSHA256(input)
	if out.InputSHA256 != want || out.CapabilityID != "cap:hermes_agent:primary:session_delete" || !sameJSON(t, out.Input, input) {
		t.Fatalf("pending output %+v, want hash %s", out, want)
	}
	requireEq(t, h.fake.Calls("session_delete")-before, 0, "a parked action reached Hermes (%d calls)")
	return id, out
}

func TestApprovals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) { c.ApprovalTTL = time.Minute }))

	t.Run("approve", func(t *testing.T) {
		h := h.at(t)
		id, out := parkedDelete(t, h, "appr-1", "appr-1")
		if time.Until(out.ExpiresAt) < 30*time.Second {
			t.Errorf("expires_at %s is not about a minute away", out.ExpiresAt)
		}
		h.decide(id, events.DecisionApprove, out.InputSHA256)
		h.followOK(id)
		wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1")
		// A second decision after the action ran changes nothing.
		h.decide(id, events.DecisionDeny, out.InputSHA256)
		h.requireResults(2, 10*time.Second, id) // pending + terminal
	})

	t.Run("deny", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("session_delete")
		id, out := parkedDelete(t, h, "appr-2", "appr-2")
		h.decide(id, events.DecisionDeny, out.InputSHA256)
		res, _ := h.follow(id)
		e := requireFailed(t, res, "approval_denied")
		if detail(e, "reason") != "test" {
			t.Errorf("details %v", e.Details)
		}
		if c := h.fake.Calls("session_delete") - before; c != 0 {
			t.Errorf("denied action reached Hermes")
		}
	})

	t.Run("mismatch", func(t *testing.T) {
		h := h.at(t)
		before := h.fake.Calls("session_delete")
		id, _ := parkedDelete(t, h, "appr-3", "appr-3")
		other, _ := events.InputSHA256(json.RawMessage(`{"session_id":"somebody-else"}`))
		h.decide(id, events.DecisionApprove, other)
		res, _ := h.follow(id)
		requireFailed(t, res, "approval_mismatch")
		if c := h.fake.Calls("session_delete") - before; c != 0 {
			t.Errorf("mismatched approval reached Hermes")
		}
	})

	t.Run("pre-approval", func(t *testing.T) {
		h := h.at(t)
		h.callOK("session_create", map[string]any{"body": map[string]any{"id": "appr-4"}}, withKey("create-appr-4"))
		h.callOK("session_delete", map[string]any{"session_id": "appr-4"}, withKey("appr-4"), preApproved)

		res, _ := h.call("session_delete", map[string]any{"session_id": "appr-4"}, withKey("appr-4b"), func(a *events.Action) {
			preApproved(a)
			a.Approval.Decision = events.DecisionDeny
		})
		requireFailed(t, res, "approval_denied")
		res, _ = h.call("session_delete", map[string]any{"session_id": "appr-4"}, withKey("appr-4c"), func(a *events.Action) {
			preApproved(a)
			a.Approval.InputSHA256 = "0000000000000000000000000000000000000000000000000000000000000000"
		})
		requireFailed(t, res, "approval_mismatch")
		// A pre-approval older than the window is not used: the action is parked.
		a := events.Action{Input: mustJSON(t, `{"session_id":"appr-4"}`), IdempotencyKey: "appr-4d"}
		preApproved(&a)
		old := time.Now().Add(-2 * time.Minute)
		a.Approval.DecidedAt = &old
		p := h.pendingOf(h.publish("session_delete", a))
		wantEq(t, p.Status, events.StatusPendingApproval, "stale pre-approval: status %s, want pending_approval")
	})
}

// TestApprovalExpiresWhileNoBridgeRuns: an action parked with a short window expires
// even though every bridge was down when it expired: the next bridge to start settles it.
func TestApprovalExpiresWhileNoBridgeRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) { c.ApprovalTTL = time.Second }))
	id, _ := parkedDelete(t, h, "exp-1", "exp-1")
	h.stopBridge(0)
	// Past expiry with no bridge running, the record is still parked.
	time.Sleep(1500 * time.Millisecond) // the approval window itself is what is tested
	store, err := kvstore.Open(context.Background(), h.js, kvstore.Config{Bucket: "HERMES_IDEMPOTENCY"})
	requireOK(t, err)
	if e, err := store.Get(context.Background(), kvstore.ActionKey(id)); err != nil || e.Record.State != kvstore.StateParked {
		t.Fatalf("record before restart: %+v %v", e.Record, err)
	}
	h.startBridge()
	res, _ := h.follow(id)
	requireFailed(t, res, "approval_expired")
	if c := h.fake.Calls("session_delete"); c != 0 {
		t.Errorf("an expired action reached Hermes")
	}
	h.until(10*time.Second, "the park entry is gone", func() bool {
		_, err := store.Get(context.Background(), kvstore.ParkKey(id))
		return err != nil
	})
}

// TestApprovalSurvivesRestart: a parked action is approved after the bridge that
// parked it stopped; another bridge runs it.
func TestApprovalSurvivesRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id, out := parkedDelete(t, h, "restart-1", "restart-1")
	h.stopBridge(0)
	h.startBridge()
	h.decide(id, events.DecisionApprove, out.InputSHA256)
	h.followOK(id)
	wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1")
}

// TestPreApprovalsRefused: with NoPreApprovals a publisher cannot approve its own
// deletion: the action is parked despite a valid pre-approval.
func TestPreApprovalsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) { c.NoPreApprovals = true }))
	h.callOK("session_create", map[string]any{"body": map[string]any{"id": "self-1"}}, withKey("create-self-1"))
	a := events.Action{Input: mustJSON(t, `{"session_id":"self-1"}`), IdempotencyKey: "self-1"}
	preApproved(&a)
	p := h.pendingOf(h.publish("session_delete", a))
	requireEq(t, p.Status, events.StatusPendingApproval, "status %s, want pending_approval")
	if c := h.fake.Calls("session_delete"); c != 0 {
		t.Errorf("a self-approved deletion reached Hermes")
	}
}

// TestParkedActionRedelivered: the same parked action published again (or redelivered)
// stays parked with its original expiry; it is neither re-parked nor run.
func TestParkedActionRedelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id, out := parkedDelete(t, h, "redeliver-1", "redeliver-1")
	// A raw copy with the same action id and no Nats-Msg-Id reaches the bridge again.
	a := events.Action{Input: mustJSON(t, `{"session_id":"redeliver-1"}`), IdempotencyKey: "redeliver-1"}
	data, _ := json.Marshal(a)
	h.publishRaw("hermes.actions.primary.session_delete", binaryHeader(id, events.TypeAction, ""), data)
	h.waitIdle(10 * time.Second)
	store, err := kvstore.Open(context.Background(), h.js, kvstore.Config{Bucket: "HERMES_IDEMPOTENCY"})
	requireOK(t, err)
	e, err := store.Get(context.Background(), kvstore.ActionKey(id))
	if err != nil || e.Record.State != kvstore.StateParked || !e.Record.ExpiresAt.Equal(out.ExpiresAt) {
		t.Fatalf("record after the copy: state %s expires %s (want parked, %s), err %v", e.Record.State, e.Record.ExpiresAt, out.ExpiresAt, err)
	}
	if c := h.fake.Calls("session_delete"); c != 0 {
		t.Errorf("the copy ran the parked action")
	}
	h.decide(id, events.DecisionApprove, out.InputSHA256)
	h.followOK(id)
}
