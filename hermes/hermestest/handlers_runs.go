package hermestest

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"
)

func runNotFound(id string) obj {
	return openaiError("Run not found: "+id, "invalid_request_error", "run_not_found")
}

// admitRun is the drain check and concurrency gate of POST /v1/runs. v0.16
// (before 2026-06-21) capped only runs, at 10 (or WithMaxConcurrentRuns),
// with type invalid_request_error and no Retry-After.
func (s *Server) admitRun(c *call) (func(), bool) {
	if s.cfg.version != Version016 {
		return s.admit(c, true)
	}
	limit := 10
	if s.cfg.maxRunsSet {
		limit = s.cfg.maxRuns
	}
	draining := locked(&s.mu, func() bool { return s.draining })
	if !draining && limit > 0 && locked(&s.runs.mu, func() bool { return s.runs.tasks >= limit }) {
		writeJSON(c.w, http.StatusTooManyRequests, nil, tooManyRuns(limit, "invalid_request_error"))
		return nil, false
	}
	return s.admit(c, false)
}

// handleRunStart is POST /v1/runs (_handle_runs). Before Hermes 0.21 the
// gate (and drain check) comes before the body is read; on 0.21 the request
// is validated first, then a keyed request replays (or conflicts) before the
// gate, which only new runs pass.
func (s *Server) handleRunStart(c *call) {
	if !validSessionKey(c) {
		return
	}
	v21 := s.v021()
	draining := locked(&s.mu, func() bool { return s.draining })
	if v21 && draining {
		writeJSON(c.w, http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}, drainingError())
		return
	}
	key := c.r.Header.Get("Idempotency-Key")
	var req runRequest
	if v21 {
		var ok bool
		if req, ok = s.parseRunRequest(c); !ok {
			return
		}
		key = strings.TrimSpace(key)
	}
	idem := s.cfg.runsIdem && key != "" && !draining
	var fp [32]byte
	if idem {
		if !validIdemKey(key) {
			writeJSON(c.w, 400, nil, openaiParamError("Idempotency-Key must be 1-255 visible ASCII characters", "invalid_request_error", "Idempotency-Key", "invalid_idempotency_key"))
			return
		}
		if v21 {
			if ok := s.validateRunInput(c, &req); !ok {
				return
			}
		}
		fp = fingerprint(c.body, c.r.Header.Get("X-Hermes-Session-Key"))
		if e := locked(&s.runs.mu, func() idemEntry { return s.idemLookupLocked(c.scope, key) }); e.runID != "" {
			s.replayRun(c, e, fp)
			return
		}
	} else if v21 && !s.validateRunInput(c, &req) {
		return
	}
	release, ok := s.admitRun(c)
	if !ok {
		return
	}
	started := false
	defer func() {
		if !started {
			release()
		}
	}()
	if !v21 {
		if req, ok = s.parseRunRequest(c); !ok || !s.validateRunInput(c, &req) {
			return
		}
	}
	id := "run_" + randHex(32)
	turn := req.turn(s, c, id)
	ctx, cancel := context.WithCancel(s.ctx) // cancelled by stop, Restart or Close
	r := &fakeRun{id: id, key: key, scope: c.scope, created: s.now(), live: true, cancel: cancel,
		approved: map[string]bool{}, done: make(chan struct{})}
	r.status = obj{{"object", "hermes.run"}, {"run_id", id}}
	st := s.runs
	st.mu.Lock()
	if idem {
		ik := idemScopeKey(c.scope, key)
		if e := s.idemLookupLocked(c.scope, key); e.runID != "" { // a concurrent twin won the reservation
			st.mu.Unlock()
			cancel()
			s.replayRun(c, e, fp)
			return
		}
		st.idem[ik] = idemEntry{runID: id, fp: fp}
	}
	s.sweepLocked()
	s.setStatusLocked(r, "queued", kv{"created_at", s.pyNow()}, kv{"session_id", turn.SessionID}, kv{"model", turn.Model})
	st.runs[id] = r
	st.order = append(st.order, id)
	st.queues[id] = &runQueue{created: s.now(), ch: make(chan struct{})}
	st.started++
	if key != "" {
		st.byKey[key]++
	}
	st.tasks++
	st.mu.Unlock()
	started = true
	s.wg.Go(func() {
		defer cancel()
		s.runTask(ctx, r, turn, release)
	})
	s.notify()
	h := echoHeaders(c.r, "")
	resp := obj{{"run_id", id}, {"status", "started"}}
	if s.cfg.runsIdem {
		resp = append(resp, kv{"replayed", false})
	}
	writeJSON(c.w, http.StatusAccepted, h, resp)
}

// runRequest is a POST /v1/runs body as the run will use it.
type runRequest struct {
	body    obj
	user    string
	history []Message
}

