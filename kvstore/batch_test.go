package kvstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// TestCreateAll: a batch writes every value in order with consecutive revisions; a batch
// with a key that holds a value is refused as a whole (nothing of it is written); a
// store whose stream cannot take batches refuses without writing and says why.
func TestCreateAll(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, kvstore.Config{Storage: jetstream.MemoryStorage, Atomic: true, KeysTTL: time.Hour})
	ctx := testCtx(t)
	if ok, why := s.Atomic(); !ok {
		t.Fatalf("memory bucket with Atomic: batches off (%s)", why)
	}
	key := kvstore.IdempotencyKey("cap", "k1")
	revs, err := s.CreateAll(ctx, []kvstore.Put{{Key: key, Record: rec("a1")}, {Key: kvstore.ActionKey("a1"), Record: rec("a1")}})
	noErr(t, err)
	if len(revs) != 2 || revs[1] != revs[0]+1 {
		t.Fatalf("revisions %v, want two consecutive", revs)
	}
	for i, k := range []string{key, kvstore.ActionKey("a1")} {
		e, err := s.Get(ctx, k)
		noErr(t, err)
		if e.Revision != revs[i] || e.Record.ActionID != "a1" {
			t.Errorf("%s: revision %d action %q, want %d a1", k, e.Revision, e.Record.ActionID, revs[i])
		}
	}

	// The key exists: the record of a2 must not be written either.
	_, err = s.CreateAll(ctx, []kvstore.Put{{Key: key, Record: rec("a2")}, {Key: kvstore.ActionKey("a2"), Record: rec("a2")}})
	if !errors.Is(err, kvstore.ErrExists) {
		t.Fatalf("batch over a held key: %v, want ErrExists", err)
	}
	if _, err := s.Get(ctx, kvstore.ActionKey("a2")); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("record of a refused batch: %v, want ErrNotFound", err)
	}
	// The record exists (a redelivery of a1 under a new key): the key stays free.
	key3 := kvstore.IdempotencyKey("cap", "k3")
	_, err = s.CreateAll(ctx, []kvstore.Put{{Key: key3, Record: rec("a1")}, {Key: kvstore.ActionKey("a1"), Record: rec("a1")}})
	if !errors.Is(err, kvstore.ErrExists) {
		t.Fatalf("batch over an existing record: %v, want ErrExists", err)
	}
	if _, err := s.Get(ctx, key3); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("key of a refused batch: %v, want ErrNotFound", err)
	}

	// A single-replica file bucket takes no batches (the server stages them on disk).
	f, _, _ := newStore(t, kvstore.Config{Atomic: true})
	if ok, why := f.Atomic(); ok || why == "" {
		t.Fatalf("R1 file bucket: Atomic() = %v %q, want false and a reason", ok, why)
	}
	_, err = f.CreateAll(ctx, []kvstore.Put{{Key: key, Record: rec("a4")}, {Key: kvstore.ActionKey("a4"), Record: rec("a4")}})
	if !errors.Is(err, kvstore.ErrBatchRefused) {
		t.Fatalf("R1 file CreateAll: %v, want ErrBatchRefused", err)
	}
	if _, err := f.Get(ctx, kvstore.ActionKey("a4")); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("record of a refused batch: %v, want ErrNotFound", err)
	}
}

