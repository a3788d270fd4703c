package hermestest_test

import (
	"strings"
	"testing"
)

func session(t *testing.T, r result) map[string]any {
	t.Helper()
	s, ok := r.json(t)["session"].(map[string]any)
	if !ok {
		t.Fatalf("no session in %s", r.body)
	}
	return s
}

func TestSessionCreateRules(t *testing.T) {
	srv := newServer(t)
	s := session(t, must(t, do(t, srv, "POST", "/api/sessions", `{"title":"  My \u0007 chat\n  title  ","system_prompt":"be brief"}`), 201))
	if s["title"] != "My chat title" || s["has_system_prompt"] != true || s["model"] != "hermes-agent" || s["source"] != "api_server" {
		t.Errorf("session %v", s)
	}
	if id := s["id"].(string); !strings.HasPrefix(id, "api_") || len(id) != len("api_1796047013_a4120d08") {
		t.Errorf("generated id %q", id)
	}
	// first non-empty of id / session_id
	s = session(t, must(t, do(t, srv, "POST", "/api/sessions", `{"id":"","session_id":"case-1"}`), 201))
	if s["id"] != "case-1" {
		t.Errorf("id %v", s["id"])
	}
	if c := must(t, do(t, srv, "POST", "/api/sessions", `{"id":"case-1"}`), 409).errCode(t); c != "session_exists" {
		t.Errorf("code %v", c)
	}
	for _, bad := range []string{`{"id":"a/b"}`, `{"id":"a..b"}`, `{"id":"   "}`, `{"id":"C:x"}`, `{"id":"` + strings.Repeat("x", 257) + `"}`, `{"id":"a\u0000b"}`} {
		if c := must(t, do(t, srv, "POST", "/api/sessions", bad), 400).errCode(t); c != "invalid_session_id" {
			t.Errorf("%s: code %v", bad, c)
		}
	}
	if c := must(t, do(t, srv, "POST", "/api/sessions", `{"system_prompt":5}`), 400).errCode(t); c != "invalid_system_prompt" {
		t.Errorf("code %v", c)
	}
	// duplicate title: 400 and the row is removed
	if c := must(t, do(t, srv, "POST", "/api/sessions", `{"id":"dup","title":"My chat title"}`), 400).errCode(t); c != "invalid_title" {
		t.Errorf("code %v", c)
	}
	must(t, do(t, srv, "GET", "/api/sessions/dup", ""), 404)
	if c := must(t, do(t, srv, "POST", "/api/sessions", `{"title":"`+strings.Repeat("t", 101)+`"}`), 400).errCode(t); c != "invalid_title" {
		t.Errorf("code %v", c)
	}
	must(t, do(t, srv, "POST", "/api/sessions", `[1]`), 400)
	must(t, do(t, srv, "POST", "/api/sessions", `{nope`), 400)
	r := must(t, do(t, srv, "GET", "/api/sessions/missing", ""), 404)
	if r.body != `{"error": {"message": "Session not found: missing", "type": "invalid_request_error", "param": null, "code": "session_not_found"}}` {
		t.Errorf("404 body %s", r.body)
	}
}

