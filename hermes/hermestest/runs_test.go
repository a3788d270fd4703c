package hermestest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// manualClock is a settable time source for WithClock.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *manualClock { return &manualClock{t: time.Unix(1796045974, 479602000)} }

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// startRun posts a run and returns its id.
func startRun(t *testing.T, srv *hermestest.Server, body string, hdr ...string) string {
	t.Helper()
	r := must(t, do(t, srv, "POST", "/v1/runs", body, append([]string{"Content-Type", "application/json"}, hdr...)...), 202)
	id, _ := r.json(t)["run_id"].(string)
	if !strings.HasPrefix(id, "run_") || len(id) != 36 {
		t.Fatalf("run_id %q", id)
	}
	return id
}

// runEvent is one decoded run-events frame.
type runEvent struct {
	raw  string
	name string
	m    map[string]any
}

// eventStream reads run events one by one.
type eventStream struct {
	t      *testing.T
	resp   *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
	closed bool // ": stream closed" seen
}

func openEvents(t *testing.T, srv *hermestest.Server, id string) (*eventStream, result) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+srv.APIKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		defer cancel()
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return nil, result{status: resp.StatusCode, header: resp.Header, body: b.String()}
	}
	es := &eventStream{t: t, resp: resp, sc: bufio.NewScanner(resp.Body), cancel: cancel}
	t.Cleanup(es.close)
	return es, result{status: 200, header: resp.Header}
}

func (es *eventStream) close() {
	es.cancel()
	es.resp.Body.Close()
}

// next returns the next data frame; ok is false at the end of the stream.
func (es *eventStream) next() (runEvent, bool) {
	es.t.Helper()
	for es.sc.Scan() {
		l := es.sc.Text()
		switch {
		case l == ": stream closed":
			es.closed = true
		case strings.HasPrefix(l, "data: "):
			ev := runEvent{raw: l[6:]}
			if err := json.Unmarshal([]byte(ev.raw), &ev.m); err != nil {
				es.t.Fatalf("frame %q: %v", l, err)
			}
			ev.name, _ = ev.m["event"].(string)
			return ev, true
		}
	}
	return runEvent{}, false
}

// all reads the rest of the stream and returns the event names.
func (es *eventStream) all() []runEvent {
	var out []runEvent
	for {
		ev, ok := es.next()
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

func names(evs []runEvent) string {
	var n []string
	for _, e := range evs {
		n = append(n, e.name)
	}
	return strings.Join(n, ",")
}

func runStatus(t *testing.T, srv *hermestest.Server, id string) map[string]any {
	t.Helper()
	return must(t, do(t, srv, "GET", "/v1/runs/"+id, ""), 200).json(t)
}

const runNotFoundFmt = `{"error": {"message": "Run not found: %s", "type": "invalid_request_error", "param": null, "code": "run_not_found"}}`

func wantRunNotFound(t *testing.T, r result, id string) {
	t.Helper()
	if r.status != 404 || r.body != strings.Replace(runNotFoundFmt, "%s", id, 1) {
		t.Fatalf("want 404 run_not_found, got %d %s", r.status, r.body)
	}
}

// TestRunsEventsOnce: the stub run's stream is the recorded sequence, ends with ": stream
// closed", and a second subscription is 404 run_not_found (the queue is gone).
func TestRunsEventsOnce(t *testing.T) {
	srv := newServer(t)
	id := startRun(t, srv, `{"input":"Hello run"}`)
	es, _ := openEvents(t, srv, id)
	evs := es.all()
	if got := names(evs); got != "message.delta,message.delta,message.delta,message.delta,reasoning.available,run.completed" || !es.closed {
		t.Fatalf("events %s closed=%v", got, es.closed)
	}
	if evs[5].m["output"] != "stub reply: Hello run" {
		t.Fatalf("run.completed %s", evs[5].raw)
	}
	_, r := openEvents(t, srv, id)
	wantRunNotFound(t, r, id)
	if st := runStatus(t, srv, id); st["status"] != "completed" || st["last_event"] != "run.completed" || st["session_id"] != id {
		t.Fatalf("status %v", st)
	}
	wantRunNotFound(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", "{}"), id)
	wantRunNotFound(t, do(t, srv, "GET", "/v1/runs/run_00000000000000000000000000000000", ""), "run_00000000000000000000000000000000")
}

// TestRunsDisconnectDropsQueue: a subscriber that goes away mid-run takes the queue with it;
// the run goes on and its status completes.
func TestRunsDisconnectDropsQueue(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, blockingAgent(release))
	id := startRun(t, srv, `{"input":"x"}`)
	es, _ := openEvents(t, srv, id)
	ctx := testCtx(t)
	noErr(t, srv.WaitRun(ctx, id, func(ri hermestest.RunInfo) bool { return ri.Subscribed && ri.Status == "running" }))
	es.close()
	// The handler notices the disconnect and drops the queue: poll until a subscription is 404.
	for {
		_, r := openEvents(t, srv, id)
		if r.status == 404 {
			wantRunNotFound(t, r, id)
			break
		}
		if ctx.Err() != nil {
			t.Fatal("queue never dropped")
		}
	}
	close(release)
	noErr(t, srv.WaitRunStatus(ctx, id, "completed"))
	if st := runStatus(t, srv, id); st["output"] != "stub reply: x" {
		t.Fatalf("status %v", st)
	}
}

// TestRunsLateSubscriberGetsEverything: events are buffered from creation.
func TestRunsLateSubscriberGetsEverything(t *testing.T) {
	srv := newServer(t)
	id := startRun(t, srv, `{"input":"a b"}`)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "completed"))
	es, _ := openEvents(t, srv, id)
	if got := names(es.all()); got != "message.delta,message.delta,message.delta,message.delta,reasoning.available,run.completed" {
		t.Fatalf("events %s", got)
	}
}

