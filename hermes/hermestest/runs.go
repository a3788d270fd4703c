package hermestest

import (
	"bytes"
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
	Status         string // queued, running, waiting_for_approval, stopping, completed, failed, cancelled, interrupted
	IdempotencyKey string // the Idempotency-Key the run was started with ("" when none)
	SessionID      string
	Output         string
	Error          string
	// PendingApprovals is how many approval requests wait for a decision.
	PendingApprovals int
	// ApprovalRequestID is the request_id of the oldest pending approval
	// request ("" when none waits, or before Hermes 0.21, which sends none).
	ApprovalRequestID string
	// Steers are the texts POST /v1/runs/{id}/steer accepted, in order,
	// whether or not the agent consumed them (Turn.Steered).
	Steers []string
	// Subscribed reports that an events subscriber has taken the queue.
	Subscribed bool
}

type pendingApproval struct {
	pattern   string
	requestID string      // 32 hex on Hermes 0.21, else ""
	done      chan string // buffered 1: the choice
}

// fakeRun is one run's state. Guarded by runStore.mu.
type fakeRun struct {
	id         string
	key        string
	scope      string // the profile that owns the run
	status     obj    // the GET /v1/runs/{id} object, in Hermes's key order
	created    time.Time
	ended      time.Time
	live       bool // the task has not finished: stop and approvals apply
	stopping   bool
	cancel     context.CancelFunc
	pending    []*pendingApproval
	approved   map[string]bool // session-scope approvals
	subscribed bool            // an events subscriber has taken the queue
	done       chan struct{}   // closed when the run's task has returned
	steers     []string        // accepted steer texts
	unread     []string        // accepted steer texts the agent has not consumed
	detached   bool            // Detach: another gateway process owns the live task
	gone       bool            // Restart dropped the run's task: it changes nothing any more
}

// runQueue is a run's event queue (one asyncio.Queue in Hermes). Guarded by
// runStore.mu; ch is closed and replaced on every push.
type runQueue struct {
	created    time.Time
	items      [][]byte
	closed     bool // the terminal event has been pushed
	gone       bool // Restart dropped it: subscribers end without ": stream closed"
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
// every POST starts a new run. Version021 has it on by default, with the
// replay's status the run's current one.
func WithRunsIdempotency() Option { return func(c *config) { c.runsIdem = true } }

// WithRunsIdempotencyMemory is WithRunsIdempotency with the store Hermes falls
// back to when its SQLite file cannot be opened: the capability says
// "durable": false, and Restart forgets keyed runs and their keys too.
func WithRunsIdempotencyMemory() Option {
	return func(c *config) { c.runsIdem, c.idemMemory = true, true }
}

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
	ri := RunInfo{ID: r.id, Status: r.status.str("status"), IdempotencyKey: r.key, SessionID: r.status.str("session_id"),
		Output: r.status.str("output"), Error: r.status.str("error"), PendingApprovals: len(r.pending),
		Steers: slices.Clone(r.steers), Subscribed: r.subscribed}
	if len(r.pending) > 0 {
		ri.ApprovalRequestID = r.pending[0].requestID
	}
	return ri, true
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
// On Hermes 0.21 a status change drops the waiting approval's copy.
func (s *Server) setStatusLocked(r *fakeRun, status string, fields ...kv) {
	if r.gone {
		return
	}
	if s.v021() {
		r.status = slices.DeleteFunc(r.status, func(f kv) bool { return f.k == "approval" })
	}
	r.status = r.status.set("status", status).set("updated_at", s.pyNow())
	for _, f := range fields {
		r.status = r.status.set(f.k, f.v)
	}
}

// pushLocked builds one run event and queues it; it also records last_event.
// head, when non-nil, comes before event/run_id/timestamp (approval.request).
// It returns the event.
func (s *Server) pushLocked(r *fakeRun, name string, head, fields obj) obj {
	if r.gone {
		return nil
	}
	ev := append(obj{}, head...)
	ev = append(ev, kv{"event", name}, kv{"run_id", r.id}, kv{"timestamp", s.pyNow()})
	ev = append(ev, fields...)
	r.status = r.status.set("updated_at", s.pyNow()).set("last_event", name)
	q := s.runs.queues[r.id]
	if q == nil || q.closed {
		return ev
	}
	q.items = append(q.items, dumps(ev, true))
	q.closed = name == "run.completed" || name == "run.failed" || name == "run.cancelled"
	close(q.ch)
	q.ch = make(chan struct{})
	return ev
}

// push is pushLocked under the lock, then wakes waiters.
func (s *Server) push(r *fakeRun, name string, head, fields obj) {
	s.update(&s.runs.mu, func() { s.pushLocked(r, name, head, fields) })
}

// expired reports whether the run's status is gone for HTTP clients:
// RunStatusTTL after it ended, or for a keyed run in Hermes 0.21's durable
// store RunsIdempotencyRetention.
func (s *Server) expired(r *fakeRun, now time.Time) bool {
	ttl := RunStatusTTL
	if r.key != "" && s.v021() && !s.cfg.idemMemory {
		ttl = RunsIdempotencyRetention
	}
	return !r.ended.IsZero() && !now.Before(r.ended.Add(ttl))
}

// expired reports whether nobody subscribed to the queue within RunStreamTTL.
func (q *runQueue) expired(now time.Time) bool {
	return !q.subscribed && !now.Before(q.created.Add(RunStreamTTL))
}

// lookupRunLocked returns a run of the call's profile whose status has not
// expired.
func (s *Server) lookupRunLocked(c *call) *fakeRun {
	if r := s.runs.runs[c.id]; r != nil && r.scope == c.scope && !s.expired(r, s.now()) {
		return r
	}
	return nil
}

// sweepLocked drops expired statuses and unsubscribed queues, as Hermes's
// periodic sweep would have done by now.
func (s *Server) sweepLocked() {
	now := s.now()
	maps.DeleteFunc(s.runs.queues, func(_ string, q *runQueue) bool { return q.expired(now) })
	maps.DeleteFunc(s.runs.runs, func(_ string, r *fakeRun) bool { return s.expired(r, now) })
	if len(s.runs.order) > 2*len(s.runs.runs)+64 {
		s.runs.order = slices.DeleteFunc(s.runs.order, s.runs.swept)
	}
}

// swept reports whether run id is no longer known (its status was swept).
func (st *runStore) swept(id string) bool { return st.runs[id] == nil }

// fingerprint identifies a run request for idempotency, as Hermes does: the
// body with sorted keys and numbers as written (1 and 1.0 differ), with the
// X-Hermes-Session-Key header sessionKey.
func fingerprint(body []byte, sessionKey string) [32]byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) == nil {
		if b, err := json.Marshal(map[string]any{"body": v, "gateway_session_key": sessionKey}); err == nil {
			return sha256.Sum256(b)
		}
	}
	return sha256.Sum256(append([]byte(sessionKey+"\x00"), body...))
}

