// Package hermestest is an in-process fake of the Hermes Agent API server
// (gateway/platforms/api_server.py) for tests and benchmarks.
//
// It reproduces the routes, auth, error envelopes, concurrency gate, SSE
// framing and byte-level JSON shapes (Python json.dumps separators,
// ensure_ascii) recorded from real Hermes v0.16.0 and v0.19.0 servers (and,
// with WithVersion(Version021), the runs API of v0.21.3 as
// hermes-runs-v0.21.md describes it from the upstream source), keeps
// sessions and stored responses in memory, and lets tests script the agent
// (Agent/Reply), inject faults (Fault) and observe calls (Calls, Requests,
// WaitCalls, InFlight).
//
// Route keys (used by Calls, WaitCalls, Fault.Route and Recorded.Route) are
// the bridge operation names: health, health_detailed, models, capabilities,
// skills, toolsets, chat, chat_stream, responses, responses_stream,
// response_get, response_delete, sessions_list, session_create, session_get,
// session_patch, session_delete, session_messages, session_fork,
// session_chat, session_chat_stream, and for the runs API run_start,
// run_status, run_events, run_approval, run_stop, and on 0.21 run_steer. chat vs chat_stream and responses vs
// responses_stream are decided by the request body's "stream" flag. Requests
// to unknown paths or with a wrong method get the route key "" (Calls("")).
//
// # Runs
//
// POST /v1/runs answers 202 {"run_id", "status": "started"} at once and plays
// the scripted Reply in the background (one goroutine per run, owned by the
// Server: Close cancels it and waits). Each run has one event queue, buffered
// from creation: the first GET …/events subscriber takes it and, when its
// handler exits (end or disconnect), the queue is gone and later
// subscriptions are 404 run_not_found; a queue nobody subscribed to is gone
// RunStreamTTL (300 s) after creation. GET /v1/runs/{id} answers the status
// object in Hermes's key order until RunStatusTTL (3600 s) after the run
// ended. Both TTLs use the WithClock clock and are applied when a request
// looks, not by a sweeper goroutine. Stop answers 200 stopping while the run
// is live (the run then ends cancelled with run.cancelled), else 404.
//
// The reply is played as run events: for each Tool its Text as
// message.delta, reasoning.available (a copy of the text), tool.started,
// approval.request when the Tool has an Approval (the run waits), then
// tool.completed {tool, duration, error}; then the final Text as
// message.delta, reasoning.available, and run.completed {output, usage}, or
// run.failed {error} when Reply.Fail is set. Reply.Delay and DeltaDelay slow
// the run down; an Agent that blocks until ctx is done gives a run that only
// stop or Close ends. RunsStarted, RunsStartedFor, ToolRuns, Run, RunIDs,
// WaitRun and WaitRunStatus observe runs; WithRunsIdempotency turns on the
// durable run idempotency of later Hermes versions.
//
// # Hermes 0.21
//
// WithVersion(Version021) keeps everything above (health reports 0.21.3)
// and changes the runs API as hermes-runs-v0.21.md §2–§8 describe it:
//
//   - Durable runs idempotency is on (WithRunsIdempotencyMemory: the memory
//     fallback, "durable": false), advertised right after run_submission,
//     with run_steer in features and endpoints. POST /v1/runs validates the
//     body first, then the Idempotency-Key (trimmed; 1–255 visible ASCII),
//     then replays or conflicts before the concurrency gate, which only new
//     runs pass. The fingerprint is the body with sorted keys plus
//     X-Hermes-Session-Key. A replay says the run's current status.
//   - Restart simulates a gateway restart: unsettled keyed runs become
//     interrupted, keyless runs and all event streams are gone. Detach makes
//     a live run another process's (stop 409 run_not_active).
//   - POST /v1/runs/{id}/steer queues text for the agent (Turn.Steered) with a
//     run.steered event; text never consumed comes back as pending_steer on
//     run.completed and the status.
//   - approval.request carries a request_id (RunInfo.ApprovalRequestID) and
//     the status copies the event under "approval"; the approval POST takes
//     request_id (400 invalid_approval_request; a wrong one is 409
//     approval_not_pending) and answers and emits it with resolved.
//   - Stop on a settled run answers 200 with its status object; a stopping
//     run has last_event run.stopping.
//   - Reply.Subagents play subagent.start and subagent.complete with tokens
//     and cost. Keyed runs' statuses are kept RunsIdempotencyRetention.
//
// WithProfileKey gives a /p/<profile>/ prefix its own key, runs and
// Idempotency-Keys (any version but 0.16).
//
// Not imitated: session_id loading SessionDB history, the ~1 s wait before
// an events 404, steer_not_accepted and steer_failed, room grants, and what
// the reference marks [later] (shutdown interrupts, replayable streams).
package hermestest

