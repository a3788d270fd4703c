package hermestest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Run lifetimes of Hermes (api_server.py): terminal statuses are kept for
// _RUN_STATUS_TTL, unsubscribed event queues are swept _RUN_STREAM_TTL after
// the run was created.
const (
	RunStatusTTL = 3600 * time.Second
	RunStreamTTL = 300 * time.Second
	// RunsIdempotencyRetention is the retention_seconds advertised with
	// WithRunsIdempotency (the later upstream value, 86400 s).
	RunsIdempotencyRetention = 86400 * time.Second
)

// Approval makes a scripted Tool ask for approval before it runs (on
// /v1/runs only; other routes run the tool at once). The run pauses with
// status waiting_for_approval after an approval.request event until POST
// /v1/runs/{id}/approval decides (or the run is stopped): once, session and
// always run the tool; deny does not (tool.completed then has error true).
// A pattern approved with session is not asked again in the same run; with
// always, not again on this Server.
type Approval struct {
	Command     string // default: the tool's Label
	PatternKey  string // default "dangerous_command"
	Description string // default "dangerous command"
	NoPermanent bool   // allow_permanent false: choices once, session, deny
	SmartDenied bool   // smart_denied true: choices once, deny
}

// RunInfo is the fake's view of one /v1/runs run.
type RunInfo struct {
	ID             string
	Status         string // queued, running, waiting_for_approval, stopping, completed, failed, cancelled
	IdempotencyKey string // the Idempotency-Key the run was started with ("" when none)
	SessionID      string
	Output         string
	Error          string
	// PendingApprovals is how many approval requests wait for a decision.
	PendingApprovals int
	// Subscribed reports that an events subscriber has taken the queue.
	Subscribed bool
}

type pendingApproval struct {
	pattern string
	done    chan string // buffered 1: the choice
}

// fakeRun is one run's state. Guarded by runStore.mu.
type fakeRun struct {
	id         string
	key        string
	status     obj // the GET /v1/runs/{id} object, in Hermes's key order
	created    time.Time
	ended      time.Time
	live       bool // the task has not finished: stop and approvals apply
	stopping   bool
	cancel     context.CancelFunc
	pending    []*pendingApproval
	approved   map[string]bool // session-scope approvals
	subscribed bool            // an events subscriber has taken the queue
}

// runQueue is a run's event queue (one asyncio.Queue in Hermes). Guarded by
// runStore.mu; ch is closed and replaced on every push.
type runQueue struct {
	created    time.Time
	items      [][]byte
	closed     bool // the terminal event has been pushed
	subscribed bool
	ch         chan struct{}
}

type idemEntry struct {
	runID string
	fp    [32]byte
}

// runStore holds runs, queues, idempotency reservations and counters.
type runStore struct {
	mu       sync.Mutex
	runs     map[string]*fakeRun
	queues   map[string]*runQueue
	idem     map[string]idemEntry
	started  int
	byKey    map[string]int
	toolRuns map[string]int
	always   map[string]bool
	tasks    int      // unfinished run tasks
	order    []string // run ids in creation order (swept ones removed lazily)
}

func newRunStore() *runStore {
	return &runStore{runs: map[string]*fakeRun{}, queues: map[string]*runQueue{}, idem: map[string]idemEntry{},
		byKey: map[string]int{}, toolRuns: map[string]int{}, always: map[string]bool{}}
}

// WithRunsIdempotency enables durable run idempotency, as later upstream
// versions have it (hermes-api.md §12, api_server_run_idempotency.py): the
// capabilities gain features.runs_idempotency {"supported": true, "durable":
// true, "retention_seconds": 86400}; POST /v1/runs validates Idempotency-Key
// (1–255 visible ASCII, else 400 invalid_idempotency_key); a repeated key
// with the same body answers 202 with the same run_id, "replayed": true and
// the header Idempotency-Replayed: true, without starting a run; the same key
// with a different body is 409 idempotency_key_conflict. The 202 bodies gain
// "replayed". Without this option (real v0.16/v0.19) the header is ignored and
// every POST starts a new run.
func WithRunsIdempotency() Option { return func(c *config) { c.runsIdem = true } }

// RunsStarted returns how many runs POST /v1/runs started (replays excluded).
func (s *Server) RunsStarted() int {
	return locked(&s.runs.mu, func() int { return s.runs.started })
}

// RunsStartedFor returns how many runs were started with this Idempotency-Key.
func (s *Server) RunsStartedFor(key string) int {
	return locked(&s.runs.mu, func() int { return s.runs.byKey[key] })
}

// ToolRuns returns how many times a scripted tool of this name actually ran
// in a /v1/runs run (a denied or stopped tool does not count).
func (s *Server) ToolRuns(name string) int {
	return locked(&s.runs.mu, func() int { return s.runs.toolRuns[name] })
}

