package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// TestMayHaveSent: for a keyed action the write-ahead mark lives in the idempotency
// record, so whether an abandoned action may have reached Hermes is read from its own
// record and from the key record it names.
func TestMayHaveSent(t *testing.T) {
	_, js := natsembed.Connect(t, natsembed.RunTest(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := kvstore.Open(ctx, js, kvstore.Config{Provision: true, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	b := &Bridge{store: store}

	put := func(key string, r kvstore.Record) {
		t.Helper()
		if _, err := store.Create(ctx, key, r); err != nil {
			t.Fatal(err)
		}
	}
	key := func(k string) string { return kvstore.IdempotencyKey("cap:hermes_agent:primary:chat", k) }
	put(key("k-dispatched"), kvstore.Record{State: kvstore.StateDispatched, ActionID: "a1"})
	put(key("k-settled"), kvstore.Record{State: kvstore.StateSettled, ActionID: "a2", Result: []byte(`{}`)})
	put(key("k-claimed"), kvstore.Record{State: kvstore.StateClaimed, ActionID: "a3"})
	put(key("k-other"), kvstore.Record{State: kvstore.StateDispatched, ActionID: "someone-else"})

	cases := []struct {
		name string
		rec  kvstore.Record
		want bool
	}{
		{"unkeyed, claimed", kvstore.Record{State: kvstore.StateClaimed, ActionID: "u1"}, false},
		{"unkeyed, dispatched", kvstore.Record{State: kvstore.StateDispatched, ActionID: "u2"}, true},
		{"keyed, the key says dispatched", kvstore.Record{State: kvstore.StateClaimed, ActionID: "a1", IdemKey: key("k-dispatched")}, true},
		{"keyed, the key was settled for it by a duplicate", kvstore.Record{State: kvstore.StateClaimed, ActionID: "a2", IdemKey: key("k-settled")}, true},
		{"keyed, the key is only claimed", kvstore.Record{State: kvstore.StateClaimed, ActionID: "a3", IdemKey: key("k-claimed")}, false},
		{"keyed, the key is held by another action", kvstore.Record{State: kvstore.StateClaimed, ActionID: "a4", IdemKey: key("k-other")}, false},
		{"keyed, no key record yet", kvstore.Record{State: kvstore.StateClaimed, ActionID: "a5", IdemKey: key("k-none")}, false},
		{"keyed, its own record says dispatched", kvstore.Record{State: kvstore.StateDispatched, ActionID: "a6", IdemKey: key("k-none")}, true},
	}
	for _, c := range cases {
		got, err := b.mayHaveSent(ctx, c.rec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: mayHaveSent = %v, want %v", c.name, got, c.want)
		}
	}
}
