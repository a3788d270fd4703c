package natsembed

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RunTest starts a server for a test: random port on 127.0.0.1, a fresh
// t.TempDir() store, no logging. Option functions may adjust the options
// (for example to set MaxPayload or a Logger such as zerolog.New(zerolog.NewTestWriter(t))).
// The server is shut down by t.Cleanup. Failure to start fails the test.
func RunTest(t testing.TB, opts ...func(*Options)) *Server {
	t.Helper()
	o := Options{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	s, err := Start(o)
	if err != nil {
		t.Fatalf("natsembed: start test server: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("natsembed: shutdown test server: %v", err)
		}
	})
	return s
}

// Connect opens a client connection to s and a JetStream context on it; both
// are closed by t.Cleanup (registered after RunTest's, so they run first).
// The connection reconnects forever with a short wait, so it survives
// Server.Restart.
func Connect(t testing.TB, s *Server, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	o := append([]nats.Option{
		nats.Name(t.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
	}, opts...)
	nc, err := nats.Connect(s.ClientURL(), o...)
	if err != nil {
		t.Fatalf("natsembed: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natsembed: jetstream: %v", err)
	}
	return nc, js
}

// RunTestCluster starts a JetStream cluster of n servers for a test, in this process:
// random client and route ports on 127.0.0.1, a t.TempDir() store each, server names
// n0, n1, ...; jsConf, when not empty, is added inside each server's jetstream block
// (limits, for example). The servers are shut down by t.Cleanup; failure to start fails
// the test. The cluster may still be electing its meta leader when it returns.
func RunTestCluster(t testing.TB, n int, jsConf string) []*Server {
	t.Helper()
	ports := make([]int, n)
	var ls []net.Listener
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("natsembed: reserve a route port: %v", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		_ = l.Close()
	}
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = strconv.Quote(fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	servers := make([]*Server, n)
	var wg sync.WaitGroup
	for i, p := range ports {
		dir := t.TempDir()
		conf := filepath.Join(dir, "node.conf")
		name := fmt.Sprintf("n%d", i)
		text := fmt.Sprintf("server_name: %s\njetstream { store_dir: %q\n%s\n}\ncluster { name: hermes, listen: \"127.0.0.1:%d\", routes: [%s] }\n",
			name, filepath.Join(dir, "js"), jsConf, p, strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatalf("natsembed: write %s: %v", conf, err)
		}
		wg.Go(func() {
			s, err := Start(Options{Host: "127.0.0.1", Port: -1, StoreDir: filepath.Join(dir, "js"),
				ConfigFile: conf, ServerName: name, ReadyTimeout: 30 * time.Second})
			if err != nil {
				t.Errorf("natsembed: start %s: %v", name, err)
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
	}
	for i, s := range servers {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Errorf("natsembed: shutdown n%d: %v", i, err)
			}
		})
	}
	return servers
}
