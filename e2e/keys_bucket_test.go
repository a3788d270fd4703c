package e2e_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// TestKeysLayout: where a deployment keeps its idempotency keys. A new one keeps them in
// the records bucket, each key with the message TTL HERMES_BRIDGE_IDEMPOTENCY_TTL, and
// creates no keys bucket. One that has a keys bucket (an earlier release made it) keeps
// using it, says so once at start, and a key claimed before a restart still replays.
func TestKeysLayout(t *testing.T) {
	t.Parallel()
	t.Run("records bucket", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.callOK("chat", `{"prompt":"a key"}`, withKey("layout-key"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfg := h.cfg.WithDefaults()
		if _, err := h.js.KeyValue(ctx, cfg.KeysBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Fatalf("keys bucket %s: %v, want none", cfg.KeysBucket, err)
		}
		recs := recordsStream(t, h)
		m, err := recs.GetLastMsgForSubject(ctx, "$KV."+cfg.Bucket+".idem.>")
		requireOK(t, err)
		if got, want := m.Header.Get(jetstream.MsgTTLHeader), cfg.IdempotencyTTL.String(); got != want {
			t.Errorf("the key's message TTL is %q, want %q", got, want)
		}
		if sc := recs.CachedInfo().Config; !sc.AllowMsgTTL || !sc.AllowAtomicPublish {
			t.Errorf("records stream: allow_msg_ttl %v allow_atomic %v, want both", sc.AllowMsgTTL, sc.AllowAtomicPublish)
		}
		h.requireLog("an unsafe keyed action claims its key and its record in two writes")
	})
	t.Run("keys bucket", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.stopBridge(0)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfg := h.cfg.WithDefaults()
		_, err := h.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.KeysBucket, TTL: cfg.IdempotencyTTL})
		requireOK(t, err)
		h.startBridge()
		res := h.callOK("chat", `{"prompt":"before the restart"}`, withKey("layout-key"))
		keys, err := h.js.KeyValue(ctx, cfg.KeysBucket)
		requireOK(t, err)
		if _, err := keys.Get(ctx, kvstore.IdempotencyKey(res.CapabilityID, "layout-key")); err != nil {
			t.Fatalf("the key is not in the keys bucket: %v", err)
		}
		h.waitIdle(10 * time.Second)
		h.stopBridge(0)
		h.startBridge()
		h.requireLog("idempotency keys live in their own bucket: an unsafe keyed action claims its key and its record in two writes")
		again, _ := h.call("chat", `{"prompt":"before the restart"}`, withKey("layout-key"))
		if again.ReplayOf == nil || *again.ReplayOf != res.ActionID {
			t.Fatalf("the key claimed before the restart does not replay: %s", describeResult(again))
		}
		wantEq(t, h.fake.Calls("chat"), 1, "Hermes received %d chat calls, want 1")
	})
}

// requireLog fails the test unless the bridge logged a line with message msg.
func (h *harness) requireLog(msg string) {
	h.t.Helper()
	for _, l := range h.logLines() {
		if l.str("message") == msg {
			return
		}
	}
	h.t.Errorf("no log line %q", msg)
}
