package e2e_test

import (
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// checkNoControlFields fails when a control field that belongs in a header is in the body.
func checkNoControlFields(t *testing.T, b map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := b[k]; ok {
			t.Errorf("body carries %q, which must not reach Hermes in the body", k)
		}
	}
}

func checkAuth(t *testing.T, r hermestest.Recorded, want bool) {
	t.Helper()
	if r.AuthValid != want {
		t.Errorf("%s %s: bearer key valid = %v, want %v", r.Method, r.Path, r.AuthValid, want)
	}
}

// TestOperationsDiscovery runs the six health and discovery reads end to end.
func TestOperationsDiscovery(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	t.Run("health", func(t *testing.T) {
		h := h.at(t)
		res := h.callOK("health", `{}`)
		r := h.lastRequest("health", 1)
		if r.Method != "GET" || r.Path != "/health" || r.Query != "" {
			t.Errorf("request %s %s?%s, want GET /health", r.Method, r.Path, r.Query)
		}
		wantEq(t, r.Header.Get("Authorization"), "", "health sent Authorization %q; the route is unauthenticated")
		out := output(t, res)
		if jstr(out, "endpoint_id") != "primary" || jstr(out, "status") != "ok" || jstr(out, "platform") != "hermes-agent" ||
			jstr(out, "version") != hermestest.Version019 || jint(out, "http_status") != 200 || jstr(out, "raw", "status") != "ok" {
			t.Errorf("health output %s", res.Output)
		}
		wantEq(t, res.CapabilityID, "cap:hermes_agent:primary:health", "capability_id %q")
	})
	for _, c := range []struct{ op, path string }{
		{"health_detailed", "/health/detailed"},
		{"models", "/v1/models"},
		{"capabilities", "/v1/capabilities"},
		{"skills", "/v1/skills"},
		{"toolsets", "/v1/toolsets"},
	} {
		t.Run(c.op, func(t *testing.T) {
			h := h.at(t)
			res, evs := h.call(c.op, `{}`)
			requireCompleted(t, res)
			wantEq(t, len(evs), 0, "%d events for a JSON operation")
			r := h.lastRequest(c.op, 1)
			if r.Method != "GET" || r.Path != c.path || len(r.Body) != 0 {
				t.Errorf("request %s %s body %q, want GET %s", r.Method, r.Path, r.Body, c.path)
			}
			checkAuth(t, r, true)
			out, ok := output(t, res).(map[string]any)
			if !ok || len(out) == 0 {
				t.Fatalf("output %s, want the Hermes JSON object", res.Output)
			}
			switch c.op {
			case "health_detailed":
				if jstr(out, "status") != "ok" || jstr(out, "version") != hermestest.Version019 {
					t.Errorf("health_detailed output %s", truncate(string(res.Output), 300))
				}
			case "models":
				if jstr(out, "object") != "list" || jstr(out, "data", 0, "id") != "hermes-agent" {
					t.Errorf("models output %s", res.Output)
				}
			case "skills", "toolsets":
				if jpath(out, "data") == nil && jpath(out, "object") == nil {
					t.Errorf("%s output %s", c.op, truncate(string(res.Output), 300))
				}
			}
		})
	}
}