// TestRunsQueueSweep: an unsubscribed queue is gone RunStreamTTL after creation (fake
// clock); the status stays.
func TestRunsQueueSweep(t *testing.T) {
	clk := newClock()
	srv := newServer(t, hermestest.WithClock(clk.now))
	id := startRun(t, srv, `{"input":"x"}`)
	id2 := startRun(t, srv, `{"input":"y"}`)
	clk.add(hermestest.RunStreamTTL - time.Second)
	es, _ := openEvents(t, srv, id2)
	if n := len(es.all()); n == 0 {
		t.Fatal("no events before the sweep")
	}
	clk.add(time.Second)
	_, r := openEvents(t, srv, id)
	wantRunNotFound(t, r, id)
	runStatus(t, srv, id)
}

// TestRunsStatusTTL: a terminal status answers until RunStatusTTL after the end, then 404.
func TestRunsStatusTTL(t *testing.T) {
	clk := newClock()
	srv := newServer(t, hermestest.WithClock(clk.now))
	id := startRun(t, srv, `{"input":"x"}`)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "completed"))
	clk.add(hermestest.RunStatusTTL - time.Millisecond)
	runStatus(t, srv, id)
	clk.add(time.Millisecond)
	wantRunNotFound(t, do(t, srv, "GET", "/v1/runs/"+id, ""), id)
}

// TestRunsStatusKeyOrder: the status object keeps Hermes's key order while running.
func TestRunsStatusKeyOrder(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := newServer(t, blockingAgent(release))
	id := startRun(t, srv, `{"input":"x","session_id":"s1","model":"m1"}`)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "running"))
	body := must(t, do(t, srv, "GET", "/v1/runs/"+id, ""), 200).body
	want := `{"object": "hermes.run", "run_id": "` + id + `", "status": "running", "updated_at": `
	if !strings.HasPrefix(body, want) || !strings.Contains(body, `, "session_id": "s1", "model": "m1"}`) {
		t.Fatalf("status %s", body)
	}
}

// TestRunsStop: stop answers 200 stopping, the run ends cancelled with run.cancelled, and a
// second stop is 404.
func TestRunsStop(t *testing.T) {
	srv := newServer(t, blockingAgent(make(chan struct{})))
	id := startRun(t, srv, `{"input":"x"}`)
	es, _ := openEvents(t, srv, id)
	r := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", "{}", "Content-Type", "application/json"), 200)
	if r.body != `{"run_id": "`+id+`", "status": "stopping"}` || r.header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("stop %s", r.body)
	}
	if got := names(es.all()); got != "run.cancelled" || !es.closed {
		t.Fatalf("events %s", got)
	}
	if st := runStatus(t, srv, id); st["status"] != "cancelled" || st["last_event"] != "run.cancelled" {
		t.Fatalf("status %v", st)
	}
	wantRunNotFound(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", "{}"), id)
}

func approvalAgent(tools ...hermestest.Tool) hermestest.Option {
	return agentReply(hermestest.Reply{Text: "done", Tools: tools})
}

