package hermestest

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

func sessionNotFound(id string) obj {
	return openaiError("Session not found: "+id, "invalid_request_error", "session_not_found")
}

// writeSession answers status with session object o, or e's error when e is
// not nil.
func writeSession(c *call, status int, o obj, e *dbErr) {
	if e != nil {
		writeJSON(c.w, e.status, nil, openaiError(e.msg, "invalid_request_error", e.code))
		return
	}
	writeJSON(c.w, status, nil, obj{{"object", "hermes.session"}, {"session", o}})
}

// parseObject parses the request body as a JSON object; on failure it writes
// the 400 and returns false.
func (s *Server) parseObject(c *call, emptyOK bool) (obj, bool) {
	if emptyOK && len(strings.TrimSpace(string(c.body))) == 0 {
		return obj{}, true
	}
	o, ok := c.bodyObject()
	if !ok {
		writeJSON(c.w, 400, nil, openaiError("Invalid JSON in request body", "invalid_request_error", nil))
		return nil, false
	}
	if o == nil {
		writeJSON(c.w, 400, nil, openaiError("Request body must be a JSON object", "invalid_request_error", nil))
		return nil, false
	}
	return o, true
}

// pickID returns the first truthy of id/session_id ("" when neither is).
// When it is not a string it answers 400 and returns ok false.
func pickID(c *call, body obj) (id string, ok bool) {
	for _, k := range []string{"id", "session_id"} {
		if v, _ := body.get(k); truthy(v) {
			if id, ok = v.(string); !ok {
				writeJSON(c.w, 400, nil, openaiError("Invalid session id", "invalid_request_error", "invalid_session_id"))
			}
			return id, ok
		}
	}
	return "", true
}

func (s *Server) handleSessionCreate(c *call) {
	body, ok := s.parseObject(c, false)
	if !ok {
		return
	}
	id, ok := pickID(c, body)
	if !ok {
		return
	}
	v, _ := body.get("system_prompt")
	sp, isStr := v.(string)
	if v != nil && !isStr {
		writeJSON(c.w, 400, nil, openaiError("system_prompt must be a string", "invalid_request_error", "invalid_system_prompt"))
		return
	}
	title, _ := body.get("title")
	o, e := s.sessions.create(id, title, s.requestModel(body), sp)
	writeSession(c, http.StatusCreated, o, e)
}

func (s *Server) handleSessionGet(c *call) {
	o, ok := s.sessions.get(c.id)
	writeFound(c, ok, obj{{"object", "hermes.session"}, {"session", o}}, sessionNotFound)
}

func queryInt(v string, def, maxV int) int {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return def
	}
	if n > maxV {
		return maxV
	}
	return n
}

func (s *Server) handleSessionsList(c *call) {
	q := c.r.URL.Query()
	limit := queryInt(q.Get("limit"), 50, 200)
	offset := queryInt(q.Get("offset"), 0, 1_000_000)
	children := slices.Contains([]string{"1", "true", "yes", "on"}, strings.ToLower(q.Get("include_children")))
	data := s.sessions.list(limit, offset, q.Get("source"), children)
	writeJSON(c.w, 200, nil, obj{{"object", "list"}, {"data", data}, {"limit", limit}, {"offset", offset}, {"has_more", len(data) == limit}})
}

// sessionExists answers 404 and reports false when session id does not exist.
func (s *Server) sessionExists(c *call, id string) bool {
	if !locked(&s.sessions.mu, func() bool { return s.sessions.rows[id] != nil }) {
		writeJSON(c.w, 404, nil, sessionNotFound(id))
		return false
	}
	return true
}

func (s *Server) handleSessionPatch(c *call) {
	id := c.id
	if !s.sessionExists(c, id) {
		return
	}
	body, ok := s.parseObject(c, true)
	if !ok {
		return
	}
	o, e := s.sessions.patch(id, body)
	writeSession(c, 200, o, e)
}

func (s *Server) handleSessionDelete(c *call) {
	ok := s.sessions.delete(c.id)
	writeFound(c, ok, obj{{"object", "hermes.session.deleted"}, {"id", c.id}, {"deleted", true}}, sessionNotFound)
}

func (s *Server) handleSessionMessages(c *call) {
	data, ok := s.sessions.messages(c.id)
	writeFound(c, ok, obj{{"object", "list"}, {"session_id", c.id}, {"data", data}}, sessionNotFound)
}

func (s *Server) handleSessionFork(c *call) {
	id := c.id
	if !s.sessionExists(c, id) {
		return
	}
	body, ok := s.parseObject(c, false)
	if !ok {
		return
	}
	child, ok := pickID(c, body)
	if !ok {
		return
	}
	title, _ := body.get("title")
	o, e := s.sessions.fork(id, child, title)
	writeSession(c, http.StatusCreated, o, e)
}