// TestOperationsChatAndResponses runs chat, chat_stream, responses, responses_stream,
// response_get and response_delete end to end and checks the mapped requests.
func TestOperationsChatAndResponses(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	t.Run("chat", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("chat", map[string]any{
			"prompt": "Hello there", "session_id": "sess-chat-1", "session_key": "memory:scope-1",
			"temperature": 0.2, "stream": true, "metadata": map[string]any{"k": "v"},
		}, withKey("chat-key-1"))
		requireCompleted(t, res)
		wantEq(t, len(evs), 0, "%d events for chat")
		r := h.lastRequest("chat", 1)
		if r.Method != "POST" || r.Path != "/v1/chat/completions" {
			t.Errorf("request %s %s", r.Method, r.Path)
		}
		checkAuth(t, r, true)
		if r.IdempotencyKey != "chat-key-1" || r.SessionID != "sess-chat-1" || r.SessionKey != "memory:scope-1" {
			t.Errorf("headers Idempotency-Key=%q X-Hermes-Session-Id=%q X-Hermes-Session-Key=%q", r.IdempotencyKey, r.SessionID, r.SessionKey)
		}
		b := body(t, r)
		wantEq(t, b["model"], "hermes-agent", "model %v, want the default hermes-agent")
		wantEq(t, b["stream"], false, "stream %v, want forced false")
		if jstr(b, "messages", 0, "role") != "user" || jstr(b, "messages", 0, "content") != "Hello there" || jpath(b, "messages", 1) != nil {
			t.Errorf("messages %v, want the prompt as one user message", b["messages"])
		}
		if jpath(b, "temperature") == nil || jstr(b, "metadata", "k") != "v" {
			t.Errorf("extra fields not forwarded: %v", b)
		}
		checkNoControlFields(t, b, "prompt", "session_id", "session_key", "idempotency_key")
		wantEq(t, jstr(output(t, res), "choices", 0, "message", "content"), "stub reply: Hello there", "output content %q")
	})

	t.Run("chat_messages", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("chat", map[string]any{"messages": []map[string]string{
			{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Two messages"}},
			"model": "custom-model"})
		requireCompleted(t, res)
		r := h.lastRequest("chat", 2)
		b := body(t, r)
		if b["model"] != "custom-model" || jstr(b, "messages", 1, "content") != "Two messages" || jstr(b, "messages", 0, "role") != "system" {
			t.Errorf("body %s", r.Body)
		}
		if r.IdempotencyKey != "" || r.SessionID != "" || r.SessionKey != "" {
			t.Errorf("unexpected headers %q %q %q", r.IdempotencyKey, r.SessionID, r.SessionKey)
		}
	})

	t.Run("chat_stream", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("chat_stream", map[string]any{"query": "Stream this please", "stream": false, "max_events": 500})
		checkStream(t, res, evs, "chat_stream", "stub reply: Stream this please")
		r := h.lastRequest("chat_stream", 1)
		b := body(t, r)
		if r.Method != "POST" || r.Path != "/v1/chat/completions" || b["stream"] != true || b["model"] != "hermes-agent" {
			t.Errorf("request %s %s body %s", r.Method, r.Path, r.Body)
		}
		if jstr(b, "messages", 0, "content") != "Stream this please" {
			t.Errorf("query not mapped to messages: %s", r.Body)
		}
		checkNoControlFields(t, b, "query", "max_events")
	})

	var respID string
	t.Run("responses", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("responses", map[string]any{
			"body":        map[string]any{"input": "Tell me a fact", "instructions": "Be brief.", "store": true, "stream": true},
			"session_key": "memory:resp"}, withKey("resp-key-1"))
		requireCompleted(t, res)
		r := h.lastRequest("responses", 1)
		if r.Method != "POST" || r.Path != "/v1/responses" {
			t.Errorf("request %s %s", r.Method, r.Path)
		}
		if r.IdempotencyKey != "resp-key-1" || r.SessionKey != "memory:resp" {
			t.Errorf("headers Idempotency-Key=%q X-Hermes-Session-Key=%q", r.IdempotencyKey, r.SessionKey)
		}
		b := body(t, r)
		if b["input"] != "Tell me a fact" || b["instructions"] != "Be brief." || b["store"] != true || b["stream"] != false {
			t.Errorf("body %s", r.Body)
		}
		checkNoControlFields(t, b, "body", "session_key", "idempotency_key")
		out := output(t, res)
		respID = jstr(out, "id")
		if !strings.HasPrefix(respID, "resp_") || jstr(out, "object") != "response" {
			t.Fatalf("responses output %s", truncate(string(res.Output), 300))
		}
	})

	t.Run("responses_stream", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("responses_stream", map[string]any{"input": "Stream a response", "max_events": 1000})
		checkStream(t, res, evs, "responses_stream", "stub reply: Stream a response")
		r := h.lastRequest("responses_stream", 1)
		b := body(t, r)
		if r.Method != "POST" || r.Path != "/v1/responses" || b["stream"] != true || b["input"] != "Stream a response" {
			t.Errorf("request %s %s body %s", r.Method, r.Path, r.Body)
		}
		checkNoControlFields(t, b, "max_events")
	})

	t.Run("response_get", func(t *testing.T) {
		if respID == "" {
			t.Skip("no stored response")
		}
		h := h.at(t)
		res := h.callOK("response_get", map[string]any{"response_id": respID})
		r := h.lastRequest("response_get", 1)
		if r.Method != "GET" || r.Path != "/v1/responses/"+respID || len(r.Body) != 0 {
			t.Errorf("request %s %s", r.Method, r.Path)
		}
		checkAuth(t, r, true)
		if got := jstr(output(t, res), "id"); got != respID {
			t.Errorf("output id %q, want %q", got, respID)
		}
	})

	t.Run("response_get_escaped", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("response_get", map[string]any{"response_id": "resp/../x y?z#é"})
		e := requireFailed(t, res, "remote_rejected")
		wantEq(t, e.HTTPStatus, 404, "http_status %d, want 404")
		r := h.lastRequest("response_get", 2)
		if want := "/v1/responses/resp%2F..%2Fx%20y%3Fz%23%C3%A9"; r.Path != want || r.Query != "" {
			t.Errorf("path %q query %q, want %q (one percent-encoded segment)", r.Path, r.Query, want)
		}
	})

	t.Run("response_delete", func(t *testing.T) {
		if respID == "" {
			t.Skip("no stored response")
		}
		h := h.at(t)
		// Approvals are not implemented yet: the delete runs directly.
		res := h.callOK("response_delete", map[string]any{"response_id": respID}, withKey("del-resp-1"), preApproved)
		r := h.lastRequest("response_delete", 1)
		if r.Method != "DELETE" || r.Path != "/v1/responses/"+respID || r.IdempotencyKey != "del-resp-1" || len(r.Body) != 0 {
			t.Errorf("request %s %s key %q body %q", r.Method, r.Path, r.IdempotencyKey, r.Body)
		}
		out := output(t, res)
		if jpath(out, "deleted") != true || jstr(out, "id") != respID {
			t.Errorf("output %s", res.Output)
		}
		wantEq(t, h.fake.StoredResponses(), 1, "fake stores %d responses after the delete, want 1 (the stream's)")
	})
}