// idemLookupLocked returns the reservation of Idempotency-Key key under
// profile scope (zero when none). On Hermes 0.21 a reservation whose run's
// status has expired is pruned first, as the store prunes settled records
// after its retention.
func (s *Server) idemLookupLocked(scope, key string) idemEntry {
	ik := idemScopeKey(scope, key)
	e := s.runs.idem[ik]
	if r := s.runs.runs[e.runID]; e.runID != "" && s.v021() && (r == nil || s.expired(r, s.now())) {
		delete(s.runs.idem, ik)
		return idemEntry{}
	}
	return e
}

// idemScopeKey is the idempotency store's key of Idempotency-Key key under
// profile scope.
func idemScopeKey(scope, key string) string { return scope + "\x00" + key }

// validIdemKey reports whether k is 1-255 visible ASCII characters.
func validIdemKey(k string) bool {
	return len(k) >= 1 && len(k) <= 255 && !strings.ContainsFunc(k, func(r rune) bool { return r <= 0x20 || r >= 0x7f })
}

// runTask is the background run (_run_and_close): it calls the agent and
// plays its reply as run events. It owns one concurrency slot (release).
func (s *Server) runTask(ctx context.Context, r *fakeRun, turn Turn, release func()) {
	defer close(r.done)
	defer release()
	defer s.update(&s.runs.mu, func() { s.runs.tasks-- })
	s.update(&s.runs.mu, func() { s.setStatusLocked(r, "running") })
	if s.v021() {
		turn.Steered = func() []string {
			return locked(&s.runs.mu, func() []string { t := r.unread; r.unread = nil; return t })
		}
	}
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
	if s.v021() && !s.playSubagents(r, rep.Subagents, wait) {
		return false
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
			return
		}
		fields := obj{{"output", full}, {"usage", respUsage(in, out)}}
		if len(r.unread) > 0 {
			fields = append(fields, kv{"pending_steer", strings.Join(r.unread, "\n")})
		}
		s.endLocked(r, "completed", fields...)
		s.pushLocked(r, "run.completed", nil, fields)
	})
	return true
}

