package kvstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// lostReply is a Store's publisher that reports a timeout for every write, after
// publishing it when write is set: as when the server stored a write (or did not) but
// its reply never came back.
func lostReply(nc *nats.Conn, write bool) func(context.Context, *nats.Msg) (uint64, bool, error) {
	return func(ctx context.Context, m *nats.Msg) (uint64, bool, error) {
		if write {
			if _, _, err := publish(ctx, nc, m); err != nil {
				return 0, false, err
			}
		}
		return 0, false, context.DeadlineExceeded
	}
}

// TestCreateFindsItsLostWrite: a Create whose reply was lost succeeds when the key holds
// its own bytes, and still fails with ErrExists when the key holds someone else's.
func TestCreateFindsItsLostWrite(t *testing.T) {
	_, js := natsembed.Connect(t, natsembed.RunTest(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, js, Config{Provision: true, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	pub := s.pub
	s.pub = lostReply(s.nc, true)

	rev, err := s.Create(ctx, "act.a1", Record{State: StateClaimed, ActionID: "a1", Owner: "r1"})
	if err != nil || rev == 0 {
		t.Fatalf("Create with a lost reply: rev %d, err %v; want the stored revision", rev, err)
	}
	e, err := s.Get(ctx, "act.a1")
	if err != nil || e.Revision != rev || e.Record.Owner != "r1" {
		t.Fatalf("Get after it: %+v, %v", e, err)
	}
	// Someone else's record under the key: the Create fails as a lost claim.
	s.pub = pub
	if _, err := s.Create(ctx, "act.a1", Record{State: StateClaimed, ActionID: "a1", Owner: "r2"}); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	// A lost reply with someone else's bytes under the key stays an error.
	s.pub = lostReply(s.nc, false)
	if _, err := s.Create(ctx, "act.a1", Record{State: StateClaimed, ActionID: "a1", Owner: "r3"}); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Create over another's record with a lost reply: %v, want the timeout", err)
	}
}

// TestFindBatch: a batch whose commit reply was lost is found when every key holds the
// bytes it sent, and not when one holds other bytes (another writer's, or nothing).
func TestFindBatch(t *testing.T) {
	_, js := natsembed.Connect(t, natsembed.RunTest(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, js, Config{Provision: true, Storage: jetstream.MemoryStorage, Atomic: true})
	if err != nil {
		t.Fatal(err)
	}
	r := Record{State: StateDispatched, ActionID: "f1", Owner: "o"}
	revs, err := s.CreateAll(ctx, []Put{{Key: "idem.f", Record: r}, {Key: ActionKey("f1"), Record: r}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*nats.Msg, 2)
	for i, k := range []string{"idem.f", ActionKey("f1")} {
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = &nats.Msg{Subject: s.subject(k), Data: e.Value()}
	}
	if got, ok := s.findBatch(ctx, msgs); !ok || got[0] != revs[0] || got[1] != revs[1] {
		t.Fatalf("findBatch of the batch written: %v %v, want %v", got, ok, revs)
	}
	msgs[1].Data = append([]byte(nil), msgs[1].Data...)
	msgs[1].Data[len(msgs[1].Data)-2] ^= 1
	if _, ok := s.findBatch(ctx, msgs); ok {
		t.Fatal("findBatch found a batch whose record holds other bytes")
	}
	msgs[1] = &nats.Msg{Subject: s.subject(ActionKey("f2")), Data: msgs[0].Data}
	if _, ok := s.findBatch(ctx, msgs); ok {
		t.Fatal("findBatch found a batch whose record is missing")
	}
}