// Run returns the fake's view of run id, also after its status expired for
// HTTP clients (until the next POST /v1/runs sweeps it); ok is false for an
// unknown id.
func (s *Server) Run(id string) (RunInfo, bool) {
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	r, ok := s.runs.runs[id]
	if !ok {
		return RunInfo{}, false
	}
	return RunInfo{ID: r.id, Status: r.status.str("status"), IdempotencyKey: r.key, SessionID: r.status.str("session_id"),
		Output: r.status.str("output"), Error: r.status.str("error"), PendingApprovals: len(r.pending), Subscribed: r.subscribed}, true
}

// RunIDs returns the ids of the runs the fake still knows (see Run), oldest first.
func (s *Server) RunIDs() []string {
	return locked(&s.runs.mu, func() []string { return slices.DeleteFunc(slices.Clone(s.runs.order), s.runs.swept) })
}

// WaitRun blocks until cond holds for run id's RunInfo (polling on every
// change of the fake), or ctx is done.
func (s *Server) WaitRun(ctx context.Context, id string, cond func(RunInfo) bool) error {
	return s.waitFor(ctx, func() bool { ri, ok := s.Run(id); return ok && cond(ri) })
}

// WaitRunStatus blocks until run id has the given status or ctx is done.
func (s *Server) WaitRunStatus(ctx context.Context, id, status string) error {
	return s.WaitRun(ctx, id, func(ri RunInfo) bool { return ri.Status == status })
}

func (s *Server) pyNow() pyFloat { return pyFloat(float64(s.now().UnixMicro()) / 1e6) }

// setStatusLocked is _set_run_status: status and updated_at, then fields.
func (s *Server) setStatusLocked(r *fakeRun, status string, fields ...kv) {
	r.status = r.status.set("status", status).set("updated_at", s.pyNow())
	for _, f := range fields {
		r.status = r.status.set(f.k, f.v)
	}
}

// pushLocked builds one run event and queues it; it also records last_event.
// head, when non-nil, comes before event/run_id/timestamp (approval.request).
func (s *Server) pushLocked(r *fakeRun, name string, head, fields obj) {
	ev := append(obj{}, head...)
	ev = append(ev, kv{"event", name}, kv{"run_id", r.id}, kv{"timestamp", s.pyNow()})
	ev = append(ev, fields...)
	r.status = r.status.set("updated_at", s.pyNow()).set("last_event", name)
	q := s.runs.queues[r.id]
	if q == nil || q.closed {
		return
	}
	q.items = append(q.items, dumps(ev, true))
	q.closed = name == "run.completed" || name == "run.failed" || name == "run.cancelled"
	close(q.ch)
	q.ch = make(chan struct{})
}

// push is pushLocked under the lock, then wakes waiters.
func (s *Server) push(r *fakeRun, name string, head, fields obj) {
	s.update(&s.runs.mu, func() { s.pushLocked(r, name, head, fields) })
}

// expired reports whether the run's status is gone for HTTP clients:
// RunStatusTTL after it ended.
func (r *fakeRun) expired(now time.Time) bool {
	return !r.ended.IsZero() && !now.Before(r.ended.Add(RunStatusTTL))
}

// expired reports whether nobody subscribed to the queue within RunStreamTTL.
func (q *runQueue) expired(now time.Time) bool {
	return !q.subscribed && !now.Before(q.created.Add(RunStreamTTL))
}

// lookupRunLocked returns a run whose status has not expired.
func (s *Server) lookupRunLocked(id string) *fakeRun {
	if r := s.runs.runs[id]; r != nil && !r.expired(s.now()) {
		return r
	}
	return nil
}

// sweepLocked drops expired statuses and unsubscribed queues, as Hermes's
// periodic sweep would have done by now.
func (s *Server) sweepLocked() {
	now := s.now()
	maps.DeleteFunc(s.runs.queues, func(_ string, q *runQueue) bool { return q.expired(now) })
	maps.DeleteFunc(s.runs.runs, func(_ string, r *fakeRun) bool { return r.expired(now) })
	if len(s.runs.order) > 2*len(s.runs.runs)+64 {
		s.runs.order = slices.DeleteFunc(s.runs.order, s.runs.swept)
	}
}

// swept reports whether run id is no longer known (its status was swept).
func (st *runStore) swept(id string) bool { return st.runs[id] == nil }

// fingerprint identifies a run request body for idempotency.
func fingerprint(body []byte) [32]byte {
	var v any
	if json.Unmarshal(body, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			return sha256.Sum256(b)
		}
	}
	return sha256.Sum256(body)
}

// validIdemKey reports whether k is 1-255 visible ASCII characters.
func validIdemKey(k string) bool {
	return len(k) >= 1 && len(k) <= 255 && !strings.ContainsFunc(k, func(r rune) bool { return r <= 0x20 || r >= 0x7f })
}

// runTask is the background run (_run_and_close): it calls the agent and
// plays its reply as run events. It owns one concurrency slot (release).
func (s *Server) runTask(ctx context.Context, r *fakeRun, turn Turn, release func()) {
	defer release()
	defer s.update(&s.runs.mu, func() { s.runs.tasks-- })
	s.update(&s.runs.mu, func() { s.setStatusLocked(r, "running") })
	if !s.playRun(ctx, r, turn) {
		s.update(&s.runs.mu, func() {
			if r.stopping {
				s.endCancelledLocked(r)
			} else {
				s.endLocked(r, "cancelled") // the server is closing: no event
			}
		})
	}
}

