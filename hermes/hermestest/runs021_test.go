package hermestest_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// The test cases of hermes-runs-v0.21.md §11, one test each (TestV021Case01…18), against
// the fake in its 0.21.3 profile, then tests of the fake's own 0.21 controls.

// ik is the Idempotency-Key of §11.
const ik = "b6f1c0de-0000-4000-8000-000000000001"

var v021 = hermestest.WithVersion(hermestest.Version021)

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func newV021(t *testing.T, opts ...hermestest.Option) *hermestest.Server {
	return newServer(t, append([]hermestest.Option{v021}, opts...)...)
}

// post202 posts a run and checks the 202 and its replay markers: replayed in the body,
// Idempotency-Replayed only on a replay.
func post202(t *testing.T, srv *hermestest.Server, body string, replayed bool, hdr ...string) (id, status string) {
	t.Helper()
	r := must(t, do(t, srv, "POST", "/v1/runs", body, append([]string{"Content-Type", "application/json"}, hdr...)...), 202)
	m := r.json(t)
	id, _ = m["run_id"].(string)
	status, _ = m["status"].(string)
	want := `{"run_id": "` + id + `", "status": "` + status + `", "replayed": false}`
	wantHdr := ""
	if replayed {
		want, wantHdr = strings.Replace(want, "false", "true", 1), "true"
	}
	if r.body != want || r.header.Get("Idempotency-Replayed") != wantHdr || !strings.HasPrefix(id, "run_") || !hex32.MatchString(id[4:]) {
		t.Fatalf("202 %s Idempotency-Replayed=%q, want replayed=%v", r.body, r.header.Get("Idempotency-Replayed"), replayed)
	}
	return id, status
}

func wantErr(t *testing.T, r result, status int, code string) {
	t.Helper()
	if r.status != status || r.errCode(t) != code {
		t.Fatalf("want %d %s, got %d %s", status, code, r.status, r.body)
	}
}

// TestV021Case01NoKey: a keyless POST is a fresh 202 with replayed false and no replay header.
func TestV021Case01NoKey(t *testing.T) {
	srv := newV021(t)
	if _, st := post202(t, srv, `{"input":"hi"}`, false); st != "started" {
		t.Fatalf("status %q", st)
	}
}

// TestV021Case02Replay: the same keyed POST replays the run with its current status; one run.
func TestV021Case02Replay(t *testing.T) {
	srv := newV021(t, blockingAgent(make(chan struct{})))
	id, st := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik)
	if st != "started" {
		t.Fatalf("status %q", st)
	}
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "running"))
	id2, st2 := post202(t, srv, `{"input":"hi"}`, true, "Idempotency-Key", ik)
	if id2 != id || st2 != "running" || st2 != runStatus(t, srv, id)["status"] {
		t.Fatalf("replay %s %s of %s", id2, st2, id)
	}
	if srv.RunsStarted() != 1 || srv.RunsStartedFor(ik) != 1 || len(srv.RunIDs()) != 1 {
		t.Fatalf("runs started %d", srv.RunsStarted())
	}
}

// TestV021Case03Conflict: the key with another body is 409 idempotency_key_conflict.
func TestV021Case03Conflict(t *testing.T) {
	srv := newV021(t)
	post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik)
	r := must(t, do(t, srv, "POST", "/v1/runs", `{"input":"other"}`, "Idempotency-Key", ik), 409)
	if r.body != `{"error": {"message": "Idempotency-Key was already used with a different request payload", "type": "invalid_request_error", "param": null, "code": "idempotency_key_conflict"}}` {
		t.Fatalf("409 %s", r.body)
	}
	if srv.RunsStarted() != 1 {
		t.Fatalf("runs started %d", srv.RunsStarted())
	}
}

// TestV021Case04SessionKeyConflict: X-Hermes-Session-Key is part of the fingerprint.
func TestV021Case04SessionKeyConflict(t *testing.T) {
	srv := newV021(t)
	post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik, "X-Hermes-Session-Key", "sk-1")
	wantErr(t, do(t, srv, "POST", "/v1/runs", `{"input":"hi"}`, "Idempotency-Key", ik, "X-Hermes-Session-Key", "sk-2"), 409, "idempotency_key_conflict")
	wantErr(t, do(t, srv, "POST", "/v1/runs", `{"input":"hi"}`, "Idempotency-Key", ik), 409, "idempotency_key_conflict")
	post202(t, srv, `{"input":"hi"}`, true, "Idempotency-Key", ik, "X-Hermes-Session-Key", "sk-1")
}