// playSubagents emits subagent.start and subagent.complete for each scripted
// subagent, with its token and cost fields; false when the run ended first.
func (s *Server) playSubagents(r *fakeRun, subs []Subagent, wait func(time.Duration) bool) bool {
	for i, sa := range subs {
		id := "sa_" + randHex(12)
		head := obj{}
		if sa.Goal != "" {
			head = append(head, kv{"goal", sa.Goal})
		}
		head = append(head, kv{"task_count", len(subs)}, kv{"task_index", i}, kv{"subagent_id", id})
		start := s.now()
		s.push(r, "subagent.start", nil, head)
		if !wait(sa.Duration) {
			return false
		}
		done := append(slices.Clone(head), kv{"status", "completed"})
		if sa.Summary != "" {
			done = append(done, kv{"summary", sa.Summary})
		}
		done = append(done, kv{"duration_seconds", pyFloat(math.Round(s.now().Sub(start).Seconds()*1000) / 1000)},
			kv{"input_tokens", sa.InputTokens}, kv{"output_tokens", sa.OutputTokens}, kv{"cost_usd", pyFloat(sa.CostUSD)})
		s.push(r, "subagent.complete", nil, done)
	}
	return true
}

// endLocked makes the run terminal; stop and approvals no longer apply.
func (s *Server) endLocked(r *fakeRun, status string, fields ...kv) {
	if r.gone {
		return
	}
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
	if s.v021() {
		p.requestID = randHex(32)
		head = append(head, kv{"request_id", p.requestID})
	}
	r.pending = append(r.pending, p)
	s.setStatusLocked(r, "waiting_for_approval")
	ev := s.pushLocked(r, "approval.request", head, obj{{"choices", choices}})
	if s.v021() {
		r.status = r.status.set("approval", ev)
	}
	s.runs.mu.Unlock()
	s.notify()
	select {
	case choice = <-p.done:
		return choice, ctx.Err() == nil
	case <-ctx.Done():
		return "", false
	}
}

// Restart simulates a gateway restart for the runs API (Hermes 0.21
// _durable_run_status): every run's task is stopped (its agent sees ctx
// done; Restart returns once they have), every event stream is gone (404
// run_not_found; an open subscription ends without ": stream closed"),
// pending approvals are dropped and keyless runs are forgotten (404). Keyed
// runs survive only in the durable store (idempotency on and not
// WithRunsIdempotencyMemory): one that had not settled becomes
// "interrupted" with error "The gateway restarted before this run settled."
// and last_event "run.interrupted" (no event), a settled one keeps its
// status; both keep replaying their Idempotency-Key. Counters, sessions and
// the chat routes are not touched.
func (s *Server) Restart() {
	durable := s.cfg.runsIdem && !s.cfg.idemMemory
	st := s.runs
	var done []chan struct{}
	s.update(&st.mu, func() {
		now := s.now()
		for id, r := range st.runs {
			if r.live {
				done = append(done, r.done)
				r.cancel()
			}
			if !durable || r.key == "" || s.expired(r, now) {
				r.gone = true
				delete(st.runs, id)
				continue
			}
			if r.live {
				r.live = false
				s.endLocked(r, "interrupted", kv{"error", "The gateway restarted before this run settled."}, kv{"last_event", "run.interrupted"})
			}
			r.gone, r.detached, r.pending = true, false, nil
		}
		for id, q := range st.queues {
			q.closed, q.gone = true, true
			close(q.ch)
			q.ch = make(chan struct{})
			delete(st.queues, id)
		}
		if !durable {
			clear(st.idem)
		}
		clear(st.always)
	})
	for _, ch := range done {
		<-ch
	}
}

// Detach simulates another gateway process owning run id (sharing Hermes
// 0.21's durable store): the run plays on, but this process cannot control
// it: stop answers 409 run_not_active, steer 409 run_not_accepting_steer and
// approval 409 approval_not_active. It reports whether id is a live run.
func (s *Server) Detach(id string) bool {
	ok := false
	s.update(&s.runs.mu, func() {
		if r := s.runs.runs[id]; r != nil && r.live {
			r.detached, ok = true, true
		}
	})
	return ok
}