func TestSessionListPatchDelete(t *testing.T) {
	srv := newServer(t)
	for _, id := range []string{"a", "b", "c"} {
		must(t, do(t, srv, "POST", "/api/sessions", `{"id":"`+id+`"}`), 201)
	}
	must(t, do(t, srv, "POST", "/api/sessions/a/chat", `{"message":"hi"}`), 200)
	l := must(t, do(t, srv, "GET", "/api/sessions?limit=2", ""), 200).json(t)
	data := l["data"].([]any)
	if len(data) != 2 || data[0].(map[string]any)["id"] != "a" || l["has_more"] != true || l["limit"].(float64) != 2 {
		t.Fatalf("list %v", l)
	}
	if p := data[0].(map[string]any)["preview"]; p != "hi" {
		t.Errorf("preview %v", p)
	}
	l = must(t, do(t, srv, "GET", "/api/sessions?limit=abc&offset=-3&source=cli", ""), 200).json(t)
	if l["limit"].(float64) != 50 || l["offset"].(float64) != 0 || len(l["data"].([]any)) != 0 || l["has_more"] != false {
		t.Errorf("list %v", l)
	}
	if l := must(t, do(t, srv, "GET", "/api/sessions?limit=999", ""), 200).json(t); l["limit"].(float64) != 200 {
		t.Errorf("limit clamp %v", l["limit"])
	}

	r := must(t, do(t, srv, "PATCH", "/api/sessions/b", `{"title":"x","model":"m","a":1}`), 400)
	if e := r.json(t)["error"].(map[string]any); e["message"] != "Unsupported session fields: a, model" || e["code"] != "unsupported_session_field" {
		t.Errorf("error %v", e)
	}
	// lookup before body parsing
	must(t, do(t, srv, "PATCH", "/api/sessions/zz", `{not json`), 404)
	must(t, do(t, srv, "PATCH", "/api/sessions/b", `{not json`), 400)
	s := session(t, must(t, do(t, srv, "PATCH", "/api/sessions/b", `{"title":"Bee","end_reason":"client_closed"}`), 200))
	if s["title"] != "Bee" || s["end_reason"] != "client_closed" || s["ended_at"] == nil {
		t.Errorf("patched %v", s)
	}
	s = session(t, must(t, do(t, srv, "PATCH", "/api/sessions/b", `{"end_reason":"other"}`), 200))
	if s["end_reason"] != "client_closed" {
		t.Errorf("first close reason must win: %v", s["end_reason"])
	}
	if c := must(t, do(t, srv, "PATCH", "/api/sessions/c", `{"title":"Bee"}`), 400).errCode(t); c != "invalid_title" {
		t.Errorf("dup title code %v", c)
	}
	s = session(t, must(t, do(t, srv, "PATCH", "/api/sessions/b", `{"title":null}`), 200))
	if s["title"] != nil {
		t.Errorf("title not cleared: %v", s["title"])
	}
	must(t, do(t, srv, "PATCH", "/api/sessions/b", `{}`), 200)

	// delete clears children's parent
	child := session(t, must(t, do(t, srv, "POST", "/api/sessions/c/fork", `{"id":"c2"}`), 201))
	if child["parent_session_id"] != "c" {
		t.Fatalf("child %v", child)
	}
	r = must(t, do(t, srv, "DELETE", "/api/sessions/c", ""), 200)
	if r.body != `{"object": "hermes.session.deleted", "id": "c", "deleted": true}` {
		t.Errorf("delete body %s", r.body)
	}
	if p := session(t, must(t, do(t, srv, "GET", "/api/sessions/c2", ""), 200))["parent_session_id"]; p != nil {
		t.Errorf("parent not cleared: %v", p)
	}
	must(t, do(t, srv, "DELETE", "/api/sessions/c", ""), 404)
	must(t, do(t, srv, "GET", "/api/sessions/c/messages", ""), 404)
}

func TestSessionForkAndChildren(t *testing.T) {
	srv := newServer(t)
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"src","title":"Case","system_prompt":"sp"}`), 201)
	must(t, do(t, srv, "POST", "/api/sessions/src/chat", `{"message":"one"}`), 200)
	c := session(t, must(t, do(t, srv, "POST", "/api/sessions/src/fork", `{}`), 201))
	if c["title"] != "Case #2" || c["parent_session_id"] != "src" || c["message_count"].(float64) != 2 || c["has_system_prompt"] != true {
		t.Errorf("child %v", c)
	}
	src := session(t, must(t, do(t, srv, "GET", "/api/sessions/src", ""), 200))
	if src["end_reason"] != "branched" {
		t.Errorf("source %v", src)
	}
	c3 := session(t, must(t, do(t, srv, "POST", "/api/sessions/src/fork", `{}`), 201))
	if c3["title"] != "Case #3" {
		t.Errorf("next lineage title %v", c3["title"])
	}
	msgs := must(t, do(t, srv, "GET", "/api/sessions/"+c["id"].(string)+"/messages", ""), 200).json(t)["data"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["content"] != "one" {
		t.Errorf("copied messages %v", msgs)
	}
	// branches are listed by default; other children are hidden.
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"closed"}`), 201)
	must(t, do(t, srv, "PATCH", "/api/sessions/closed", `{"end_reason":"done"}`), 200)
	must(t, do(t, srv, "POST", "/api/sessions/closed/fork", `{"id":"hidden"}`), 201)
	ids := func(q string) map[string]bool {
		out := map[string]bool{}
		for _, d := range must(t, do(t, srv, "GET", "/api/sessions"+q, ""), 200).json(t)["data"].([]any) {
			out[d.(map[string]any)["id"].(string)] = true
		}
		return out
	}
	if l := ids(""); l["hidden"] || !l[c["id"].(string)] {
		t.Errorf("default list %v", l)
	}
	if l := ids("?include_children=true"); !l["hidden"] {
		t.Errorf("include_children list %v", l)
	}
	must(t, do(t, srv, "POST", "/api/sessions/src/fork", `{"id":"src"}`), 409)
	must(t, do(t, srv, "POST", "/api/sessions/nope/fork", `{}`), 404)
	if c := must(t, do(t, srv, "POST", "/api/sessions/src/fork", `{"id":"a\nb"}`), 400).errCode(t); c != "invalid_session_id" {
		t.Errorf("code %v", c)
	}
}

