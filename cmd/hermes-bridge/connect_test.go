package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	noErr(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// asyncRun is the `run` logic running in-process: its logs, and its error once stopped
// is closed.
type asyncRun struct {
	logs    *syncBuffer
	stopped chan struct{}
	err     error
}

// startRunAsync runs the `run` logic in-process with environ; the run is stopped when
// the test ends.
func startRunAsync(t *testing.T, environ map[string]string) *asyncRun {
	t.Helper()
	env := map[string]string{"HERMES_BRIDGE_DATA_DIR": t.TempDir(), "HERMES_BRIDGE_HTTP_ADDR": "", "HERMES_URL": "http://127.0.0.1:1",
		"HERMES_BRIDGE_SHUTDOWN_GRACE": "1s"}
	for k, v := range environ {
		env[k] = v
	}
	p, err := prepareRun(env)
	noErr(t, err)
	r := &asyncRun{logs: &syncBuffer{}, stopped: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(r.stopped)
		r.err = runService(ctx, p, newLogger(p.cfg, r.logs, p.replicaID), r.logs, nil)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.stopped:
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	})
	return r
}

// wait returns run's error once it stopped, failing the test after d.
func (r *asyncRun) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-r.stopped:
		return r.err
	case <-time.After(d):
		t.Fatalf("run did not stop within %s:\n%s", d, r.logs.String())
		return nil
	}
}

// TestRunWaitsForNATS (issue 26, item 11): run started before its external NATS server
// retries the first connection, saying so, and connects once the server is up.
func TestRunWaitsForNATS(t *testing.T) {
	port := freePort(t)
	r := startRunAsync(t, map[string]string{"NATS_URL": "nats://127.0.0.1:" + strconv.Itoa(port)})
	waitFor(t, 10*time.Second, "the retry line", func() bool { return strings.Contains(r.logs.String(), "NATS is not reachable yet; retrying") })
	natsembed.RunTest(t, func(o *natsembed.Options) { o.Port = port })
	waitFor(t, 30*time.Second, "the bridge started", func() bool {
		select {
		case <-r.stopped:
			t.Fatalf("run stopped: %v\n%s", r.err, r.logs.String())
		default:
		}
		return strings.Contains(r.logs.String(), `"bridge started"`)
	})
	if !strings.Contains(r.logs.String(), "NATS is reachable now; connected") {
		t.Errorf("no line says the retried connection succeeded:\n%s", r.logs.String())
	}
}

// TestRunGivesUpOnNATS: with no server, run gives up after
// HERMES_BRIDGE_NATS_CONNECT_WAIT, logging a few attempts (not every one) and the
// give-up, and its error says how long it tried.
func TestRunGivesUpOnNATS(t *testing.T) {
	for _, v := range []*time.Duration{&connectLogEvery} {
		old := *v
		*v = 500 * time.Millisecond
		t.Cleanup(func() { *v = old })
	}
	start := time.Now()
	r := startRunAsync(t, map[string]string{"NATS_URL": "nats://127.0.0.1:" + strconv.Itoa(freePort(t)),
		"HERMES_BRIDGE_NATS_CONNECT_WAIT": "2s"})
	err := r.wait(t, 30*time.Second)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "HERMES_BRIDGE_NATS_CONNECT_WAIT=2s") {
		t.Fatalf("run: %v", err)
	}
	if took < 1500*time.Millisecond {
		t.Errorf("gave up after %s, before the 2s wait", took)
	}
	out := r.logs.String()
	if n := strings.Count(out, "NATS is not reachable yet; retrying"); n < 2 || n > 6 {
		t.Errorf("%d retry lines in 2s with one every 500ms at most:\n%s", n, out)
	}
	if !strings.Contains(out, "giving up: NATS did not become reachable within HERMES_BRIDGE_NATS_CONNECT_WAIT") {
		t.Errorf("no give-up line:\n%s", out)
	}
	// 0 tries once.
	start = time.Now()
	r = startRunAsync(t, map[string]string{"NATS_URL": "nats://127.0.0.1:" + strconv.Itoa(freePort(t)),
		"HERMES_BRIDGE_NATS_CONNECT_WAIT": "0s"})
	if err := r.wait(t, 30*time.Second); err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("HERMES_BRIDGE_NATS_CONNECT_WAIT=0: %v after %s", err, time.Since(start))
	}
}
