package e2e_test

// Black-box regression test for finding 12 of issue 22: an action re-published after its
// idempotency key expired, while its result is still in the output stream, must not be
// sent again.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// TestRegress22_RepublishAfterKeyTTLNotSent (finding 12): the action record lives as
// long as the result it decides about (the output max age plus a margin), not as long as
// the idempotency key. A completed keyed action is re-published with its id once its
// key is gone (the actions stream's duplicate window cut to 1 s directly on the server):
// the bridge finds the record, then the result, and acks it as a duplicate, with no
// second call. Two layouts: keys in the records bucket with their own message TTL (the
// key's expiry is its subject purged: what the server does when the TTL passes), and
// keys in a keys bucket of their own whose TTL is cut to 3 s (the bridge refuses a TTL
// under a minute). Before (57a644c) one bucket kept both with the key's TTL: the
// re-publish found no record, claimed afresh and called Hermes again.
func TestRegress22_RepublishAfterKeyTTLNotSent(t *testing.T) {
	t.Parallel()
	for _, keysBucket := range []bool{false, true} {
		t.Run(fmt.Sprintf("keys_bucket=%v", keysBucket), func(t *testing.T) {
			t.Parallel()
			republishAfterKeyExpired(t, keysBucket)
		})
	}
}

func republishAfterKeyExpired(t *testing.T, keysBucket bool) {
	h := newHarness(t)
	h.stopBridge(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := h.cfg.WithDefaults()
	if keysBucket {
		_, err := h.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.KeysBucket, TTL: 3 * time.Second})
		requireOK(t, err)
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
	bucket := cfg.Bucket
	if keysBucket {
		bucket = cfg.KeysBucket
	} else {
		recs, err := h.js.Stream(ctx, "KV_"+cfg.Bucket)
		requireOK(t, err)
		requireOK(t, recs.Purge(ctx, jetstream.WithPurgeSubject("$KV."+cfg.Bucket+".idem.>")))
	}
	keys, err := h.js.KeyValue(ctx, bucket)
	requireOK(t, err)
	h.eventually(15*time.Second, func() error {
		// Each listing is bounded: a listing whose end never came (its channel left
		// open) once held this test for the whole package's timeout.
		lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer lcancel()
		lister, err := keys.ListKeys(lctx, jetstream.MetaOnly())
		if err != nil {
			return err
		}
		defer func() { _ = lister.Stop() }()
		for {
			select {
			case k, ok := <-lister.Keys():
				if !ok {
					return nil
				}
				if kvstore.IsIdempotencyKey(k) {
					return fmt.Errorf("key %s still held", k)
				}
			case <-lctx.Done():
				return fmt.Errorf("listing the keys: %w", lctx.Err())
			}
		}
	})
	if _, err := keys.Get(ctx, kvstore.ActionKey(id)); keysBucket == false && err != nil {
		t.Fatalf("the action record went with the key: %v", err)
	}

	// Re-publish until it lands past the duplicate window (1 s after the first).
	h.eventually(10*time.Second, func() error {
		h.publish("chat", a, client.WithActionID(id))
		info, err := actions.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 2 {
			return fmt.Errorf("the actions stream holds %d messages, want 2", info.State.Msgs)
		}
		return nil
	})
	h.waitIdle(15 * time.Second)
	wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1: the re-published action was sent again although its result is stored")
	if n := h.results(id); n != 1 {
		t.Errorf("%d result messages for %s, want 1", n, id)
	}
}