// TestV021Case05KeyOrder: key order and whitespace do not change the fingerprint; a
// number written differently does.
func TestV021Case05KeyOrder(t *testing.T) {
	srv := newV021(t)
	id, _ := post202(t, srv, `{"input":"hi","model":"m1","n":1}`, false, "Idempotency-Key", ik)
	id2, _ := post202(t, srv, "{ \"n\": 1,\n  \"model\" : \"m1\", \"input\": \"hi\" }", true, "Idempotency-Key", ik)
	if id2 != id {
		t.Fatalf("replayed %s, want %s", id2, id)
	}
	wantErr(t, do(t, srv, "POST", "/v1/runs", `{"input":"hi","model":"m1","n":1.0}`, "Idempotency-Key", ik), 409, "idempotency_key_conflict")
}

// TestV021Case06KeyValidation: 1–255 visible ASCII after trimming, else 400.
func TestV021Case06KeyValidation(t *testing.T) {
	srv := newV021(t)
	for _, k := range []string{"has space", strings.Repeat("k", 256), "tab\tin", "é-key"} {
		r := must(t, do(t, srv, "POST", "/v1/runs", `{"input":"hi"}`, "Idempotency-Key", k), 400)
		if r.body != `{"error": {"message": "Idempotency-Key must be 1-255 visible ASCII characters", "type": "invalid_request_error", "param": "Idempotency-Key", "code": "invalid_idempotency_key"}}` {
			t.Fatalf("%q: %s", k, r.body)
		}
	}
	if srv.RunsStarted() != 0 {
		t.Fatal("an invalid key started a run")
	}
	post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", strings.Repeat("k", 255))
	id, _ := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", "  abc  ")
	if ri, _ := srv.Run(id); ri.IdempotencyKey != "abc" {
		t.Fatalf("key %q", ri.IdempotencyKey)
	}
	if id2, _ := post202(t, srv, `{"input":"hi"}`, true, "Idempotency-Key", "abc"); id2 != id {
		t.Fatalf("abc replayed %s, want %s", id2, id)
	}
	post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", "   ") // blank: no key
	if srv.RunsStarted() != 3 {
		t.Fatalf("runs started %d", srv.RunsStarted())
	}
}

// TestV021Case07GateReplay: a full gate refuses a new keyed run with 429 but replays an
// admitted key.
func TestV021Case07GateReplay(t *testing.T) {
	srv := newV021(t, hermestest.WithMaxConcurrentRuns(1), blockingAgent(make(chan struct{})))
	id, _ := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik)
	r := must(t, do(t, srv, "POST", "/v1/runs", `{"input":"hi"}`, "Idempotency-Key", "another-key"), 429)
	if r.errCode(t) != "rate_limit_exceeded" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("429 %s %v", r.body, r.header)
	}
	if id2, _ := post202(t, srv, `{"input":"hi"}`, true, "Idempotency-Key", ik); id2 != id {
		t.Fatalf("replayed %s, want %s", id2, id)
	}
	if srv.RunsStarted() != 1 || srv.RunsStartedFor("another-key") != 0 {
		t.Fatalf("runs started %d", srv.RunsStarted())
	}
}

// TestV021Case08ReplayCompleted: a replay after the end says completed; the status has
// output, usage and last_event.
func TestV021Case08ReplayCompleted(t *testing.T) {
	srv := newV021(t)
	id, _ := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "completed"))
	if id2, st := post202(t, srv, `{"input":"hi"}`, true, "Idempotency-Key", ik); id2 != id || st != "completed" {
		t.Fatalf("replay %s %s", id2, st)
	}
	body := must(t, do(t, srv, "GET", "/v1/runs/"+id, ""), 200).body
	if !strings.Contains(body, `"status": "completed"`) || !strings.Contains(body, `"last_event": "run.completed"`) ||
		!strings.HasSuffix(body, `"output": "stub reply: hi", "usage": {"input_tokens": 570, "output_tokens": 5, "total_tokens": 575}}`) {
		t.Fatalf("status %s", body)
	}
}

