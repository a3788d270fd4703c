package natsembed_test

import (
	"bufio"
	"bytes"
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
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

func TestRunTestJetStream(t *testing.T) {
	s := natsembed.RunTest(t)
	if s.Port() <= 0 {
		t.Fatalf("Port() = %d, want a real port", s.Port())
	}
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("ClientURL() = %q", s.ClientURL())
	}
	_, js := natsembed.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	ack, err := js.Publish(ctx, "t.a", []byte("x"))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if ack.Sequence != 1 {
		t.Fatalf("ack.Sequence = %d, want 1", ack.Sequence)
	}
}

func TestStartRequiresStoreDir(t *testing.T) {
	if _, err := natsembed.Start(natsembed.Options{Port: -1}); err == nil {
		t.Fatal("Start without StoreDir succeeded")
	}
}

func TestStartPortInUse(t *testing.T) {
	s := natsembed.RunTest(t)
	start := time.Now()
	_, err := natsembed.Start(natsembed.Options{Port: s.Port(), StoreDir: t.TempDir()})
	if err == nil {
		t.Fatal("second Start on the same port succeeded")
	}
	if !errors.Is(err, natsembed.ErrNotReady) {
		t.Fatalf("err = %v, want ErrNotReady", err)
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("err = %v, want the listen error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("port-in-use error took %s, want fast failure", d)
	}
}

func TestMaxPayload(t *testing.T) {
	s := natsembed.RunTest(t, func(o *natsembed.Options) { o.MaxPayload = 4096 })
	nc, _ := natsembed.Connect(t, s)
	if got := nc.MaxPayload(); got != 4096 {
		t.Fatalf("MaxPayload = %d, want 4096", got)
	}
}

func TestRestartKeepsPortAndData(t *testing.T) {
	s := natsembed.RunTest(t)
	port, url := s.Port(), s.ClientURL()
	nc, js := natsembed.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if _, err := js.Publish(ctx, "r.a", []byte("before")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	first := s.NATS()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.NATS() == first {
		t.Fatal("NATS() returned the old instance after Restart")
	}
	if s.Port() != port || s.ClientURL() != url {
		t.Fatalf("after Restart port/url = %d %q, want %d %q", s.Port(), s.ClientURL(), port, url)
	}
	// The existing connection reconnects; poll until it is connected again.
	deadline := time.Now().Add(10 * time.Second)
	for !nc.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("client did not reconnect after Restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := js.Stream(ctx, "R")
	if err != nil {
		t.Fatalf("Stream after restart: %v", err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, "r.a")
	if err != nil {
		t.Fatalf("GetLastMsgForSubject after restart: %v", err)
	}
	if string(msg.Data) != "before" {
		t.Fatalf("data after restart = %q", msg.Data)
	}
}

func TestShutdownIdempotentAndBounded(t *testing.T) {
	s, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if s.NATS().Running() {
		t.Fatal("server still running after Shutdown")
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if _, err := nats.Connect(s.ClientURL(), nats.Timeout(time.Second)); err == nil {
		t.Fatal("connect to a stopped server succeeded")
	}
}

// syncBuffer is a goroutine-safe writer for the logger test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestLoggerAdapter(t *testing.T) {
	var buf syncBuffer
	natsembed.RunTest(t, func(o *natsembed.Options) { o.Logger = zerolog.New(&buf) })
	out := buf.String()
	if !strings.Contains(out, "Server is ready") {
		t.Fatalf("log output lacks the ready notice:\n%s", out)
	}
	if strings.Contains(out, `"level":"trace"`) {
		t.Fatal("trace lines logged")
	}
}

func TestConfigFileAuth(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	err := os.WriteFile(conf, []byte(`
authorization {
  users = [ { user: "bridge", password: "s3cret" } ]
}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s := natsembed.RunTest(t, func(o *natsembed.Options) { o.ConfigFile = conf })
	if nc, err := nats.Connect(s.ClientURL(), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Fatal("connect without credentials succeeded")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("bridge", "s3cret"))
	if err != nil {
		t.Fatalf("connect with credentials: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("AccountInfo with config file: %v", err)
	}
}

func TestConfigFileInvalid(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "bad.conf")
	if err := os.WriteFile(conf, []byte("port: {{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: t.TempDir(), ConfigFile: conf}); err == nil {
		t.Fatal("Start with a broken config file succeeded")
	}
}

// Two servers must never share a store directory: the second Start fails at once with
// a StoreLockedError naming the directory and the holder, and the lock is free again
// after Shutdown (also across Restart).
func TestStoreDirLocked(t *testing.T) {
	dir := t.TempDir()
	first, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: dir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer first.Shutdown(ctx)

	start := time.Now()
	second, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: dir})
	if err == nil {
		second.Shutdown(ctx)
		t.Fatal("a second Start on the same store directory succeeded")
	}
	if !errors.Is(err, natsembed.ErrStoreLocked) || !errors.Is(err, natsembed.ErrNotReady) {
		t.Fatalf("err = %v, want ErrStoreLocked (and ErrNotReady)", err)
	}
	var le *natsembed.StoreLockedError
	if !errors.As(err, &le) {
		t.Fatalf("err = %T %v, want a *StoreLockedError", err, err)
	}
	if le.Dir != dir || le.PID != os.Getpid() || le.URL != first.ClientURL() {
		t.Fatalf("StoreLockedError = %+v, want dir %s, pid %d, url %s", le, dir, os.Getpid(), first.ClientURL())
	}
	for _, want := range []string{dir, fmt.Sprintf("pid %d", os.Getpid()), first.ClientURL()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err.Error(), want)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the locked-store error took %s, want fast failure", d)
	}

	// Restart keeps the directory: a third Start is still refused after it.
	if err := first.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: dir}); !errors.Is(err, natsembed.ErrStoreLocked) {
		if err == nil {
			s.Shutdown(ctx)
		}
		t.Fatalf("Start after the holder's Restart: %v, want ErrStoreLocked", err)
	}

	if err := first.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	third, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: dir})
	if err != nil {
		t.Fatalf("Start after the holder's Shutdown: %v", err)
	}
	// The first server, restarted after its Shutdown, now finds the directory taken.
	if err := first.Restart(ctx); !errors.Is(err, natsembed.ErrStoreLocked) {
		t.Fatalf("Restart of a stopped server on a directory taken since: %v, want ErrStoreLocked", err)
	}
	if err := third.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// WebSocketPort -1 opens a WebSocket listener on a free port that nats.go reaches over
// ws://, keeps it across Restart, and refuses a browser Origin not in the allowed list.
func TestWebSocketListener(t *testing.T) {
	s := natsembed.RunTest(t, func(o *natsembed.Options) {
		o.WebSocketPort = -1
		o.WebSocketAllowedOrigins = []string{"http://127.0.0.1:9464"}
	})
	ws := s.WebSocketURL()
	if !strings.HasPrefix(ws, "ws://127.0.0.1:") || strings.HasSuffix(ws, ":0") || strings.HasSuffix(ws, ":-1") {
		t.Fatalf("WebSocketURL() = %q", ws)
	}
	nc, err := nats.Connect(ws)
	if err != nil {
		t.Fatalf("connect over %s: %v", ws, err)
	}
	if err := nc.Publish("t.x", nil); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	// A browser on another page sends its own Origin: refused before any NATS protocol.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ws, "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: http://evil.example\r\n\r\n", strings.TrimPrefix(ws, "ws://"))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if !strings.Contains(line, "403") {
		t.Fatalf("foreign origin answered %q, want 403", line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.WebSocketURL(); got != ws {
		t.Fatalf("after Restart WebSocketURL() = %q, want %q", got, ws)
	}
	if nc, err = nats.Connect(ws); err != nil {
		t.Fatalf("connect over %s after Restart: %v", ws, err)
	}
	nc.Close()
	if plain := natsembed.RunTest(t); plain.WebSocketURL() != "" {
		t.Fatalf("no WebSocketPort: WebSocketURL() = %q, want empty", plain.WebSocketURL())
	}
}
