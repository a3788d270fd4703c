package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// Subjects and names used by the floors. They live beside the bridge's "hermes" prefix on
// the same server and use the same storage type as the bridge's streams.
const (
	endpointID      = "primary"
	floorPrefix     = "benchfloor" // minimal JetStream loop: benchfloor.actions.> in, benchfloor.results.> out
	floorInStream   = "BENCH_FLOOR_IN"
	floorOutStream  = "BENCH_FLOOR_OUT"
	floorConsumer   = "bench-floor"
	rawStream       = "BENCH_RAW" // scenario 2 raw async-publish floor: benchraw.>
	rawPrefix       = "benchraw"
	resultTimeout   = 2 * time.Minute
	streamDupWindow = 2 * time.Minute // same Duplicates window as the bridge's streams
)

// env is everything one bench run shares: one embedded nats-server, one fake Hermes, one
// bridge, the client side and the floors' plumbing.
type env struct {
	o       options
	status  *statusLog
	storage jetstream.StorageType
	workers int

	dir  string
	ns   *natsembed.Server
	fake *hermestest.Server
	key  string

	ncBridge, ncClient, ncFloor *nats.Conn
	js                          jetstream.JetStream // client side (bench publishers)
	jsFloor                     jetstream.JetStream // minimal loop side (its result publishes)
	client, floorClient         *events.Client
	hub, floorHub               *hub
	httpc                       *http.Client

	bridgeCancel context.CancelFunc
	bridgeDone   chan error
	bridgeCfg    bridge.Config
	blog         *startedWriter // the bridge's log: readiness and warn/error lines

	floorStop func()

	seq  atomic.Int64                  // unique action ids across the run
	gate atomic.Pointer[chan struct{}] // while set, "hold" prompts wait for it to close
}

func (e *env) newID(tag string) string {
	return tag + "-" + strconv.FormatInt(e.seq.Add(1), 36)
}

// agent is the fake's instant agent. A prompt "events N ..." asks for a stream of exactly
// N SSE events on chat_stream: the role chunk, one text delta, N-4 padding deltas, the
// finish chunk and [DONE]. A prompt "hold ..." first waits for the current gate to open
// (scenario 3 holds every stream open at once to measure memory per in-flight action).
// Anything else gets a short reply at once.
func (e *env) agent(ctx context.Context, t hermestest.Turn) hermestest.Reply {
	if rest, ok := strings.CutPrefix(t.UserText, "hold "); ok {
		if g := e.gate.Load(); g != nil {
			select {
			case <-*g:
			case <-ctx.Done():
				return hermestest.Reply{}
			}
		}
		t.UserText = rest
	}
	if rest, ok := strings.CutPrefix(t.UserText, "events "); ok {
		f, _, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(f)
		return hermestest.Reply{Text: "x", Deltas: 1, Events: max(n-4, 0)}
	}
	return hermestest.Reply{Text: "stub reply: " + t.UserText}
}

// streamPrompt is the prompt for an n-event stream.
func streamPrompt(n int, id string) string { return "events " + strconv.Itoa(n) + " " + id }

// startedWriter discards the bridge's log lines and signals its "bridge started" line.
type startedWriter struct {
	once    sync.Once
	started chan struct{}
	errs    atomic.Int64 // lines at warn level or above
	mu      sync.Mutex
	last    string // last warn/error line (for the report)
}