// TestV021Case09Restart: a keyed running run is interrupted by a restart: replay, status,
// events 404, stop 200 with the status object; the agent's work was stopped.
func TestV021Case09Restart(t *testing.T) {
	srv := newV021(t, blockingAgent(make(chan struct{})))
	id, _ := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "running"))
	srv.Restart()
	if srv.InFlight() != 0 {
		t.Fatalf("in flight %d after Restart", srv.InFlight())
	}
	if id2, st := post202(t, srv, `{"input":"hi"}`, true, "Idempotency-Key", ik); id2 != id || st != "interrupted" {
		t.Fatalf("replay %s %s", id2, st)
	}
	body := must(t, do(t, srv, "GET", "/v1/runs/"+id, ""), 200).body
	if !strings.HasSuffix(body, `"error": "The gateway restarted before this run settled.", "last_event": "run.interrupted"}`) || !strings.Contains(body, `"status": "interrupted"`) {
		t.Fatalf("status %s", body)
	}
	_, r := openEvents(t, srv, id)
	wantRunNotFound(t, r, id)
	if stop := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", ""), 200); stop.body != body {
		t.Fatalf("stop %s, want %s", stop.body, body)
	}
	if srv.RunsStarted() != 1 {
		t.Fatalf("runs started %d", srv.RunsStarted())
	}
}

// TestV021Case10RestartKeyless: a keyless run is forgotten by a restart.
func TestV021Case10RestartKeyless(t *testing.T) {
	srv := newV021(t, blockingAgent(make(chan struct{})))
	id, _ := post202(t, srv, `{"input":"hi"}`, false)
	done, _ := post202(t, srv, `{"input":"hi"}`, false)
	srv.Restart()
	wantRunNotFound(t, do(t, srv, "GET", "/v1/runs/"+id, ""), id)
	wantRunNotFound(t, do(t, srv, "GET", "/v1/runs/"+done, ""), done)
	wantRunNotFound(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", ""), id)
}

// TestV021Case11StopCompleted: stop on a completed run is 200 with its status object.
func TestV021Case11StopCompleted(t *testing.T) {
	srv := newV021(t)
	id, _ := post202(t, srv, `{"input":"hi"}`, false)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "completed"))
	body := must(t, do(t, srv, "GET", "/v1/runs/"+id, ""), 200).body
	if stop := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", "{}"), 200); stop.body != body || !strings.Contains(body, `"status": "completed"`) {
		t.Fatalf("stop %s, want %s", stop.body, body)
	}
}

// TestV021Case12StopRunning: stop on a running run: stopping (status and last_event), then
// run.cancelled without fields and ": stream closed".
func TestV021Case12StopRunning(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	srv := newV021(t, hermestest.WithAgent(func(ctx context.Context, _ hermestest.Turn) hermestest.Reply {
		<-ctx.Done()
		<-hold // the agent takes its time to notice the interrupt
		return hermestest.Reply{}
	}))
	id, _ := post202(t, srv, `{"input":"hi"}`, false)
	es, _ := openEvents(t, srv, id)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "running"))
	if r := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", ""), 200); r.body != `{"run_id": "`+id+`", "status": "stopping"}` {
		t.Fatalf("stop %s", r.body)
	}
	if st := runStatus(t, srv, id); st["status"] != "stopping" || st["last_event"] != "run.stopping" {
		t.Fatalf("status %v", st)
	}
	if r := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", ""), 200); r.body != `{"run_id": "`+id+`", "status": "stopping"}` {
		t.Fatalf("second stop %s", r.body)
	}
	hold <- struct{}{}
	evs := es.all()
	if names(evs) != "run.cancelled" || len(evs[0].m) != 3 || !es.closed {
		t.Fatalf("events %v closed=%v", evs, es.closed)
	}
}

var frameHead = regexp.MustCompile(`^data: \{"event": "[a-z._]+", "run_id": "run_[0-9a-f]{32}", "timestamp": [0-9]+\.[0-9]+`)

