package kvstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStore starts a server and provisions a bucket with cfg (Provision forced on).
func newStore(t testing.TB, cfg kvstore.Config) (*kvstore.Store, jetstream.JetStream, *natsembed.Server) {
	t.Helper()
	srv := natsembed.RunTest(t)
	_, js := natsembed.Connect(t, srv)
	cfg.Provision = true
	s, err := kvstore.Open(testCtx(t), js, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, js, srv
}

func rec(actionID string) kvstore.Record {
	return kvstore.Record{
		State:        kvstore.StateClaimed,
		ActionID:     actionID,
		CapabilityID: "cap:hermes_agent:ep1:chat",
		InputSHA256:  strings.Repeat("ab", 32),
		Owner:        "replica-1",
		PendingSeq:   7,
		Attempt:      1,
	}
}

// poll calls f every 20ms until it returns true or d passes.
func poll(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noErr fails the test at once on an error.
func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mustCreate creates key with r and returns its revision, failing the test on an error.
func mustCreate(t testing.TB, ctx context.Context, s *kvstore.Store, key string, r kvstore.Record) uint64 {
	t.Helper()
	rev, err := s.Create(ctx, key, r)
	noErr(t, err)
	return rev
}

// bucketStatus returns the status of the KV bucket, failing the test on an error.
func bucketStatus(t testing.TB, ctx context.Context, js jetstream.JetStream, bucket string) jetstream.KeyValueStatus {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	noErr(t, err)
	st, err := kv.Status(ctx)
	noErr(t, err)
	return st
}

var hexKey = regexp.MustCompile(`^idem\.[0-9a-f]{64}$`)

func TestKeys(t *testing.T) {
	if got := kvstore.ActionKey("a_B-9"); got != "act.a_B-9" {
		t.Fatalf("ActionKey = %q", got)
	}
	k := kvstore.IdempotencyKey("cap:hermes_agent:ep1:session_create", "order-42")
	if !hexKey.MatchString(k) {
		t.Fatalf("IdempotencyKey = %q, want idem.<64 hex>", k)
	}
	if k2 := kvstore.IdempotencyKey("cap:hermes_agent:ep1:session_create", "order-42"); k2 != k {
		t.Fatalf("IdempotencyKey not deterministic: %q vs %q", k, k2)
	}
	tests := []struct {
		name       string
		cap1, key1 string
		cap2, key2 string
	}{
		{"same key, different capability", "cap:hermes_agent:ep1:session_create", "k", "cap:hermes_agent:ep1:session_fork", "k"},
		{"same key, different endpoint", "cap:hermes_agent:ep1:session_create", "k", "cap:hermes_agent:ep2:session_create", "k"},
		{"separator is not ambiguous", "ab", "c", "a", "bc"},
		{"different key", "cap", "k1", "cap", "k2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := kvstore.IdempotencyKey(tc.cap1, tc.key1), kvstore.IdempotencyKey(tc.cap2, tc.key2)
			if a == b {
				t.Fatalf("keys collide: %q", a)
			}
		})
	}
	// Known answer: sha256("c\x00k").
	if got, want := kvstore.IdempotencyKey("c", "k"), "idem.db79839d0054ed6d64f9cdc984ad923d4b3d14ee2017c65fc2965fa14382cf9a"; got != want {
		t.Fatalf("IdempotencyKey(c, k) = %q, want %q", got, want)
	}
	// A key longer than the buffer hashed without an allocation hashes the same way.
	long := strings.Repeat("k", 1024)
	sum := sha256.Sum256([]byte("c\x00" + long))
	if got, want := kvstore.IdempotencyKey("c", long), "idem."+hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("IdempotencyKey(c, 1024 k) = %q, want %q", got, want)
	}
}