var rmTool = hermestest.Tool{Name: "terminal", Args: `{"command": "rm -rf build/"}`, Output: "ok",
	Approval: &hermestest.Approval{PatternKey: "recursive_delete", Description: "recursive delete"}}

// TestRunsApprovalRoundTrip: approval.request (key order as documented) pauses the run in
// waiting_for_approval; "once" resumes it, the tool runs, the answer is as documented.
func TestRunsApprovalRoundTrip(t *testing.T) {
	srv := newServer(t, approvalAgent(rmTool))
	id := startRun(t, srv, `{"input":"clean"}`)
	es, _ := openEvents(t, srv, id)
	ev, _ := es.next()
	if ev.name != "tool.started" || ev.m["tool"] != "terminal" || ev.m["preview"] != "rm -rf build/" {
		t.Fatalf("first %s", ev.raw)
	}
	ev, _ = es.next()
	wantPrefix := `{"command": "rm -rf build/", "pattern_key": "recursive_delete", "pattern_keys": ["recursive_delete"], "description": "recursive delete", "allow_permanent": true, "allow_session": true, "event": "approval.request", "run_id": "` + id + `", "timestamp": `
	if !strings.HasPrefix(ev.raw, wantPrefix) || !strings.HasSuffix(ev.raw, `, "choices": ["once", "session", "always", "deny"]}`) {
		t.Fatalf("approval.request %s", ev.raw)
	}
	if st := runStatus(t, srv, id); st["status"] != "waiting_for_approval" || st["last_event"] != "approval.request" {
		t.Fatalf("status %v", st)
	}
	if srv.ToolRuns("terminal") != 0 {
		t.Fatal("tool ran before approval")
	}
	r := must(t, do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"approve"}`), 200)
	if r.body != `{"object": "hermes.run.approval_response", "run_id": "`+id+`", "choice": "once", "resolved": 1}` {
		t.Fatalf("approval %s", r.body)
	}
	rest := es.all()
	if got := names(rest); got != "approval.responded,tool.completed,message.delta,reasoning.available,run.completed" {
		t.Fatalf("events %s", got)
	}
	if rest[0].m["choice"] != "once" || rest[0].m["resolved"] != 1.0 || rest[1].m["error"] != false {
		t.Fatalf("events %s %s", rest[0].raw, rest[1].raw)
	}
	if srv.ToolRuns("terminal") != 1 {
		t.Fatalf("ToolRuns %d", srv.ToolRuns("terminal"))
	}
	r = do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"once"}`)
	if r.status != 409 || r.errCode(t) != "approval_not_active" {
		t.Fatalf("after end: %d %s", r.status, r.body)
	}
}

