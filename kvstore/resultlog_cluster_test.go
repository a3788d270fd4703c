package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/kvstore/kvtest"
)

// freePorts returns n ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// runCluster starts a three-node JetStream cluster and returns a JetStream context on
// its first node.
func runCluster(t *testing.T) jetstream.JetStream {
	t.Helper()
	ports := freePorts(t, 3)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	servers := make([]*natsembed.Server, 3)
	var wg sync.WaitGroup
	for i, p := range ports {
		dir := t.TempDir()
		conf := filepath.Join(dir, "n.conf")
		cfg := fmt.Sprintf("server_name: n%d\njetstream { store_dir: %q }\ncluster { name: c, listen: \"127.0.0.1:%d\", routes: [%s] }\n",
			i, filepath.Join(dir, "js"), p, strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			s, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: filepath.Join(dir, "js"), ConfigFile: conf,
				ServerName: fmt.Sprintf("n%d", i), ReadyTimeout: 30 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			servers[i] = s
		})
	}
	wg.Wait()
	for _, s := range servers {
		if s == nil {
			t.FailNow()
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
		})
	}
	_, js := natsembed.Connect(t, servers[0])
	return js
}

// TestJetStreamLogLoserOnReplicatedStream: on a replicated output stream a second
// terminal result of an action (same Nats-Msg-Id, stale expected sequence) is answered
// as a duplicate of the first, not as a wrong last sequence; Append must still report
// ErrConflict, so that the second settler gets ErrSettled with the winner's entry.
func TestJetStreamLogLoserOnReplicatedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	js := runCluster(t)
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
	if err != nil {
		t.Fatal(err)
	}
	l := kvstore.NewJetStreamLog(js, st, func(id string) string { return "t.results." + id })
	msg := func(data string) *nats.Msg {
		m := kvtest.ResultMsg("a", []byte(data))
		m.Subject = "t.results.a"
		return m
	}
	seq, err := l.Append(ctx, "a", msg(`"winner"`), 0)
	if err != nil {
		t.Fatal(err)
	}
	// The loser's publish has the same Nats-Msg-Id: the stream calls it a duplicate.
	if got, err := l.Append(ctx, "a", msg(`"loser"`), 0); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("a second terminal result with a stale expected sequence: %d, %v; want ErrConflict", got, err)
	}
	// The winner's own message again (a retry after a lost reply) is its success.
	if got, err := l.Append(ctx, "a", msg(`"winner"`), 0); err != nil || got != seq {
		t.Fatalf("the same message again: %d, %v; want %d", got, err, seq)
	}
	// Through the ledger: the loser gets ErrSettled with the winner's entry.
	le, err := kvstore.NewLedger(kvtest.NewRecords(), l, time.Second).SettleUnclaimed(ctx, "a", msg(`"loser"`), 0)
	if !errors.Is(err, kvstore.ErrSettled) || le.Seq != seq || string(le.Data) != `"winner"` {
		t.Fatalf("SettleUnclaimed of the loser: %d %s, %v; want ErrSettled with %d \"winner\"", le.Seq, le.Data, err, seq)
	}
}