// TestV021Case13Events: data-only frames led by event/run_id/timestamp, run.completed with
// output and usage, ": stream closed"; after a disconnect the stream is 404 and the status
// still answers.
func TestV021Case13Events(t *testing.T) {
	release := make(chan struct{})
	srv := newV021(t, hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		if tu.UserText == "block" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return hermestest.StubAgent(ctx, tu)
	}))
	id, _ := post202(t, srv, `{"input":"hi there"}`, false)
	r := must(t, do(t, srv, "GET", "/v1/runs/"+id+"/events", ""), 200)
	frames := strings.Split(strings.TrimSuffix(r.body, "\n\n"), "\n\n")
	if frames[len(frames)-1] != ": stream closed" {
		t.Fatalf("last frame %q", frames[len(frames)-1])
	}
	frames = frames[:len(frames)-1]
	for _, f := range frames {
		if !frameHead.MatchString(f) || strings.Contains(f, "\n") {
			t.Fatalf("frame %q", f)
		}
	}
	if last := frames[len(frames)-1]; !strings.Contains(last, `"event": "run.completed"`) ||
		!strings.HasSuffix(last, `"output": "stub reply: hi there", "usage": {"input_tokens": 572, "output_tokens": 6, "total_tokens": 578}}`) {
		t.Fatalf("last event %s", last)
	}

	id2, _ := post202(t, srv, `{"input":"block"}`, false)
	es, _ := openEvents(t, srv, id2)
	ctx := testCtx(t)
	noErr(t, srv.WaitRun(ctx, id2, func(ri hermestest.RunInfo) bool { return ri.Subscribed && ri.Status == "running" }))
	es.close()
	for {
		_, r := openEvents(t, srv, id2)
		if r.status == 404 {
			wantRunNotFound(t, r, id2)
			break
		}
		if ctx.Err() != nil {
			t.Fatal("queue never dropped")
		}
	}
	if st := runStatus(t, srv, id2); st["status"] != "running" {
		t.Fatalf("status %v", st)
	}
	close(release)
	noErr(t, srv.WaitRunStatus(ctx, id2, "completed"))
}

// slowReply waits for approval, then holds the run (running) until it is stopped.
var slowReply = hermestest.Reply{Text: "done", Tools: []hermestest.Tool{rmTool}, DeltaDelay: time.Hour}

