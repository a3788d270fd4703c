package kvstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// lostReplyKV reports a timeout for every Create, after writing through to the bucket
// when write is set: as when the server stored a Create (or did not) but its reply
// never came back.
type lostReplyKV struct {
	jetstream.KeyValue
	write bool
}

func (k lostReplyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if k.write {
		if _, err := k.KeyValue.Create(ctx, key, value, opts...); err != nil {
			return 0, err
		}
	}
	return 0, context.DeadlineExceeded
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
	kv := s.kv
	s.kv = lostReplyKV{KeyValue: kv, write: true}

	rev, err := s.Create(ctx, "act.a1", Record{State: StateClaimed, ActionID: "a1", Owner: "r1"})
	if err != nil || rev == 0 {
		t.Fatalf("Create with a lost reply: rev %d, err %v; want the stored revision", rev, err)
	}
	e, err := s.Get(ctx, "act.a1")
	if err != nil || e.Revision != rev || e.Record.Owner != "r1" {
		t.Fatalf("Get after it: %+v, %v", e, err)
	}
	// Someone else's record under the key: the Create fails as a lost claim.
	if _, err := s.Create(ctx, "act.a1", Record{State: StateClaimed, ActionID: "a1", Owner: "r2"}); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	// A lost reply with someone else's bytes under the key stays an error.
	s.kv = lostReplyKV{KeyValue: kv}
	if _, err := s.Create(ctx, "act.a1", Record{State: StateClaimed, ActionID: "a1", Owner: "r3"}); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Create over another's record with a lost reply: %v, want the timeout", err)
	}
}
