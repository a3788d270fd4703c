package e2e_test

// Black-box regression test for finding 12 of issue 22: an action re-published after its
// idempotency key expired, while its result is still in the output stream, must not be
// sent again.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// TestRegress22_RepublishAfterKeyTTLNotSent (finding 12): the action record lives as
// long as the result it decides about (the output max age plus a margin), not as long as
// the idempotency key. The keys bucket's TTL is cut to 3 s and the actions stream's
// duplicate window to 1 s directly on the server (the bridge refuses a TTL under a
// minute); a completed keyed action is re-published with its id once its key is gone:
// the bridge finds the record, then the result, and acks it as a duplicate, with no
// second call. Before (57a644c) one bucket kept both with the key's TTL: the re-publish
// found no record, claimed afresh and called Hermes again. The test sees that failure
// when the records bucket's TTL is cut as well (recordsTTL below).
func TestRegress22_RepublishAfterKeyTTLNotSent(t *testing.T) {
	t.Parallel()
	const keysTTL, recordsTTL = 3 * time.Second, time.Duration(0) // 0: as provisioned
	h := newHarness(t)
	h.stopBridge(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := h.cfg.WithDefaults()
	for b, ttl := range map[string]time.Duration{cfg.KeysBucket: keysTTL, cfg.Bucket: recordsTTL} {
		if ttl == 0 {
			continue
		}
		h.setBucketTTL(ctx, b, ttl)
	}
	actions, err := h.js.Stream(ctx, cfg.ActionsStream)
	requireOK(t, err)
	sc := actions.CachedInfo().Config
	sc.Duplicates = time.Second
	if _, err := h.js.UpdateStream(ctx, sc); err != nil {
		t.Fatalf("shorten the actions stream's duplicate window: %v", err)
	}
	h.cfg.Provision = false
	h.cfg.AckWait = 3 * time.Second
	h.cfg.Heartbeat = time.Second
	h.startBridge()

	a := events.Action{Input: mustJSON(t, `{"prompt":"once"}`), IdempotencyKey: "finding-12"}
	id := h.publish("chat", a)
	h.followOK(id)
	h.waitIdle(10 * time.Second)

	// The key expires (the records bucket keeps the record).
	keys, err := h.js.KeyValue(ctx, cfg.KeysBucket)
	requireOK(t, err)
	h.eventually(15*time.Second, func() error {
		lister, err := keys.ListKeys(context.Background())
		if err != nil {
			return err
		}
		for k := range lister.Keys() {
			return fmt.Errorf("key %s still held", k)
		}
		return nil
	})

	h.publish("chat", a, client.WithActionID(id))
	info, err := actions.Info(ctx)
	requireOK(t, err)
	requireEq(t, info.State.Msgs, 2, "the actions stream holds %d messages, want 2 (the re-publish must reach the bridge, past the duplicate window)")
	h.waitIdle(15 * time.Second)
	wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1: the re-published action was sent again although its result is stored")
	if n := h.results(id); n != 1 {
		t.Errorf("%d result messages for %s, want 1", n, id)
	}
}