// parseRunRequest reads the body as a JSON object (else 400 Invalid JSON).
func (s *Server) parseRunRequest(c *call) (req runRequest, ok bool) {
	body, ok := c.bodyObject()
	if !ok || body == nil {
		writeJSON(c.w, 400, nil, openaiError("Invalid JSON", "invalid_request_error", nil))
		return req, false
	}
	return runRequest{body: body}, true
}

// validateRunInput derives the user message and history from req.body,
// answering the 400s of a missing or empty input and of a bad history.
func (s *Server) validateRunInput(c *call, req *runRequest) bool {
	body := req.body
	inV, _ := body.get("input")
	if !truthy(inV) {
		writeJSON(c.w, 400, nil, openaiError("Missing 'input' field", "invalid_request_error", nil))
		return false
	}
	var user string
	var history []Message
	switch x := inV.(type) {
	case string:
		user = x
	case []any:
		for i, e := range x {
			eo, ok := e.(obj)
			if !ok {
				// Hermes calls .get on every element: a text/plain 500.
				writeText(c.w, 500, "500 Internal Server Error\n\nServer got itself in trouble")
				return false
			}
			role := eo.str("role")
			cv, _ := eo.get("content")
			text, _, _, _ := normContent(cv, "")
			if i == len(x)-1 {
				user = text
			} else {
				history = append(history, Message{Role: role, Content: text})
			}
		}
	default:
		user = fmt.Sprint(x)
	}
	if strings.TrimSpace(user) == "" {
		writeJSON(c.w, 400, nil, openaiError("No user message found in input", "invalid_request_error", nil))
		return false
	}
	explicit, reason := conversationHistory(body)
	if reason != "" {
		writeJSON(c.w, 400, nil, openaiError(reason, "invalid_request_error", nil))
		return false
	}
	if len(explicit) > 0 {
		history = explicit
	}
	req.user, req.history = user, history
	return true
}

// turn is the agent turn of run id: the session is the body's session_id,
// else the stored session of previous_response_id, else the run id.
func (req runRequest) turn(s *Server, c *call, id string) Turn {
	history := req.history
	sessionID := id
	if sr, ok := s.responses.get(req.body.str("previous_response_id")); ok {
		if len(history) == 0 {
			history = append([]Message(nil), sr.history...)
		}
		sessionID = cmp.Or(sr.sessionID, sessionID)
	}
	return Turn{Route: "run_start", UserText: req.user, History: history, SessionID: cmp.Or(req.body.str("session_id"), sessionID),
		SessionKey: c.r.Header.Get("X-Hermes-Session-Key"), Instructions: req.body.str("instructions"), Model: s.requestModel(req.body)}
}

// replayRun answers a POST /v1/runs whose Idempotency-Key reserved run e: 202
// with e's run_id when the request's fingerprint fp matches, else 409. The
// replay's status is "started" before Hermes 0.21, the run's current one on 0.21.
func (s *Server) replayRun(c *call, e idemEntry, fp [32]byte) {
	if e.fp != fp {
		msg := "Idempotency-Key was already used with a different request"
		if s.v021() {
			msg += " payload"
		}
		writeJSON(c.w, http.StatusConflict, nil, openaiError(msg, "invalid_request_error", "idempotency_key_conflict"))
		return
	}
	status := "started"
	if s.v021() {
		status = locked(&s.runs.mu, func() string {
			if r := s.runs.runs[e.runID]; r != nil {
				return r.status.str("status")
			}
			return "completed" // swept from memory: only terminal runs are
		})
	}
	h := echoHeaders(c.r, "")
	h.Set("Idempotency-Replayed", "true")
	writeJSON(c.w, http.StatusAccepted, h, obj{{"run_id", e.runID}, {"status", status}, {"replayed", true}})
}

// handleRunStatus is GET /v1/runs/{run_id}.
func (s *Server) handleRunStatus(c *call) {
	body := locked(&s.runs.mu, func() []byte {
		if r := s.lookupRunLocked(c); r != nil {
			return dumps(r.status, true)
		}
		return nil
	})
	writeFound(c, body != nil, rawJSON(body), runNotFound)
}

// terminalStatus reports whether a run status is final.
func terminalStatus(st string) bool {
	return st == "completed" || st == "failed" || st == "cancelled" || st == "interrupted"
}