import (
	"cmp"
	"context"
	"crypto/subtle"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Versions the fake can imitate.
const (
	Version021 = "0.21.3"
	Version019 = "0.19.0"
	Version016 = "0.16.0"
)

// DefaultAPIKey is the bearer key used when WithAPIKey is not given.
const DefaultAPIKey = "hermestest-key-0123456789"

// MaxRequestBytes is Hermes' MAX_REQUEST_BYTES.
const MaxRequestBytes = 10_000_000

// Option configures a Server.
type Option func(*config)

type config struct {
	key          string
	version      string
	maxRuns      int
	maxRunsSet   bool
	keepalive    time.Duration
	agent        Agent
	clock        func() time.Time
	maxResponses int
	runsIdem     bool
	idemMemory   bool              // the idempotency store fell back to memory: durable false
	profiles     map[string]string // multiplex profile name -> its API key
}

// The model names of the API server and of its agent (stored with sessions), and how
// long the Responses stream batches text deltas, as Hermes has them by default.
const (
	serverModel    = "hermes-agent"
	agentModel     = "stub-model"
	responsesBatch = 50 * time.Millisecond
)

// WithAPIKey sets the bearer key (default DefaultAPIKey).
func WithAPIKey(key string) Option { return func(c *config) { c.key = key } }

// WithVersion selects the imitated version: "0.19.0" (default), "0.16.0" or
// "0.21.3".
// 0.16.0: 401 invalid_api_key; /health without version; /health/detailed
// unauthenticated and without version/readiness/busy fields; no concurrency
// gate on chat/responses unless WithMaxConcurrentRuns is given.
// 0.21.3: the runs API of hermes-runs-v0.21.md (see the package doc, "Hermes
// 0.21"); durable runs idempotency is on without WithRunsIdempotency.
func WithVersion(v string) Option { return func(c *config) { c.version = v } }

// WithProfileKey configures a multiplex profile: requests under
// /p/<profile>/ authenticate with key (any other key, the default one too,
// is 401), and runs and Idempotency-Keys are per profile (another profile's
// run is 404 run_not_found, the same key under another profile starts a new
// run). Without it a /p/<profile>/ prefix is accepted and ignored.
func WithProfileKey(profile, key string) Option {
	return func(c *config) {
		if c.profiles == nil {
			c.profiles = map[string]string{}
		}
		c.profiles[profile] = key
	}
}

// WithMaxConcurrentRuns sets gateway.api_server.max_concurrent_runs (default
// 10; 0 or negative disables the gate).
func WithMaxConcurrentRuns(n int) Option {
	return func(c *config) { c.maxRuns = n; c.maxRunsSet = true }
}

// WithKeepalive sets the SSE idle time after which ": keepalive" is written
// (default 30s).
func WithKeepalive(d time.Duration) Option { return func(c *config) { c.keepalive = d } }

// WithAgent sets the agent script (default StubAgent).
func WithAgent(a Agent) Option { return func(c *config) { c.agent = a } }

// WithClock sets the time source (default time.Now).
func WithClock(f func() time.Time) Option { return func(c *config) { c.clock = f } }

// WithMaxStoredResponses sets the Responses LRU size (default 100).
func WithMaxStoredResponses(n int) Option { return func(c *config) { c.maxResponses = n } }

// Server is a fake Hermes API server.
type Server struct {
	// URL is the base URL (http://127.0.0.1:port) once started; "" for a
	// server used only through Handler.
	URL string

	cfg  config
	ts   *httptest.Server
	ctx  context.Context // done once the fake closes
	stop context.CancelFunc
	once sync.Once
	wg   sync.WaitGroup // agent goroutines

	mu        sync.Mutex
	calls     map[string]int
	requests  []Recorded
	changed   chan struct{}
	faults    []*Fault
	active    int // concurrency gate count
	draining  bool
	sessions  *sessionDB
	responses *responseStore
	runs      *runStore
}

// NewServer starts a fake on a loopback port.
func NewServer(opts ...Option) *Server {
	s := NewUnstartedServer(opts...)
	s.Start()
	return s
}

// NewUnstartedServer returns a fake that is not listening yet; call Start,
// or serve Handler yourself (then call Close when done).
func NewUnstartedServer(opts ...Option) *Server {
	c := config{
		key:          DefaultAPIKey,
		version:      Version019,
		maxRuns:      10,
		keepalive:    30 * time.Second,
		agent:        StubAgent,
		clock:        time.Now,
		maxResponses: 100,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.version == Version021 || c.idemMemory {
		c.runsIdem = true
	}
	if c.version == Version016 && !c.maxRunsSet {
		c.maxRuns = 0
	}
	c.maxRuns = max(c.maxRuns, 0)
	s := &Server{
		cfg:     c,
		calls:   map[string]int{},
		changed: make(chan struct{}),
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.sessions = newSessionDB(s)
	s.responses = newResponseStore(c.maxResponses)
	s.runs = newRunStore()
	s.ts = httptest.NewUnstartedServer(s)
	return s
}

// Start starts listening on 127.0.0.1 and sets URL.
func (s *Server) Start() {
	s.ts.Start()
	s.URL = s.ts.URL
}

// StartAt starts listening on addr (host:port) instead of a fresh loopback port, e.g. the
// address of a fake just closed, to imitate a Hermes restarted in place, and sets URL. A
// port not yet freed is retried for up to 10 s; the error is the last bind's.
func (s *Server) StartAt(addr string) error {
	var l net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	_ = s.ts.Listener.Close()
	s.ts.Listener = l
	s.Start()
	return nil
}

// Handler returns the fake's HTTP handler (for cmd/fake-hermes).
func (s *Server) Handler() http.Handler { return s }

// APIKey returns the configured bearer key.
func (s *Server) APIKey() string { return s.cfg.key }

// Close stops the server: stalled streams, keepalive loops and agent
// goroutines are released (agents see ctx done), then the listener and all
// connections are closed. Safe to call more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		s.stop()
		if s.URL != "" {
			s.ts.CloseClientConnections()
			s.ts.Close()
		} else if s.ts.Listener != nil {
			_ = s.ts.Listener.Close() // never started: only the reserved listener
		}
		s.wg.Wait()
	})
}