// TestV021Case14Approval: approval.request with request_id, waiting_for_approval with the
// approval object, an answer by request_id, approval.responded, running again.
func TestV021Case14Approval(t *testing.T) {
	srv := newV021(t, agentReply(slowReply))
	id, _ := post202(t, srv, `{"input":"clean"}`, false)
	es, _ := openEvents(t, srv, id)
	es.next() // tool.started
	ev, _ := es.next()
	rid, _ := ev.m["request_id"].(string)
	if ev.name != "approval.request" || !hex32.MatchString(rid) ||
		!strings.HasSuffix(ev.raw, `"allow_session": true, "request_id": "`+rid+`", "event": "approval.request", "run_id": "`+id+`", "timestamp": `+strings.SplitN(strings.SplitN(ev.raw, `"timestamp": `, 2)[1], ",", 2)[0]+`, "choices": ["once", "session", "always", "deny"]}`) {
		t.Fatalf("approval.request %s", ev.raw)
	}
	st := runStatus(t, srv, id)
	if ap, _ := st["approval"].(map[string]any); st["status"] != "waiting_for_approval" || st["last_event"] != "approval.request" || ap["request_id"] != rid || ap["event"] != "approval.request" {
		t.Fatalf("status %v", st)
	}
	if ri, _ := srv.Run(id); ri.ApprovalRequestID != rid || ri.PendingApprovals != 1 {
		t.Fatalf("RunInfo %+v", ri)
	}
	r := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"approve","request_id":"`+rid+`"}`), 200)
	if r.body != `{"object": "hermes.run.approval_response", "run_id": "`+id+`", "choice": "once", "request_id": "`+rid+`", "resolved": 1}` {
		t.Fatalf("approval %s", r.body)
	}
	ev, _ = es.next()
	if ev.name != "approval.responded" || !strings.HasSuffix(ev.raw, `"choice": "once", "request_id": "`+rid+`", "resolved": 1}`) {
		t.Fatalf("approval.responded %s", ev.raw)
	}
	st = runStatus(t, srv, id)
	if _, has := st["approval"]; st["status"] != "running" || has {
		t.Fatalf("status %v", st)
	}
	if ri, _ := srv.Run(id); ri.ApprovalRequestID != "" || srv.ToolRuns("terminal") != 1 {
		t.Fatalf("RunInfo %+v", ri)
	}
}

// TestV021Case15ApprovalErrors: invalid choice, invalid request_id, nothing pending (also
// a wrong request_id), and a settled run.
func TestV021Case15ApprovalErrors(t *testing.T) {
	srv := newV021(t, agentReply(hermestest.Reply{Text: "done", Tools: []hermestest.Tool{rmTool}}))
	id, _ := post202(t, srv, `{"input":"clean"}`, false)
	ctx := testCtx(t)
	noErr(t, srv.WaitRunStatus(ctx, id, "waiting_for_approval"))
	path := "/v1/runs/" + id + "/approval"
	r := must(t, do(t, srv, "POST", path, `{"choice":"maybe"}`), 400)
	if r.body != `{"error": {"message": "Invalid approval choice; expected one of: always, deny, once, session", "type": "invalid_request_error", "param": null, "code": "invalid_approval_choice"}}` {
		t.Fatalf("bad choice %s", r.body)
	}
	for _, b := range []string{`{"choice":"once","request_id":""}`, `{"choice":"once","request_id":"  "}`, `{"choice":"once","request_id":7}`,
		`{"choice":"maybe","request_id":""}`, `{"choice":"once","request_id":"` + strings.Repeat("r", 257) + `"}`} {
		wantErr(t, do(t, srv, "POST", path, b), 400, "invalid_approval_request")
	}
	wantErr(t, do(t, srv, "POST", path, `{"choice":"once","request_id":"0123456789abcdef0123456789abcdef"}`), 409, "approval_not_pending")
	must(t, do(t, srv, "POST", path, `{"choice":"once","request_id":null}`), 200) // null is absent: the oldest
	noErr(t, srv.WaitRunStatus(ctx, id, "completed"))
	wantErr(t, do(t, srv, "POST", path, `{"choice":"once"}`), 409, "approval_not_active")

	srv2 := newV021(t, blockingAgent(make(chan struct{})))
	id2, _ := post202(t, srv2, `{"input":"hi"}`, false)
	r = do(t, srv2, "POST", "/v1/runs/"+id2+"/approval", `{"choice":"once"}`)
	if r.status != 409 || r.body != `{"error": {"message": "Run has no pending approval: `+id2+`", "type": "invalid_request_error", "param": null, "code": "approval_not_pending"}}` {
		t.Fatalf("nothing pending %d %s", r.status, r.body)
	}
}

// TestV021Case16Steer: steer while running (200, run.steered, the agent gets the text),
// 409 while waiting for approval and after the end (before the body is read), 400 for a
// blank text; unconsumed text comes back as pending_steer.
func TestV021Case16Steer(t *testing.T) {
	release := make(chan struct{})
	srv := newV021(t, hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		select {
		case <-release:
		case <-ctx.Done():
			return hermestest.Reply{}
		}
		if tu.UserText == "consume" {
			return hermestest.Reply{Text: "steered by " + strings.Join(tu.Steered(), "+")}
		}
		return hermestest.Reply{Text: "ignored"}
	}))
	id, _ := post202(t, srv, `{"input":"consume"}`, false)
	id2, _ := post202(t, srv, `{"input":"ignore"}`, false)
	es, _ := openEvents(t, srv, id)
	ctx := testCtx(t)
	noErr(t, srv.WaitRunStatus(ctx, id, "running"))
	noErr(t, srv.WaitRunStatus(ctx, id2, "running"))
	r := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/steer", `{"message":"focus"}`), 200)
	if r.body != `{"object": "hermes.run.steer", "run_id": "`+id+`", "accepted": true}` {
		t.Fatalf("steer %s", r.body)
	}
	must(t, do(t, srv, "POST", "/v1/runs/"+id+"/steer", `{"input":[{"type":"text","text":" tests "}]}`), 200)
	for _, b := range []string{`{"input":"   "}`, `{}`, `{"text":""}`} {
		r := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/steer", b), 400)
		if r.body != `{"error": {"message": "Missing non-empty steer text; expected 'input', 'message', or 'text'.", "type": "invalid_request_error", "param": null, "code": "invalid_steer_input"}}` {
			t.Fatalf("%s: %s", b, r.body)
		}
	}
	must(t, do(t, srv, "POST", "/v1/runs/"+id2+"/steer", `{"text":"nobody reads this"}`), 200)
	if st := runStatus(t, srv, id); st["status"] != "running" || st["last_event"] != "run.steered" {
		t.Fatalf("status %v", st)
	}
	if ri, _ := srv.Run(id); !slices.Equal(ri.Steers, []string{"focus", "tests"}) {
		t.Fatalf("steers %q", ri.Steers)
	}
	ev, _ := es.next()
	if !strings.HasPrefix(ev.raw, `{"event": "run.steered", "run_id": "`+id+`", "timestamp": `) || !strings.HasSuffix(ev.raw, `, "accepted": true}`) {
		t.Fatalf("event %s", ev.raw)
	}
	close(release)
	noErr(t, srv.WaitRunStatus(ctx, id, "completed"))
	noErr(t, srv.WaitRunStatus(ctx, id2, "completed"))
	if st := runStatus(t, srv, id); st["output"] != "steered by focus+tests" || st["pending_steer"] != nil {
		t.Fatalf("consumed: %v", st)
	}
	es2, _ := openEvents(t, srv, id2)
	evs := es2.all()
	if last := evs[len(evs)-1]; last.name != "run.completed" || !strings.HasSuffix(last.raw, `"pending_steer": "nobody reads this"}`) {
		t.Fatalf("run.completed %s", last.raw)
	}
	if st := runStatus(t, srv, id2); st["pending_steer"] != "nobody reads this" {
		t.Fatalf("status %v", st)
	}
	wantErr(t, do(t, srv, "POST", "/v1/runs/"+id+"/steer", `{bad json`), 409, "run_not_accepting_steer")

	srv2 := newV021(t, agentReply(hermestest.Reply{Text: "done", Tools: []hermestest.Tool{rmTool}}))
	id3, _ := post202(t, srv2, `{"input":"clean"}`, false)
	noErr(t, srv2.WaitRunStatus(ctx, id3, "waiting_for_approval"))
	wantErr(t, do(t, srv2, "POST", "/v1/runs/"+id3+"/steer", `{"message":"focus"}`), 409, "run_not_accepting_steer")
	wantRunNotFound(t, do(t, srv2, "POST", "/v1/runs/run_nope/steer", `{"message":"x"}`), "run_nope")
}

// TestV021Case17Capabilities: runs_idempotency right after run_submission (durable, or not
// with the memory store), run_steer in features and endpoints.
func TestV021Case17Capabilities(t *testing.T) {
	srv := newV021(t)
	caps := must(t, do(t, srv, "GET", "/v1/capabilities", ""), 200).body
	for _, want := range []string{
		`"run_submission": true, "runs_idempotency": {"supported": true, "durable": true, "retention_seconds": 86400}, "run_status": true`,
		`"run_approval_response": true, "run_steer": true, "tool_progress_events"`,
		`"run_approval": {"method": "POST", "path": "/v1/runs/{run_id}/approval"}, "run_steer": {"method": "POST", "path": "/v1/runs/{run_id}/steer"}, "run_stop"`,
	} {
		if !strings.Contains(caps, want) {
			t.Fatalf("capabilities lack %s:\n%s", want, caps)
		}
	}
	if strings.Count(caps, "runs_idempotency") != 1 {
		t.Fatalf("capabilities %s", caps)
	}
	if h := must(t, do(t, srv, "GET", "/health", ""), 200).body; h != `{"status": "ok", "platform": "hermes-agent", "version": "0.21.3"}` {
		t.Fatalf("health %s", h)
	}
	mem := newV021(t, hermestest.WithRunsIdempotencyMemory())
	if caps := must(t, do(t, mem, "GET", "/v1/capabilities", ""), 200).body; !strings.Contains(caps, `"runs_idempotency": {"supported": true, "durable": false, "retention_seconds": 86400}`) {
		t.Fatalf("memory capabilities %s", caps)
	}
}

// TestV021Case18Profiles: runs and keys are per profile.
func TestV021Case18Profiles(t *testing.T) {
	keyA, keyB := "profile-a-key-0123456789", "profile-b-key-0123456789"
	srv := newV021(t, hermestest.WithProfileKey("a", keyA), hermestest.WithProfileKey("b", keyB))
	asA, asB := []string{"Authorization", "Bearer " + keyA}, []string{"Authorization", "Bearer " + keyB}
	r := must(t, do(t, srv, "POST", "/p/a/v1/runs", `{"input":"hi"}`, append(asA, "Idempotency-Key", ik)...), 202)
	id := r.json(t)["run_id"].(string)
	wantRunNotFound(t, do(t, srv, "GET", "/p/b/v1/runs/"+id, "", asB...), id)
	wantRunNotFound(t, do(t, srv, "GET", "/v1/runs/"+id, ""), id)
	wantRunNotFound(t, do(t, srv, "POST", "/p/b/v1/runs/"+id+"/stop", "", asB...), id)
	must(t, do(t, srv, "GET", "/p/a/v1/runs/"+id, "", asA...), 200)
	wantErr(t, do(t, srv, "GET", "/p/a/v1/runs/"+id, ""), 401, "gateway_auth_failed")
	rb := must(t, do(t, srv, "POST", "/p/b/v1/runs", `{"input":"hi"}`, append(asB, "Idempotency-Key", ik)...), 202)
	if m := rb.json(t); m["run_id"] == id || m["replayed"] != false || rb.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("profile b %s", rb.body)
	}
	if ra := must(t, do(t, srv, "POST", "/p/a/v1/runs", `{"input":"hi"}`, append(asA, "Idempotency-Key", ik)...), 202); ra.json(t)["run_id"] != id {
		t.Fatalf("profile a replay %s", ra.body)
	}
	if srv.RunsStartedFor(ik) != 2 {
		t.Fatalf("runs started for the key %d", srv.RunsStartedFor(ik))
	}
}

// TestV021RestartMemoryStore: with the memory fallback a restart forgets keyed runs and
// their keys: the same key starts a new run.
func TestV021RestartMemoryStore(t *testing.T) {
	srv := newV021(t, hermestest.WithRunsIdempotencyMemory(), blockingAgent(make(chan struct{})))
	id, _ := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik)
	srv.Restart()
	wantRunNotFound(t, do(t, srv, "GET", "/v1/runs/"+id, ""), id)
	if id2, _ := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik); id2 == id || srv.RunsStartedFor(ik) != 2 {
		t.Fatalf("after restart %s, started %d", id2, srv.RunsStartedFor(ik))
	}
}

// TestV021RestartEndsStreams: an open events stream ends at a restart, without
// ": stream closed"; a settled keyed run keeps its status and replays.
func TestV021RestartEndsStreams(t *testing.T) {
	srv := newV021(t, hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		if tu.UserText == "x" {
			return hermestest.StubAgent(ctx, tu)
		}
		return slowReply
	}))
	id, _ := post202(t, srv, `{"input":"clean"}`, false, "Idempotency-Key", ik)
	es, _ := openEvents(t, srv, id)
	es.next()
	done, _ := post202(t, srv, `{"input":"x"}`, false, "Idempotency-Key", "done-key")
	ctx := testCtx(t)
	noErr(t, srv.WaitRunStatus(ctx, id, "waiting_for_approval"))
	noErr(t, srv.WaitRunStatus(ctx, done, "completed"))
	srv.Restart()
	rest := es.all()
	if names(rest) != "approval.request" || es.closed {
		t.Fatalf("after restart %s closed=%v", names(rest), es.closed)
	}
	wantErr(t, do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"once"}`), 409, "approval_not_active")
	if st := runStatus(t, srv, id); st["status"] != "interrupted" || st["approval"] != nil {
		t.Fatalf("status %v", st)
	}
	if srv.ToolRuns("terminal") != 0 {
		t.Fatal("tool ran")
	}
	if _, st := post202(t, srv, `{"input":"x"}`, true, "Idempotency-Key", "done-key"); st != "completed" {
		t.Fatalf("settled run %s replayed as interrupted", done)
	}
}