func TestRecordJSONStable(t *testing.T) {
	s, js, _ := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := kvstore.Record{
		State: kvstore.StateSettled, ActionID: "a1", CapabilityID: "cap:hermes_agent:ep1:chat",
		InputSHA256: "00ff", Owner: "r1", Attempt: 2, PendingSeq: 9, Decision: kvstore.DecisionApprove,
		RunID:     "run_0f",
		Result:    json.RawMessage(`{"status":"completed"}`),
		CreatedAt: ts,
	}
	mustCreate(t, ctx, s, "act.a1", r)
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	noErr(t, err)
	raw, err := kv.Get(ctx, "act.a1")
	noErr(t, err)
	var generic map[string]json.RawMessage
	noErr(t, json.Unmarshal(raw.Value(), &generic))
	updated := string(generic["updated_at"])
	want := `{"v":1,"state":"settled","action_id":"a1","capability_id":"cap:hermes_agent:ep1:chat",` +
		`"input_sha256":"00ff","owner":"r1","attempt":2,` +
		`"result":{"status":"completed"},"decision":"approve","run_id":"run_0f","pending_seq":9,"created_at":"2026-01-02T03:04:05Z","updated_at":` + updated + `}`
	if string(raw.Value()) != want {
		t.Fatalf("stored JSON\n got %s\nwant %s", raw.Value(), want)
	}

	// Optional fields are omitted.
	mustCreate(t, ctx, s, "act.a2", kvstore.Record{State: kvstore.StateClaimed, ActionID: "a2"})
	raw, err = kv.Get(ctx, "act.a2")
	noErr(t, err)
	for _, f := range []string{"owner", "result", "attempt", "capability_id", "decision", "approver", "cancel", "run_id", "pending_seq"} {
		if strings.Contains(string(raw.Value()), `"`+f+`"`) {
			t.Errorf("empty %s not omitted: %s", f, raw.Value())
		}
	}
}

// TestGetRoundTrip: a record reads back as written; a missing key is ErrNotFound; the
// longest action key and an idempotency key of any key are valid in the bucket.
func TestGetRoundTrip(t *testing.T) {
	s, _, _ := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	r := rec("a1")
	r.Result = json.RawMessage(`{"x":1}`)
	before := time.Now()
	rev := mustCreate(t, ctx, s, kvstore.ActionKey("a1"), r)
	e, err := s.Get(ctx, kvstore.ActionKey("a1"))
	noErr(t, err)
	if e.Revision != rev || e.Key != "act.a1" {
		t.Fatalf("entry rev/key = %d %q, want %d act.a1", e.Revision, e.Key, rev)
	}
	got := e.Record
	if got.State != r.State || got.ActionID != r.ActionID || got.Owner != r.Owner || got.PendingSeq != r.PendingSeq ||
		got.Attempt != r.Attempt || string(got.Result) != string(r.Result) || got.InputSHA256 != r.InputSHA256 {
		t.Fatalf("round trip mismatch:\n got %+v\nwant %+v", got, r)
	}
	if got.CreatedAt.Before(before.Add(-time.Second)) || got.UpdatedAt.IsZero() {
		t.Fatalf("timestamps not set: created %v updated %v", got.CreatedAt, got.UpdatedAt)
	}
	if e.Written.IsZero() {
		t.Fatal("Written not set")
	}
	if _, err := s.Get(ctx, "act.nope"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("Get missing err = %v, want ErrNotFound", err)
	}
	for _, k := range []string{
		kvstore.ActionKey(strings.Repeat("aZ9_-", 25) + "xyz"), // 128 chars
		kvstore.IdempotencyKey("cap:hermes_agent:ep1:chat", "any key: with spaces/ünïcode"),
	} {
		if _, err := s.Create(ctx, k, rec("a1")); err != nil {
			t.Fatalf("Create(%q): %v", k, err)
		}
	}
}

