package hermestest

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

type storedResponse struct {
	response     obj
	history      []Message
	instructions string
	sessionID    string
	access       uint64
}

// responseStore is the in-memory ResponseStore: LRU over max entries plus
// conversation-name pointers.
type responseStore struct {
	mu   sync.Mutex
	max  int
	m    map[string]*storedResponse
	conv map[string]string
	tick uint64
}

func newResponseStore(max int) *responseStore {
	if max <= 0 {
		max = 100
	}
	return &responseStore{max: max, m: map[string]*storedResponse{}, conv: map[string]string{}}
}

func (rs *responseStore) get(id string) (*storedResponse, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.m[id]
	if ok {
		rs.tick++
		r.access = rs.tick
	}
	return r, ok
}

func (rs *responseStore) put(id string, r *storedResponse) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.tick++
	r.access = rs.tick
	rs.m[id] = r
	for len(rs.m) > rs.max {
		oldest, oa := "", uint64(0)
		for k, v := range rs.m {
			if oldest == "" || v.access < oa {
				oldest, oa = k, v.access
			}
		}
		rs.deleteLocked(oldest)
	}
}

func (rs *responseStore) deleteLocked(id string) bool {
	if _, ok := rs.m[id]; !ok {
		return false
	}
	delete(rs.m, id)
	for name, rid := range rs.conv {
		if rid == id {
			delete(rs.conv, name)
		}
	}
	return true
}

func (rs *responseStore) delete(id string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.deleteLocked(id)
}

func (rs *responseStore) conversation(name string) (string, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	id, ok := rs.conv[name]
	return id, ok
}

func (rs *responseStore) setConversation(name, id string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := rs.m[id]; ok {
		rs.conv[name] = id
	}
}

// StoredResponses reports how many Responses objects are stored.
func (s *Server) StoredResponses() int {
	s.responses.mu.Lock()
	defer s.responses.mu.Unlock()
	return len(s.responses.m)
}

// ConversationPointer returns the response id a conversation name points at.
func (s *Server) ConversationPointer(name string) (string, bool) {
	return s.responses.conversation(name)
}

func notFoundResponse(id string) obj {
	return openaiError("Response not found: "+id, "invalid_request_error", nil)
}

func (s *Server) handleResponseGet(c *call) {
	id := c.route.id
	r, ok := s.responses.get(id)
	if !ok {
		writeJSON(c.w, 404, nil, notFoundResponse(id))
		return
	}
	writeJSON(c.w, 200, nil, r.response)
}

func (s *Server) handleResponseDelete(c *call) {
	id := c.route.id
	if !s.responses.delete(id) {
		writeJSON(c.w, 404, nil, notFoundResponse(id))
		return
	}
	writeJSON(c.w, 200, nil, obj{{"id", id}, {"object", "response"}, {"deleted", true}})
}

