package hermestest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

func respID(t *testing.T, r result) string {
	t.Helper()
	id, _ := r.json(t)["id"].(string)
	if !strings.HasPrefix(id, "resp_") || len(id) != 33 {
		t.Fatalf("response id %q", id)
	}
	return id
}

func TestResponsesValidation(t *testing.T) {
	srv := newServer(t)
	for body, msg := range map[string]string{
		`{}`:          "Missing 'input' field",
		`{"input":5}`: "'input' must be a string or array",
		`{"input":"x","conversation":"c","previous_response_id":"resp_x"}`: "Cannot use both 'conversation' and 'previous_response_id'",
		`{not json`: "Invalid JSON in request body",
	} {
		r := must(t, do(t, srv, "POST", "/v1/responses", body), 400)
		if m := r.json(t)["error"].(map[string]any)["message"]; m != msg {
			t.Errorf("%s: %v", body, m)
		}
	}
	must(t, do(t, srv, "POST", "/v1/responses", `{"input":"x","conversation_history":"nope"}`), 400)
	must(t, do(t, srv, "POST", "/v1/responses", `{"input":"x","conversation_history":[{"role":"user"}]}`), 400)
	r := must(t, do(t, srv, "POST", "/v1/responses", `{"input":"x","previous_response_id":"resp_missing"}`), 404)
	if r.body != `{"error": {"message": "Previous response not found: resp_missing", "type": "invalid_request_error", "param": null, "code": null}}` {
		t.Errorf("404 %s", r.body)
	}
}

func TestResponsesChainStoreAndConversation(t *testing.T) {
	rec := &turnLog{}
	srv := newServer(t, rec.agent())
	r1 := must(t, do(t, srv, "POST", "/v1/responses", `{"input":"one","instructions":"be terse","conversation":"conv"}`), 200)
	id1 := respID(t, r1)
	sess := r1.header.Get("X-Hermes-Session-Id")
	if len(sess) != 36 {
		t.Errorf("session id %q", sess)
	}
	if p, _ := srv.ConversationPointer("conv"); p != id1 {
		t.Errorf("pointer %q", p)
	}
	r2 := must(t, do(t, srv, "POST", "/v1/responses", `{"input":"two","conversation":"conv"}`), 200)
	id2 := respID(t, r2)
	if r2.header.Get("X-Hermes-Session-Id") != sess {
		t.Errorf("chained session %q != %q", r2.header.Get("X-Hermes-Session-Id"), sess)
	}
	if tu := rec.get()[1]; len(tu.History) != 2 || tu.History[0].Content != "one" || tu.Instructions != "be terse" {
		t.Errorf("chained turn %+v", tu)
	}
	if p, _ := srv.ConversationPointer("conv"); p != id2 {
		t.Errorf("pointer %q want %q", p, id2)
	}
	// GET returns the stored object verbatim.
	if g := must(t, do(t, srv, "GET", "/v1/responses/"+id2, ""), 200); g.body != r2.body {
		t.Errorf("get %s\nwant %s", g.body, r2.body)
	}
	// delete clears the pointer.
	must(t, do(t, srv, "DELETE", "/v1/responses/"+id2, ""), 200)
	must(t, do(t, srv, "DELETE", "/v1/responses/"+id2, ""), 404)
	if _, ok := srv.ConversationPointer("conv"); ok {
		t.Errorf("pointer survived delete")
	}
	// store:false is not retrievable nor chainable.
	id3 := respID(t, must(t, do(t, srv, "POST", "/v1/responses", `{"input":"x","store":false}`), 200))
	must(t, do(t, srv, "GET", "/v1/responses/"+id3, ""), 404)
	must(t, do(t, srv, "POST", "/v1/responses", `{"input":"x","previous_response_id":"`+id3+`"}`), 404)
	// conversation_history takes precedence over stored history.
	must(t, do(t, srv, "POST", "/v1/responses", `{"input":["a",{"role":"user","content":"b"}],"previous_response_id":"`+id1+`","conversation_history":[{"role":"user","content":"h"}]}`), 200)
	turns := rec.get()
	if tu := turns[len(turns)-1]; len(tu.History) != 2 || tu.History[0].Content != "h" || tu.History[1].Content != "a" || tu.UserText != "b" {
		t.Errorf("explicit history turn %+v", tu)
	}
}

func TestResponsesLRUEviction(t *testing.T) {
	srv := newServer(t, hermestest.WithMaxStoredResponses(3))
	ids := []string{}
	for i := 0; i < 3; i++ {
		ids = append(ids, respID(t, must(t, do(t, srv, "POST", "/v1/responses", fmt.Sprintf(`{"input":"%d","conversation":"c%d"}`, i, i)), 200)))
	}
	must(t, do(t, srv, "GET", "/v1/responses/"+ids[0], ""), 200) // refresh 0: 1 is now oldest
	must(t, do(t, srv, "POST", "/v1/responses", `{"input":"new"}`), 200)
	must(t, do(t, srv, "GET", "/v1/responses/"+ids[1], ""), 404)
	must(t, do(t, srv, "GET", "/v1/responses/"+ids[0], ""), 200)
	if _, ok := srv.ConversationPointer("c1"); ok {
		t.Errorf("evicted response's conversation pointer kept")
	}
	if _, ok := srv.ConversationPointer("c0"); !ok {
		t.Errorf("live pointer dropped")
	}
	if n := srv.StoredResponses(); n != 3 {
		t.Errorf("stored %d", n)
	}
	// Default size is 100.
	srv2 := newServer(t)
	first := respID(t, must(t, do(t, srv2, "POST", "/v1/responses", `{"input":"0"}`), 200))
	for i := 0; i < 100; i++ {
		must(t, do(t, srv2, "POST", "/v1/responses", `{"input":"x"}`), 200)
	}
	must(t, do(t, srv2, "GET", "/v1/responses/"+first, ""), 404)
	if n := srv2.StoredResponses(); n != 100 {
		t.Errorf("stored %d", n)
	}
}

func TestResponsesStreamFailedAndSnapshot(t *testing.T) {
	srv := newServer(t, agentReply(hermestest.Reply{Fail: "model exploded"}))
	r := must(t, do(t, srv, "POST", "/v1/responses", `{"input":"x","stream":true}`), 200)
	fs := sseFrames(r.body)
	if got := events(fs); got != "response.created,response.failed" {
		t.Fatalf("events %s", got)
	}
	if !strings.Contains(fs[1].data, `"status": "failed"`) || !strings.Contains(fs[1].data, `"error": {"message": "model exploded", "type": "server_error"}`) || strings.Contains(r.body, "[DONE]") {
		t.Errorf("failed frame %s", fs[1].data)
	}
	// non-stream: still completed, error text as message
	m := must(t, do(t, srv, "POST", "/v1/responses", `{"input":"x"}`), 200).json(t)
	if m["status"] != "completed" || !strings.Contains(fmt.Sprint(m["output"]), "model exploded") {
		t.Errorf("non-stream failure %v", m)
	}
}
