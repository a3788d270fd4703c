package hermestest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

const chatBody = `{"model":"hermes-agent","messages":[{"role":"user","content":"Hello"}]}`
const chatStreamBody = `{"model":"hermes-agent","stream":true,"messages":[{"role":"user","content":"Hello"}]}`

func TestChatValidation(t *testing.T) {
	srv := newServer(t)
	cases := []struct{ body, msg string }{
		{`{"messages":[]}`, "Missing or invalid 'messages' field"},
		{`{"messages":"x"}`, "Missing or invalid 'messages' field"},
		{`{"messages":[{"role":"user","content":"  "}]}`, "No user message found in messages"},
		{`{"messages":[{"role":"tool","content":"x"}]}`, "No user message found in messages"},
	}
	for _, c := range cases {
		r := must(t, do(t, srv, "POST", "/v1/chat/completions", c.body), 400)
		want := `{"error": {"message": "` + c.msg + `", "type": "invalid_request_error"}}`
		if r.body != want {
			t.Errorf("%s: %s", c.body, r.body)
		}
	}
	r := must(t, do(t, srv, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"input_file"}]}]}`), 400)
	if e := r.json(t)["error"].(map[string]any); e["code"] != "unsupported_content_type" || e["param"] != "messages[0].content" {
		t.Errorf("content error %v", e)
	}
	for _, h := range []string{"a/b", strings.Repeat("s", 257)} {
		must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody, "X-Hermes-Session-Id", h), 400)
	}
	must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody, "X-Hermes-Session-Key", strings.Repeat("s", 257)), 400)
	// Bearer prefix is case-sensitive.
	must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody, "Authorization", "bearer "+srv.APIKey()), 401)
	// Body limits.
	r = must(t, do(t, srv, "POST", "/v1/chat/completions", strings.Repeat(" ", hermestest.MaxRequestBytes+1)), 413)
	if r.body != `{"error": {"message": "Request body too large.", "type": "invalid_request_error", "param": null, "code": "body_too_large"}}` || r.header.Get("X-Frame-Options") != "" {
		t.Errorf("413 %v %s", r.header, r.body)
	}
	// 404 / 405 text bodies.
	if r := must(t, do(t, srv, "GET", "/v2/nothing", ""), 404); r.body != "404: Not Found" {
		t.Errorf("404 body %q", r.body)
	}
	if r := must(t, do(t, srv, "GET", "/v1/chat/completions", ""), 405); r.body != "405: Method Not Allowed" {
		t.Errorf("405 body %q", r.body)
	}
}

func TestChatSessionContinuity(t *testing.T) {
	rec := &turnLog{}
	srv := newServer(t, rec.agent())
	must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody, "X-Hermes-Session-Id", "s1", "X-Hermes-Session-Key", "mem"), 200)
	r := must(t, do(t, srv, "POST", "/v1/chat/completions",
		`{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"ignored history"},{"role":"assistant","content":"x"},{"role":"user","content":"next"}]}`,
		"X-Hermes-Session-Id", "s1"), 200)
	if r.header.Get("X-Hermes-Session-Id") != "s1" {
		t.Errorf("session header %q", r.header.Get("X-Hermes-Session-Id"))
	}
	seen := rec.get()
	last := seen[len(seen)-1]
	if len(last.History) != 2 || last.History[0].Content != "Hello" || last.UserText != "next" || last.Instructions != "sys" {
		t.Errorf("history should come from the session DB: %+v", last)
	}
	if seen[0].SessionKey != "mem" {
		t.Errorf("session key %q", seen[0].SessionKey)
	}
	if id := must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody), 200).header.Get("X-Hermes-Session-Id"); id != "api-7c129c8425088ece" {
		t.Errorf("derived id %q", id)
	}
	reqs := srv.Requests()
	if reqs[0].Header.Get("Authorization") != "Bearer <redacted>" || !reqs[0].AuthValid || reqs[0].SessionKey != "mem" || reqs[0].Route != "chat" {
		t.Errorf("recorded %+v", reqs[0])
	}
}

func TestChatFailureSemantics(t *testing.T) {
	srv := newServer(t, agentReply(hermestest.Reply{Fail: "provider returned 401"}))
	r := must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody), 502)
	want := `{"error": {"message": "provider returned 401", "type": "server_error", "param": null, "code": "agent_incomplete", "hermes": {"completed": false, "partial": false, "failed": true}}}`
	if r.body != want || r.header.Get("X-Hermes-Completed") != "false" || r.header.Get("X-Hermes-Partial") != "false" {
		t.Errorf("502: %v %s", r.header, r.body)
	}

	srv2 := newServer(t, agentReply(hermestest.Reply{Text: "half", Partial: true}))
	r = must(t, do(t, srv2, "POST", "/v1/chat/completions", chatBody), 200)
	m := r.json(t)
	h := m["hermes"].(map[string]any)
	if m["choices"].([]any)[0].(map[string]any)["finish_reason"] != "length" || h["error_code"] != "output_truncated" || r.header.Get("X-Hermes-Partial") != "true" || r.header.Get("X-Hermes-Error") == "" {
		t.Errorf("partial: %v %s", r.header, r.body)
	}
	// Normal completion: no hermes block or header.
	srv3 := newServer(t)
	r = must(t, do(t, srv3, "POST", "/v1/chat/completions", chatBody), 200)
	if _, ok := r.json(t)["hermes"]; ok || r.header.Get("X-Hermes-Completed") != "" {
		t.Errorf("unexpected hermes block: %s", r.body)
	}

	// Stream failure: finish chunk carries error + hermes, then [DONE].
	srv4 := newServer(t, agentReply(hermestest.Reply{Fail: "boom"}))
	r = must(t, do(t, srv4, "POST", "/v1/chat/completions", chatStreamBody), 200)
	frames := sseFrames(r.body)
	fin := frames[len(frames)-2].data
	if !strings.Contains(fin, `"finish_reason": "error"}], "usage": `) || !strings.Contains(fin, `"error": {"message": "boom", "type": "agent_error"}, "hermes": {"completed": false`) || frames[len(frames)-1].data != "[DONE]" {
		t.Errorf("stream failure frames: %s", r.body)
	}
}

type frame struct{ event, data string }

func sseFrames(body string) []frame {
	var out []frame
	for _, block := range strings.Split(body, "\n\n") {
		var f frame
		ok := false
		for _, l := range strings.Split(block, "\n") {
			if v, found := strings.CutPrefix(l, "event: "); found {
				f.event, ok = v, true
			}
			if v, found := strings.CutPrefix(l, "data: "); found {
				f.data, ok = v, true
			}
		}
		if ok {
			out = append(out, f)
		}
	}
	return out
}

func events(fs []frame) string {
	var names []string
	for _, f := range fs {
		n := f.event
		if n == "" {
			n = "data"
		}
		names = append(names, n)
	}
	return strings.Join(names, ",")
}

func TestStreamsWithTools(t *testing.T) {
	rep := hermestest.Reply{Text: "Two files.", Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command":"ls"}`, Output: "a.txt\nb.txt", CallID: "call_abc123", Text: "Let me look."}, {Name: "_hidden", Output: "x"}}}
	srv := newServer(t, agentReply(rep))
	// chat stream
	r := must(t, do(t, srv, "POST", "/v1/chat/completions", chatStreamBody), 200)
	fs := sseFrames(r.body)
	if got := events(fs); got != "data,data,data,data,hermes.tool.progress,hermes.tool.progress,data,data,data,data" {
		t.Errorf("chat events %s\n%s", got, r.body)
	}
	if fs[4].data != `{"tool": "terminal", "emoji": "\ud83d\udcbb", "label": "ls", "toolCallId": "call_abc123", "status": "running"}` ||
		fs[5].data != `{"tool": "terminal", "toolCallId": "call_abc123", "status": "completed"}` {
		t.Errorf("tool frames %q %q", fs[4].data, fs[5].data)
	}
	if r.header.Get("X-Frame-Options") != "" || r.header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("SSE headers %v", r.header)
	}
	// non-stream chat content is the final text only
	if c := must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody), 200).json(t)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]; c != "Two files." {
		t.Errorf("content %v", c)
	}
	// responses stream
	r = must(t, do(t, srv, "POST", "/v1/responses", `{"input":"ls","stream":true}`), 200)
	fs = sseFrames(r.body)
	want := "response.created,response.output_item.added,response.output_text.delta,response.output_item.added,response.output_item.done,response.output_item.added,response.output_item.done," +
		"response.output_item.added,response.output_item.done,response.output_item.added,response.output_item.done," +
		"response.output_text.delta,response.output_text.done,response.output_item.done,response.completed"
	if got := events(fs); got != want {
		t.Errorf("responses events\n got %s\nwant %s", got, want)
	}
	for i, f := range fs {
		var m struct {
			Type string `json:"type"`
			Seq  *int   `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(f.data), &m); err != nil || m.Type != f.event || m.Seq == nil || *m.Seq != i {
			t.Errorf("frame %d: %s", i, f.data)
		}
	}
	last := fs[len(fs)-1].data
	if !strings.Contains(last, `"output": [{"type": "function_call", "name": "terminal", "arguments": "{\"command\": \"ls\"}", "call_id": "call_abc123"}, {"type": "function_call_output", "call_id": "call_abc123", "output": [{"type": "input_text", "text": "a.txt\nb.txt"}]}`) ||
		!strings.Contains(last, `{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two files."}]}], "usage"`) {
		t.Errorf("completed %s", last)
	}
	// non-stream responses: function_call items then the message
	out := must(t, do(t, srv, "POST", "/v1/responses", `{"input":"ls"}`), 200).json(t)["output"].([]any)
	if len(out) != 5 || out[0].(map[string]any)["type"] != "function_call" || out[1].(map[string]any)["output"] != "a.txt\nb.txt" || out[4].(map[string]any)["type"] != "message" {
		t.Errorf("output %v", out)
	}
	// session chat stream
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"s"}`), 201)
	r = must(t, do(t, srv, "POST", "/api/sessions/s/chat/stream", `{"message":"ls"}`), 200)
	fs = sseFrames(r.body)
	want = "run.started,message.started,assistant.delta,assistant.delta,assistant.delta,tool.progress,tool.started,tool.completed,tool.started,tool.completed,assistant.delta,assistant.delta,tool.progress,assistant.completed,run.completed,done"
	if got := events(fs); got != want {
		t.Errorf("session events\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(fs[6].data, `"tool_name": "terminal", "preview": "ls", "args": {"command": "ls"}`) {
		t.Errorf("tool.started %s", fs[6].data)
	}
	msgs := must(t, do(t, srv, "GET", "/api/sessions/s/messages", ""), 200).json(t)["data"].([]any)
	if len(msgs) != 6 || msgs[2].(map[string]any)["role"] != "tool" || msgs[1].(map[string]any)["tool_calls"] == nil {
		t.Errorf("persisted messages %v", msgs)
	}
	if s := session(t, must(t, do(t, srv, "GET", "/api/sessions/s", ""), 200)); s["tool_call_count"].(float64) != 2 {
		t.Errorf("tool_call_count %v", s["tool_call_count"])
	}
}

func TestSessionStreamErrorAndUTF8(t *testing.T) {
	srv := newServer(t, agentReply(hermestest.Reply{Text: "héllo 😀", Fail: "agent crashed"}))
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"s"}`), 201)
	r := must(t, do(t, srv, "POST", "/api/sessions/s/chat/stream", `{"message":"x"}`), 200)
	fs := sseFrames(r.body)
	if got := events(fs); got != "run.started,message.started,assistant.delta,assistant.delta,error,done" {
		t.Errorf("events %s", got)
	}
	if !strings.Contains(fs[3].data, `"delta": " 😀"`) {
		t.Errorf("session stream must be raw UTF-8: %s", fs[3].data)
	}
	r = must(t, do(t, srv, "POST", "/api/sessions/s/chat", `{"message":"x"}`), 500)
	if !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("500 content type %q", r.header.Get("Content-Type"))
	}
}

