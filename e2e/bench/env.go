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
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
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
	promisePrefix   = "benchpromise" // the promise floor: benchpromise.actions.> in, benchpromise.out.results.> stored as benchpromise.results.>
	promiseIn       = "BENCH_PROMISE_IN"
	promiseOut      = "BENCH_PROMISE_OUT"
	promiseConsumer = "bench-promise"
	promiseBucket   = "BENCH_PROMISE" // the claim records, History 1 as the bridge's buckets
	rawStream       = "BENCH_RAW"     // scenario 2 raw async-publish floor: benchraw.>
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
	bridge, floor, promise      pipeline            // the bridge, the js loop, the promise floor
	promiseKV                   jetstream.KeyValue  // the promise floor's claims
	httpc                       *http.Client

	bridgeCancel context.CancelFunc
	bridgeDone   chan error
	bridgeCfg    bridge.Config
	stopTracing  func()
	traces       *traceSink     // -tracing otlp: where the spans go
	blog         *startedWriter // the bridge's log: readiness and warn/error lines

	floorStops []func()

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
	e.fake = hermestest.NewServer(hermestest.WithAgent(e.agent), hermestest.WithMaxConcurrentRuns(0),
		hermestest.WithKeepalive(time.Minute))
	e.key = e.fake.APIKey()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 2 * e.workers
	tr.MaxIdleConnsPerHost = e.workers
	e.httpc = &http.Client{Transport: tr}

	for _, p := range []struct {
		dst    *pipeline
		prefix string
		decode func(*nats.Msg) (outcome, bool)
	}{{&e.bridge, events.DefaultPrefix, decodeBridgeResult}, {&e.floor, floorPrefix, decodeFloorResult}, {&e.promise, promisePrefix, decodeFloorResult}} {
		p.dst.client = client.New(e.js, client.WithSource("hermes-bench"), client.WithSubjects(events.Subjects{Prefix: p.prefix}))
		if p.dst.hub, err = newHub(e.ncClient, p.prefix+".results.", p.decode); err != nil {
			return nil, err
		}
	}
	if err = e.startBridge(ctx); err != nil {
		return nil, err
	}
	if err = e.startFloorLoops(ctx); err != nil {
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
		// Metrics on, as `run` has them: the registry is scraped by nobody, the
		// recording is what costs.
		Metrics: opshttp.NewRegistry(),
		Endpoints: []bridge.Endpoint{{
			ID: endpointID, BaseURL: e.fake.URL, Key: func() string { return key }, MaxConcurrency: e.workers,
		}},
	}
	if e.o.NoMetrics {
		e.bridgeCfg.Metrics = nil
	}
	tp, stop, sink, err := tracerProvider(ctx, e.o.Tracing)
	if err != nil {
		return err
	}
	e.bridgeCfg.TracerProvider, e.stopTracing, e.traces = tp, stop, sink
	w := &startedWriter{started: make(chan struct{})}
	e.blog = w
	b, err := bridge.New(e.ncBridge, e.bridgeCfg, zerolog.New(w).With().Timestamp().Logger())
	if err != nil {
		return fmt.Errorf("bridge.New: %w", err)
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.bridgeCancel, e.bridgeDone = cancel, make(chan error, 1)
	go pprof.Do(bctx, pprof.Labels(ownerLabel, ownerBridge), func(ctx context.Context) { e.bridgeDone <- b.Run(ctx) })
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

// startFloorLoops starts the two hand-written JetStream loops scenario 1 compares the
// bridge with, and creates the scenario 2 raw stream.
func (e *env) startFloorLoops(ctx context.Context) error {
	if _, err := e.jsFloor.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: rawStream, Subjects: []string{rawPrefix + ".>"},
		Storage: e.storage, Duplicates: streamDupWindow}); err != nil {
		return fmt.Errorf("floor stream %s: %w", rawStream, err)
	}
	kv, err := e.jsFloor.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: promiseBucket, History: 1,
		TTL: 25 * time.Hour, Storage: e.storage})
	if err != nil {
		return fmt.Errorf("promise floor bucket: %w", err)
	}
	e.promiseKV = kv
	if err := e.startLoop(ctx, floorPrefix, floorInStream, floorConsumer, jetstream.StreamConfig{
		Name: floorOutStream, Subjects: []string{floorPrefix + ".results.>"},
	}, e.floorHandle); err != nil {
		return err
	}
	// The promise floor's output stream is the bridge's (bridge/outputs.go): it captures
	// <prefix>.out.>, stores under <prefix>.> and republishes what it stored, so that a
	// live subscriber sees only stored results.
	return e.startLoop(ctx, promisePrefix, promiseIn, promiseConsumer, jetstream.StreamConfig{
		Name: promiseOut, Subjects: []string{promisePrefix + ".out.results.>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: promisePrefix + ".out.>", Destination: promisePrefix + ".>"},
		RePublish:        &jetstream.RePublish{Source: promisePrefix + ".*.>", Destination: promisePrefix + ".{{wildcard(1)}}.>"},
	}, e.promiseHandle)
}

// startLoop starts one minimal hand-written JetStream loop: a stream and a durable pull
// consumer on <prefix>.actions.>, Messages() with PullMaxMessages, Concurrency workers
// that run handle on each message, and the output stream out (given its name, subjects
// and any transform; storage and duplicate window are the bridge's). No CloudEvents
// decoding beyond reading the prompt.
func (e *env) startLoop(ctx context.Context, prefix, in, consumer string, out jetstream.StreamConfig, handle func(context.Context, jetstream.Msg)) error {
	out.Storage, out.Duplicates = e.storage, streamDupWindow
	for _, sc := range []jetstream.StreamConfig{
		{Name: in, Subjects: []string{prefix + ".actions.>"}, Storage: e.storage, Duplicates: streamDupWindow}, out,
	} {
		if _, err := e.jsFloor.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("floor stream %s: %w", sc.Name, err)
		}
	}
	workers := e.o.Concurrency
	cons, err := e.jsFloor.CreateOrUpdateConsumer(ctx, in, jetstream.ConsumerConfig{
		Durable: consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: workers, FilterSubject: prefix + ".actions.>",
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
				handle(lctx, m)
			}
		}()
	}
	e.floorStops = append(e.floorStops, func() { cancel(); it.Stop(); wg.Wait() })
	return nil
}

