package e2e_test

import (
	"context"
	"testing"
	"time"
)

// TestKeysMovedToTheirBucket: a bridge before the keys bucket kept idempotency keys in
// the records bucket. A bridge that provisions the keys bucket afresh copies them
// there first, so that a key claimed before the upgrade still replays its action
// after it (and the records bucket keeps them until they expire).
func TestKeysMovedToTheirBucket(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	res := h.callOK("chat", `{"prompt":"before the upgrade"}`, withKey("upgrade-key"))
	h.waitIdle(10 * time.Second)
	h.stopBridge(0)

	// The old layout: the key in the records bucket, no keys bucket.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := h.cfg.WithDefaults()
	keys, err := h.js.KeyValue(ctx, cfg.KeysBucket)
	requireOK(t, err)
	names, err := keys.ListKeys(ctx)
	requireOK(t, err)
	recs, err := h.js.KeyValue(ctx, cfg.Bucket)
	requireOK(t, err)
	n := 0
	for k := range names.Keys() {
		e, err := keys.Get(ctx, k)
		requireOK(t, err)
		if _, err := recs.Create(ctx, k, e.Value()); err != nil {
			t.Fatalf("copy key %s to the records bucket: %v", k, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d keys in %s, want 1", n, cfg.KeysBucket)
	}
	requireOK(t, h.js.DeleteKeyValue(ctx, cfg.KeysBucket))

	requireOK(t, h.tryBridge(h.cfg), "start after the upgrade: %v")
	moved := false
	for _, l := range h.logLines() {
		moved = moved || (l.str("message") == "moved the idempotency keys to their own bucket" && l.num("keys") == 1)
	}
	if !moved {
		t.Errorf("no log line says that 1 key was moved")
	}
	again, _ := h.call("chat", `{"prompt":"before the upgrade"}`, withKey("upgrade-key"))
	if again.ReplayOf == nil || *again.ReplayOf != res.ActionID {
		t.Fatalf("the key claimed before the upgrade does not replay: %s", describeResult(again))
	}
	wantEq(t, h.fake.Calls("chat"), 1, "Hermes received %d chat calls, want 1")
}