// playRun plays the agent's reply to turn as run r's events and ends r as
// failed or completed; false when ctx was done first (r not ended).
func (s *Server) playRun(ctx context.Context, r *fakeRun, turn Turn) bool {
	rep := s.cfg.agent(ctx, turn)
	rep.Tools = prepareTools(rep.Tools)
	alive := func() bool { return ctx.Err() == nil }
	wait := func(d time.Duration) bool { return sleepCtx(ctx, d) }
	if !alive() || !wait(rep.Delay) {
		return false
	}
	delta := func(d string) bool {
		if !alive() {
			return false
		}
		s.push(r, "message.delta", nil, obj{{"delta", d}})
		return true
	}
	reasoning := func(text string) {
		if text != "" {
			s.push(r, "reasoning.available", nil, obj{{"text", thinkingCopy(text)}})
		}
	}
	for _, t := range rep.Tools {
		if !rep.deltas(t.Text, 0, wait, delta) || !alive() {
			return false
		}
		reasoning(t.Text)
		if strings.HasPrefix(t.Name, "_") {
			continue
		}
		start := s.now()
		s.push(r, "tool.started", nil, obj{{"tool", t.Name}, {"preview", t.Label}})
		denied := false
		if t.Approval != nil {
			choice, ok := s.awaitApproval(ctx, r, t)
			if !ok {
				return false
			}
			denied = choice == "deny"
		}
		if !denied {
			s.update(&s.runs.mu, func() { s.runs.toolRuns[t.Name]++ })
		}
		if !wait(rep.DeltaDelay) {
			return false
		}
		dur := math.Round(s.now().Sub(start).Seconds()*1000) / 1000
		s.push(r, "tool.completed", nil, obj{{"tool", t.Name}, {"duration", pyFloat(dur)}, {"error", denied}})
	}
	if !rep.deltas(rep.Text, rep.Deltas, wait, delta) || !alive() || !rep.padding(wait, delta) {
		return false
	}
	if rep.Fail != "" {
		s.update(&s.runs.mu, func() {
			s.endLocked(r, "failed", kv{"error", rep.Fail})
			s.pushLocked(r, "run.failed", nil, obj{{"error", rep.Fail}})
		})
		return true
	}
	full := rep.fullText()
	reasoning(full)
	in, out := rep.usage(turn)
	s.sessions.persistTurn(turn, rep, full)
	s.update(&s.runs.mu, func() {
		if r.stopping { // a stop that raced the last step still cancels, as agent.interrupt would
			s.endCancelledLocked(r)
		} else {
			s.endLocked(r, "completed", kv{"output", full}, kv{"usage", respUsage(in, out)})
			s.pushLocked(r, "run.completed", nil, obj{{"output", full}, {"usage", respUsage(in, out)}})
		}
	})
	return true
}

// endLocked makes the run terminal; stop and approvals no longer apply.
func (s *Server) endLocked(r *fakeRun, status string, fields ...kv) {
	s.setStatusLocked(r, status, fields...)
	r.live, r.ended = false, s.now()
	for _, p := range r.pending {
		select {
		case p.done <- "deny":
		default:
		}
	}
	r.pending = nil
}

func (s *Server) endCancelledLocked(r *fakeRun) {
	s.endLocked(r, "cancelled")
	s.pushLocked(r, "run.cancelled", nil, nil)
}

// awaitApproval emits approval.request for tool t and waits for a decision;
// ok is false when the run was stopped (or the server closed) first.
func (s *Server) awaitApproval(ctx context.Context, r *fakeRun, t Tool) (choice string, ok bool) {
	a := *t.Approval
	a.Command = cmp.Or(a.Command, t.Label)
	a.PatternKey = cmp.Or(a.PatternKey, "dangerous_command")
	a.Description = cmp.Or(a.Description, "dangerous command")
	s.runs.mu.Lock()
	if r.approved[a.PatternKey] || s.runs.always[a.PatternKey] {
		s.runs.mu.Unlock()
		return "once", true
	}
	head := obj{{"command", a.Command}, {"pattern_key", a.PatternKey}, {"pattern_keys", []string{a.PatternKey}},
		{"description", a.Description}, {"allow_permanent", !a.NoPermanent}, {"allow_session", true}}
	choices := []string{"once", "session", "always", "deny"}
	switch {
	case a.SmartDenied:
		head = append(head, kv{"smart_denied", true})
		choices = []string{"once", "deny"}
	case a.NoPermanent:
		choices = []string{"once", "session", "deny"}
	}
	p := &pendingApproval{pattern: a.PatternKey, done: make(chan string, 1)}
	r.pending = append(r.pending, p)
	s.setStatusLocked(r, "waiting_for_approval")
	s.pushLocked(r, "approval.request", head, obj{{"choices", choices}})
	s.runs.mu.Unlock()
	s.notify()
	select {
	case choice = <-p.done:
		return choice, ctx.Err() == nil
	case <-ctx.Done():
		return "", false
	}
}