func TestCreateRace(t *testing.T) {
	s, _, _ := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	for round, key := range []string{"act.race", "act.race"} {
		var wins, exists atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 20 {
			wg.Go(func() {
				<-start
				r := rec("race")
				r.Owner = fmt.Sprintf("replica-%d", i)
				_, err := s.Create(ctx, key, r)
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, kvstore.ErrExists):
					exists.Add(1)
				default:
					t.Errorf("Create: unexpected error %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 || exists.Load() != 19 {
			t.Fatalf("round %d: wins=%d exists=%d, want 1 and 19", round, wins.Load(), exists.Load())
		}
		// Round 2 races over a delete tombstone (the Create fallback path).
		e, err := s.Get(ctx, key)
		noErr(t, err)
		noErr(t, s.Delete(ctx, key, e.Revision))
	}
}

func TestUpdateCAS(t *testing.T) {
	s, _, _ := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	key := kvstore.ActionKey("a1")
	rev1 := mustCreate(t, ctx, s, key, rec("a1"))
	r := rec("a1")
	r.State = kvstore.StateDispatched
	rev2, err := s.Update(ctx, key, r, rev1)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if rev2 <= rev1 {
		t.Fatalf("rev2 %d <= rev1 %d", rev2, rev1)
	}
	e, err := s.Get(ctx, key)
	if err != nil || e.Record.State != kvstore.StateDispatched || e.Revision != rev2 {
		t.Fatalf("Get after Update = %+v, %v", e, err)
	}

	// Stale revision.
	_, err = s.Update(ctx, key, r, rev1)
	if !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("stale Update err = %v, want ErrConflict", err)
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("stale Update err = %v, want it to wrap jetstream.ErrKeyRevisionMismatch", err)
	}
	// Missing key and revision 0.
	if _, err := s.Update(ctx, "act.missing", r, 5); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("Update of missing key err = %v, want ErrConflict", err)
	}
	if _, err := s.Update(ctx, key, r, 0); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("Update with rev 0 err = %v, want ErrConflict", err)
	}
}

func TestUpdateRace(t *testing.T) {
	s, _, _ := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	key := kvstore.ActionKey("a1")
	rev := mustCreate(t, ctx, s, key, rec("a1"))
	var wins, conflicts atomic.Int32
	var winner atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 20 {
		wg.Go(func() {
			<-start
			r := rec("a1")
			r.State = kvstore.StateDispatched
			r.Owner = fmt.Sprintf("replica-%d", i)
			_, err := s.Update(ctx, key, r, rev)
			switch {
			case err == nil:
				wins.Add(1)
				winner.Store(r.Owner)
			case errors.Is(err, kvstore.ErrConflict):
				conflicts.Add(1)
			default:
				t.Errorf("Update: unexpected error %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || conflicts.Load() != 19 {
		t.Fatalf("wins=%d conflicts=%d, want 1 and 19", wins.Load(), conflicts.Load())
	}
	e, err := s.Get(ctx, key)
	noErr(t, err)
	if e.Record.Owner != winner.Load().(string) {
		t.Fatalf("stored owner %q, winner %q", e.Record.Owner, winner.Load())
	}
}

func TestDeleteThenCreate(t *testing.T) {
	s, _, _ := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	key := kvstore.IdempotencyKey("cap:hermes_agent:ep1:session_create", "k1")
	rev := mustCreate(t, ctx, s, key, rec("a1"))
	rev2, err := s.Update(ctx, key, rec("a1"), rev)
	noErr(t, err)
	// Stale delete loses.
	if err := s.Delete(ctx, key, rev); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("stale Delete err = %v, want ErrConflict", err)
	}
	if err := s.Delete(ctx, key, 0); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("Delete rev 0 err = %v, want ErrConflict", err)
	}
	if err := s.Delete(ctx, key, rev2); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("Get after Delete err = %v, want ErrNotFound", err)
	}
	// Deleting again with the old revision conflicts (the tombstone is newer).
	if err := s.Delete(ctx, key, rev2); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("second Delete err = %v, want ErrConflict", err)
	}
	r := rec("a2")
	rev3, err := s.Create(ctx, key, r)
	if err != nil {
		t.Fatalf("Create after Delete: %v", err)
	}
	e, err := s.Get(ctx, key)
	if err != nil || e.Revision != rev3 || e.Record.ActionID != "a2" {
		t.Fatalf("Get after re-Create = %+v, %v", e, err)
	}
	if _, err := s.Create(ctx, key, r); !errors.Is(err, kvstore.ErrExists) || !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("Create over re-created key err = %v, want ErrExists wrapping jetstream.ErrKeyExists", err)
	}
}

