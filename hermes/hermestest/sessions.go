package hermestest

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

type session struct {
	id, source    string
	model         string
	title         string // "" = null
	startedAt     float64
	endedAt       float64 // 0 = null
	endReason     string  // "" = null
	toolCallCount int
	inputTokens   int
	outputTokens  int
	estimatedCost bool // 0.0 once the agent ran, else null
	apiCallCount  int
	parent        string
	hasSystem     bool
	modelConfig   bool
}

type message struct {
	id           int64
	sessionID    string
	role         string
	content      string
	toolCallID   string
	toolCalls    any // []any of obj, or nil
	toolName     string
	timestamp    float64
	finishReason string
}

// sessionDB is the in-memory stand-in for hermes_state.SessionDB.
type sessionDB struct {
	s      *Server
	mu     sync.Mutex
	rows   map[string]*session
	order  []string // creation order
	msgs   map[string][]*message
	nextID int64
}

func newSessionDB(s *Server) *sessionDB {
	return &sessionDB{s: s, rows: map[string]*session{}, msgs: map[string][]*message{}, nextID: 1}
}

func (db *sessionDB) ts() float64 {
	return float64(db.s.now().UnixMicro()) / 1e6
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// object renders _session_response; list adds last_active and preview.
func (db *sessionDB) object(x *session, list bool) obj {
	var ended, cost any
	if x.endedAt != 0 {
		ended = pyFloat(x.endedAt)
	}
	if x.estimatedCost {
		cost = pyFloat(0)
	}
	o := obj{
		{"id", x.id}, {"source", x.source}, {"user_id", nil}, {"model", nullStr(x.model)}, {"title", nullStr(x.title)},
		{"started_at", pyFloat(x.startedAt)}, {"ended_at", ended}, {"end_reason", nullStr(x.endReason)},
		{"message_count", len(db.msgs[x.id])}, {"tool_call_count", x.toolCallCount},
		{"input_tokens", x.inputTokens}, {"output_tokens", x.outputTokens},
		{"cache_read_tokens", 0}, {"cache_write_tokens", 0}, {"reasoning_tokens", 0},
		{"estimated_cost_usd", cost}, {"actual_cost_usd", nil}, {"api_call_count", x.apiCallCount},
		{"parent_session_id", nullStr(x.parent)},
	}
	if list {
		var preview any
		for _, m := range db.msgs[x.id] {
			if m.role == "user" && m.content != "" {
				p := strings.Join(strings.Fields(m.content), " ")
				if utf8.RuneCountInString(p) > 60 {
					p = string([]rune(p)[:60]) + "..."
				}
				preview = p
				break
			}
		}
		o = append(o, kv{"last_active", pyFloat(db.lastActive(x))}, kv{"preview", preview})
	}
	o = append(o, kv{"has_system_prompt", x.hasSystem}, kv{"has_model_config", x.modelConfig})
	return o
}

func (db *sessionDB) lastActive(x *session) float64 {
	ms := db.msgs[x.id]
	if len(ms) > 0 {
		return ms[len(ms)-1].timestamp
	}
	return x.startedAt
}

func messageObject(m *message) obj {
	return obj{
		{"id", m.id}, {"session_id", m.sessionID}, {"role", m.role}, {"content", m.content},
		{"tool_call_id", nullStr(m.toolCallID)}, {"tool_calls", m.toolCalls}, {"tool_name", nullStr(m.toolName)},
		{"timestamp", pyFloat(m.timestamp)}, {"token_count", nil}, {"finish_reason", nullStr(m.finishReason)},
		{"reasoning", nil}, {"reasoning_content", nil},
	}
}

// ---- validation helpers ----

var driveRe = regexp.MustCompile(`^[A-Za-z]:`)

// validSessionID applies the create handler's id rules.
func validSessionID(id string) bool {
	t := strings.TrimSpace(id)
	if t == "" || utf8.RuneCountInString(t) > 256 {
		return false
	}
	return !strings.ContainsFunc(t, unicode.IsControl) && !strings.Contains(t, "..") && !strings.ContainsAny(t, `/\`) && !driveRe.MatchString(t)
}

// sanitizeTitle trims, strips control characters and collapses whitespace.
func sanitizeTitle(t string) string {
	t = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' {
			return -1
		}
		return r
	}, t)
	return strings.Join(strings.Fields(t), " ")
}

type dbErr struct {
	status int
	msg    string
	code   string
}

// checkTitle rejects a title that is too long or used by another session
// than self; "" (null) is always accepted.
func (db *sessionDB) checkTitle(title, self string) *dbErr {
	if title == "" {
		return nil
	}
	if utf8.RuneCountInString(title) > 100 {
		return &dbErr{400, fmt.Sprintf("Title too long (%d chars, max 100)", utf8.RuneCountInString(title)), "invalid_title"}
	}
	for _, id := range db.order {
		x := db.rows[id]
		if x.id != self && x.title == title {
			return &dbErr{400, fmt.Sprintf("Title '%s' is already in use by session %s", title, x.id), "invalid_title"}
		}
	}
	return nil
}

func (db *sessionDB) genID() string {
	return fmt.Sprintf("api_%d_%s", db.s.now().Unix(), randHex(8))
}

func (db *sessionDB) insert(x *session) {
	db.rows[x.id] = x
	db.order = append(db.order, x.id)
}

// ---- operations (callers hold no lock) ----

// create implements POST /api/sessions after body parsing.
func (db *sessionDB) create(id string, title any, model string, systemPrompt string) (obj, *dbErr) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if id == "" {
		id = db.genID()
	} else {
		if !validSessionID(id) {
			return nil, &dbErr{400, "Invalid session id", "invalid_session_id"}
		}
		id = strings.TrimSpace(id)
	}
	if _, ok := db.rows[id]; ok {
		return nil, &dbErr{409, "Session already exists: " + id, "session_exists"}
	}
	x := &session{id: id, source: "api_server", model: model, startedAt: db.ts(), hasSystem: systemPrompt != ""}
	if ts, ok := title.(string); ok {
		x.title = sanitizeTitle(ts)
	}
	if e := db.checkTitle(x.title, id); e != nil {
		return nil, e
	}
	db.insert(x)
	return db.object(x, false), nil
}

func (db *sessionDB) get(id string) (o obj, ok bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if x := db.rows[id]; x != nil {
		return db.object(x, false), true
	}
	return nil, false
}

// list implements list_sessions_rich.
func (db *sessionDB) list(limit, offset int, source string, children bool) []any {
	db.mu.Lock()
	defer db.mu.Unlock()
	rows := make([]*session, 0, len(db.rows))
	for _, id := range db.order {
		x := db.rows[id]
		if source != "" && x.source != source {
			continue
		}
		if !children && x.parent != "" {
			p, ok := db.rows[x.parent]
			if ok && p.endReason != "branched" {
				continue
			}
		}
		rows = append(rows, x)
	}
	// Most recently active first; ties newest created first.
	slices.Reverse(rows)
	slices.SortStableFunc(rows, func(a, b *session) int { return cmp.Compare(db.lastActive(b), db.lastActive(a)) })
	out := []any{}
	for i := offset; i < len(rows) && len(out) < limit; i++ {
		out = append(out, db.object(rows[i], true))
	}
	return out
}

// patch applies title/end_reason.
func (db *sessionDB) patch(id string, body obj) (obj, *dbErr) {
	db.mu.Lock()
	defer db.mu.Unlock()
	x, ok := db.rows[id]
	if !ok {
		return nil, &dbErr{404, "Session not found: " + id, "session_not_found"}
	}
	var bad []string
	for _, m := range body {
		if m.k != "title" && m.k != "end_reason" {
			bad = append(bad, m.k)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, &dbErr{400, "Unsupported session fields: " + strings.Join(bad, ", "), "unsupported_session_field"}
	}
	if tv, ok := body.get("title"); ok {
		switch t := tv.(type) {
		case nil:
			x.title = ""
		case string:
			st := sanitizeTitle(t)
			if e := db.checkTitle(st, id); e != nil {
				return nil, e
			}
			x.title = st
		default:
			return nil, &dbErr{400, "Title must be a string or null", "invalid_title"}
		}
	}
	if rv, ok := body.get("end_reason"); ok && truthy(rv) && x.endedAt == 0 {
		x.endedAt = db.ts()
		if s, ok := rv.(string); ok {
			x.endReason = s
		} else {
			x.endReason = string(dumps(rv, true))
		}
	}
	return db.object(x, false), nil
}

func (db *sessionDB) delete(id string) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, ok := db.rows[id]; !ok {
		return false
	}
	delete(db.rows, id)
	delete(db.msgs, id)
	db.order = slices.DeleteFunc(db.order, func(o string) bool { return o == id })
	for _, x := range db.rows {
		if x.parent == id {
			x.parent = ""
		}
	}
	return true
}

func (db *sessionDB) messages(id string) ([]any, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, ok := db.rows[id]; !ok {
		return nil, false
	}
	out := []any{}
	for _, m := range db.msgs[id] {
		out = append(out, messageObject(m))
	}
	return out, true
}

var lineageRe = regexp.MustCompile(`^(.*) #(\d+)$`)

// nextLineageTitle mirrors SessionDB.get_next_title_in_lineage.
func (db *sessionDB) nextLineageTitle(title string) string {
	base := title
	if m := lineageRe.FindStringSubmatch(title); m != nil {
		base = m[1]
	}
	maxN := 1
	for _, x := range db.rows {
		if x.title == base {
			continue
		}
		if m := lineageRe.FindStringSubmatch(x.title); m != nil && m[1] == base {
			if n, err := strconv.Atoi(m[2]); err == nil && n > maxN {
				maxN = n
			}
		}
	}
	return fmt.Sprintf("%s #%d", base, maxN+1)
}

// fork implements the non-atomic fork: end source, create child (childID, or
// a new id when ""), copy messages, then validate the title (nil: derived
// from the source's).
func (db *sessionDB) fork(src, childID string, title any) (obj, *dbErr) {
	db.mu.Lock()
	defer db.mu.Unlock()
	x, ok := db.rows[src]
	if !ok {
		return nil, &dbErr{404, "Session not found: " + src, "session_not_found"}
	}
	if childID != "" {
		if strings.TrimSpace(childID) == "" || strings.ContainsAny(childID, "\r\n\x00") {
			return nil, &dbErr{400, "Invalid session id", "invalid_session_id"}
		}
		childID = strings.TrimSpace(childID)
	} else {
		childID = db.genID()
	}
	if _, ok := db.rows[childID]; ok {
		return nil, &dbErr{409, "Session already exists: " + childID, "session_exists"}
	}
	now := db.ts()
	if x.endedAt == 0 {
		x.endedAt = now
		x.endReason = "branched"
	}
	c := &session{id: childID, source: "api_server", model: x.model, startedAt: now, parent: src, hasSystem: x.hasSystem}
	db.insert(c)
	for _, m := range db.msgs[src] {
		cp := *m
		cp.id = db.nextID
		db.nextID++
		cp.sessionID = childID
		db.msgs[childID] = append(db.msgs[childID], &cp)
	}
	if title != nil {
		ts, ok := title.(string)
		if !ok {
			return nil, &dbErr{400, "Title must be a string or null", "invalid_title"}
		}
		t := sanitizeTitle(ts)
		if e := db.checkTitle(t, childID); e != nil {
			return nil, e // non-atomic: source ended, child and messages kept
		}
		c.title = t
	} else if x.title != "" {
		t := db.nextLineageTitle(x.title)
		if db.checkTitle(t, childID) != nil {
			t = x.title + " fork"
			if db.checkTitle(t, childID) != nil {
				t = ""
			}
		}
		c.title = t
	}
	return db.object(c, false), nil
}

// history returns the stored conversation of a session (user/assistant/tool).
func (db *sessionDB) history(id string) []Message {
	db.mu.Lock()
	defer db.mu.Unlock()
	var out []Message
	for _, m := range db.msgs[id] {
		out = append(out, Message{Role: m.role, Content: m.content})
	}
	return out
}

func (db *sessionDB) addMsg(id string, m *message) {
	m.id = db.nextID
	db.nextID++
	m.sessionID = id
	m.timestamp = db.ts()
	db.msgs[id] = append(db.msgs[id], m)
}

// persistTurn stores the agent's reply to turn t with final as the last
// assistant message: it creates the session when missing, appends the user
// message, tool exchanges and final message, and updates the session counters
// the agent maintains.
func (db *sessionDB) persistTurn(t Turn, rep Reply, final string) {
	in, out := rep.usage(t)
	db.mu.Lock()
	defer db.mu.Unlock()
	x, ok := db.rows[t.SessionID]
	if !ok { // an agent run creates its session row (source api_server)
		x = &session{id: t.SessionID, source: "api_server", startedAt: db.ts()}
		db.insert(x)
	}
	x.model = agentModel
	x.hasSystem = true
	x.modelConfig = true
	x.estimatedCost = true
	x.apiCallCount += 1 + len(rep.Tools)
	x.inputTokens += in
	x.outputTokens += out
	x.toolCallCount += len(rep.Tools)
	db.addMsg(t.SessionID, &message{role: "user", content: t.UserText})
	for _, tl := range rep.Tools {
		db.addMsg(t.SessionID, &message{role: "assistant", content: tl.Text, toolCalls: []any{toolCallObj(tl)}, finishReason: "tool_calls"})
		db.addMsg(t.SessionID, &message{role: "tool", content: tl.Output, toolCallID: tl.CallID, toolName: tl.Name})
	}
	db.addMsg(t.SessionID, &message{role: "assistant", content: final, finishReason: rep.outcome().finish})
}

func toolCallObj(t Tool) obj {
	return obj{{"id", t.CallID}, {"type", "function"}, {"function", obj{{"name", t.Name}, {"arguments", t.Args}}}}
}
