// Package e2e_test drives the whole bridge black-box: an embedded nats-server, the fake
// Hermes from hermes/hermestest, and the bridge running in-process. Tests talk to the
// bridge through NATS only and check what reached Hermes through the fake's records.
package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// harness is one embedded NATS server, one fake Hermes and one or more bridges.
type harness struct {
	t      *testing.T
	ns     *natsembed.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	fake   *hermestest.Server
	client *client.Client
	cfg    bridge.Config
	logs   *syncBuffer
	// bridgeNATS are extra connection options of every bridge replica (see withBridgeNATS).
	bridgeNATS []nats.Option

	state *harnessState // shared by every view of the harness (see at)
}

type harnessState struct {
	mu      sync.Mutex
	bridges []*runningBridge
}

type runningBridge struct {
	b      *bridge.Bridge
	cancel context.CancelFunc
	done   chan error
}

type harnessOption func(*harnessOptions)

type harnessOptions struct {
	fakeOpts []hermestest.Option
	cfg      func(*bridge.Config)
	natsOpts []func(*natsembed.Options)
	noBridge bool
	// clientNATS and bridgeNATS are extra connection options (for example credentials)
	// of the test's own connection and of every bridge replica.
	clientNATS, bridgeNATS []nats.Option
}

// withClientNATS adds options (for example nats.UserInfo) to the test's own connection,
// the one behind h.nc, h.js and h.client.
func withClientNATS(opts ...nats.Option) harnessOption {
	return func(o *harnessOptions) { o.clientNATS = append(o.clientNATS, opts...) }
}

// withBridgeNATS adds options (for example nats.UserInfo) to every bridge replica's connection.
func withBridgeNATS(opts ...nats.Option) harnessOption {
	return func(o *harnessOptions) { o.bridgeNATS = append(o.bridgeNATS, opts...) }
}

// withNATS adjusts the embedded server's options (for example MaxPayload).
func withNATS(f func(*natsembed.Options)) harnessOption {
	return func(o *harnessOptions) { o.natsOpts = append(o.natsOpts, f) }
}

func withFake(opts ...hermestest.Option) harnessOption {
	return func(o *harnessOptions) { o.fakeOpts = append(o.fakeOpts, opts...) }
}

func withConfig(f func(*bridge.Config)) harnessOption {
	return func(o *harnessOptions) { o.cfg = f }
}

func withoutBridge() harnessOption { return func(o *harnessOptions) { o.noBridge = true } }