// TestOperationsSessions runs the nine session operations end to end on a session
// created through the bridge.
func TestOperationsSessions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const sid = "e2e sess/1é" // needs percent-encoding in every path
	const sidPath = "e2e%20sess%2F1%C3%A9"
	const sidOK = "e2e-sess 1"
	const sidOKPath = "e2e-sess%201"

	t.Run("session_create", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("session_create", map[string]any{"body": map[string]any{
			"id": sidOK, "title": "E2E session", "system_prompt": "Be factual."}}, withKey("create-1"))
		requireCompleted(t, res)
		r := h.lastRequest("session_create", 1)
		if r.Method != "POST" || r.Path != "/api/sessions" || r.IdempotencyKey != "create-1" {
			t.Errorf("request %s %s key %q", r.Method, r.Path, r.IdempotencyKey)
		}
		b := body(t, r)
		if b["id"] != sidOK || b["title"] != "E2E session" || b["system_prompt"] != "Be factual." || len(b) != 3 {
			t.Errorf("body %s, want the unwrapped body", r.Body)
		}
		if got := jstr(output(t, res), "session", "id"); got != sidOK {
			t.Fatalf("created session id %q; output %s", got, res.Output)
		}
	})

	t.Run("sessions_list", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("sessions_list", map[string]any{"limit": 10, "include_children": true,
			"query": map[string]any{"source": "api_server"}})
		requireCompleted(t, res)
		r := h.lastRequest("sessions_list", 1)
		if r.Method != "GET" || r.Path != "/api/sessions" || r.Query != "limit=10&offset=0&source=api_server&include_children=true" {
			t.Errorf("request %s %s?%s", r.Method, r.Path, r.Query)
		}
		out := output(t, res)
		found := false
		for i := 0; jpath(out, "data", i) != nil; i++ {
			found = found || jstr(out, "data", i, "id") == sidOK
		}
		if !found {
			t.Errorf("created session not listed: %s", truncate(string(res.Output), 400))
		}
	})

	t.Run("session_get", func(t *testing.T) {
		h := h.at(t)
		res := h.callOK("session_get", map[string]any{"session_id": sidOK})
		r := h.lastRequest("session_get", 1)
		if r.Method != "GET" || r.Path != "/api/sessions/"+sidOKPath {
			t.Errorf("request %s %s", r.Method, r.Path)
		}
		wantEq(t, jstr(output(t, res), "session", "title"), "E2E session", "title %q")
	})

	t.Run("session_get_escaped", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("session_get", map[string]any{"session_id": sid})
		e := requireFailed(t, res, "remote_rejected")
		wantEq(t, detail(e, "remote_code"), "session_not_found", "remote_code %q")
		if r := h.lastRequest("session_get", 2); r.Path != "/api/sessions/"+sidPath {
			t.Errorf("path %q, want /api/sessions/%s", r.Path, sidPath)
		}
	})

	t.Run("session_patch", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("session_patch", map[string]any{"session_id": sidOK,
			"body": map[string]any{"title": "Renamed session"}}, withKey("patch-1"))
		requireCompleted(t, res)
		r := h.lastRequest("session_patch", 1)
		if r.Method != "PATCH" || r.Path != "/api/sessions/"+sidOKPath || r.IdempotencyKey != "patch-1" {
			t.Errorf("request %s %s key %q", r.Method, r.Path, r.IdempotencyKey)
		}
		b := body(t, r)
		if b["title"] != "Renamed session" || len(b) != 1 {
			t.Errorf("body %s, want only the title", r.Body)
		}
		wantEq(t, jstr(output(t, res), "session", "title"), "Renamed session", "title after patch %q")
	})

	t.Run("session_chat", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("session_chat", map[string]any{"session_id": sidOK, "prompt": "Continue please",
			"session_key": "memory:session"}, withKey("schat-1"))
		requireCompleted(t, res)
		r := h.lastRequest("session_chat", 1)
		if r.Method != "POST" || r.Path != "/api/sessions/"+sidOKPath+"/chat" || r.SessionKey != "memory:session" || r.IdempotencyKey != "schat-1" {
			t.Errorf("request %s %s session key %q idem %q", r.Method, r.Path, r.SessionKey, r.IdempotencyKey)
		}
		b := body(t, r)
		if b["message"] != "Continue please" {
			t.Errorf("prompt not mapped to message: %s", r.Body)
		}
		checkNoControlFields(t, b, "prompt", "session_id", "session_key", "idempotency_key")
		out := output(t, res)
		if jstr(out, "message", "content") != "stub reply: Continue please" || jstr(out, "session_id") != sidOK {
			t.Errorf("output %s", res.Output)
		}
	})

	t.Run("session_chat_stream", func(t *testing.T) {
		h := h.at(t)
		res, evs := h.call("session_chat_stream", map[string]any{"session_id": sidOK, "message": "stream turn", "max_events": 200})
		checkStream(t, res, evs, "session_chat_stream", "stub reply: stream turn")
		r := h.lastRequest("session_chat_stream", 1)
		b := body(t, r)
		if r.Method != "POST" || r.Path != "/api/sessions/"+sidOKPath+"/chat/stream" || b["message"] != "stream turn" {
			t.Errorf("request %s %s body %s", r.Method, r.Path, r.Body)
		}
		checkNoControlFields(t, b, "session_id", "max_events")
	})

	t.Run("session_messages", func(t *testing.T) {
		h := h.at(t)
		res := h.callOK("session_messages", map[string]any{"session_id": sidOK})
		r := h.lastRequest("session_messages", 1)
		if r.Method != "GET" || r.Path != "/api/sessions/"+sidOKPath+"/messages" {
			t.Errorf("request %s %s", r.Method, r.Path)
		}
		out := output(t, res)
		n := 0
		for jpath(out, "data", n) != nil {
			n++
		}
		if n < 4 {
			t.Errorf("%d messages after two turns, want at least 4: %s", n, truncate(string(res.Output), 400))
		}
	})

	t.Run("session_fork", func(t *testing.T) {
		h := h.at(t)
		res, _ := h.call("session_fork", map[string]any{"session_id": sidOK,
			"body": map[string]any{"id": "e2e-child", "title": "Child"}}, withKey("fork-1"))
		requireCompleted(t, res)
		r := h.lastRequest("session_fork", 1)
		if r.Method != "POST" || r.Path != "/api/sessions/"+sidOKPath+"/fork" || r.IdempotencyKey != "fork-1" {
			t.Errorf("request %s %s key %q", r.Method, r.Path, r.IdempotencyKey)
		}
		b := body(t, r)
		if b["id"] != "e2e-child" || b["title"] != "Child" || len(b) != 2 {
			t.Errorf("body %s", r.Body)
		}
		if got := jstr(output(t, res), "session", "id"); got != "e2e-child" {
			t.Errorf("fork output %s", res.Output)
		}
	})

	t.Run("session_delete", func(t *testing.T) {
		h := h.at(t)
		// Approvals are not implemented yet: the delete runs directly.
		res := h.callOK("session_delete", map[string]any{"session_id": "e2e-child"}, withKey("sdel-1"), preApproved)
		r := h.lastRequest("session_delete", 1)
		if r.Method != "DELETE" || r.Path != "/api/sessions/e2e-child" || r.IdempotencyKey != "sdel-1" || len(r.Body) != 0 {
			t.Errorf("request %s %s key %q", r.Method, r.Path, r.IdempotencyKey)
		}
		if out := output(t, res); jpath(out, "deleted") != true {
			t.Errorf("output %s", res.Output)
		}
		res, _ = h.call("session_get", map[string]any{"session_id": "e2e-child"})
		requireFailed(t, res, "remote_rejected")
	})

	// Every operation of this family reached Hermes with the endpoint's key.
	for _, r := range h.fake.Requests() {
		if !r.AuthValid {
			t.Errorf("%s %s reached Hermes without the valid bearer key", r.Method, r.Path)
		}
	}
}