// TestCreateAllRacing: of many batches racing for one key, or for one record, exactly
// one is written, whole.
func TestCreateAllRacing(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, kvstore.Config{Storage: jetstream.MemoryStorage, Atomic: true, KeysTTL: time.Hour})
	ctx := testCtx(t)
	const n = 16
	for _, race := range []string{"key", "record"} {
		errs := make(chan error, n)
		for i := range n {
			go func() {
				id := race + string(rune('a'+i))
				key := kvstore.IdempotencyKey("cap", race+"-shared")
				act := kvstore.ActionKey(id)
				if race == "record" {
					key, act = kvstore.IdempotencyKey("cap", id), kvstore.ActionKey(race+"-shared")
				}
				_, err := s.CreateAll(ctx, []kvstore.Put{{Key: key, Record: rec(id)}, {Key: act, Record: rec(id)}})
				errs <- err
			}()
		}
		won := 0
		for range n {
			switch err := <-errs; {
			case err == nil:
				won++
			case errors.Is(err, kvstore.ErrExists), errors.Is(err, kvstore.ErrBatchRefused):
			default:
				t.Fatalf("%s race: %v", race, err)
			}
		}
		if won != 1 {
			t.Fatalf("%s race: %d batches won, want 1", race, won)
		}
		// Every key written belongs to the winner's pair: count the pairs' halves.
		keys, err := s.Keys(ctx, ">")
		noErr(t, err)
		winners := map[string]int{}
		for _, k := range keys {
			e, err := s.Get(ctx, k)
			noErr(t, err)
			winners[e.Record.ActionID]++
		}
		for id, c := range winners {
			if c%2 != 0 {
				t.Fatalf("%s race: action %s has %d of its two values", race, id, c)
			}
		}
	}
}

// TestKeysTTL: idempotency keys carry the message TTL at every write (Create, Update and
// CreateAll); records do not; provisioning again keeps message TTLs and atomic batches.
func TestKeysTTL(t *testing.T) {
	t.Parallel()
	cfg := kvstore.Config{Storage: jetstream.MemoryStorage, Atomic: true, KeysTTL: 90 * time.Minute}
	s, js, _ := newStore(t, cfg)
	ctx := testCtx(t)
	if s.KeysTTL() != cfg.KeysTTL {
		t.Fatalf("KeysTTL %s, want %s", s.KeysTTL(), cfg.KeysTTL)
	}
	key := kvstore.IdempotencyKey("cap", "ttl")
	rev := mustCreate(t, ctx, s, key, rec("t1"))
	act := mustCreate(t, ctx, s, kvstore.ActionKey("t1"), rec("t1"))
	stream, err := js.Stream(ctx, "KV_"+kvstore.DefaultBucket)
	noErr(t, err)
	ttlOf := func(seq uint64) string {
		m, err := stream.GetMsg(ctx, seq)
		noErr(t, err)
		return m.Header.Get(jetstream.MsgTTLHeader)
	}
	if got := ttlOf(rev); got != "1h30m0s" {
		t.Errorf("created key TTL %q, want 1h30m0s", got)
	}
	if got := ttlOf(act); got != "" {
		t.Errorf("record TTL %q, want none", got)
	}
	rev2, err := s.Update(ctx, key, rec("t1"), rev)
	noErr(t, err)
	if got := ttlOf(rev2); got != "1h30m0s" {
		t.Errorf("updated key TTL %q, want 1h30m0s", got)
	}
	if _, err := s.Update(ctx, key, rec("t1"), rev); !errors.Is(err, kvstore.ErrConflict) {
		t.Errorf("stale Update of a key: %v, want ErrConflict", err)
	}
	revs, err := s.CreateAll(ctx, []kvstore.Put{{Key: kvstore.IdempotencyKey("cap", "ttl2"), Record: rec("t2")}, {Key: kvstore.ActionKey("t2"), Record: rec("t2")}})
	noErr(t, err)
	if got, got2 := ttlOf(revs[0]), ttlOf(revs[1]); got != "1h30m0s" || got2 != "" {
		t.Errorf("batch TTLs %q %q, want 1h30m0s and none", got, got2)
	}

	cfg.Provision = true
	again, err := kvstore.Open(ctx, js, cfg)
	noErr(t, err)
	if ok, why := again.Atomic(); !ok || again.KeysTTL() != cfg.KeysTTL {
		t.Fatalf("provisioned again: Atomic %v (%s), KeysTTL %s", ok, why, again.KeysTTL())
	}
	info, err := stream.Info(ctx)
	noErr(t, err)
	if !info.Config.AllowAtomicPublish || !info.Config.AllowMsgTTL || info.Config.MaxMsgsPerSubject != 1 || !info.Config.AllowDirect {
		t.Fatalf("stream config after a second provisioning: %+v", info.Config)
	}
}