// TestRunsApprovalDeny: deny resumes the run without running the tool.
func TestRunsApprovalDeny(t *testing.T) {
	srv := newServer(t, approvalAgent(rmTool))
	id := startRun(t, srv, `{"input":"clean"}`)
	ctx := testCtx(t)
	noErr(t, srv.WaitRunStatus(ctx, id, "waiting_for_approval"))
	r := do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"maybe"}`)
	if r.status != 400 || r.errCode(t) != "invalid_approval_choice" {
		t.Fatalf("bad choice: %d %s", r.status, r.body)
	}
	if r := do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{bad`); r.status != 400 {
		t.Fatalf("bad json: %d %s", r.status, r.body)
	}
	must(t, do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"deny"}`), 200)
	noErr(t, srv.WaitRunStatus(ctx, id, "completed"))
	es, _ := openEvents(t, srv, id)
	evs := es.all()
	if got := names(evs); got != "tool.started,approval.request,approval.responded,tool.completed,message.delta,reasoning.available,run.completed" {
		t.Fatalf("events %s", got)
	}
	if evs[3].m["error"] != true || srv.ToolRuns("terminal") != 0 {
		t.Fatalf("denied tool ran: %s, %d", evs[3].raw, srv.ToolRuns("terminal"))
	}
}

// TestRunsApprovalScopes: "session" approves the pattern for the rest of the run; smart-denied
// and non-permanent approvals offer fewer choices; 409 approval_not_pending when none waits.
func TestRunsApprovalScopes(t *testing.T) {
	second := rmTool
	second.Approval = &hermestest.Approval{PatternKey: "recursive_delete", NoPermanent: true}
	third := hermestest.Tool{Name: "curl", Args: `{"url": "x"}`, Approval: &hermestest.Approval{SmartDenied: true}}
	srv := newServer(t, approvalAgent(rmTool, second, third))
	id := startRun(t, srv, `{"input":"x"}`)
	ctx := testCtx(t)
	noErr(t, srv.WaitRunStatus(ctx, id, "waiting_for_approval"))
	must(t, do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"session","all":true}`), 200)
	noErr(t, srv.WaitRun(ctx, id, func(ri hermestest.RunInfo) bool { return ri.PendingApprovals == 1 }))
	if srv.ToolRuns("terminal") != 2 {
		t.Fatalf("ToolRuns(terminal) %d", srv.ToolRuns("terminal"))
	}
	must(t, do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"once"}`), 200)
	noErr(t, srv.WaitRunStatus(ctx, id, "completed"))
	es, _ := openEvents(t, srv, id)
	var reqs []runEvent
	for _, ev := range es.all() {
		if ev.name == "approval.request" {
			reqs = append(reqs, ev)
		}
	}
	if len(reqs) != 2 || !strings.HasSuffix(reqs[1].raw, `"choices": ["once", "deny"]}`) || reqs[1].m["smart_denied"] != true {
		t.Fatalf("approval requests %v", reqs)
	}
	srv2 := newServer(t, approvalAgent(second))
	id2 := startRun(t, srv2, `{"input":"x"}`)
	es2, _ := openEvents(t, srv2, id2)
	es2.next()
	ev, _ := es2.next()
	if !strings.HasSuffix(ev.raw, `"choices": ["once", "session", "deny"]}`) {
		t.Fatalf("no-permanent choices %s", ev.raw)
	}
	must(t, do(t, srv2, "POST", "/v1/runs/"+id2+"/approval", `{"choice":"once"}`), 200)
	noErr(t, srv2.WaitRunStatus(testCtx(t), id2, "completed"))
	if r := do(t, srv2, "POST", "/v1/runs/"+id2+"/approval", `{"choice":"once"}`); r.status != 409 {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// TestRunsApprovalNotPending: approving a live run that waits for nothing is 409.
func TestRunsApprovalNotPending(t *testing.T) {
	srv := newServer(t, blockingAgent(make(chan struct{})))
	id := startRun(t, srv, `{"input":"x"}`)
	r := do(t, srv, "POST", "/v1/runs/"+id+"/approval", `{"choice":"once"}`)
	if r.status != 409 || r.errCode(t) != "approval_not_pending" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	wantRunNotFound(t, do(t, srv, "POST", "/v1/runs/run_x/approval", `{"choice":"once"}`), "run_x")
}

// TestRunsStopWhileWaitingForApproval: the tool never runs and the run is cancelled.
func TestRunsStopWhileWaitingForApproval(t *testing.T) {
	srv := newServer(t, approvalAgent(rmTool))
	id := startRun(t, srv, `{"input":"x"}`)
	ctx := testCtx(t)
	noErr(t, srv.WaitRunStatus(ctx, id, "waiting_for_approval"))
	must(t, do(t, srv, "POST", "/v1/runs/"+id+"/stop", ""), 200)
	noErr(t, srv.WaitRunStatus(ctx, id, "cancelled"))
	if srv.ToolRuns("terminal") != 0 {
		t.Fatal("tool ran")
	}
}

// TestRunsFailed: an agent failure ends with run.failed and status failed with error.
func TestRunsFailed(t *testing.T) {
	srv := newServer(t, agentReply(hermestest.Reply{Fail: "model exploded"}))
	id := startRun(t, srv, `{"input":"x"}`)
	es, _ := openEvents(t, srv, id)
	evs := es.all()
	if got := names(evs); got != "run.failed" || evs[0].m["error"] != "model exploded" {
		t.Fatalf("events %s %v", got, evs)
	}
	body := must(t, do(t, srv, "GET", "/v1/runs/"+id, ""), 200).body
	if !strings.HasSuffix(body, `"model": "hermes-agent", "error": "model exploded", "last_event": "run.failed"}`) || !strings.Contains(body, `"status": "failed"`) {
		t.Fatalf("status %s", body)
	}
}

// TestRunsValidation: the documented 400s and the session-key echo on the 202.
func TestRunsValidation(t *testing.T) {
	srv := newServer(t)
	for _, tc := range []struct{ body, msg string }{
		{`{bad`, "Invalid JSON"},
		{`{}`, "Missing 'input' field"},
		{`{"input":""}`, "Missing 'input' field"},
		{`{"input":[{"role":"user","content":"  "}]}`, "No user message found in input"},
	} {
		r := must(t, do(t, srv, "POST", "/v1/runs", tc.body), 400)
		if r.body != `{"error": {"message": "`+tc.msg+`", "type": "invalid_request_error", "param": null, "code": null}}` {
			t.Errorf("%s: %s", tc.body, r.body)
		}
	}
	r := must(t, do(t, srv, "POST", "/v1/runs", `{"input":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, "X-Hermes-Session-Key", "k1"), 202)
	if r.header.Get("X-Hermes-Session-Key") != "k1" {
		t.Fatalf("no key echo: %v", r.header)
	}
	if srv.RunsStarted() != 1 {
		t.Fatalf("RunsStarted %d", srv.RunsStarted())
	}
}