// TestSessionForkNonAtomic: a duplicate title fails with 400 after the source
// was ended and the child plus its messages were created.
func TestSessionForkNonAtomic(t *testing.T) {
	srv := newServer(t)
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"taken","title":"Taken"}`), 201)
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"src"}`), 201)
	must(t, do(t, srv, "POST", "/api/sessions/src/chat", `{"message":"hello"}`), 200)
	if c := must(t, do(t, srv, "POST", "/api/sessions/src/fork", `{"id":"kid","title":"Taken"}`), 400).errCode(t); c != "invalid_title" {
		t.Fatalf("code %v", c)
	}
	if s := session(t, must(t, do(t, srv, "GET", "/api/sessions/src", ""), 200)); s["end_reason"] != "branched" {
		t.Errorf("source not ended: %v", s)
	}
	kid := session(t, must(t, do(t, srv, "GET", "/api/sessions/kid", ""), 200))
	if kid["parent_session_id"] != "src" || kid["message_count"].(float64) != 2 || kid["title"] != nil {
		t.Errorf("child %v", kid)
	}
}

func TestSessionChatRules(t *testing.T) {
	srv := newServer(t)
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"s"}`), 201)
	for body, code := range map[string]string{
		`{}`:             "missing_message",
		`{"message":""}`: "missing_message",
		`{"message":[{"type":"file","file":{}}]}`:          "unsupported_content_type",
		`{"message":"hi","system_message":5}`:              "invalid_system_message",
		`{"message":"` + strings.Repeat("x", 65537) + `"}`: "invalid_content_part",
	} {
		if c := must(t, do(t, srv, "POST", "/api/sessions/s/chat", body), 400).errCode(t); c != code {
			t.Errorf("%.40s: code %v want %s", body, c, code)
		}
	}
	must(t, do(t, srv, "POST", "/api/sessions/none/chat", `{"message":"x"}`), 404)
	r := must(t, do(t, srv, "POST", "/api/sessions/s/chat", `{"input":[{"type":"input_text","text":"part"}],"instructions":"x"}`, "X-Hermes-Session-Key", "k1"), 200)
	if r.header.Get("X-Hermes-Session-Id") != "s" || r.header.Get("X-Hermes-Session-Key") != "k1" {
		t.Errorf("headers %v", r.header)
	}
	m := r.json(t)
	if m["object"] != "hermes.session.chat.completion" || m["message"].(map[string]any)["content"] != "stub reply: part" {
		t.Errorf("body %v", m)
	}
	msgs := must(t, do(t, srv, "GET", "/api/sessions/s/messages", ""), 200).json(t)["data"].([]any)
	if len(msgs) != 2 {
		t.Fatalf("messages %v", msgs)
	}
	if a, b := msgs[0].(map[string]any)["id"].(float64), msgs[1].(map[string]any)["id"].(float64); b != a+1 {
		t.Errorf("message ids %v %v", a, b)
	}
	must(t, do(t, srv, "POST", "/api/sessions/s/chat", `{"message":"x"}`, "X-Hermes-Session-Key", strings.Repeat("k", 257)), 400)
}
