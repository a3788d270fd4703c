package kvstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// TestJetStreamLogLoserOnReplicatedStream: on a replicated output stream a second
// terminal result of an action (same Nats-Msg-Id, stale expected sequence) is answered
// as a duplicate of the first, not as a wrong last sequence; Append must still report
// ErrConflict, and the log's last entry stays the winner's.
func TestJetStreamLogLoserOnReplicatedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	_, js := natsembed.Connect(t, natsembed.RunTestCluster(t, 3, "")[0])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var st jetstream.Stream
	var err error
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		st, err = js.CreateStream(actx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"t.results.>"},
			Replicas: 3, Storage: jetstream.MemoryStorage})
		acancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // the cluster elects its meta leader
	}
	noErr(t, err)
	l := kvstore.NewJetStreamLog(js, st, func(id string) string { return "t.results." + id })
	msg := func(data string) *nats.Msg { // each result names its appender: the data
		m := nats.NewMsg("t.results.a")
		m.Header.Set(jetstream.MsgIDHeader, "a:result")
		m.Header.Set(kvstore.HeaderOwner, data)
		m.Data = []byte(data)
		return m
	}
	seq, err := l.Append(ctx, "a", msg(`"winner"`), 0)
	noErr(t, err)
	// The loser's publish has the same Nats-Msg-Id: the stream calls it a duplicate.
	if got, err := l.Append(ctx, "a", msg(`"loser"`), 0); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("a second terminal result with a stale expected sequence: %d, %v; want ErrConflict", got, err)
	}
	// The winner's own message again (a retry after a lost reply) is its success.
	if got, err := l.Append(ctx, "a", msg(`"winner"`), 0); err != nil || got != seq {
		t.Fatalf("the same message again: %d, %v; want %d", got, err, seq)
	}
	// The log keeps the winner's entry, which the loser's core reads and replays.
	le, err := l.Last(ctx, "a")
	if err != nil || le.Seq != seq || string(le.Data) != `"winner"` {
		t.Fatalf("the log after the loser: %d %s, %v; want %d \"winner\"", le.Seq, le.Data, err, seq)
	}
}