// handleRunStop is POST /v1/runs/{run_id}/stop: 200 stopping while the run's
// task is live. Otherwise 404 before Hermes 0.21 (the check is the live
// task, not the status); on 0.21 a terminal run answers 200 with its status
// object and a non-terminal one without a task here 409 run_not_active.
func (s *Server) handleRunStop(c *call) {
	var resp any
	code := http.StatusOK
	s.update(&s.runs.mu, func() {
		r := s.lookupRunLocked(c)
		if !s.v021() {
			if r = s.runs.runs[c.id]; r == nil || !r.live || r.scope != c.scope {
				return
			}
		}
		switch {
		case r == nil:
		case terminalStatus(r.status.str("status")):
			resp = rawJSON(dumps(r.status, true))
		case !r.live || r.detached:
			code, resp = http.StatusConflict, openaiError("Run is not active in this gateway process: "+c.id, "invalid_request_error", "run_not_active")
		default:
			r.stopping = true
			s.setStatusLocked(r, "stopping")
			if s.v021() {
				r.status = r.status.set("last_event", "run.stopping")
			}
			r.cancel()
			resp = obj{{"run_id", c.id}, {"status", "stopping"}}
		}
	})
	if resp == nil {
		writeJSON(c.w, http.StatusNotFound, nil, runNotFound(c.id))
		return
	}
	writeJSON(c.w, code, nil, resp)
}

// approvalChoices maps the accepted approval choices to the ones Hermes acts on.
var approvalChoices = map[string]string{"once": "once", "session": "session", "always": "always", "deny": "deny",
	"approve": "once", "approved": "once", "allow": "once"}

// approvalRequestID is the body's request_id on Hermes 0.21: "" when absent
// or null, else a trimmed non-empty string of at most 256 characters (ok
// false otherwise).
func approvalRequestID(body obj) (id string, ok bool) {
	v, present := body.get("request_id")
	if !present || v == nil {
		return "", true
	}
	str, isStr := v.(string)
	str = strings.TrimSpace(str)
	return str, isStr && str != "" && utf8.RuneCountInString(str) <= 256
}

// handleRunApproval is POST /v1/runs/{run_id}/approval.
func (s *Server) handleRunApproval(c *call) {
	id := c.id
	v21 := s.v021()
	r := locked(&s.runs.mu, func() *fakeRun { return s.lookupRunLocked(c) })
	if r == nil {
		writeJSON(c.w, http.StatusNotFound, nil, runNotFound(id))
		return
	}
	body := obj{}
	if strings.TrimSpace(string(c.body)) != "" {
		var ok bool
		if body, ok = c.bodyObject(); !ok || body == nil {
			writeJSON(c.w, 400, nil, openaiError("Invalid JSON", "invalid_request_error", nil))
			return
		}
	}
	var reqID string
	if v21 {
		var ok bool
		if reqID, ok = approvalRequestID(body); !ok {
			writeJSON(c.w, 400, nil, openaiError("Approval request_id is invalid.", "invalid_request_error", "invalid_approval_request"))
			return
		}
	}
	choice, ok := approvalChoices[strings.ToLower(strings.TrimSpace(body.str("choice")))]
	if !ok {
		if v21 {
			writeJSON(c.w, 400, nil, openaiError("Invalid approval choice; expected one of: always, deny, once, session", "invalid_request_error", "invalid_approval_choice"))
		} else {
			writeJSON(c.w, 400, nil, openaiParamError("Invalid approval choice. Use one of: once, session, always, deny", "invalid_request_error", "choice", "invalid_approval_choice"))
		}
		return
	}
	av, _ := body.get("all")
	rv, _ := body.get("resolve_all")
	all := truthy(av) || truthy(rv)
	s.runs.mu.Lock()
	if !r.live || r.detached || r.gone {
		s.runs.mu.Unlock()
		writeJSON(c.w, http.StatusConflict, nil, openaiError("Run has no active approval session: "+id, "invalid_request_error", "approval_not_active"))
		return
	}
	var resolve []*pendingApproval
	switch {
	case reqID != "":
		if i := slices.IndexFunc(r.pending, func(p *pendingApproval) bool { return p.requestID == reqID }); i >= 0 {
			resolve = []*pendingApproval{r.pending[i]}
		}
	case all:
		resolve = r.pending
	case len(r.pending) > 0:
		resolve = r.pending[:1]
	}
	if len(resolve) == 0 {
		s.runs.mu.Unlock()
		msg := "No pending approval for run: " + id
		if v21 {
			msg = "Run has no pending approval: " + id
		}
		writeJSON(c.w, http.StatusConflict, nil, openaiError(msg, "invalid_request_error", "approval_not_pending"))
		return
	}
	for _, p := range resolve {
		switch choice {
		case "session":
			r.approved[p.pattern] = true
		case "always":
			s.runs.always[p.pattern] = true
		}
		p.done <- choice
	}
	n := len(resolve)
	r.pending = slices.DeleteFunc(slices.Clone(r.pending), func(p *pendingApproval) bool { return slices.Contains(resolve, p) })
	if !r.stopping { // a stop in progress keeps its status
		s.setStatusLocked(r, "running")
	}
	ev := obj{{"choice", choice}}
	if reqID != "" {
		ev = append(ev, kv{"request_id", reqID})
	}
	ev = append(ev, kv{"resolved", n})
	s.pushLocked(r, "approval.responded", nil, ev)
	s.runs.mu.Unlock()
	s.notify()
	writeJSON(c.w, http.StatusOK, nil, append(obj{{"object", "hermes.run.approval_response"}, {"run_id", id}}, ev...))
}