// CloseClientConnections closes every client connection to the fake, idle or not
// (a stream in progress ends as a broken connection); the fake keeps listening. Clients
// open new connections for their next requests.
func (s *Server) CloseClientConnections() {
	if s.URL != "" {
		s.ts.CloseClientConnections()
	}
}

// SetDraining makes agent routes answer 503 gateway_draining (after auth).
func (s *Server) SetDraining(on bool) {
	s.update(&s.mu, func() { s.draining = on })
}

func (s *Server) now() time.Time { return s.cfg.clock() }

// v021 reports whether the fake imitates Hermes 0.21.
func (s *Server) v021() bool { return s.cfg.version == Version021 }

// ---- routing ----

// endpoint is one method and path pattern ("{id}" matches any non-empty
// segment) with its route key and handler.
type endpoint struct {
	method string
	path   []string
	key    string
	handle func(*Server, *call)
	v021   bool // only Hermes 0.21 has it
}

func endpointOf(method, path, key string, h func(*Server, *call)) endpoint {
	return endpoint{method: method, path: strings.Split(path, "/"), key: key, handle: h}
}

// endpoints is the fake's API surface. chat and responses become
// chat_stream and responses_stream when the body asks to stream.
var endpoints = []endpoint{
	endpointOf("GET", "health", "health", (*Server).handleHealth),
	endpointOf("GET", "v1/health", "health", (*Server).handleHealth),
	endpointOf("GET", "health/detailed", "health_detailed", (*Server).handleHealthDetailed),
	endpointOf("GET", "v1/models", "models", (*Server).handleModels),
	endpointOf("GET", "v1/capabilities", "capabilities", (*Server).handleCapabilities),
	endpointOf("GET", "v1/skills", "skills", (*Server).handleSkills),
	endpointOf("GET", "v1/toolsets", "toolsets", (*Server).handleToolsets),
	endpointOf("POST", "v1/chat/completions", "chat", (*Server).handleChat),
	endpointOf("POST", "v1/responses", "responses", (*Server).handleResponses),
	endpointOf("GET", "v1/responses/{id}", "response_get", (*Server).handleResponseGet),
	endpointOf("DELETE", "v1/responses/{id}", "response_delete", (*Server).handleResponseDelete),
	endpointOf("POST", "v1/runs", "run_start", (*Server).handleRunStart),
	endpointOf("GET", "v1/runs/{id}", "run_status", (*Server).handleRunStatus),
	endpointOf("GET", "v1/runs/{id}/events", "run_events", (*Server).handleRunEvents),
	endpointOf("POST", "v1/runs/{id}/approval", "run_approval", (*Server).handleRunApproval),
	{method: "POST", path: []string{"v1", "runs", "{id}", "steer"}, key: "run_steer", handle: (*Server).handleRunSteer, v021: true},
	endpointOf("POST", "v1/runs/{id}/stop", "run_stop", (*Server).handleRunStop),
	endpointOf("GET", "api/sessions", "sessions_list", (*Server).handleSessionsList),
	endpointOf("POST", "api/sessions", "session_create", (*Server).handleSessionCreate),
	endpointOf("GET", "api/sessions/{id}", "session_get", (*Server).handleSessionGet),
	endpointOf("PATCH", "api/sessions/{id}", "session_patch", (*Server).handleSessionPatch),
	endpointOf("DELETE", "api/sessions/{id}", "session_delete", (*Server).handleSessionDelete),
	endpointOf("GET", "api/sessions/{id}/messages", "session_messages", (*Server).handleSessionMessages),
	endpointOf("POST", "api/sessions/{id}/fork", "session_fork", (*Server).handleSessionFork),
	endpointOf("POST", "api/sessions/{id}/chat", "session_chat", (*Server).handleSessionChat),
	endpointOf("POST", "api/sessions/{id}/chat/stream", "session_chat_stream", (*Server).handleSessionChat),
}