// clientGoroutines counts goroutines running client-side code (nats.go or
// this package). The embedded server's own goroutines (consumers it keeps
// for a few seconds after a watcher goes) are not counted.
func clientGoroutines() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "nats-io/nats-server") {
			continue
		}
		if strings.Contains(g, "nats-io/nats.go") || strings.Contains(g, "hermes-bridge/kvstore.") {
			n++
		}
	}
	return n
}

func TestWait(t *testing.T) {
	s, _, _ := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	base := clientGoroutines()

	t.Run("already newer", func(t *testing.T) {
		key := "act.w1"
		rev := mustCreate(t, ctx, s, key, rec("w1"))
		e, err := s.Wait(ctx, key, rev-1)
		if err != nil || e.Revision != rev {
			t.Fatalf("Wait = %+v, %v; want rev %d", e, err, rev)
		}
	})

	t.Run("wakes on update", func(t *testing.T) {
		key := "act.w2"
		rev := mustCreate(t, ctx, s, key, rec("w2"))
		type res struct {
			e   kvstore.Entry
			err error
		}
		done := make(chan res, 1)
		go func() {
			e, err := s.Wait(ctx, key, rev)
			done <- res{e, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("Wait returned before the update: %+v %v", r.e, r.err)
		case <-time.After(100 * time.Millisecond):
		}
		settled := rec("w2")
		settled.State = kvstore.StateSettled
		settled.Result = json.RawMessage(`{"ok":true}`)
		rev2, err := s.Update(ctx, key, settled, rev)
		noErr(t, err)
		r := <-done
		if r.err != nil || r.e.Revision != rev2 || r.e.Record.State != kvstore.StateSettled {
			t.Fatalf("Wait = %+v, %v; want settled at rev %d", r.e, r.err, rev2)
		}
	})

	t.Run("wakes on delete", func(t *testing.T) {
		key := "act.w3"
		rev := mustCreate(t, ctx, s, key, rec("w3"))
		done := make(chan error, 1)
		go func() {
			_, err := s.Wait(ctx, key, rev)
			done <- err
		}()
		noErr(t, s.Delete(ctx, key, rev))
		if err := <-done; !errors.Is(err, kvstore.ErrNotFound) {
			t.Fatalf("Wait after Delete err = %v, want ErrNotFound", err)
		}
		// A Wait started after the delete also reports it.
		if _, err := s.Wait(ctx, key, rev); !errors.Is(err, kvstore.ErrNotFound) {
			t.Fatalf("Wait on deleted key err = %v, want ErrNotFound", err)
		}
	})

	t.Run("missing key", func(t *testing.T) {
		if _, err := s.Wait(ctx, "act.never", 0); !errors.Is(err, kvstore.ErrNotFound) {
			t.Fatalf("Wait on missing key err = %v, want ErrNotFound", err)
		}
	})

	t.Run("ctx cancel", func(t *testing.T) {
		key := "act.w4"
		rev := mustCreate(t, ctx, s, key, rec("w4"))
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := s.Wait(cctx, key, rev)
			done <- err
		}()
		time.AfterFunc(50*time.Millisecond, cancel)
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel err = %v, want context.Canceled", err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer dcancel()
		if _, err := s.Wait(dctx, key, rev); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait past deadline err = %v, want DeadlineExceeded", err)
		}
	})

	t.Run("no goroutine leak", func(t *testing.T) {
		key := "act.w5"
		rev := mustCreate(t, ctx, s, key, rec("w5"))
		for range 50 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			_, _ = s.Wait(cctx, key, rev)
			cancel()
			if _, err := s.Wait(ctx, key, rev-1); err != nil {
				t.Fatal(err)
			}
		}
		poll(t, 5*time.Second, "client goroutines to settle", func() bool { return clientGoroutines() <= base })
	})
}

