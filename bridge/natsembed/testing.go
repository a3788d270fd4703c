package natsembed

import (
	"context"
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