// newHarness starts NATS, the fake Hermes and one bridge; everything stops at cleanup.
func newHarness(t *testing.T, opts ...harnessOption) *harness {
	t.Helper()
	var o harnessOptions
	for _, f := range opts {
		f(&o)
	}
	ns := natsembed.RunTest(t, o.natsOpts...)
	nc, js := natsembed.Connect(t, ns, o.clientNATS...)
	fake := hermestest.NewServer(o.fakeOpts...)
	t.Cleanup(fake.Close)
	key := fake.APIKey()
	cfg := bridge.Config{
		Provision: true,
		AckWait:   5 * time.Second,
		RetryBase: 20 * time.Millisecond,
		RetryMax:  200 * time.Millisecond,
		// Subtests share an endpoint and inject 5xx on purpose: only the breaker tests
		// (which set their own threshold) should see the endpoint paused.
		BreakerThreshold: 1000,
		Endpoints: []bridge.Endpoint{{
			ID: "primary", BaseURL: fake.URL, Key: func() string { return key }, MaxConcurrency: 10,
		}},
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	h := &harness{t: t, ns: ns, nc: nc, js: js, fake: fake, cfg: cfg, logs: &syncBuffer{},
		client: client.New(js), state: &harnessState{}, bridgeNATS: o.bridgeNATS}
	if !o.noBridge {
		h.startBridge()
	}
	return h
}

// startBridge runs one more bridge replica on its own connection and waits until its
// consumer exists.
func (h *harness) startBridge() *runningBridge {
	h.t.Helper()
	nc, _ := natsembed.Connect(h.t, h.ns, h.bridgeNATS...)
	started := strings.Count(h.logs.String(), `"message":"bridge started"`)
	var w io.Writer = h.logs
	if testing.Verbose() {
		w = io.MultiWriter(h.logs, os.Stderr)
	}
	h.state.mu.Lock()
	replica := fmt.Sprintf("r%d", len(h.state.bridges))
	h.state.mu.Unlock()
	b, err := bridge.New(nc, h.cfg, zerolog.New(w).With().Timestamp().Str("replica", replica).Logger())
	requireOK(h.t, err, "bridge.New: %v")
	ctx, cancel := context.WithCancel(context.Background())
	rb := &runningBridge{b: b, cancel: cancel, done: make(chan error, 1)}
	// Every goroutine the replica starts carries its name in the label bridgeLabel.
	go pprof.Do(ctx, pprof.Labels(bridgeLabel, replica), func(ctx context.Context) { rb.done <- b.Run(ctx) })
	h.state.mu.Lock()
	h.state.bridges = append(h.state.bridges, rb)
	h.state.mu.Unlock()
	h.t.Cleanup(func() { rb.stop(h.t) })
	// Ready once this replica has bound its consumer and logged that it started.
	h.until(10*time.Second, "the bridge started", func() bool {
		return strings.Count(h.logs.String(), `"message":"bridge started"`) > started
	})
	return rb
}

func (rb *runningBridge) stop(t *testing.T) {
	rb.cancel()
	select {
	case err := <-rb.done:
		if err != nil {
			t.Errorf("bridge.Run: %v", err)
		}
		rb.done <- nil
	case <-time.After(60 * time.Second):
		t.Errorf("bridge did not stop within 60s")
	}
}

// eventually polls f until it returns nil or the timeout passes.
func (h *harness) eventually(timeout time.Duration, f func() error) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// until polls cond until it holds or the timeout passes; what names the condition in
// the failure message.
func (h *harness) until(timeout time.Duration, what string, cond func() bool) {
	h.t.Helper()
	h.eventually(timeout, func() error {
		if !cond() {
			return errors.New("not yet: " + what)
		}
		return nil
	})
}

// publish publishes an action and returns its id.
func (h *harness) publish(op string, a events.Action, opts ...client.PublishOption) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := h.client.Publish(ctx, "primary", op, a, opts...)
	if err != nil {
		h.t.Fatalf("publish %s: %v", op, err)
	}
	return id
}

// follow replays and follows an action until its terminal result.
func (h *harness) follow(id string) (*events.Result, []*events.EventData) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var evs []*events.EventData
	res, err := h.client.Follow(ctx, id, func(e *events.EventData) error {
		evs = append(evs, e)
		return nil
	}, nil)
	if err != nil {
		h.t.Fatalf("follow %s: %v", id, err)
	}
	return res, evs
}

// call publishes and follows.
func (h *harness) call(op string, input any, mod ...func(*events.Action)) (*events.Result, []*events.EventData) {
	h.t.Helper()
	a := events.Action{Input: mustJSON(h.t, input)}
	for _, f := range mod {
		f(&a)
	}
	return h.follow(h.publish(op, a))
}

// callOK is call that fails unless the result is completed (see requireCompleted).
func (h *harness) callOK(op string, input any, mod ...func(*events.Action)) *events.Result {
	h.t.Helper()
	res, _ := h.call(op, input, mod...)
	requireCompleted(h.t, res)
	return res
}

// followOK is follow that fails unless the result is completed (see requireCompleted).
func (h *harness) followOK(id string) *events.Result {
	h.t.Helper()
	res, _ := h.follow(id)
	requireCompleted(h.t, res)
	return res
}

// results counts the result messages stored for an action.
func (h *harness) results(id string) int {
	h.t.Helper()
	n, err := h.storedResultCount(id)
	if err != nil {
		h.t.Fatalf("stored results of %s: %v", id, err)
	}
	return n
}

// storedResultCount counts the result messages stored on the action's result subject,
// without failing the test (it is called from a bridge hook, off the test goroutine).
func (h *harness) storedResultCount(id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg := h.cfg.WithDefaults()
	s, err := h.js.Stream(ctx, cfg.OutputStream)
	if err != nil {
		return 0, err
	}
	subj := cfg.Prefix + ".results." + id
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, err
	}
	return int(info.State.Subjects[subj]), nil
}

func withKey(k string) func(*events.Action) { return func(a *events.Action) { a.IdempotencyKey = k } }

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	if raw, ok := v.(json.RawMessage); ok {
		return raw
	}
	if s, ok := v.(string); ok {
		return json.RawMessage(s)
	}
	b, err := json.Marshal(v)
	requireOK(t, err, "marshal: %v")
	return b
}

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