// TestV021Detach: a run owned by another process: stop 409 run_not_active, steer and
// approval refused; it still completes.
func TestV021Detach(t *testing.T) {
	release := make(chan struct{})
	srv := newV021(t, blockingAgent(release))
	id, _ := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik)
	ctx := testCtx(t)
	noErr(t, srv.WaitRunStatus(ctx, id, "running"))
	if !srv.Detach(id) || srv.Detach("run_nope") {
		t.Fatal("Detach")
	}
	r := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", ""), 409)
	if r.body != `{"error": {"message": "Run is not active in this gateway process: `+id+`", "type": "invalid_request_error", "param": null, "code": "run_not_active"}}` {
		t.Fatalf("stop %s", r.body)
	}
	wantErr(t, do(t, srv, "POST", "/v1/runs/"+id+"/steer", `{"message":"x"}`), 409, "run_not_accepting_steer")
	wantErr(t, do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"once"}`), 409, "approval_not_active")
	close(release)
	noErr(t, srv.WaitRunStatus(ctx, id, "completed"))
}

// TestV021Subagents: scripted subagents emit subagent.start and subagent.complete with
// tokens and cost, before the final text.
func TestV021Subagents(t *testing.T) {
	srv := newV021(t, agentReply(hermestest.Reply{Text: "ok", Subagents: []hermestest.Subagent{
		{Goal: "find", Summary: "found", InputTokens: 120, OutputTokens: 30, CostUSD: 0.0125}, {InputTokens: 1},
	}}))
	id, _ := post202(t, srv, `{"input":"hi"}`, false)
	es, _ := openEvents(t, srv, id)
	evs := es.all()
	if got := names(evs); got != "subagent.start,subagent.complete,subagent.start,subagent.complete,message.delta,reasoning.available,run.completed" {
		t.Fatalf("events %s", got)
	}
	sid, _ := evs[0].m["subagent_id"].(string)
	if !strings.HasSuffix(evs[0].raw, `"goal": "find", "task_count": 2, "task_index": 0, "subagent_id": "`+sid+`"}`) ||
		!regexp.MustCompile(`"goal": "find", "task_count": 2, "task_index": 0, "subagent_id": "`+sid+`", "status": "completed", "summary": "found", "duration_seconds": [0-9.]+, "input_tokens": 120, "output_tokens": 30, "cost_usd": 0.0125}$`).MatchString(evs[1].raw) ||
		!strings.HasSuffix(evs[3].raw, `"input_tokens": 1, "output_tokens": 0, "cost_usd": 0.0}`) || strings.Contains(evs[3].raw, "goal") {
		t.Fatalf("subagent events\n%s\n%s\n%s", evs[0].raw, evs[1].raw, evs[3].raw)
	}
	v19 := newServer(t, agentReply(hermestest.Reply{Text: "ok", Subagents: []hermestest.Subagent{{Goal: "find"}}}))
	id19 := startRun(t, v19, `{"input":"hi"}`)
	es19, _ := openEvents(t, v19, id19)
	if got := names(es19.all()); strings.Contains(got, "subagent") {
		t.Fatalf("v0.19 events %s", got)
	}
}

// TestV021OlderVersionsUnchanged: 0.19 has no steer route, answers stop on a finished run
// with 404, sends no request_id and keeps the replay status "started".
func TestV021OlderVersionsUnchanged(t *testing.T) {
	srv := newServer(t, hermestest.WithRunsIdempotency(), agentReply(hermestest.Reply{Text: "done", Tools: []hermestest.Tool{rmTool}}))
	id := startRun(t, srv, `{"input":"x"}`, "Idempotency-Key", "k")
	r := do(t, srv, "POST", "/v1/runs/"+id+"/steer", `{"message":"x"}`)
	if r.status != 404 || r.body != "404: Not Found" || srv.Calls("") != 1 {
		t.Fatalf("steer on 0.19: %d %s", r.status, r.body)
	}
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "waiting_for_approval"))
	if ri, _ := srv.Run(id); ri.ApprovalRequestID != "" {
		t.Fatalf("request_id on 0.19: %+v", ri)
	}
	if _, has := runStatus(t, srv, id)["approval"]; has {
		t.Fatal("approval object on 0.19")
	}
	r = must(t, do(t, srv, "POST", "/v1/runs", `{"input":"x"}`, "Idempotency-Key", "k"), 202)
	if r.body != `{"run_id": "`+id+`", "status": "started", "replayed": true}` {
		t.Fatalf("replay %s", r.body)
	}
	must(t, do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"once","request_id":""}`), 200)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "completed"))
	wantRunNotFound(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", ""), id)
}