// TestRunsIdempotency: without the option a repeated key starts a second run and the
// capabilities do not advertise runs_idempotency; with it the same key replays the run.
func TestRunsIdempotency(t *testing.T) {
	plain := newServer(t)
	a := startRun(t, plain, `{"input":"x"}`, "Idempotency-Key", "k1")
	b := startRun(t, plain, `{"input":"x"}`, "Idempotency-Key", "k1")
	if a == b || plain.RunsStartedFor("k1") != 2 || plain.RunsStarted() != 2 {
		t.Fatalf("plain: %s %s %d", a, b, plain.RunsStartedFor("k1"))
	}
	if strings.Contains(must(t, do(t, plain, "GET", "/v1/capabilities", ""), 200).body, "runs_idempotency") {
		t.Fatal("plain server advertises runs_idempotency")
	}

	srv := newServer(t, hermestest.WithRunsIdempotency())
	caps := must(t, do(t, srv, "GET", "/v1/capabilities", ""), 200).body
	if !strings.Contains(caps, `"cors": false, "runs_idempotency": {"supported": true, "durable": true, "retention_seconds": 86400}}, "endpoints"`) {
		t.Fatalf("capabilities %s", caps)
	}
	r1 := must(t, do(t, srv, "POST", "/v1/runs", `{"input":"x"}`, "Idempotency-Key", "k1"), 202)
	id := r1.json(t)["run_id"].(string)
	if r1.body != `{"run_id": "`+id+`", "status": "started", "replayed": false}` || r1.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("first %s", r1.body)
	}
	r2 := must(t, do(t, srv, "POST", "/v1/runs", `{ "input": "x" }`, "Idempotency-Key", "k1"), 202)
	if r2.body != `{"run_id": "`+id+`", "status": "started", "replayed": true}` || r2.header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("replay %s %v", r2.body, r2.header)
	}
	if srv.RunsStartedFor("k1") != 1 || srv.RunsStarted() != 1 {
		t.Fatalf("started %d", srv.RunsStartedFor("k1"))
	}
	r3 := must(t, do(t, srv, "POST", "/v1/runs", `{"input":"y"}`, "Idempotency-Key", "k1"), 409)
	if r3.errCode(t) != "idempotency_key_conflict" {
		t.Fatalf("conflict %s", r3.body)
	}
	r4 := must(t, do(t, srv, "POST", "/v1/runs", `{"input":"y"}`, "Idempotency-Key", strings.Repeat("k", 256)), 400)
	if r4.errCode(t) != "invalid_idempotency_key" {
		t.Fatalf("invalid key %s", r4.body)
	}
	startRun(t, srv, `{"input":"x"}`, "Idempotency-Key", "k2")
	startRun(t, srv, `{"input":"x"}`)
	if srv.RunsStarted() != 3 || srv.RunsStartedFor("k2") != 1 {
		t.Fatalf("started %d", srv.RunsStarted())
	}
}