func (s *Server) handleResponses(c *call) {
	release, ok := s.admit(c, true)
	if !ok {
		return
	}
	defer release()
	if !validSessionKey(c) {
		return
	}
	body, ok := c.bodyObject()
	if !ok || body == nil {
		writeJSON(c.w, 400, nil, adhocError("Invalid JSON in request body"))
		return
	}
	iv, present := body.get("input")
	if !present || iv == nil {
		writeJSON(c.w, 400, nil, adhocError("Missing 'input' field"))
		return
	}
	if str, ok := iv.(string); ok {
		iv = []any{str} // a string is one user message
	}
	arr, ok := iv.([]any)
	var items []Message
	for i := 0; ok && i < len(arr); i++ {
		switch y := arr[i].(type) {
		case string:
			items = append(items, Message{Role: "user", Content: y})
		case obj:
			role := "user"
			if rv, ok := y.get("role"); ok {
				if rs, ok := rv.(string); ok && rs != "" {
					role = rs
				}
			}
			cv, _ := y.get("content")
			text, _, _, cerr := normContent(cv, "input["+strconv.Itoa(i)+"].content")
			if cerr != nil {
				writeJSON(c.w, 400, nil, cerr.body())
				return
			}
			items = append(items, Message{Role: role, Content: text})
		default:
			ok = false
		}
	}
	if !ok {
		writeJSON(c.w, 400, nil, adhocError("'input' must be a string or array"))
		return
	}
	if len(items) == 0 {
		writeJSON(c.w, 400, nil, adhocError("No user message found in input"))
		return
	}
	convV, _ := body.get("conversation")
	prevV, _ := body.get("previous_response_id")
	if truthy(convV) && truthy(prevV) {
		writeJSON(c.w, 400, nil, adhocError("Cannot use both 'conversation' and 'previous_response_id'"))
		return
	}
	var explicit []Message
	hasExplicit := false
	if hv, ok := body.get("conversation_history"); ok && hv != nil {
		arr, ok := hv.([]any)
		if !ok {
			writeJSON(c.w, 400, nil, adhocError("'conversation_history' must be an array of message objects"))
			return
		}
		for i, e := range arr {
			eo, ok := e.(obj)
			rv, okr := eo.get("role")
			cv, okc := eo.get("content")
			if !ok || !okr || !okc {
				writeJSON(c.w, 400, nil, adhocError(fmt.Sprintf("conversation_history[%d] must have 'role' and 'content'", i)))
				return
			}
			role, _ := rv.(string)
			text, _, _, _ := normContent(cv, "")
			explicit = append(explicit, Message{Role: role, Content: text})
		}
		hasExplicit = len(arr) > 0
	}
	convName, _ := convV.(string)
	prevID, _ := prevV.(string)
	if convName != "" {
		if id, ok := s.responses.conversation(convName); ok {
			prevID = id
		}
	}
	instructions := ""
	instrSet := false
	if v, ok := body.get("instructions"); ok && v != nil {
		instructions, _ = v.(string)
		instrSet = true
	}
	var history []Message
	sessionID := ""
	if prevID != "" {
		prev, ok := s.responses.get(prevID)
		if !ok {
			writeJSON(c.w, 404, nil, openaiError("Previous response not found: "+prevID, "invalid_request_error", nil))
			return
		}
		history = append(history, prev.history...)
		sessionID = prev.sessionID
		if !instrSet {
			instructions = prev.instructions
		}
	}
	if hasExplicit {
		history = explicit
	}
	history = append(history, items[:len(items)-1]...)
	if tv, _ := body.get("truncation"); tv == "auto" && len(history) > 100 {
		history = history[len(history)-100:]
	}
	if sessionID == "" {
		sessionID = uuid4()
	}
	sv, _ := body.get("store")
	store := boolish(sv, true)
	model := s.requestModel(body)
	user := items[len(items)-1].Content
	turn := Turn{Route: c.route.key, UserText: user, History: history, SessionID: sessionID,
		SessionKey: c.r.Header.Get("X-Hermes-Session-Key"), Instructions: instructions, Model: model}
	rc := &respRun{s: s, c: c, id: "resp_" + randHex(28), created: s.now().Unix(), model: model, turn: turn,
		store: store, conv: convName, instructions: instructions}
	hdr := echoHeaders(c.r, sessionID)
	if c.route.key == "responses_stream" {
		rc.stream(hdr)
		return
	}
	rep, ok := s.runTurn(c, turn)
	if !ok {
		return
	}
	oc := rep.outcome()
	text := rep.fullText()
	if text == "" {
		if oc.err != "" {
			text = oc.err
		} else {
			text = "(No response generated)"
		}
	}
	in, out := rep.usage(user + instructions)
	output := []any{}
	for _, t := range rep.Tools {
		output = append(output,
			obj{{"type", "function_call"}, {"name", t.Name}, {"arguments", t.Args}, {"call_id", t.CallID}},
			obj{{"type", "function_call_output"}, {"call_id", t.CallID}, {"output", t.Output}})
	}
	output = append(output, messageItem(text))
	resp := obj{{"id", rc.id}, {"object", "response"}, {"status", "completed"}, {"created_at", rc.created}, {"model", model},
		{"output", output}, {"usage", respUsage(in, out)}}
	s.sessions.persistTurn(turnRecord{sessionID: sessionID, userContent: user, tools: rep.Tools, final: text, finish: oc.finish, in: in, out: out})
	rc.save(resp, rep, text)
	if s.jsonFault(c) {
		return
	}
	writeJSON(c.w, 200, hdr, resp)
}

func messageItem(text string) obj {
	return obj{{"type", "message"}, {"role", "assistant"}, {"content", []any{obj{{"type", "output_text"}, {"text", text}}}}}
}

func respUsage(in, out int) obj {
	return obj{{"input_tokens", in}, {"output_tokens", out}, {"total_tokens", in + out}}
}

type respRun struct {
	s            *Server
	c            *call
	id           string
	created      int64
	model        string
	turn         Turn
	store        bool
	conv         string
	instructions string
}