func (s *Server) handleSessionChat(c *call) {
	release, ok := s.admit(c, false)
	if !ok {
		return
	}
	defer release()
	if !validSessionKey(c) {
		return
	}
	id := c.id
	if !s.sessionExists(c, id) {
		return
	}
	body, ok := s.parseObject(c, false)
	if !ok {
		return
	}
	mv, _ := body.get("message")
	if !truthy(mv) {
		mv, _ = body.get("input")
	}
	text, img, norm, cerr := normContent(mv, "message")
	if truthy(mv) && cerr != nil {
		writeJSON(c.w, 400, nil, cerr)
		return
	}
	if !truthy(mv) || (strings.TrimSpace(text) == "" && !img) {
		writeJSON(c.w, 400, nil, openaiError("Missing 'message' field", "invalid_request_error", "missing_message"))
		return
	}
	system := ""
	for _, k := range []string{"system_message", "instructions"} {
		v, _ := body.get(k)
		str, isStr := v.(string)
		if v != nil && !isStr {
			writeJSON(c.w, 400, nil, openaiError(k+" must be a string", "invalid_request_error", "invalid_system_message"))
			return
		}
		if str != "" {
			system = str
			break
		}
	}
	turn := Turn{Route: c.key, UserText: text, History: s.sessions.history(id), SessionID: id,
		SessionKey: c.r.Header.Get("X-Hermes-Session-Key"), Instructions: system, Model: serverModel}
	hdr := echoHeaders(c.r, id)
	if c.key == "session_chat_stream" {
		s.sessionStream(c, turn, norm, hdr)
		return
	}
	rep, ok := s.runAgent(c, turn, nil)
	if !ok {
		return
	}
	if rep.Fail != "" {
		writeText(c.w, 500, "500 Internal Server Error\n\nServer got itself in trouble")
		return
	}
	full := rep.fullText()
	in, out := rep.usage(turn)
	s.sessions.persistTurn(turn, rep, full)
	if s.jsonFault(c) {
		return
	}
	writeJSON(c.w, 200, hdr, obj{{"object", "hermes.session.chat.completion"}, {"session_id", id},
		{"message", obj{{"role", "assistant"}, {"content", full}}}, {"usage", respUsage(in, out)}})
}

// thinkingCopy is the first 500 characters of s (the copy of assistant text
// reported as thinking or reasoning).
func thinkingCopy(s string) string {
	if utf8.RuneCountInString(s) > 500 {
		return string([]rune(s)[:500])
	}
	return s
}

func (s *Server) sessionStream(c *call, turn Turn, norm any, hdr http.Header) {
	sw := s.startSSE(c, hdr)
	runID := "run_" + randHex(32)
	msgID := "msg_" + randHex(32)
	seq := 0
	var b []byte
	emit := func(event string, o obj) bool {
		if _, ok := o.get("session_id"); !ok {
			o = append(o, kv{"session_id", turn.SessionID})
		}
		seq++
		o = append(o, kv{"run_id", runID}, kv{"seq", seq}, kv{"ts", s.pyNow()})
		b = appendJSON(b[:0], o, false)
		return sw.frame(event, b) == nil
	}
	if !emit("run.started", obj{{"user_message", obj{{"role", "user"}, {"content", norm}}}}) ||
		!emit("message.started", obj{{"message", obj{{"id", msgID}, {"role", "assistant"}}}}) {
		return
	}
	rep, ok := s.runAgent(c, turn, sw)
	if !ok {
		return
	}
	delta := func(d string) bool { return emit("assistant.delta", obj{{"message_id", msgID}, {"delta", d}}) }
	thinking := func(t string) bool {
		if t == "" {
			return true
		}
		return emit("tool.progress", obj{{"message_id", msgID}, {"tool_name", "_thinking"}, {"delta", thinkingCopy(t)}})
	}
	var msgs []any
	for _, t := range rep.Tools {
		if !rep.deltas(t.Text, 0, sw.wait, delta) || !thinking(t.Text) ||
			!emit("tool.started", obj{{"message_id", msgID}, {"tool_name", t.Name}, {"preview", t.Label}, {"args", argsObj(t)}}) ||
			!sw.wait(rep.DeltaDelay) ||
			!emit("tool.completed", obj{{"message_id", msgID}, {"tool_name", t.Name}, {"preview", nil}, {"args", nil}}) {
			return
		}
		msgs = append(msgs,
			obj{{"role", "assistant"}, {"content", t.Text}, {"tool_calls", []any{toolCallObj(t)}}, {"finish_reason", "tool_calls"}, {"reasoning", nil}},
			obj{{"role", "tool"}, {"content", t.Output}, {"tool_call_id", t.CallID}})
	}
	if !rep.deltas(rep.Text, rep.Deltas, sw.wait, delta) || !rep.padding(sw.wait, delta) {
		return
	}
	if rep.Fail != "" {
		if emit("error", obj{{"message", rep.Fail}}) && emit("done", obj{}) {
			_ = sw.flush()
		}
		return
	}
	full := rep.fullText()
	oc := rep.outcome()
	in, out := rep.usage(turn)
	if !thinking(full) {
		return
	}
	s.sessions.persistTurn(turn, rep, full)
	msgs = append(msgs, obj{{"role", "assistant"}, {"content", full}, {"finish_reason", oc.finish}, {"reasoning", nil}})
	if emit("assistant.completed", obj{{"session_id", turn.SessionID}, {"message_id", msgID}, {"content", full}, {"completed", true}, {"partial", false}, {"interrupted", false}}) &&
		emit("run.completed", obj{{"session_id", turn.SessionID}, {"message_id", msgID}, {"completed", true}, {"messages", msgs}, {"usage", respUsage(in, out)}}) &&
		emit("done", obj{}) {
		_ = sw.flush()
	}
}