// TestRunsFaults: a dropped 202 still started the run (an uncertain start); a stream dropped
// after one event loses the queue; a Status fault answers before anything starts.
func TestRunsFaults(t *testing.T) {
	srv := newServer(t)
	srv.InjectFault(hermestest.Fault{Route: "run_start", Drop: true})
	if r := do(t, srv, "POST", "/v1/runs", `{"input":"x"}`); r.err == nil {
		t.Fatalf("want a broken connection, got %d", r.status)
	}
	if srv.RunsStarted() != 1 {
		t.Fatalf("RunsStarted %d", srv.RunsStarted())
	}
	srv.InjectFault(hermestest.Fault{Route: "run_start", Status: 503})
	if r := do(t, srv, "POST", "/v1/runs", `{"input":"x"}`); r.status != 503 || r.errCode(t) != "gateway_draining" || srv.RunsStarted() != 1 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	id := startRun(t, srv, `{"input":"a b c"}`)
	noErr(t, srv.WaitRunStatus(testCtx(t), id, "completed"))
	srv.InjectFault(hermestest.Fault{Route: "run_events", Drop: true, AfterEvents: 1})
	es, _ := openEvents(t, srv, id)
	if n := len(es.all()); n != 1 || es.closed {
		t.Fatalf("%d events before the drop, closed=%v", n, es.closed)
	}
	_, r := openEvents(t, srv, id)
	wantRunNotFound(t, r, id)
}

// TestRunsConcurrencyGate: runs hold a slot until they end; v0.19 answers 429 with
// Retry-After, v0.16 caps runs with the old body and no Retry-After.
func TestRunsConcurrencyGate(t *testing.T) {
	for _, v := range []string{hermestest.Version019, hermestest.Version016} {
		release := make(chan struct{})
		srv := newServer(t, hermestest.WithVersion(v), hermestest.WithMaxConcurrentRuns(1), blockingAgent(release))
		startRun(t, srv, `{"input":"x"}`)
		r := must(t, do(t, srv, "POST", "/v1/runs", `{"input":"y"}`), 429)
		typ := "rate_limit_error"
		if v == hermestest.Version016 {
			typ = "invalid_request_error"
		}
		if r.body != `{"error": {"message": "Too many concurrent runs (max 1)", "type": "`+typ+`", "param": null, "code": "rate_limit_exceeded"}}` ||
			(r.header.Get("Retry-After") == "1") != (v == hermestest.Version019) {
			t.Fatalf("%s: %s %v", v, r.body, r.header)
		}
		close(release)
		noErr(t, srv.WaitInFlight(testCtx(t), 0))
		startRun(t, srv, `{"input":"z"}`)
	}
}

// TestRunsCloseStopsRuns: Close returns while runs block in the agent or wait for approval
// with a subscriber attached, and leaves no goroutines behind.
func TestRunsCloseStopsRuns(t *testing.T) {
	base := runtime.NumGoroutine()
	ctx := testCtx(t)
	srv := hermestest.NewServer(blockingAgent(make(chan struct{})))
	startRun(t, srv, `{"input":"x"}`)
	srv2 := hermestest.NewServer(approvalAgent(rmTool))
	id := startRun(t, srv2, `{"input":"x"}`)
	noErr(t, srv2.WaitRunStatus(ctx, id, "waiting_for_approval"))
	es, _ := openEvents(t, srv2, id)
	es.next()
	done := make(chan struct{})
	go func() { srv.Close(); srv2.Close(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Close blocked on a run")
	}
	es.close()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	waitGoroutines(t, ctx, base)
}

// TestRunsIDsAndInfo: RunIDs lists runs oldest first; Run reports status, key and output.
func TestRunsIDsAndInfo(t *testing.T) {
	clk := newClock() // a frozen clock: equal creation times keep their order
	srv := newServer(t, hermestest.WithClock(clk.now))
	a := startRun(t, srv, `{"input":"a"}`, "Idempotency-Key", "ka")
	b := startRun(t, srv, `{"input":"b"}`)
	if ids := srv.RunIDs(); len(ids) != 2 || ids[0] != a || ids[1] != b {
		t.Fatalf("RunIDs %v", ids)
	}
	noErr(t, srv.WaitRunStatus(testCtx(t), a, "completed"))
	ri, ok := srv.Run(a)
	if !ok || ri.IdempotencyKey != "ka" || ri.Output != "stub reply: a" || ri.SessionID != a || ri.Subscribed {
		t.Fatalf("Run %+v", ri)
	}
	if _, ok := srv.Run("run_nope"); ok {
		t.Fatal("unknown run found")
	}
}

// TestRunsKeepalive: an idle events stream carries ": keepalive" comments.
func TestRunsKeepalive(t *testing.T) {
	srv := newServer(t, hermestest.WithKeepalive(5*time.Millisecond), blockingAgent(make(chan struct{})))
	id := startRun(t, srv, `{"input":"x"}`)
	es, _ := openEvents(t, srv, id)
	for es.sc.Scan() {
		if es.sc.Text() == ": keepalive" {
			return
		}
	}
	t.Fatal("no keepalive")
}