// save stores the response record and moves the conversation pointer.
func (rc *respRun) save(resp obj, rep Reply, text string) {
	if !rc.store {
		return
	}
	hist := append([]Message(nil), rc.turn.History...)
	hist = append(hist, Message{Role: "user", Content: rc.turn.UserText})
	for _, t := range rep.Tools {
		hist = append(hist, Message{Role: "assistant", Content: t.Text}, Message{Role: "tool", Content: t.Output})
	}
	hist = append(hist, Message{Role: "assistant", Content: text})
	rc.s.responses.put(rc.id, &storedResponse{response: resp, history: hist, instructions: rc.instructions, sessionID: rc.turn.SessionID})
	if rc.conv != "" {
		rc.s.responses.setConversation(rc.conv, rc.id)
	}
}

var trimKeys = map[string]bool{"content": true, "query": true, "pattern": true, "old_string": true, "new_string": true}

// trimArgs applies the response.completed argument trimming.
func trimArgs(args string) string {
	v, err := loads([]byte(args))
	o, ok := v.(obj)
	if err != nil || !ok {
		return args
	}
	changed := false
	for i, m := range o {
		if s, ok := m.v.(string); ok && trimKeys[m.k] && utf8.RuneCountInString(s) > 500 {
			o[i].v = fmt.Sprintf("[%d chars \u2014 truncated for response.completed]", utf8.RuneCountInString(s))
			changed = true
		}
	}
	if !changed {
		return args
	}
	return string(dumps(o, true))
}

func trimOutput(s string) string {
	n := utf8.RuneCountInString(s)
	if n <= 1000 {
		return s
	}
	r := []rune(s)
	return string(r[:500]) + fmt.Sprintf("...[%d more chars]", n-500)
}