// TestOpenErrors: binding a missing bucket names it and the way out; invalid settings
// and a nil JetStream are refused.
func TestOpenErrors(t *testing.T) {
	srv := natsembed.RunTest(t)
	_, js := natsembed.Connect(t, srv)
	_, err := kvstore.Open(testCtx(t), js, kvstore.Config{Bucket: "NOPE"})
	if !errors.Is(err, kvstore.ErrNoBucket) || !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("bind missing err = %v, want ErrNoBucket and jetstream.ErrBucketNotFound", err)
	}
	if want := "bucket NOPE does not exist; create it or enable provisioning"; !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q, want it to contain %q", err, want)
	}
	for _, cfg := range []kvstore.Config{
		{TTL: -time.Second, Provision: true},
		{Replicas: -1, Provision: true},
		{MaxValueSize: -1, Provision: true},
	} {
		if _, err := kvstore.Open(testCtx(t), js, cfg); err == nil {
			t.Errorf("Open(%+v) succeeded", cfg)
		}
	}
	if _, err := kvstore.Open(testCtx(t), nil, kvstore.Config{}); err == nil {
		t.Error("Open(nil js) succeeded")
	}
}

func TestProvisionIdempotentAndBind(t *testing.T) {
	s, js, _ := newStore(t, kvstore.Config{Bucket: "B1", TTL: time.Hour, MaxValueSize: 8192})
	ctx := testCtx(t)
	if s.Bucket() != "B1" || s.TTL() != time.Hour || s.MaxValueSize() != 8192 {
		t.Fatalf("store = %s %s %d", s.Bucket(), s.TTL(), s.MaxValueSize())
	}
	rev := mustCreate(t, ctx, s, "act.keep", rec("keep"))
	s2, err := kvstore.Open(ctx, js, kvstore.Config{Bucket: "B1", TTL: time.Hour, MaxValueSize: 8192, Provision: true})
	if err != nil {
		t.Fatalf("second provisioning: %v", err)
	}
	e, err := s2.Get(ctx, "act.keep")
	if err != nil || e.Revision != rev {
		t.Fatalf("record after re-provisioning = %+v, %v", e, err)
	}
	// Bind-only picks up the bucket's TTL and value limit.
	s3, err := kvstore.Open(ctx, js, kvstore.Config{Bucket: "B1"})
	if err != nil {
		t.Fatalf("bind: %v", err)
	}
	if s3.TTL() != time.Hour || s3.MaxValueSize() != 8192 {
		t.Fatalf("bound store TTL %s limit %d, want 1h 8192", s3.TTL(), s3.MaxValueSize())
	}
	st := bucketStatus(t, ctx, js, "B1")
	if st.History() != 1 || st.TTL() != time.Hour {
		t.Fatalf("bucket history %d TTL %s, want 1 and 1h", st.History(), st.TTL())
	}
	if cfg := st.(*jetstream.KeyValueBucketStatus).Config(); cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 {
		t.Fatalf("bucket storage %v replicas %d", cfg.Storage, cfg.Replicas)
	}
}

