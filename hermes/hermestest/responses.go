package hermestest

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
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
}

// responseStore is the in-memory ResponseStore: LRU over max entries plus
// conversation-name pointers.
type responseStore struct {
	mu   sync.Mutex
	max  int
	m    map[string]*storedResponse
	lru  []string // the ids in m, least recently used first
	conv map[string]string
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
		rs.lru = append(slices.DeleteFunc(rs.lru, func(k string) bool { return k == id }), id)
	}
	return r, ok
}

func (rs *responseStore) put(id string, r *storedResponse) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.lru = append(slices.DeleteFunc(rs.lru, func(k string) bool { return k == id }), id)
	rs.m[id] = r
	for len(rs.m) > rs.max {
		rs.deleteLocked(rs.lru[0])
	}
}

func (rs *responseStore) deleteLocked(id string) bool {
	if _, ok := rs.m[id]; !ok {
		return false
	}
	delete(rs.m, id)
	rs.lru = slices.DeleteFunc(rs.lru, func(k string) bool { return k == id })
	maps.DeleteFunc(rs.conv, func(_, rid string) bool { return rid == id })
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
	return locked(&s.responses.mu, func() int { return len(s.responses.m) })
}

// ConversationPointer returns the response id a conversation name points at.
func (s *Server) ConversationPointer(name string) (string, bool) {
	return s.responses.conversation(name)
}

func notFoundResponse(id string) obj {
	return openaiError("Response not found: "+id, "invalid_request_error", nil)
}

func (s *Server) handleResponseGet(c *call) {
	id := c.id
	r, ok := s.responses.get(id)
	if !ok {
		writeJSON(c.w, 404, nil, notFoundResponse(id))
		return
	}
	writeJSON(c.w, 200, nil, r.response)
}