func (rc *respRun) stream(hdr http.Header) {
	s, c := rc.s, rc.c
	sw := s.startSSE(c, hdr)
	seq := 0
	var b []byte
	emit := func(typ string, o obj) bool {
		o = append(o, kv{"sequence_number", seq})
		seq++
		b = appendJSON(b[:0], append(obj{{"type", typ}}, o...), true)
		return sw.frame(typ, b) == nil
	}
	snapshot := func(status string, output []any) obj {
		return obj{{"id", rc.id}, {"object", "response"}, {"status", status}, {"created_at", rc.created}, {"model", rc.model}, {"output", output}}
	}
	if rc.store {
		s.responses.put(rc.id, &storedResponse{response: snapshot("in_progress", []any{}), history: append(append([]Message(nil), rc.turn.History...), Message{Role: "user", Content: rc.turn.UserText}), instructions: rc.instructions, sessionID: rc.turn.SessionID})
	}
	if !emit("response.created", obj{{"response", snapshot("in_progress", []any{})}}) {
		return
	}
	rep, ok := s.runAgent(c.ctx, rc.turn, sw.waitReply)
	if !ok || !sw.wait(rep.Delay) {
		rc.incomplete()
		return
	}
	rep.Tools = prepareTools(rep.Tools)
	nextIndex := 0
	msgID, msgIndex := "", -1
	streamed := ""
	var final []any // completed output tool items
	openMsg := func() bool {
		if msgID != "" {
			return true
		}
		msgID = "msg_" + randHex(24)
		msgIndex = nextIndex
		nextIndex++
		return emit("response.output_item.added", obj{{"output_index", msgIndex}, {"item", obj{{"id", msgID}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"}, {"content", []any{}}}}})
	}
	delta := func(d string) bool {
		if !openMsg() {
			return false
		}
		streamed += d
		return emit("response.output_text.delta", obj{{"item_id", msgID}, {"output_index", msgIndex}, {"content_index", 0}, {"delta", d}, {"logprobs", []any{}}})
	}
	pending, pendingAge := "", time.Duration(0)
	flushPending := func() bool {
		if pending == "" {
			return true
		}
		d := pending
		pending, pendingAge = "", 0
		return delta(d)
	}
	text := func(t string, n int) bool {
		for i, d := range splitDeltas(t, n) {
			if i > 0 && rep.DeltaDelay > 0 {
				if pendingAge+rep.DeltaDelay >= responsesBatch {
					if !flushPending() {
						return false
					}
				} else {
					pendingAge += rep.DeltaDelay
				}
				if !sw.wait(rep.DeltaDelay) {
					return false
				}
			}
			pending += d
		}
		return true
	}
	for _, t := range rep.Tools {
		if t.Text != "" && !text(t.Text, 0) {
			rc.incomplete()
			return
		}
		if !flushPending() {
			rc.incomplete()
			return
		}
		fcID, fcoID := "fc_"+randHex(24), "fco_"+randHex(24)
		idx := nextIndex
		nextIndex++
		fc := func(status string) obj {
			return obj{{"id", fcID}, {"type", "function_call"}, {"status", status}, {"name", t.Name}, {"call_id", t.CallID}, {"arguments", t.Args}}
		}
		if !emit("response.output_item.added", obj{{"output_index", idx}, {"item", fc("in_progress")}}) || !sw.wait(rep.DeltaDelay) ||
			!emit("response.output_item.done", obj{{"output_index", idx}, {"item", fc("completed")}}) {
			rc.incomplete()
			return
		}
		oidx := nextIndex
		nextIndex++
		fco := obj{{"id", fcoID}, {"type", "function_call_output"}, {"call_id", t.CallID}, {"output", []any{obj{{"type", "input_text"}, {"text", t.Output}}}}, {"status", "completed"}}
		if !emit("response.output_item.added", obj{{"output_index", oidx}, {"item", fco}}) ||
			!emit("response.output_item.done", obj{{"output_index", oidx}, {"item", fco}}) {
			rc.incomplete()
			return
		}
		final = append(final,
			obj{{"type", "function_call"}, {"name", t.Name}, {"arguments", trimArgs(t.Args)}, {"call_id", t.CallID}},
			obj{{"type", "function_call_output"}, {"call_id", t.CallID}, {"output", []any{obj{{"type", "input_text"}, {"text", trimOutput(t.Output)}}}}})
	}
	if !text(rep.Text, rep.Deltas) || !flushPending() {
		rc.incomplete()
		return
	}
	for i := 0; i < rep.Events; i++ {
		if rep.DeltaDelay > 0 && !sw.wait(rep.DeltaDelay) {
			rc.incomplete()
			return
		}
		if !delta(rep.PadText) {
			rc.incomplete()
			return
		}
	}
	oc := rep.outcome()
	full := rep.fullText()
	in, out := rep.usage(rc.turn.UserText + rc.instructions)
	if oc.failed && full == "" {
		output := append(final, messageItem(oc.err))
		resp := snapshot("failed", output)
		resp = append(resp, kv{"error", obj{{"message", oc.err}, {"type", "server_error"}}}, kv{"usage", respUsage(in, out)})
		s.sessions.persistTurn(turnRecord{sessionID: rc.turn.SessionID, userContent: rc.turn.UserText, tools: rep.Tools, final: "", finish: oc.finish, in: in, out: out})
		rc.save(resp, rep, oc.err)
		if emit("response.failed", obj{{"response", resp}}) {
			_ = sw.flush()
		}
		return
	}
	if full != "" && msgID == "" {
		if !delta(full) { // fallback delta when text was not streamed
			rc.incomplete()
			return
		}
	}
	if msgID != "" {
		if !emit("response.output_text.done", obj{{"item_id", msgID}, {"output_index", msgIndex}, {"content_index", 0}, {"text", full}, {"logprobs", []any{}}}) ||
			!emit("response.output_item.done", obj{{"output_index", msgIndex}, {"item", obj{{"id", msgID}, {"type", "message"}, {"status", "completed"}, {"role", "assistant"}, {"content", []any{obj{{"type", "output_text"}, {"text", full}}}}}}}) {
			rc.incomplete()
			return
		}
	}
	output := append(final, messageItem(full))
	resp := snapshot("completed", output)
	resp = append(resp, kv{"usage", respUsage(in, out)})
	s.sessions.persistTurn(turnRecord{sessionID: rc.turn.SessionID, userContent: rc.turn.UserText, tools: rep.Tools, final: full, finish: oc.finish, in: in, out: out})
	rc.save(resp, rep, full)
	if emit("response.completed", obj{{"response", resp}}) {
		_ = sw.flush()
	}
}

// incomplete stores a status "incomplete" snapshot after a disconnect.
func (rc *respRun) incomplete() {
	if !rc.store {
		return
	}
	if r, ok := rc.s.responses.get(rc.id); ok {
		snap := obj{{"id", rc.id}, {"object", "response"}, {"status", "incomplete"}, {"created_at", rc.created}, {"model", rc.model}, {"output", []any{}}}
		rc.s.responses.put(rc.id, &storedResponse{response: snap, history: r.history, instructions: r.instructions, sessionID: r.sessionID})
	}
}