func TestDraining(t *testing.T) {
	srv := newServer(t)
	srv.SetDraining(true)
	r := must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody), 503)
	if r.errCode(t) != "gateway_draining" || r.header.Get("Retry-After") != "1" {
		t.Errorf("503 %v %s", r.header, r.body)
	}
	must(t, do(t, srv, "GET", "/v1/models", ""), 200)
}

func TestSessionChatCountsButNeverRejects(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, hermestest.WithMaxConcurrentRuns(1), hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		if tu.Route == "session_chat" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return hermestest.StubAgent(ctx, tu)
	}))
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"s"}`), 201)
	done := make(chan result, 2)
	for i := 0; i < 2; i++ {
		go func() { done <- do(t, srv, "POST", "/api/sessions/s/chat", `{"message":"x"}`) }()
	}
	noErr(t, srv.WaitInFlight(testCtx(t), 2))
	must(t, do(t, srv, "POST", "/v1/chat/completions", chatBody), 429)
	close(release)
	for i := 0; i < 2; i++ {
		must(t, <-done, 200)
	}
}

// TestKeepalive: a slow agent keeps the stream alive with ": keepalive".
func TestKeepalive(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, hermestest.WithKeepalive(10*time.Millisecond), blockingAgent(release))
	req, _ := http.NewRequestWithContext(testCtx(t), "POST", srv.URL+"/v1/chat/completions", strings.NewReader(chatStreamBody))
	req.Header.Set("Authorization", "Bearer "+srv.APIKey())
	resp, err := http.DefaultClient.Do(req)
	noErr(t, err)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	keepalives := 0
	var rest strings.Builder
	for {
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		noErr(t, err)
		if line == ": keepalive\n" {
			keepalives++
			if keepalives == 2 {
				close(release)
			}
			continue
		}
		rest.WriteString(line)
	}
	if keepalives < 2 {
		t.Fatalf("keepalives %d", keepalives)
	}
	if !strings.HasSuffix(rest.String(), "data: [DONE]\n\n") {
		t.Errorf("stream did not finish: %s", rest.String())
	}
}

func TestLargeStreamPadding(t *testing.T) {
	srv := newServer(t, agentReply(hermestest.Reply{Text: "x", Events: 20000}))
	r := must(t, do(t, srv, "POST", "/v1/chat/completions", chatStreamBody), 200)
	if n := strings.Count(r.body, "\n\n"); n != 1+1+20000+2 {
		t.Errorf("%d frames", n)
	}
	must(t, do(t, srv, "POST", "/api/sessions", `{"id":"s"}`), 201)
	r = must(t, do(t, srv, "POST", "/api/sessions/s/chat/stream", `{"message":"x"}`), 200)
	if n := strings.Count(r.body, "event: assistant.delta"); n != 20001 {
		t.Errorf("%d deltas", n)
	}
}
