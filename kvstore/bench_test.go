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

// BenchmarkClaimPath runs one keyed, unsafe action's ledger writes per iteration on an
// embedded server with file storage, as the bridge does for a non-streaming call:
// Begin (Create act.<id>), ClaimKey (Create idem.<sha>), Dispatch (Update act.<id>)
// and Settle (Append of the result message).
func BenchmarkClaimPath(b *testing.B) {
	s, js, _ := newStore(b, kvstore.Config{})
	ctx := deadlineCtx(b)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"bench.results.>"},
		Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	subject := func(id string) string { return "bench.results." + id }
	l := kvstore.NewLedger(s, kvstore.NewJetStreamLog(js, st, subject), 30*time.Second)
	input := strings.Repeat("ab", 32)
	data := []byte(`{"action_id":"x","status":"completed","output":{"text":"hello"},"error":null}`)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := "bench-" + strconv.Itoa(i)
		in := kvstore.Intent{ActionID: id, CapabilityID: "cap:hermes_agent:ep1:chat", InputSHA256: input,
			IdemKey: kvstore.IdempotencyKey("cap:hermes_agent:ep1:chat", id), Owner: "replica-1.nonce-" + strconv.Itoa(i)}
		out, err := l.Begin(ctx, in, nil)
		if err != nil || out.Verdict != kvstore.Run {
			b.Fatalf("Begin: %v %v", out.Verdict, err)
		}
		c := out.Claim
		if ko, err := c.ClaimKey(ctx, nil); err != nil || ko.Verdict != kvstore.KeyHeld {
			b.Fatalf("ClaimKey: %v %v", ko.Verdict, err)
		}
		if err := c.Dispatch(ctx); err != nil {
			b.Fatalf("Dispatch: %v", err)
		}
		m := nats.NewMsg(subject(id))
		m.Header.Set(jetstream.MsgIDHeader, id+":result")
		m.Data = data
		if _, err := c.Settle(ctx, m, false); err != nil {
			b.Fatalf("Settle: %v", err)
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
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rev, err = s.Update(ctx, "act.upd", r, rev); err != nil {
			b.Fatal(err)
		}
	}
}