func (s *Server) handleResponseDelete(c *call) {
	ok := s.responses.delete(c.id)
	writeFound(c, ok, obj{{"id", c.id}, {"object", "response"}, {"deleted", true}}, notFoundResponse)
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
			role := cmp.Or(y.str("role"), "user")
			cv, _ := y.get("content")
			text, _, _, cerr := normContent(cv, "input["+strconv.Itoa(i)+"].content")
			if cerr != nil {
				writeJSON(c.w, 400, nil, cerr)
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
	explicit, reason := conversationHistory(body)
	if reason != "" {
		writeJSON(c.w, 400, nil, adhocError(reason))
		return
	}
	convName := body.str("conversation")
	prevID := body.str("previous_response_id")
	if id, ok := s.responses.conversation(convName); ok { // no conversation is named ""
		prevID = id
	}
	instrV, _ := body.get("instructions")
	instructions := body.str("instructions")
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
		if instrV == nil {
			instructions = prev.instructions
		}
	}
	if len(explicit) > 0 {
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
	model := s.requestModel(body)
	turn := Turn{Route: c.key, UserText: items[len(items)-1].Content, History: history, SessionID: sessionID,
		SessionKey: c.r.Header.Get("X-Hermes-Session-Key"), Instructions: instructions, Model: model}
	rc := &respRun{s: s, c: c, id: "resp_" + randHex(28), created: s.now().Unix(), turn: turn, store: boolish(sv, true), conv: convName}
	hdr := echoHeaders(c.r, sessionID)
	if c.key == "responses_stream" {
		rc.stream(hdr)
		return
	}
	rep, ok := s.runAgent(c, turn, nil)
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
	in, out := rep.usage(turn)
	output := []any{}
	for _, t := range rep.Tools {
		output = append(output,
			obj{{"type", "function_call"}, {"name", t.Name}, {"arguments", t.Args}, {"call_id", t.CallID}},
			obj{{"type", "function_call_output"}, {"call_id", t.CallID}, {"output", t.Output}})
	}
	output = append(output, messageItem(text))
	resp := append(rc.snapshot("completed", output), kv{"usage", respUsage(in, out)})
	s.sessions.persistTurn(turn, rep, text)
	rc.save(resp, rep, text)
	if s.jsonFault(c) {
		return
	}
	writeJSON(c.w, 200, hdr, resp)
}

// conversationHistory decodes the body's conversation_history (nil when it is
// absent or null); reason says why a malformed one is a 400.
func conversationHistory(body obj) (history []Message, reason string) {
	hv, _ := body.get("conversation_history")
	if hv == nil {
		return nil, ""
	}
	arr, ok := hv.([]any)
	if !ok {
		return nil, "'conversation_history' must be an array of message objects"
	}
	for i, e := range arr {
		eo, ok := e.(obj)
		_, okr := eo.get("role")
		cv, okc := eo.get("content")
		if !ok || !okr || !okc {
			return nil, fmt.Sprintf("conversation_history[%d] must have 'role' and 'content'", i)
		}
		text, _, _, _ := normContent(cv, "")
		history = append(history, Message{Role: eo.str("role"), Content: text})
	}
	return history, ""
}

func messageItem(text string) obj {
	return obj{{"type", "message"}, {"role", "assistant"}, {"content", []any{obj{{"type", "output_text"}, {"text", text}}}}}
}

func respUsage(in, out int) obj {
	return obj{{"input_tokens", in}, {"output_tokens", out}, {"total_tokens", in + out}}
}

// respRun is one POST /v1/responses turn: the response id and what storing
// it needs.
type respRun struct {
	s       *Server
	c       *call
	id      string
	created int64
	turn    Turn
	store   bool   // the request's "store"
	conv    string // the request's conversation name ("" when none)
}

// snapshot is the response object with status and output (no usage).
func (rc *respRun) snapshot(status string, output []any) obj {
	return obj{{"id", rc.id}, {"object", "response"}, {"status", status}, {"created_at", rc.created}, {"model", rc.turn.Model}, {"output", output}}
}

// put stores resp, with the turn's history, its user message and then more,
// when the request asked to store.
func (rc *respRun) put(resp obj, more ...Message) {
	if !rc.store {
		return
	}
	hist := append(slices.Clone(rc.turn.History), Message{Role: "user", Content: rc.turn.UserText})
	hist = append(hist, more...)
	rc.s.responses.put(rc.id, &storedResponse{response: resp, history: hist, instructions: rc.turn.Instructions, sessionID: rc.turn.SessionID})
}

// save stores the response record and moves the conversation pointer.
func (rc *respRun) save(resp obj, rep Reply, text string) {
	if !rc.store {
		return
	}
	var more []Message
	for _, t := range rep.Tools {
		more = append(more, Message{Role: "assistant", Content: t.Text}, Message{Role: "tool", Content: t.Output})
	}
	rc.put(resp, append(more, Message{Role: "assistant", Content: text})...)
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
	for i, m := range o {
		if s, ok := m.v.(string); ok && trimKeys[m.k] && utf8.RuneCountInString(s) > 500 {
			o[i].v = fmt.Sprintf("[%d chars \u2014 truncated for response.completed]", utf8.RuneCountInString(s))
		}
	}
	return string(dumps(o, true)) // args as prepareTools encoded them: unchanged members keep their bytes
}

func trimOutput(s string) string {
	n := utf8.RuneCountInString(s)
	if n <= 1000 {
		return s
	}
	return thinkingCopy(s) + fmt.Sprintf("...[%d more chars]", n-500)
}

// stream answers the turn as a Responses SSE stream; when the stream is cut
// short after response.created, the stored response becomes "incomplete".
func (rc *respRun) stream(hdr http.Header) {
	sw := rc.s.startSSE(rc.c, hdr)
	seq := 0
	var b []byte
	emit := func(typ string, o obj) bool {
		o = append(o, kv{"sequence_number", seq})
		seq++
		b = appendJSON(b[:0], append(obj{{"type", typ}}, o...), true)
		return sw.frame(typ, b) == nil
	}
	rc.put(rc.snapshot("in_progress", []any{}))
	if emit("response.created", obj{{"response", rc.snapshot("in_progress", []any{})}}) && !rc.play(sw, emit) {
		rc.incomplete()
	}
}

// play runs the agent and streams its reply through emit; false when the
// stream ended before the final event.
func (rc *respRun) play(sw *sseWriter, emit func(typ string, o obj) bool) bool {
	s := rc.s
	rep, ok := s.runAgent(rc.c, rc.turn, sw)
	if !ok {
		return false
	}
	nextIndex := 0
	msgID, msgIndex := "", -1
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
		return openMsg() && emit("response.output_text.delta", obj{{"item_id", msgID}, {"output_index", msgIndex}, {"content_index", 0}, {"delta", d}, {"logprobs", []any{}}})
	}
	// Text deltas are batched: a delta waits for more text until it is
	// responsesBatch old, or a tool call or the end comes.
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
		if !text(t.Text, 0) || !flushPending() {
			return false
		}
		fcID, fcoID := "fc_"+randHex(24), "fco_"+randHex(24)
		idx := nextIndex
		nextIndex++
		fc := func(status string) obj {
			return obj{{"id", fcID}, {"type", "function_call"}, {"status", status}, {"name", t.Name}, {"call_id", t.CallID}, {"arguments", t.Args}}
		}
		if !emit("response.output_item.added", obj{{"output_index", idx}, {"item", fc("in_progress")}}) || !sw.wait(rep.DeltaDelay) ||
			!emit("response.output_item.done", obj{{"output_index", idx}, {"item", fc("completed")}}) {
			return false
		}
		oidx := nextIndex
		nextIndex++
		fco := obj{{"id", fcoID}, {"type", "function_call_output"}, {"call_id", t.CallID}, {"output", []any{obj{{"type", "input_text"}, {"text", t.Output}}}}, {"status", "completed"}}
		if !emit("response.output_item.added", obj{{"output_index", oidx}, {"item", fco}}) ||
			!emit("response.output_item.done", obj{{"output_index", oidx}, {"item", fco}}) {
			return false
		}
		final = append(final,
			obj{{"type", "function_call"}, {"name", t.Name}, {"arguments", trimArgs(t.Args)}, {"call_id", t.CallID}},
			obj{{"type", "function_call_output"}, {"call_id", t.CallID}, {"output", []any{obj{{"type", "input_text"}, {"text", trimOutput(t.Output)}}}}})
	}
	if !text(rep.Text, rep.Deltas) || !flushPending() || !rep.padding(sw.wait, delta) {
		return false
	}
	oc := rep.outcome()
	full := rep.fullText()
	in, out := rep.usage(rc.turn)
	if oc.failed && full == "" {
		resp := rc.snapshot("failed", append(final, messageItem(oc.err)))
		resp = append(resp, kv{"error", obj{{"message", oc.err}, {"type", "server_error"}}}, kv{"usage", respUsage(in, out)})
		s.sessions.persistTurn(rc.turn, rep, "")
		rc.save(resp, rep, oc.err)
		if emit("response.failed", obj{{"response", resp}}) {
			_ = sw.flush()
		}
		return true
	}
	if full != "" && msgID == "" && !delta(full) { // fallback delta when text was not streamed
		return false
	}
	if msgID != "" {
		if !emit("response.output_text.done", obj{{"item_id", msgID}, {"output_index", msgIndex}, {"content_index", 0}, {"text", full}, {"logprobs", []any{}}}) ||
			!emit("response.output_item.done", obj{{"output_index", msgIndex}, {"item", obj{{"id", msgID}, {"type", "message"}, {"status", "completed"}, {"role", "assistant"}, {"content", []any{obj{{"type", "output_text"}, {"text", full}}}}}}}) {
			return false
		}
	}
	resp := append(rc.snapshot("completed", append(final, messageItem(full))), kv{"usage", respUsage(in, out)})
	s.sessions.persistTurn(rc.turn, rep, full)
	rc.save(resp, rep, full)
	if emit("response.completed", obj{{"response", resp}}) {
		_ = sw.flush()
	}
	return true
}

// incomplete stores a status "incomplete" snapshot after a disconnect, when
// the response is still stored.
func (rc *respRun) incomplete() {
	if _, ok := rc.s.responses.get(rc.id); ok {
		rc.put(rc.snapshot("incomplete", []any{}))
	}
}