// TestTTLChange: a provisioning Open never shortens the TTL of a bucket that holds
// values unless it is allowed to (the server would delete the older values at once);
// it lengthens it, and shortens that of an empty bucket, without permission.
func TestTTLChange(t *testing.T) {
	srv := natsembed.RunTest(t)
	_, js := natsembed.Connect(t, srv)
	ctx := testCtx(t)
	ttl := func(bucket string) time.Duration { return bucketStatus(t, ctx, js, bucket).TTL() }

	// Empty: shortened without permission.
	if _, err := kvstore.Open(ctx, js, kvstore.Config{Bucket: "EMPTY", TTL: time.Hour, Provision: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.Open(ctx, js, kvstore.Config{Bucket: "EMPTY", TTL: time.Minute, Provision: true}); err != nil {
		t.Fatalf("shortening an empty bucket: %v", err)
	}
	if got := ttl("EMPTY"); got != time.Minute {
		t.Fatalf("empty bucket TTL %s, want 1m", got)
	}

	s, err := kvstore.Open(ctx, js, kvstore.Config{Bucket: "FULL", TTL: time.Hour, Provision: true})
	noErr(t, err)
	mustCreate(t, ctx, s, "act.keep", rec("keep"))
	// Shorter, with values, not allowed: refused, nothing changed.
	_, err = kvstore.Open(ctx, js, kvstore.Config{Bucket: "FULL", TTL: time.Minute, Provision: true})
	var se *kvstore.TTLShrinkError
	if !errors.Is(err, kvstore.ErrTTLShrink) || !errors.As(err, &se) {
		t.Fatalf("shortening a bucket with values: %v, want a TTLShrinkError", err)
	}
	if se.Bucket != "FULL" || se.Current != time.Hour || se.Requested != time.Minute || se.Values != 1 {
		t.Errorf("error %+v", *se)
	}
	for _, want := range []string{"FULL", "1h0m0s", "1m0s", "AllowRetentionShrink"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if got := ttl("FULL"); got != time.Hour {
		t.Fatalf("TTL %s after a refused Open, want 1h", got)
	}
	// Binding never changes the TTL, so it needs no permission.
	if b, err := kvstore.Open(ctx, js, kvstore.Config{Bucket: "FULL", TTL: time.Minute}); err != nil || b.TTL() != time.Hour {
		t.Fatalf("bind: %v (TTL %v)", err, b)
	}
	// Longer: applied.
	if _, err := kvstore.Open(ctx, js, kvstore.Config{Bucket: "FULL", TTL: 2 * time.Hour, Provision: true}); err != nil {
		t.Fatalf("lengthening: %v", err)
	}
	if got := ttl("FULL"); got != 2*time.Hour {
		t.Fatalf("TTL %s, want 2h", got)
	}
	// Shorter, allowed: applied, and the fresh value is kept.
	s, err = kvstore.Open(ctx, js, kvstore.Config{Bucket: "FULL", TTL: time.Minute, Provision: true, AllowRetentionShrink: true})
	if err != nil {
		t.Fatalf("allowed shortening: %v", err)
	}
	if s.TTL() != time.Minute || ttl("FULL") != time.Minute {
		t.Fatalf("TTL %s / %s after the allowed shortening, want 1m", s.TTL(), ttl("FULL"))
	}
	if _, err := s.Get(ctx, "act.keep"); err != nil {
		t.Fatalf("value after the allowed shortening: %v", err)
	}
}

func TestDefaultsFromServer(t *testing.T) {
	srv := natsembed.RunTest(t, func(o *natsembed.Options) { o.MaxPayload = 64 * 1024 })
	_, js := natsembed.Connect(t, srv)
	s, err := kvstore.Open(testCtx(t), js, kvstore.Config{Provision: true})
	noErr(t, err)
	if s.Bucket() != kvstore.DefaultBucket || s.TTL() != kvstore.DefaultTTL || s.MaxValueSize() != 64*1024 {
		t.Fatalf("defaults: %s %s %d", s.Bucket(), s.TTL(), s.MaxValueSize())
	}
}

func TestBucketTTL(t *testing.T) {
	s, _, _ := newStore(t, kvstore.Config{TTL: time.Second})
	ctx := testCtx(t)
	key := kvstore.ActionKey("ttl")
	rev := mustCreate(t, ctx, s, key, rec("ttl"))
	// An Update keeps expiry: the new revision expires by the bucket TTL too.
	if _, err := s.Update(ctx, key, rec("ttl"), rev); err != nil {
		t.Fatal(err)
	}
	poll(t, 15*time.Second, "the record to expire", func() bool {
		_, err := s.Get(ctx, key)
		return errors.Is(err, kvstore.ErrNotFound)
	})
	if _, err := s.Create(ctx, key, rec("ttl")); err != nil {
		t.Fatalf("Create after expiry: %v", err)
	}
}

func TestTooLarge(t *testing.T) {
	s, _, _ := newStore(t, kvstore.Config{MaxValueSize: 1024})
	ctx := testCtx(t)
	key := kvstore.ActionKey("big")
	rev := mustCreate(t, ctx, s, key, rec("big"))
	big := rec("big")
	big.State = kvstore.StateSettled
	big.Result = json.RawMessage(`{"text":"` + strings.Repeat("x", 2000) + `"}`)

	_, err := s.Update(ctx, key, big, rev)
	if !errors.Is(err, kvstore.ErrTooLarge) {
		t.Fatalf("Update too large err = %v, want ErrTooLarge", err)
	}
	var tl *kvstore.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 1024 || tl.Size <= 2000 {
		t.Fatalf("TooLargeError = %+v", tl)
	}
	if _, err := s.Create(ctx, "act.big2", big); !errors.Is(err, kvstore.ErrTooLarge) {
		t.Fatalf("Create too large err = %v, want ErrTooLarge", err)
	}
	// The claim is untouched and a smaller record still fits.
	small := big
	small.Result = json.RawMessage(`{"text":"truncated"}`)
	if _, err := s.Update(ctx, key, small, rev); err != nil {
		t.Fatalf("fallback Update: %v", err)
	}

	// With the client-side check off, the server's rejection maps the same way.
	kvstore.SetLimitForTest(s, 0)
	e, err := s.Get(ctx, key)
	noErr(t, err)
	if _, err := s.Update(ctx, key, big, e.Revision); !errors.Is(err, kvstore.ErrTooLarge) {
		t.Fatalf("server-side too large err = %v, want ErrTooLarge", err)
	}
}

func TestTooLargeMaxPayload(t *testing.T) {
	srv := natsembed.RunTest(t, func(o *natsembed.Options) { o.MaxPayload = 4096 })
	_, js := natsembed.Connect(t, srv)
	ctx := testCtx(t)
	s, err := kvstore.Open(ctx, js, kvstore.Config{Provision: true})
	noErr(t, err)
	kvstore.SetLimitForTest(s, 0)
	big := rec("p")
	big.Result = json.RawMessage(`"` + strings.Repeat("y", 5000) + `"`)
	if _, err := s.Create(ctx, "act.p", big); !errors.Is(err, kvstore.ErrTooLarge) {
		t.Fatalf("over max_payload err = %v, want ErrTooLarge", err)
	}
}

func TestCorruptRecord(t *testing.T) {
	s, js, _ := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	noErr(t, err)
	for key, val := range map[string]string{"act.garbage": "not json", "act.future": `{"v":99,"state":"claimed"}`} {
		if _, err := kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, kvstore.ErrCorrupt) {
			t.Fatalf("Get %s err = %v, want ErrCorrupt", key, err)
		}
	}
}

func TestRecordSurvivesRestart(t *testing.T) {
	s, _, srv := newStore(t, kvstore.Config{})
	ctx := testCtx(t)
	key := kvstore.ActionKey("persist")
	r := rec("persist")
	r.State = kvstore.StateSettled
	r.Result = json.RawMessage(`{"status":"completed"}`)
	rev := mustCreate(t, ctx, s, key, r)
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	var e kvstore.Entry
	var err error
	poll(t, 15*time.Second, "the record after restart", func() bool {
		e, err = s.Get(ctx, key)
		return err == nil
	})
	if e.Revision != rev || e.Record.State != kvstore.StateSettled || string(e.Record.Result) != string(r.Result) {
		t.Fatalf("after restart = %+v", e)
	}
	// CAS still works against the recovered revision.
	if _, err := s.Update(ctx, key, r, rev); err != nil {
		t.Fatalf("Update after restart: %v", err)
	}
}

func BenchmarkCreate(b *testing.B) { benchCreate(b, context.Background()) }

func BenchmarkCreateDuplicate(b *testing.B) {
	s, _, _ := newStore(b, kvstore.Config{})
	ctx := context.Background()
	r := rec("bench")
	if _, err := s.Create(ctx, "act.dup", r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Create(ctx, "act.dup", r); !errors.Is(err, kvstore.ErrExists) {
			b.Fatal(err)
		}
	}
}

func BenchmarkUpdate(b *testing.B) { benchUpdate(b, context.Background()) }