// TestV021Retention: a keyed run's status outlives RunStatusTTL in the durable store, for
// RunsIdempotencyRetention; then its key starts a new run. A keyless run's does not.
func TestV021Retention(t *testing.T) {
	clk := newClock()
	srv := newV021(t, hermestest.WithClock(clk.now))
	id, _ := post202(t, srv, `{"input":"hi"}`, false, "Idempotency-Key", ik)
	plain, _ := post202(t, srv, `{"input":"hi"}`, false)
	ctx := testCtx(t)
	noErr(t, srv.WaitRunStatus(ctx, id, "completed"))
	noErr(t, srv.WaitRunStatus(ctx, plain, "completed"))
	clk.add(hermestest.RunStatusTTL)
	wantRunNotFound(t, do(t, srv, "GET", "/v1/runs/"+plain, ""), plain)
	runStatus(t, srv, id)
	clk.add(hermestest.RunsIdempotencyRetention - hermestest.RunStatusTTL - time.Millisecond)
	if _, st := post202(t, srv, `{"input":"hi"}`, true, "Idempotency-Key", ik); st != "completed" {
		t.Fatalf("replay status %s", st)
	}
	clk.add(time.Millisecond)
	wantRunNotFound(t, do(t, srv, "GET", "/v1/runs/"+id, ""), id)
	if id2, _ := post202(t, srv, `{"input":"other"}`, false, "Idempotency-Key", ik); id2 == id {
		t.Fatal("an expired key replayed")
	}
}
