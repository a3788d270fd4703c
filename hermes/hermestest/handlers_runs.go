package hermestest

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
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

// handleRunStart is POST /v1/runs (_handle_runs).
func (s *Server) handleRunStart(c *call) {
	if !validSessionKey(c) {
		return
	}
	draining := locked(&s.mu, func() bool { return s.draining })
	key := c.r.Header.Get("Idempotency-Key")
	idem := s.cfg.runsIdem && key != "" && !draining
	var fp [32]byte
	if idem {
		if !validIdemKey(key) {
			writeJSON(c.w, 400, nil, openaiParamError("Idempotency-Key must be 1-255 visible ASCII characters", "invalid_request_error", "Idempotency-Key", "invalid_idempotency_key"))
			return
		}
		fp = fingerprint(c.body)
		if e := locked(&s.runs.mu, func() idemEntry { return s.runs.idem[key] }); e.runID != "" {
			replayRun(c, e, fp)
			return
		}
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
	body, ok := c.bodyObject()
	if !ok || body == nil {
		writeJSON(c.w, 400, nil, openaiError("Invalid JSON", "invalid_request_error", nil))
		return
	}
	inV, _ := body.get("input")
	if !truthy(inV) {
		writeJSON(c.w, 400, nil, openaiError("Missing 'input' field", "invalid_request_error", nil))
		return
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
				return
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
		return
	}
	explicit, reason := conversationHistory(body)
	if reason != "" {
		writeJSON(c.w, 400, nil, openaiError(reason, "invalid_request_error", nil))
		return
	}
	if len(explicit) > 0 {
		history = explicit
	}
	id := "run_" + randHex(32)
	sessionID := id
	if sr, ok := s.responses.get(body.str("previous_response_id")); ok {
		if len(history) == 0 {
			history = append([]Message(nil), sr.history...)
		}
		sessionID = cmp.Or(sr.sessionID, sessionID)
	}
	sessionID = cmp.Or(body.str("session_id"), sessionID)
	instructions := body.str("instructions")
	model := s.requestModel(body)
	turn := Turn{Route: "run_start", UserText: user, History: history, SessionID: sessionID,
		SessionKey: c.r.Header.Get("X-Hermes-Session-Key"), Instructions: instructions, Model: model}

	ctx, cancel := context.WithCancel(s.ctx) // cancelled by stop or Close
	r := &fakeRun{id: id, key: key, created: s.now(), live: true, cancel: cancel, approved: map[string]bool{}}
	r.status = obj{{"object", "hermes.run"}, {"run_id", id}}
	st := s.runs
	st.mu.Lock()
	if idem {
		if e, ok := st.idem[key]; ok { // a concurrent twin won the reservation
			st.mu.Unlock()
			cancel()
			replayRun(c, e, fp)
			return
		}
		st.idem[key] = idemEntry{runID: id, fp: fp}
	}
	s.sweepLocked()
	s.setStatusLocked(r, "queued", kv{"created_at", s.pyNow()}, kv{"session_id", sessionID}, kv{"model", model})
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

// replayRun answers a POST /v1/runs whose Idempotency-Key reserved run e: 202
// with e's run_id when the body's fingerprint fp matches, else 409.
func replayRun(c *call, e idemEntry, fp [32]byte) {
	if e.fp != fp {
		writeJSON(c.w, http.StatusConflict, nil, openaiError("Idempotency-Key was already used with a different request", "invalid_request_error", "idempotency_key_conflict"))
		return
	}
	h := echoHeaders(c.r, "")
	h.Set("Idempotency-Replayed", "true")
	writeJSON(c.w, http.StatusAccepted, h, obj{{"run_id", e.runID}, {"status", "started"}, {"replayed", true}})
}

// handleRunStatus is GET /v1/runs/{run_id}.
func (s *Server) handleRunStatus(c *call) {
	id := c.id
	body := locked(&s.runs.mu, func() []byte {
		if r := s.lookupRunLocked(id); r != nil {
			return dumps(r.status, true)
		}
		return nil
	})
	writeFound(c, body != nil, rawJSON(body), runNotFound)
}

// handleRunStop is POST /v1/runs/{run_id}/stop: 200 stopping while the run's
// task is live, else 404 (the check is the live task, not the status).
func (s *Server) handleRunStop(c *call) {
	stopping := false
	s.update(&s.runs.mu, func() {
		if r := s.runs.runs[c.id]; r != nil && r.live {
			r.stopping, stopping = true, true
			s.setStatusLocked(r, "stopping")
			r.cancel()
		}
	})
	writeFound(c, stopping, obj{{"run_id", c.id}, {"status", "stopping"}}, runNotFound)
}

// approvalChoices maps the accepted approval choices to the ones Hermes acts on.
var approvalChoices = map[string]string{"once": "once", "session": "session", "always": "always", "deny": "deny",
	"approve": "once", "approved": "once", "allow": "once"}

// handleRunApproval is POST /v1/runs/{run_id}/approval.
func (s *Server) handleRunApproval(c *call) {
	id := c.id
	r := locked(&s.runs.mu, func() *fakeRun { return s.lookupRunLocked(id) })
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
	choice, ok := approvalChoices[strings.ToLower(strings.TrimSpace(body.str("choice")))]
	if !ok {
		writeJSON(c.w, 400, nil, openaiParamError("Invalid approval choice. Use one of: once, session, always, deny", "invalid_request_error", "choice", "invalid_approval_choice"))
		return
	}
	av, _ := body.get("all")
	rv, _ := body.get("resolve_all")
	all := truthy(av) || truthy(rv)
	s.runs.mu.Lock()
	if !r.live {
		s.runs.mu.Unlock()
		writeJSON(c.w, http.StatusConflict, nil, openaiError("Run has no active approval session: "+id, "invalid_request_error", "approval_not_active"))
		return
	}
	if len(r.pending) == 0 {
		s.runs.mu.Unlock()
		writeJSON(c.w, http.StatusConflict, nil, openaiError("No pending approval for run: "+id, "invalid_request_error", "approval_not_pending"))
		return
	}
	n := 1
	if all {
		n = len(r.pending)
	}
	for _, p := range r.pending[:n] {
		switch choice {
		case "session":
			r.approved[p.pattern] = true
		case "always":
			s.runs.always[p.pattern] = true
		}
		p.done <- choice
	}
	r.pending = append([]*pendingApproval(nil), r.pending[n:]...)
	if !r.stopping { // a stop in progress keeps its status
		s.setStatusLocked(r, "running")
	}
	s.pushLocked(r, "approval.responded", nil, obj{{"choice", choice}, {"resolved", n}})
	s.runs.mu.Unlock()
	s.notify()
	writeJSON(c.w, http.StatusOK, nil, obj{{"object", "hermes.run.approval_response"}, {"run_id", id}, {"choice", choice}, {"resolved", n}})
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