func (w *startedWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"bridge started"`)) {
		w.once.Do(func() { close(w.started) })
	}
	if bytes.Contains(p, []byte(`"level":"warn"`)) || bytes.Contains(p, []byte(`"level":"error"`)) {
		w.errs.Add(1)
		w.mu.Lock()
		w.last = strings.TrimSpace(string(p))
		w.mu.Unlock()
	}
	return len(p), nil
}

func newEnv(ctx context.Context, o options, st *statusLog) (_ *env, err error) {
	e := &env{o: o, status: st, storage: jetstream.FileStorage}
	if o.Store == "memory" {
		e.storage = jetstream.MemoryStorage
	}
	e.workers = max(o.Concurrency, o.Streams)
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "hermes-bench-*"); err != nil {
		return nil, err
	}
	if e.ns, err = natsembed.Start(natsembed.Options{Port: -1, StoreDir: e.dir}); err != nil {
		return nil, err
	}
	connect := func(name string) (*nats.Conn, error) {
		return nats.Connect(e.ns.ClientURL(), nats.Name(name), nats.MaxReconnects(-1))
	}
	if e.ncBridge, err = connect("bench-bridge"); err != nil {
		return nil, err
	}
	if e.ncClient, err = connect("bench-client"); err != nil {
		return nil, err
	}
	if e.ncFloor, err = connect("bench-floor"); err != nil {
		return nil, err
	}
	if e.js, err = jetstream.New(e.ncClient); err != nil {
		return nil, err
	}
	if e.jsFloor, err = jetstream.New(e.ncFloor); err != nil {
		return nil, err
	}
	e.client = events.NewClient(e.js, events.WithSource("hermes-bench"))
	e.floorClient = events.NewClient(e.js, events.WithSource("hermes-bench"),
		events.WithSubjects(events.Subjects{Prefix: floorPrefix}))

	e.fake = hermestest.NewServer(hermestest.WithAgent(e.agent), hermestest.WithMaxConcurrentRuns(0),
		hermestest.WithKeepalive(time.Minute))
	e.key = e.fake.APIKey()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 2 * e.workers
	tr.MaxIdleConnsPerHost = e.workers
	e.httpc = &http.Client{Transport: tr}

	if e.hub, err = newHub(e.ncClient, "hermes.results.", decodeBridgeResult); err != nil {
		return nil, err
	}
	if e.floorHub, err = newHub(e.ncClient, floorPrefix+".results.", decodeFloorResult); err != nil {
		return nil, err
	}
	if err = e.startBridge(ctx); err != nil {
		return nil, err
	}
	if err = e.startFloorLoop(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *env) startBridge(ctx context.Context) error {
	key := e.key
	e.bridgeCfg = bridge.Config{
		Provision: true,
		Storage:   e.storage,
		Workers:   e.workers,
		Endpoints: []bridge.Endpoint{{
			ID: endpointID, BaseURL: e.fake.URL, Key: func() string { return key }, MaxConcurrency: e.workers,
		}},
	}
	w := &startedWriter{started: make(chan struct{})}
	e.blog = w
	b, err := bridge.New(e.ncBridge, e.bridgeCfg, zerolog.New(w).With().Timestamp().Logger())
	if err != nil {
		return fmt.Errorf("bridge.New: %w", err)
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.bridgeCancel, e.bridgeDone = cancel, make(chan error, 1)
	go func() { e.bridgeDone <- b.Run(bctx) }()
	select {
	case <-w.started:
		return nil
	case err := <-e.bridgeDone:
		e.bridgeDone <- err
		return fmt.Errorf("bridge.Run returned before it started: %v", err)
	case <-time.After(30 * time.Second):
		return errors.New("bridge did not start within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startFloorLoop starts the minimal hand-written JetStream loop: a stream and a durable pull
// consumer on benchfloor.actions.>, Messages() with PullMaxMessages, Concurrency workers that
// call the fake over HTTP, publish the response body to benchfloor.results.<id> with a
// synchronous JetStream publish and Ack. No KV, no dedup, no CloudEvents decoding beyond
// reading the prompt.
func (e *env) startFloorLoop(ctx context.Context) error {
	for _, sc := range []jetstream.StreamConfig{
		{Name: floorInStream, Subjects: []string{floorPrefix + ".actions.>"}, Storage: e.storage, Duplicates: streamDupWindow},
		{Name: floorOutStream, Subjects: []string{floorPrefix + ".results.>"}, Storage: e.storage, Duplicates: streamDupWindow},
		{Name: rawStream, Subjects: []string{rawPrefix + ".>"}, Storage: e.storage, Duplicates: streamDupWindow},
	} {
		if _, err := e.jsFloor.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("floor stream %s: %w", sc.Name, err)
		}
	}
	workers := e.o.Concurrency
	cons, err := e.jsFloor.CreateOrUpdateConsumer(ctx, floorInStream, jetstream.ConsumerConfig{
		Durable: floorConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: workers, FilterSubject: floorPrefix + ".actions.>",
	})
	if err != nil {
		return fmt.Errorf("floor consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(workers))
	if err != nil {
		return fmt.Errorf("floor consume: %w", err)
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ch := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // dispatcher
		defer wg.Done()
		defer close(ch)
		for {
			m, err := it.Next(jetstream.NextContext(lctx))
			if err != nil {
				if lctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return
				}
				continue
			}
			ch <- m
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range ch {
				e.floorHandle(lctx, m)
			}
		}()
	}
	e.floorStop = func() { cancel(); it.Stop(); wg.Wait() }
	return nil
}

// floorHandle is one iteration of the minimal loop.
func (e *env) floorHandle(ctx context.Context, m jetstream.Msg) {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	var a struct {
		Input struct {
			Prompt string `json:"prompt"`
		} `json:"input"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	if json.Unmarshal(m.Data(), &a) != nil || id == "" {
		_ = m.Term()
		return
	}
	body, err := e.httpChat(ctx, a.Input.Prompt, a.IdempotencyKey)
	if err != nil {
		_ = m.Nak()
		return
	}
	if _, err := e.jsFloor.Publish(ctx, floorPrefix+".results."+id, body); err != nil {
		_ = m.Nak()
		return
	}
	_ = m.Ack()
}

// chatBody is the JSON body the bridge sends for input {"prompt": p} (hermes.Prepare).
func chatBody(prompt string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"messages": []map[string]string{{"role": "user", "content": prompt}},
		"model":    "hermes-agent",
		"stream":   stream,
	})
	return b
}

// httpChat posts a non-streaming chat to the fake and returns the response body.
func (e *env) httpChat(ctx context.Context, prompt, key string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.fake.URL+"/v1/chat/completions",
		bytes.NewReader(chatBody(prompt, false)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := e.httpc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fake answered %d", resp.StatusCode)
	}
	return body, nil
}

// httpStream posts a streaming chat and counts its SSE events (data: lines) without
// republishing anything.
func (e *env) httpStream(ctx context.Context, prompt string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.fake.URL+"/v1/chat/completions",
		bytes.NewReader(chatBody(prompt, true)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := e.httpc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("fake answered %d", resp.StatusCode)
	}
	return countSSE(resp.Body)
}

func (e *env) close() {
	if e.floorStop != nil {
		e.floorStop()
	}
	if e.bridgeCancel != nil {
		e.bridgeCancel()
		select {
		case <-e.bridgeDone:
		case <-time.After(60 * time.Second):
		}
	}
	for _, h := range []*hub{e.hub, e.floorHub} {
		if h != nil {
			_ = h.sub.Unsubscribe()
		}
	}
	for _, nc := range []*nats.Conn{e.ncBridge, e.ncClient, e.ncFloor} {
		if nc != nil {
			nc.Close()
		}
	}
	if e.fake != nil {
		e.fake.Close()
	}
	if e.ns != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = e.ns.Shutdown(ctx)
		cancel()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}