// floorAction is what the loops read from an action: the prompt and the key.
type floorAction struct {
	Input struct {
		Prompt string `json:"prompt"`
	} `json:"input"`
	IdempotencyKey string `json:"idempotency_key"`
}

// floorHandle is one iteration of the js loop: decode, call, publish, ack.
func (e *env) floorHandle(ctx context.Context, m jetstream.Msg) {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	var a floorAction
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

// promiseClaim is the promise floor's claim record: as many bytes as the bridge's action
// record of a scenario 1 action (its JSON: state, action and capability ids, input hash,
// owner, attempt, idempotency record key, times).
var promiseClaim = bytes.Repeat([]byte("c"), 420)

// promiseResultOpts make the promise floor's result publish a compare-and-set on its
// subject, as the bridge's result append is (kvstore.JetStreamLog.Append).
var promiseResultOpts = []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(0)}

// promiseHandle is the js loop plus exactly the durable writes the bridge's promise
// needs for an unsafe keyed action: one claim before the call (a KV Create of the
// action's record, which fails if the action was claimed before), then the result
// appended with the bridge's message id, only if the action has no result yet, and
// republished by its stream once stored.
func (e *env) promiseHandle(ctx context.Context, m jetstream.Msg) {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	var a floorAction
	if json.Unmarshal(m.Data(), &a) != nil || id == "" || a.IdempotencyKey == "" {
		_ = m.Term()
		return
	}
	if _, err := e.promiseKV.Create(ctx, "act."+id, promiseClaim); err != nil {
		_ = m.Nak()
		return
	}
	body, err := e.httpChat(ctx, a.Input.Prompt, a.IdempotencyKey)
	if err != nil {
		_ = m.Nak()
		return
	}
	res := &nats.Msg{Subject: promisePrefix + ".out.results." + id, Header: nats.Header{jetstream.MsgIDHeader: {id + ":result"}}, Data: body}
	if _, err := e.jsFloor.PublishMsg(ctx, res, promiseResultOpts...); err != nil {
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

// postChat posts a chat to the fake (with an Idempotency-Key unless key is "") and
// returns the response of status 200 for the caller to read and close.
func (e *env) postChat(ctx context.Context, prompt, key string, stream bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.fake.URL+"/v1/chat/completions",
		bytes.NewReader(chatBody(prompt, stream)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	accept := "application/json"
	if stream {
		accept = "text/event-stream"
	}
	req.Header.Set("Accept", accept)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := e.httpc.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("fake answered %d", resp.StatusCode)
	}
	return resp, err
}

// httpChat posts a non-streaming chat to the fake and returns the response body.
func (e *env) httpChat(ctx context.Context, prompt, key string) ([]byte, error) {
	resp, err := e.postChat(ctx, prompt, key, false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// httpStream posts a streaming chat and counts its SSE events (data: lines) without
// republishing anything.
func (e *env) httpStream(ctx context.Context, prompt string) (int, error) {
	resp, err := e.postChat(ctx, prompt, "", true)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return countSSE(resp.Body)
}

// purgeStreams empties every stream on the server (the bridge's, its bucket and the
// floors'), runs the GC and reports the heap left. The bridge and the loops are idle
// between scenarios; their consumers carry on from the purged sequence.
func (e *env) purgeStreams(ctx context.Context) error {
	var names []string
	var msgs uint64
	for sl := e.jsFloor.ListStreams(ctx); ; {
		si, ok := <-sl.Info()
		if !ok {
			if err := sl.Err(); err != nil {
				return err
			}
			break
		}
		names = append(names, si.Config.Name)
		msgs += si.State.Msgs
	}
	for _, name := range names {
		s, err := e.jsFloor.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		if err := s.Purge(ctx); err != nil {
			return fmt.Errorf("purge %s: %w", name, err)
		}
	}
	runtime.GC()
	e.status.printf("purged %d streams (%d messages); heap in use %.1f MiB", len(names), msgs, float64(readMem().heapInuse)/(1<<20))
	return nil
}

// resetFake frees what the fake keeps between passes: the recorded requests and call
// counters, and the sessions and responses it persisted (it stores every chat, as Hermes
// does). Without it every pass would run with the live heap of all the passes before it.
// closeHTTPConns closes every HTTP connection to the fake (the floor's idle ones and the
// bridge's): the next pass opens its own.
func (e *env) closeHTTPConns() {
	e.httpc.CloseIdleConnections()
	e.fake.CloseClientConnections()
}

func (e *env) resetFake() {
	e.fake.ResetCounters()
	e.fake.ForgetSessions()
}

func (e *env) close() {
	for _, stop := range e.floorStops {
		stop()
	}
	if e.bridgeCancel != nil {
		e.bridgeCancel()
		select {
		case <-e.bridgeDone:
		case <-time.After(60 * time.Second):
		}
	}
	if e.stopTracing != nil {
		e.stopTracing()
	}
	for _, p := range []pipeline{e.bridge, e.floor, e.promise} {
		if p.hub != nil {
			_ = p.hub.sub.Unsubscribe()
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
