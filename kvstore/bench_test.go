package kvstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// deadlineCtx is a context with an action's deadline (minutes away), as the bridge
// passes to the ledger: requests under it are bounded by OpTimeout, not by it.
func deadlineCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// BenchmarkClaimPath runs, per iteration, the store and log requests that the
// action core (bridge/core) makes for one keyed, unsafe action on its one-write start,
// on an embedded server with file storage: the key's Create, the record's Create
// (already dispatched) and the result's Append. (The bridge keeps keys and records in
// two buckets; one serves both here.)
func BenchmarkClaimPath(b *testing.B) {
	s, js, _ := newStore(b, kvstore.Config{})
	ctx := deadlineCtx(b)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"bench.results.>"},
		Storage: jetstream.FileStorage})
	noErr(b, err)
	subject := func(id string) string { return "bench.results." + id }
	log := kvstore.NewJetStreamLog(js, st, subject)
	input := strings.Repeat("ab", 32)
	data := []byte(`{"action_id":"x","status":"completed","output":{"text":"hello"},"error":null}`)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := "bench-" + strconv.Itoa(i)
		capID := "cap:hermes_agent:ep1:chat"
		idem := kvstore.IdempotencyKey(capID, id)
		owner := "replica-1.nonce-" + strconv.Itoa(i)
		key := kvstore.Record{State: kvstore.StateClaimed, ActionID: id, CapabilityID: capID, InputSHA256: input, Owner: owner}
		if _, err := s.Create(ctx, idem, key); err != nil {
			b.Fatalf("key: %v", err)
		}
		r := key
		r.State, r.Attempt, r.IdemKey = kvstore.StateDispatched, 1, idem
		if _, err := s.Create(ctx, kvstore.ActionKey(id), r); err != nil {
			b.Fatalf("record: %v", err)
		}
		m := nats.NewMsg(subject(id))
		m.Header.Set(jetstream.MsgIDHeader, id+":result")
		m.Data = data
		if _, err := log.Append(ctx, id, m, 0); err != nil {
			b.Fatalf("append: %v", err)
		}
	}
}

// BenchmarkCreateDeadline is BenchmarkCreate under a context with a deadline.
func BenchmarkCreateDeadline(b *testing.B) { benchCreate(b, deadlineCtx(b)) }

// benchCreate creates a new action record per iteration under ctx.
func benchCreate(b *testing.B, ctx context.Context) {
	s, _, _ := newStore(b, kvstore.Config{})
	r := rec("bench")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Create(ctx, kvstore.ActionKey("b"+strconv.Itoa(i)), r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateDeadline is BenchmarkUpdate under a context with a deadline.
func BenchmarkUpdateDeadline(b *testing.B) { benchUpdate(b, deadlineCtx(b)) }

// benchUpdate updates one record per iteration, with its last revision, under ctx.
func benchUpdate(b *testing.B, ctx context.Context) {
	s, _, _ := newStore(b, kvstore.Config{})
	r := rec("bench")
	rev, err := s.Create(ctx, "act.upd", r)
	noErr(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if rev, err = s.Update(ctx, "act.upd", r, rev); err != nil {
			b.Fatal(err)
		}
	}
}
