package hermestest

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// validSessionKey answers 400 and reports false when the request's
// X-Hermes-Session-Key is unusable: a line break or NUL, or over 256 characters.
func validSessionKey(c *call) bool {
	var e string
	switch v := c.r.Header.Get("X-Hermes-Session-Key"); {
	case strings.ContainsAny(v, "\r\n\x00"):
		e = "Invalid session key"
	case utf8.RuneCountInString(v) > 256:
		e = "Session key too long"
	default:
		return true
	}
	writeJSON(c.w, 400, nil, adhocError(e))
	return false
}

func sessionIDError(v string) string {
	if strings.ContainsAny(v, "\r\n\x00") || strings.Contains(v, "..") || strings.ContainsAny(v, `/\`) {
		return "Invalid session ID"
	}
	if utf8.RuneCountInString(v) > 256 {
		return "Session ID too long"
	}
	return ""
}

func derivedChatSessionID(system, firstUser string) string {
	sum := sha256.Sum256([]byte(system + "\n" + firstUser))
	return "api-" + hex.EncodeToString(sum[:])[:16]
}

// echoHeaders are the response headers echoing the session: its id (when
// not "") and the request's X-Hermes-Session-Key (when present).
func echoHeaders(r *http.Request, sessionID string) http.Header {
	h := http.Header{}
	if sessionID != "" {
		h.Set("X-Hermes-Session-Id", sessionID)
	}
	if k := r.Header.Get("X-Hermes-Session-Key"); k != "" {
		h.Set("X-Hermes-Session-Key", k)
	}
	return h
}

func (s *Server) handleChat(c *call) {
	release, ok := s.admit(c, true)
	if !ok {
		return
	}
	defer release()
	body, ok := c.bodyObject()
	if !ok {
		writeJSON(c.w, 400, nil, openaiError("Invalid JSON in request body", "invalid_request_error", nil))
		return
	}
	mv, _ := body.get("messages")
	msgs, _ := mv.([]any)
	if len(msgs) == 0 {
		writeJSON(c.w, 400, nil, adhocError("Missing or invalid 'messages' field"))
		return
	}
	var systems []string
	var kept []Message
	lastImage := false // the last kept message has an image
	for i, m := range msgs {
		mo, _ := m.(obj)
		role := mo.str("role")
		cv, _ := mo.get("content")
		text, img, _, cerr := normContent(cv, "messages["+strconv.Itoa(i)+"].content")
		if cerr != nil {
			writeJSON(c.w, 400, nil, cerr)
			return
		}
		switch role {
		case "system":
			systems = append(systems, text)
		case "user", "assistant":
			kept = append(kept, Message{Role: role, Content: text})
			lastImage = img
		}
	}
	if len(kept) == 0 || (strings.TrimSpace(kept[len(kept)-1].Content) == "" && !lastImage) {
		writeJSON(c.w, 400, nil, adhocError("No user message found in messages"))
		return
	}
	if !validSessionKey(c) {
		return
	}
	system := strings.Join(systems, "\n")
	firstUser := ""
	if i := slices.IndexFunc(kept, func(m Message) bool { return m.Role == "user" }); i >= 0 {
		firstUser = kept[i].Content
	}
	sessionID := c.r.Header.Get("X-Hermes-Session-Id")
	history := kept[:len(kept)-1]
	if sessionID != "" {
		if e := sessionIDError(sessionID); e != "" {
			writeJSON(c.w, 400, nil, adhocError(e))
			return
		}
		history = s.sessions.history(sessionID)
	} else {
		sessionID = derivedChatSessionID(system, firstUser)
	}
	model := s.requestModel(body)
	user := kept[len(kept)-1].Content
	turn := Turn{Route: c.key, UserText: user, History: history, SessionID: sessionID,
		SessionKey: c.r.Header.Get("X-Hermes-Session-Key"), Instructions: system, Model: model}
	id := "chatcmpl-" + randHex(29)
	created := s.now().Unix()
	hdr := echoHeaders(c.r, sessionID)
	if c.key == "chat_stream" {
		s.chatStream(c, turn, id, created, hdr)
		return
	}
	rep, ok := s.runAgent(c, turn, nil)
	if !ok {
		return
	}
	oc := rep.outcome()
	text := rep.fullText()
	in, out := rep.usage(turn)
	s.sessions.persistTurn(turn, rep, text)
	if s.jsonFault(c) {
		return
	}
	resp := obj{
		{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
		{"choices", []any{obj{{"index", 0}, {"message", obj{{"role", "assistant"}, {"content", text}}}, {"finish_reason", oc.finish}}}},
		{"usage", obj{{"prompt_tokens", in}, {"completion_tokens", out}, {"total_tokens", in + out}}},
	}
	if !oc.completed { // failed or partial: oc.err is set
		hdr.Set("X-Hermes-Completed", "false")
		hdr.Set("X-Hermes-Partial", strconv.FormatBool(oc.partial))
		if text == "" {
			writeJSON(c.w, http.StatusBadGateway, hdr, obj{{"error", obj{
				{"message", oc.err}, {"type", "server_error"}, {"param", nil}, {"code", "agent_incomplete"},
				{"hermes", obj{{"completed", false}, {"partial", oc.partial}, {"failed", oc.failed}}},
			}}})
			return
		}
		resp = append(resp, kv{"hermes", hermesBlock(oc)})
		hdr.Set("X-Hermes-Error", strings.Map(func(r rune) rune {
			if r < 0x20 || r > 0x7e {
				return ' '
			}
			return r
		}, oc.err[:min(len(oc.err), 200)]))
	}
	writeJSON(c.w, http.StatusOK, hdr, resp)
}

func hermesBlock(oc outcome) obj {
	return obj{{"completed", oc.completed}, {"partial", oc.partial}, {"failed", oc.failed}, {"error", oc.err}, {"error_code", oc.errorCode}}
}

func (s *Server) chatStream(c *call, turn Turn, id string, created int64, hdr http.Header) {
	model := turn.Model
	sw := s.startSSE(c, hdr)
	prefix := dumps(obj{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model}}, true)
	prefix = append(prefix[:len(prefix)-1], `, "choices": [{"index": 0, "delta": `...)
	const nullFinish = `, "finish_reason": null}]}`
	b := append([]byte(nil), prefix...)
	b = append(b, `{"role": "assistant"}`+nullFinish...)
	if sw.frame("", b) != nil {
		return
	}
	rep, ok := s.runAgent(c, turn, sw)
	if !ok {
		return
	}
	content := func(d string) bool {
		b = append(b[:0], prefix...)
		b = append(b, `{"content": `...)
		b = appendString(b, d, true)
		b = append(b, '}')
		b = append(b, nullFinish...)
		return sw.frame("", b) == nil
	}
	for _, t := range rep.Tools {
		if !rep.deltas(t.Text, 0, sw.wait, content) {
			return
		}
		if strings.HasPrefix(t.Name, "_") {
			continue
		}
		if sw.frame("hermes.tool.progress", dumps(obj{{"tool", t.Name}, {"emoji", t.Emoji}, {"label", t.Label}, {"toolCallId", t.CallID}, {"status", "running"}}, true)) != nil ||
			!sw.wait(rep.DeltaDelay) ||
			sw.frame("hermes.tool.progress", dumps(obj{{"tool", t.Name}, {"toolCallId", t.CallID}, {"status", "completed"}}, true)) != nil {
			return
		}
	}
	if !rep.deltas(rep.Text, rep.Deltas, sw.wait, content) || !rep.padding(sw.wait, content) {
		return
	}
	oc := rep.outcome()
	in, out := rep.usage(turn)
	fin := obj{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
		{"choices", []any{obj{{"index", 0}, {"delta", obj{}}, {"finish_reason", oc.finish}}}},
		{"usage", obj{{"prompt_tokens", in}, {"completion_tokens", out}, {"total_tokens", in + out}}}}
	if oc.finish != "stop" {
		fin = append(fin, kv{"error", obj{{"message", oc.err}, {"type", "agent_error"}}}, kv{"hermes", hermesBlock(oc)})
	}
	if sw.frame("", dumps(fin, true)) != nil {
		return
	}
	s.sessions.persistTurn(turn, rep, rep.fullText())
	if sw.frame("", []byte("[DONE]")) == nil {
		_ = sw.flush()
	}
}