// handleRunSteer is POST /v1/runs/{run_id}/steer (Hermes 0.21): the status
// gate first (409 run_not_accepting_steer unless running with a live task
// here), then the text (input, message or text; 400 invalid_steer_input when
// empty), queued for the agent (Turn.Steered) with a run.steered event.
func (s *Server) handleRunSteer(c *call) {
	id := c.id
	gate := locked(&s.runs.mu, func() int {
		r := s.lookupRunLocked(c)
		switch {
		case r == nil:
			return http.StatusNotFound
		case r.status.str("status") != "running" || !r.live || r.detached:
			return http.StatusConflict
		}
		return http.StatusOK
	})
	switch gate {
	case http.StatusNotFound:
		writeJSON(c.w, http.StatusNotFound, nil, runNotFound(id))
		return
	case http.StatusConflict:
		writeJSON(c.w, http.StatusConflict, nil, openaiError("Run is not currently accepting steer input: "+id, "invalid_request_error", "run_not_accepting_steer"))
		return
	}
	body, ok := c.bodyObject()
	if !ok || body == nil {
		writeJSON(c.w, 400, nil, openaiError("Invalid JSON", "invalid_request_error", nil))
		return
	}
	var text string
	for _, k := range []string{"input", "message", "text"} {
		if v, _ := body.get(k); truthy(v) {
			text, _, _, _ = normContent(v, "")
			break
		}
	}
	if text = strings.TrimSpace(text); text == "" {
		writeJSON(c.w, 400, nil, openaiError("Missing non-empty steer text; expected 'input', 'message', or 'text'.", "invalid_request_error", "invalid_steer_input"))
		return
	}
	accepted := false
	s.update(&s.runs.mu, func() {
		r := s.lookupRunLocked(c)
		if r == nil || !r.live || r.detached || r.status.str("status") != "running" {
			return
		}
		accepted = true
		r.steers = append(r.steers, text)
		r.unread = append(r.unread, text)
		s.setStatusLocked(r, "running")
		s.pushLocked(r, "run.steered", nil, obj{{"accepted", true}})
	})
	if !accepted { // the run settled while the body was read
		writeJSON(c.w, http.StatusConflict, nil, openaiError("Run is not currently accepting steer input: "+id, "invalid_request_error", "run_not_accepting_steer"))
		return
	}
	writeJSON(c.w, http.StatusOK, nil, obj{{"object", "hermes.run.steer"}, {"run_id", id}, {"accepted", true}})
}

// handleRunEvents is GET /v1/runs/{run_id}/events: the run's single queue.
// The first subscriber takes it; when its handler exits (end of stream or
// disconnect) the queue is gone and a later subscription is 404. A queue
// nobody subscribed to is swept RunStreamTTL after the run was created.
func (s *Server) handleRunEvents(c *call) {
	id := c.id
	st := s.runs
	st.mu.Lock()
	q := st.queues[id]
	if r := st.runs[id]; q != nil && (r == nil || r.scope != c.scope) {
		q = nil // another profile's run
	}
	if q != nil && q.expired(s.now()) {
		delete(st.queues, id)
		q = nil
	}
	if q == nil {
		st.mu.Unlock()
		writeJSON(c.w, http.StatusNotFound, nil, runNotFound(id))
		return
	}
	q.subscribed = true
	if r := st.runs[id]; r != nil {
		r.subscribed = true
	}
	st.mu.Unlock()
	s.notify()
	defer s.update(&s.runs.mu, func() {
		if st.queues[id] == q {
			delete(st.queues, id)
		}
	})
	sw := s.startSSE(c, nil)
	for {
		st.mu.Lock()
		if q.gone { // Restart: the connection just ends
			st.mu.Unlock()
			return
		}
		var item []byte
		if len(q.items) > 0 {
			item = q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
		}
		last := len(q.items) == 0 && q.closed
		if last && st.queues[id] == q {
			// The terminal event is out: drop the queue now rather than when the handler
			// returns, so that a client that re-subscribes right after reading it gets the
			// 404 deterministically.
			delete(st.queues, id)
		}
		ch := q.ch
		st.mu.Unlock()
		if item != nil && sw.frame("", item) != nil {
			return
		}
		if last { // the terminal event is out (here, or to another subscriber)
			_ = sw.comment("stream closed")
			return
		}
		if item == nil {
			if _, ok := idle(sw, ch); !ok {
				return
			}
		}
	}
}