// match resolves method+path to its endpoint and {id}. When none matches it
// returns nil and the methods the path does allow (empty for 404, else 405).
// v021 selects the routes of Hermes 0.21.
func match(method string, segs []string, v021 bool) (e *endpoint, id string, allow []string) {
next:
	for i := range endpoints {
		d := &endpoints[i]
		if len(segs) != len(d.path) || (d.v021 && !v021) {
			continue
		}
		id = ""
		for j, p := range d.path {
			switch {
			case p == "{id}" && segs[j] != "":
				id = segs[j]
			case p != segs[j]:
				continue next
			}
		}
		if d.method == method {
			return d, id, nil
		}
		allow = append(allow, d.method)
	}
	slices.Sort(allow)
	return nil, "", allow
}

// splitPath splits an escaped path into unescaped segments.
func splitPath(escaped string) ([]string, bool) {
	escaped = strings.TrimPrefix(escaped, "/")
	if escaped == "" {
		return nil, true
	}
	parts := strings.Split(escaped, "/")
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return nil, false
		}
		parts[i] = u
	}
	return parts, true
}

// call carries per-request state to handlers.
type call struct {
	w      http.ResponseWriter
	r      *http.Request
	ctx    context.Context // done when the client goes or the fake closes
	key    string          // the route key (what faults, counters and records name)
	id     string          // the {id} path segment, if the pattern has one
	scope  string          // the multiplex profile that owns what the call creates and sees
	body   []byte
	tooBig bool
	fault  *Fault
}

// bodyObject decodes the request body. ok is false when the body is too big
// or not JSON; o is nil when it is JSON but not an object.
func (c *call) bodyObject() (o obj, ok bool) {
	if c.tooBig {
		return nil, false
	}
	v, err := loads(c.body)
	o, _ = v.(obj)
	return o, err == nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// body_limit_middleware (outermost of the ones we model; no security headers).
	if (r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH") && r.ContentLength > MaxRequestBytes {
		s.record(r, "", nil, false)
		writeRaw(w, http.StatusRequestEntityTooLarge, dumps(openaiError("Request body too large.", "invalid_request_error", "body_too_large"), true))
		return
	}
	var body []byte // nil when unreadable
	tooBig := false
	if r.Method != "GET" && r.Method != "HEAD" {
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
		if err == nil {
			body = b
		}
		tooBig = err != nil || len(b) > MaxRequestBytes
	}
	segs, okPath := splitPath(r.URL.EscapedPath())
	c := &call{w: w, r: r, body: body, tooBig: tooBig, scope: "default"}
	wantKey := s.cfg.key
	if okPath && s.cfg.version != Version016 && len(segs) >= 2 && segs[0] == "p" {
		if k, ok := s.cfg.profiles[segs[1]]; ok {
			c.scope, wantKey = segs[1], k
		}
		segs = segs[2:] // /p/{profile}/ accepted and ignored without multiplexing
	}
	var e *endpoint
	var allow []string
	if okPath {
		e, c.id, allow = match(r.Method, segs, s.v021())
	}
	if e == nil {
		s.record(r, "", body, false)
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ","))
			writeText(w, http.StatusMethodNotAllowed, "405: Method Not Allowed")
		} else {
			writeText(w, http.StatusNotFound, "404: Not Found")
		}
		return
	}
	c.key = e.key
	if c.key == "chat" || c.key == "responses" {
		if o, _ := c.bodyObject(); o != nil {
			if sv, _ := o.get("stream"); boolish(sv, false) {
				c.key += "_stream"
			}
		}
	}
	authOK := checkAuth(r, wantKey)
	f := s.takeFault(c.key)
	s.record(r, c.key, body, authOK)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	c.ctx, c.fault = ctx, f
	if f != nil {
		if f.Delay > 0 && !sleepCtx(ctx, f.Delay) {
			return
		}
		if f.Reset {
			resetConn(w)
			return
		}
		if f.Status != 0 {
			s.writeFault(w, f)
			return
		}
	}
	handle := func() {
		if c.key != "health" && !authOK && !(c.key == "health_detailed" && s.cfg.version == Version016) {
			s.authError(c.w)
			return
		}
		e.handle(s, c)
	}
	if f.streamEffect() && !agentRoute(c.key) {
		// Plain JSON route: do the work, then ruin the response.
		c.w = httptest.NewRecorder()
		handle()
		c.w = w
		s.jsonFault(c)
		return
	}
	handle()
}

// agentRoute reports whether the route applies stream/JSON fault effects itself.
func agentRoute(key string) bool {
	return slices.Contains([]string{"chat", "chat_stream", "responses", "responses_stream", "session_chat", "session_chat_stream", "run_events"}, key)
}

// checkAuth reports whether r carries the bearer key want.
func checkAuth(r *http.Request, want string) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(want)) == 1
}

func (s *Server) authError(w http.ResponseWriter) {
	var body obj
	if s.cfg.version == Version016 {
		body = obj{{"error", obj{{"message", "Invalid API key"}, {"type", "invalid_request_error"}, {"code", "invalid_api_key"}}}}
	} else {
		body = obj{{"error", obj{{"message", "Invalid gateway API key (API_SERVER_KEY)"}, {"type", "gateway_auth_error"}, {"code", "gateway_auth_failed"}}}}
	}
	writeJSON(w, http.StatusUnauthorized, nil, body)
}

// ---- concurrency gate ----

// admit reserves a run slot. gate=false counts without rejecting (session
// chat). It returns false when the gate is full or draining (response written).
func (s *Server) admit(c *call, gate bool) (release func(), ok bool) {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		writeJSON(c.w, http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}, drainingError())
		return nil, false
	}
	if gate && s.cfg.maxRuns > 0 && s.active >= s.cfg.maxRuns {
		s.mu.Unlock()
		writeJSON(c.w, http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}, tooManyRuns(s.cfg.maxRuns, "rate_limit_error"))
		return nil, false
	}
	s.active++
	s.mu.Unlock()
	s.notify()
	return sync.OnceFunc(func() { s.update(&s.mu, func() { s.active-- }) }), true
}

// drainingError is the 503 body of a draining gateway.
func drainingError() obj {
	return openaiError("Gateway is draining existing work; retry shortly.", "invalid_request_error", "gateway_draining")
}

// tooManyRuns is the 429 body of a full concurrency gate of n runs; typ is
// the error type, which differs between /v1/runs and the other agent routes.
func tooManyRuns(n int, typ string) obj {
	return openaiError("Too many concurrent runs (max "+strconv.Itoa(n)+")", typ, "rate_limit_exceeded")
}

// InFlight reports the number of admitted agent runs (chat, responses and
// session chat requests currently holding a concurrency slot).
func (s *Server) InFlight() int {
	return locked(&s.mu, func() int { return s.active })
}

// locked returns f's result computed with mu held.
func locked[T any](mu *sync.Mutex, f func() T) T {
	mu.Lock()
	defer mu.Unlock()
	return f()
}

// ---- agent invocation ----

// requestModel is the request body's model when it is a non-empty string, else the
// configured one.
func (s *Server) requestModel(body obj) string {
	return cmp.Or(body.str("model"), serverModel)
}

// runAgent calls the agent for turn on an owned goroutine, waits for its reply
// and then its scripted Delay (sending keepalives when sw is the request's
// stream, else plainly), and returns the reply with its tools prepared; ok is
// false when the request or stream ended first.
func (s *Server) runAgent(c *call, turn Turn, sw *sseWriter) (rep Reply, ok bool) {
	actx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	ch := make(chan Reply, 1)
	s.wg.Go(func() { ch <- s.cfg.agent(actx, turn) })
	if sw != nil {
		rep, ok = idle(sw, ch)
		ok = ok && sw.wait(rep.Delay)
	} else {
		select {
		case rep = <-ch:
			ok = sleepCtx(c.ctx, rep.Delay)
		case <-c.ctx.Done():
		}
	}
	if !ok {
		return Reply{}, false
	}
	rep.Tools = prepareTools(rep.Tools)
	return rep, true
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
