package hermes_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// recorded is the response half of a transcript file copied from shared/reference.
type recorded struct {
	status int
	header http.Header
	body   []byte
}

func readRecorded(t *testing.T, path string) recorded {
	t.Helper()
	raw, err := os.ReadFile(path)
	noErr(t, err)
	_, resp, ok := bytes.Cut(raw, []byte("### --- response (headers + raw body) ---\n"))
	if !ok {
		t.Fatalf("%s: no response section", path)
	}
	resp, _, _ = bytes.Cut(resp, []byte("\n### curl exit"))
	br := bufio.NewReader(bytes.NewReader(resp))
	hr, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer hr.Body.Close()
	body, _ := io.ReadAll(hr.Body)
	return recorded{status: hr.StatusCode, header: hr.Header, body: body}
}

// replayServer answers every request with the recorded response, byte for byte.
func replayServer(t *testing.T, rec recorded, seen *http.Request) string {
	t.Helper()
	var mu sync.Mutex
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if seen != nil {
			*seen = *r.Clone(context.Background())
		}
		mu.Unlock()
		for k, vs := range rec.header {
			if k != "Content-Length" && k != "Date" && k != "Transfer-Encoding" {
				w.Header()[k] = vs
			}
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body)
	}).URL
}

// TestGoldenRuns replays the recorded answers of POST /v1/runs, GET /v1/runs/{id}, stop after
// completion and capabilities (v0.16 and v0.19) through the typed client.
func TestGoldenRuns(t *testing.T) {
	for _, v := range []string{"v0.16", "v0.19"} {
		t.Run(v, func(t *testing.T) {
			ctx := context.Background()
			create := readRecorded(t, "testdata/"+v+"_40_runs_create.txt")
			var req http.Request
			c := newClient(t, replayServer(t, create, &req))
			st, err := c.RunStart(ctx, hermes.Request{Input: hermes.DecodedInput(`{"input":"Hello run"}`), IdempotencyKey: "act-1"})
			noErr(t, err)
			var want struct {
				RunID string `json:"run_id"`
			}
			_ = json.Unmarshal(create.body, &want)
			if st.RunID != want.RunID || st.Status != "started" || st.Replayed || st.HTTPStatus != 202 || string(st.Raw) != string(create.body) {
				t.Fatalf("RunStart %+v", st)
			}
			if req.Header.Get("Idempotency-Key") != "act-1" || req.URL.Path != "/v1/runs" || req.Method != "POST" {
				t.Fatalf("request %s %s %v", req.Method, req.URL.Path, req.Header)
			}

			get := readRecorded(t, "testdata/"+v+"_42_runs_get.txt")
			c = newClient(t, replayServer(t, get, &req))
			rs, err := c.RunStatus(ctx, st.RunID)
			noErr(t, err)
			if rs.RunID != st.RunID || rs.Status != hermes.RunCompleted || !rs.Terminal() || rs.SessionID != st.RunID ||
				rs.Model != "hermes-agent" || rs.LastEvent != "run.completed" || rs.Output == nil || *rs.Output != "stub reply: Hello run" ||
				rs.Error != nil || rs.Usage == nil || rs.Usage.OutputTokens != 5 || rs.Usage.TotalTokens != rs.Usage.InputTokens+5 ||
				rs.CreatedAt <= 1.7e9 || rs.UpdatedAt < rs.CreatedAt || string(rs.Raw) != string(get.body) {
				t.Fatalf("RunStatus %+v", rs)
			}
			if req.URL.Path != "/v1/runs/"+st.RunID {
				t.Fatalf("path %s", req.URL.Path)
			}

			stop := readRecorded(t, "testdata/"+v+"_43_runs_stop.txt")
			c = newClient(t, replayServer(t, stop, &req))
			_, err = c.RunStop(ctx, st.RunID)
			e := asError(t, err)
			if !errors.Is(err, hermes.ErrRunNotFound) || errors.Is(err, hermes.ErrRouteNotFound) || e.HTTPStatus != 404 ||
				e.RemoteCode != "run_not_found" || e.Code != hermes.CodeRemoteRejected || strings.Contains(err.Error(), st.RunID) {
				t.Fatalf("RunStop after completion: %v %+v", err, e)
			}
			if req.URL.Path != "/v1/runs/"+st.RunID+"/stop" || req.ContentLength > 0 {
				t.Fatalf("stop request %s %d", req.URL.Path, req.ContentLength)
			}

			caps := readRecorded(t, "testdata/"+v+"_05_capabilities.txt")
			cp, err := newClient(t, replayServer(t, caps, nil)).Capabilities(ctx)
			noErr(t, err)
			if !cp.Runs() || cp.DurableRunIdempotency() || cp.RunsIdempotency != (hermes.RunsIdempotency{}) ||
				cp.Endpoints["run_events"].Path != "/v1/runs/{run_id}/events" || cp.Model != "hermes-agent" {
				t.Fatalf("capabilities %+v", cp)
			}
		})
	}
}

type goldenRunEvent struct {
	Name      string           `json:"name"`
	Kind      string           `json:"kind"`
	Terminal  bool             `json:"terminal"`
	Delta     string           `json:"delta,omitempty"`
	Text      string           `json:"text,omitempty"`
	Output    string           `json:"output,omitempty"`
	Usage     *hermes.RunUsage `json:"usage,omitempty"`
	RunID     string           `json:"run_id"`
	Timestamp float64          `json:"timestamp"`
	Data      json.RawMessage  `json:"data"`
}

// TestGoldenRunEvents reads the recorded run-events streams through RunEvents and compares the
// events with testdata/*_41_runs_events.run.golden.json; after run.completed Next is io.EOF.
func TestGoldenRunEvents(t *testing.T) {
	for _, v := range []string{"v0.16", "v0.19"} {
		t.Run(v, func(t *testing.T) {
			body, err := os.ReadFile("testdata/" + v + "_41_runs_events.sse")
			noErr(t, err)
			var req *http.Request
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				req = r
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write(body)
			})
			es, err := newClient(t, srv.URL).RunEvents(context.Background(), "run_905f3dcb188744a8bb5f62036342a339")
			noErr(t, err)
			defer es.Close()
			var got []goldenRunEvent
			var text strings.Builder
			for {
				ev, err := es.Next()
				if err == io.EOF {
					break
				}
				noErr(t, err)
				text.WriteString(ev.Delta)
				got = append(got, goldenRunEvent{ev.Name, ev.Kind, ev.Terminal, ev.Delta, ev.Text, ev.Output, ev.Usage, ev.RunID, ev.Timestamp, ev.Data})
			}
			if _, err := es.Next(); err != io.EOF {
				t.Fatalf("after the end: %v", err)
			}
			if req.URL.Path != "/v1/runs/run_905f3dcb188744a8bb5f62036342a339/events" || req.Header.Get("Accept") != "text/event-stream" {
				t.Fatalf("request %s %v", req.URL.Path, req.Header)
			}
			if len(got) != 6 || text.String() != "stub reply: Hello run" || got[5].Output != text.String() || got[4].Kind != hermes.KindThought {
				t.Fatalf("events %+v", got)
			}
			b, _ := json.MarshalIndent(got, "", "  ")
			b = append(b, '\n')
			checkGolden(t, "testdata/"+v+"_41_runs_events.run.golden.json", b, "TestGoldenRunEvents")
		})
	}
}

// TestRunEventsIncomplete: a stream that ends without a terminal event is stream_incomplete;
// a frame that is not a run event is invalid_response.
func TestRunEventsIncomplete(t *testing.T) {
	for _, tc := range []struct{ body, code string }{
		{"data: {\"event\": \"message.delta\", \"delta\": \"a\"}\n\n: stream closed\n\n", hermes.CodeStreamIncomplete},
		{"data: [1, 2]\n\n", hermes.CodeInvalidResponse},
		{"data: {\"delta\": \"no event\"}\n\n", hermes.CodeInvalidResponse},
	} {
		es, err := newClient(t, sseServer(t, tc.body).URL).RunEvents(context.Background(), "run_1")
		noErr(t, err)
		var last error
		for range 5 {
			if _, last = es.Next(); last != nil {
				break
			}
		}
		if e := asError(t, last); e.Code != tc.code {
			t.Errorf("%q: %v", tc.body, last)
		}
		if _, again := es.Next(); again != last {
			t.Errorf("error not sticky")
		}
		es.Close()
	}
}

// TestRouteNotFound: aiohttp's text/plain 404 is ErrRouteNotFound, not ErrRunNotFound.
func TestRouteNotFound(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(404)
		_, _ = io.WriteString(w, "404: Not Found")
	})
	c := newClient(t, srv.URL)
	_, err := c.RunStatus(context.Background(), "run_1")
	if !errors.Is(err, hermes.ErrRouteNotFound) || errors.Is(err, hermes.ErrRunNotFound) {
		t.Fatalf("RunStatus: %v", err)
	}
	_, err = c.RunEvents(context.Background(), "run_1")
	if !errors.Is(err, hermes.ErrRouteNotFound) {
		t.Fatalf("RunEvents: %v", err)
	}
}

// TestPrepareRuns: the mapping of the five run operations (and of run_steer, which Prepare
// accepts but the bridge does not serve as an action) and the rules Prepare keeps (the
// others are the schema's: schemas/input_rules_test.go).
func TestPrepareRuns(t *testing.T) {
	ok := []struct{ op, in, key, path, body string }{
		{"run_start", `{"input":"hi","session_key":"k","model":"m"}`, "a", "/v1/runs", `{"input":"hi","model":"m"}`},
		{"run_start", `{"body":{"input":[{"role":"user","content":"x"}],"session_id":"s"},"idempotency_key":"i"}`, "a", "/v1/runs", `{"input":[{"content":"x","role":"user"}],"session_id":"s"}`},
		{"run_start", `{"body":"just text"}`, "a", "/v1/runs", `{"input":"just text"}`},
		{"run_status", `{"run_id":"run_1"}`, "", "/v1/runs/run_1", ""},
		{"run_events", `{"body":{"run_id":"a b"},"max_events":3}`, "", "/v1/runs/a%20b/events", ""},
		{"run_stop", `{"run_id":"run_1"}`, "k", "/v1/runs/run_1/stop", ""},
		{"run_approval", `{"run_id":"run_1","choice":"allow","resolve_all":true}`, "k", "/v1/runs/run_1/approval", `{"all":true,"choice":"allow"}`},
		{"run_approval", `{"run_id":"run_1","body":{"choice":"deny","all":false}}`, "k", "/v1/runs/run_1/approval", `{"choice":"deny"}`},
		{"run_steer", `{"run_id":"run_1","input":"focus"}`, "", "/v1/runs/run_1/steer", `{"input":"focus"}`},
		{"run_approval", `{"run_id":"run_1","choice":"once","request_id":"r1"}`, "k", "/v1/runs/run_1/approval", `{"choice":"once","request_id":"r1"}`},
		{"run_approval", `{"run_id":"run_1","choice":"once","request_id":""}`, "k", "/v1/runs/run_1/approval", `{"choice":"once"}`},
	}
	for _, tc := range ok {
		p, err := hermes.Prepare(hermes.Request{Operation: tc.op, Input: hermes.DecodedInput(tc.in), IdempotencyKey: tc.key})
		if err != nil {
			t.Errorf("%s %s: %v", tc.op, tc.in, err)
			continue
		}
		if p.Path != tc.path || string(p.Body) != tc.body {
			t.Errorf("%s %s: %s %s", tc.op, tc.in, p.Path, p.Body)
		}
		if tc.op == "run_start" && (p.Header.Get("Idempotency-Key") != tc.key || p.Spec.KeyRequired != true) {
			t.Errorf("run_start headers %v", p.Header)
		}
		if tc.op == "run_events" && (p.MaxEvents != 3 || p.Header.Get("Accept") != "text/event-stream") {
			t.Errorf("run_events %d %v", p.MaxEvents, p.Header)
		}
	}
	bad := []struct{ op, in, key, field string }{
		{"run_start", `{"input":"hi"}`, "", "idempotency_key"},
		{"run_start", `{"input":"hi"}`, "has space", "idempotency_key"},
		{"run_start", `{"input":"hi"}`, strings.Repeat("k", 256), "idempotency_key"},
		{"run_start", `{"input":[{"role":"user"}]}`, "k", "input.input[0].content"},
		{"run_start", `{"body":{"input":[{"content":"a"},{"content":null}]}}`, "k", "input.body.input[1].content"},
		{"run_start", `{"input":"x","session_key":"a\u0000"}`, "k", "input.session_key"},
		{"run_status", `{}`, "", "input.run_id"},
		{"run_events", `{"run_id":".."}`, "", "input.run_id"},
	}
	for _, tc := range bad {
		_, err := hermes.Prepare(hermes.Request{Operation: tc.op, Input: hermes.DecodedInput(tc.in), IdempotencyKey: tc.key})
		var ie *hermes.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s %s: %v, want field %s", tc.op, tc.in, err, tc.field)
		}
	}
	if n := len(hermes.RunOperations()); n != 5 {
		t.Fatalf("%d run operations", n)
	}
	if _, ok := hermes.LookupRun("run_steer"); ok {
		t.Fatal("run_steer is a run operation the bridge would serve as an action")
	}
	if _, ok := hermes.Lookup("run_start"); ok {
		t.Fatal("run_start is in the 21-operation table")
	}
	if s, ok := hermes.LookupRun("run_events"); !ok || !s.Stream || !s.Safe {
		t.Fatalf("LookupRun %+v", s)
	}
}

// TestParseCapabilitiesRunsIdempotency: the shapes of runs_idempotency the client accepts.
func TestParseCapabilitiesRunsIdempotency(t *testing.T) {
	for _, tc := range []struct {
		body string
		want hermes.RunsIdempotency
	}{
		{`{"features": {"runs_idempotency": {"supported": true, "durable": true, "retention_seconds": 86400}}}`, hermes.RunsIdempotency{true, true, 86400}},
		{`{"features": {"runs_idempotency": {"supported": false, "durable": true}}}`, hermes.RunsIdempotency{}},
		{`{"features": {"runs_idempotency": {"durable": false}}}`, hermes.RunsIdempotency{Supported: true}},
		{`{"features": {"runs_idempotency": true}}`, hermes.RunsIdempotency{Supported: true}},
		{`{"runs_idempotency": {"supported": true, "durable": true, "retention_seconds": 60}}`, hermes.RunsIdempotency{true, true, 60}},
		{`{"features": {"runs_idempotency": "yes"}}`, hermes.RunsIdempotency{}},
		{`{"features": []}`, hermes.RunsIdempotency{}},
	} {
		c, err := hermes.ParseCapabilities([]byte(tc.body))
		if err != nil || c.RunsIdempotency != tc.want {
			t.Errorf("%s: %+v %v", tc.body, c, err)
		}
	}
	if _, err := hermes.ParseCapabilities([]byte(`[]`)); err == nil {
		t.Fatal("array accepted")
	}
}

// ---- against the fake -------------------------------------------------------------------

func readAll(t *testing.T, es *hermes.RunEventStream) []hermes.RunEvent {
	t.Helper()
	var out []hermes.RunEvent
	for {
		ev, err := es.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		out = append(out, ev)
	}
}

func runNames(evs []hermes.RunEvent) string {
	var n []string
	for _, e := range evs {
		n = append(n, e.Name)
	}
	return strings.Join(n, ",")
}

func fakeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// follow subscribes to the events of run id.
func follow(t *testing.T, ctx context.Context, c *hermes.Client, id string) *hermes.RunEventStream {
	t.Helper()
	es, err := c.RunEvents(ctx, id)
	noErr(t, err)
	return es
}

func start(t *testing.T, c *hermes.Client, in, key string) *hermes.RunStarted {
	t.Helper()
	st, err := c.RunStart(fakeCtx(t), hermes.Request{Input: hermes.DecodedInput(in), IdempotencyKey: key})
	noErr(t, err)
	return st
}

// TestFakeRunLifecycle, for both versions: start, follow the events to run.completed, read the
// status; a second subscription and a stop after the end are ErrRunNotFound.
func TestFakeRunLifecycle(t *testing.T) {
	for _, v := range []string{hermestest.Version019, hermestest.Version016} {
		t.Run(v, func(t *testing.T) {
			s, c := fakeServer(t, hermestest.WithVersion(v))
			ctx := fakeCtx(t)
			st := start(t, c, `{"input":"Hello run","session_key":"sk"}`, "act-1")
			if st.Replayed || st.SessionKey != "sk" || s.RunsStartedFor("act-1") != 1 {
				t.Fatalf("start %+v", st)
			}
			es := follow(t, ctx, c, st.RunID)
			evs := readAll(t, es)
			es.Close()
			if got := runNames(evs); got != "message.delta,message.delta,message.delta,message.delta,reasoning.available,run.completed" {
				t.Fatalf("events %s", got)
			}
			if last := evs[len(evs)-1]; last.Output != "stub reply: Hello run" || last.Usage == nil || last.RunID != st.RunID {
				t.Fatalf("run.completed %+v", last)
			}
			rs, err := c.RunStatus(ctx, st.RunID)
			if err != nil || rs.Status != hermes.RunCompleted || *rs.Output != "stub reply: Hello run" {
				t.Fatalf("status %+v %v", rs, err)
			}
			if _, err := c.RunEvents(ctx, st.RunID); !errors.Is(err, hermes.ErrRunNotFound) {
				t.Fatalf("re-subscribe: %v", err)
			}
			if _, err := c.RunStop(ctx, st.RunID); !errors.Is(err, hermes.ErrRunNotFound) {
				t.Fatalf("stop after end: %v", err)
			}
			if _, err := c.RunStatus(ctx, "run_0123"); !errors.Is(err, hermes.ErrRunNotFound) {
				t.Fatalf("unknown run: %v", err)
			}
			// The generic path works too: run_events through Call gives the stream aggregate.
			st2 := start(t, c, `{"input":"again"}`, "act-2")
			res, err := c.Call(ctx, hermes.Request{Operation: "run_events", Input: hermes.DecodedInput(`{"run_id":"` + st2.RunID + `"}`)}, nil)
			if err != nil || res.Status != "completed" || res.Stream.Text != "stub reply: again" || res.Stream.LastName != "run.completed" {
				t.Fatalf("Call run_events %+v %v", res, err)
			}
		})
	}
}

// TestFakeRunReattach: the bridge's crash path. A subscriber goes away mid-run; re-attaching
// to the events is ErrRunNotFound, so the caller polls the status until it is terminal.
func TestFakeRunReattach(t *testing.T) {
	release := make(chan struct{})
	s, c := fakeServer(t, hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return hermestest.Reply{Text: "late answer"}
	}))
	ctx := fakeCtx(t)
	st := start(t, c, `{"input":"slow"}`, "act-slow")
	es := follow(t, ctx, c, st.RunID)
	noErr(t, s.WaitRun(ctx, st.RunID, func(ri hermestest.RunInfo) bool { return ri.Subscribed }))
	es.Close() // the "crash"
	for {
		es2, err := c.RunEvents(ctx, st.RunID)
		if errors.Is(err, hermes.ErrRunNotFound) {
			break
		}
		noErr(t, err)
		es2.Close() // the fake had not yet noticed the disconnect
		if ctx.Err() != nil {
			t.Fatal("queue never dropped")
		}
	}
	rs, err := c.RunStatus(ctx, st.RunID)
	if err != nil || rs.Terminal() || rs.Status != hermes.RunRunning {
		t.Fatalf("status mid-run %+v %v", rs, err)
	}
	close(release)
	for {
		rs, err = c.RunStatus(ctx, st.RunID)
		noErr(t, err)
		if rs.Terminal() {
			break
		}
		noErr(t, s.WaitRun(ctx, st.RunID, func(ri hermestest.RunInfo) bool { return hermes.RunTerminal(ri.Status) }))
	}
	if rs.Status != hermes.RunCompleted || *rs.Output != "late answer" || s.RunsStarted() != 1 {
		t.Fatalf("final %+v", rs)
	}
}

// TestFakeRunStop: stop a slow run; it ends cancelled with run.cancelled, and stopping again is
// ErrRunNotFound.
func TestFakeRunStop(t *testing.T) {
	s, c := fakeServer(t, hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		<-ctx.Done()
		return hermestest.Reply{}
	}))
	ctx := fakeCtx(t)
	st := start(t, c, `{"input":"x"}`, "k")
	noErr(t, s.WaitRunStatus(ctx, st.RunID, "running"))
	es := follow(t, ctx, c, st.RunID)
	defer es.Close()
	sr, err := c.RunStop(ctx, st.RunID)
	if err != nil || sr.Status != hermes.RunStopping || sr.RunID != st.RunID {
		t.Fatalf("stop %+v %v", sr, err)
	}
	evs := readAll(t, es)
	if runNames(evs) != "run.cancelled" || evs[0].Kind != hermes.KindDone || !evs[0].Terminal {
		t.Fatalf("events %+v", evs)
	}
	rs, err := c.RunStatus(ctx, st.RunID)
	if err != nil || rs.Status != hermes.RunCancelled || rs.LastEvent != "run.cancelled" {
		t.Fatalf("status %+v %v", rs, err)
	}
	if _, err := c.RunStop(ctx, st.RunID); !errors.Is(err, hermes.ErrRunNotFound) {
		t.Fatalf("second stop: %v", err)
	}
}

// TestFakeRunSteer (v0.21): RunSteer queues text for a running run (accepted); text the agent
// never reads comes back as pending_steer on run.completed and the status; steering a
// finished run is 409 run_not_accepting_steer, blank text 400 invalid_steer_input. The
// capabilities say run_steer; v0.19's do not, and its steer route is missing.
func TestFakeRunSteer(t *testing.T) {
	release := make(chan struct{})
	s, c := fakeServer(t, hermestest.WithVersion(hermestest.Version021),
		hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return hermestest.Reply{Text: "done"}
		}))
	ctx := fakeCtx(t)
	if caps, err := c.Capabilities(ctx); err != nil || !caps.RunSteer {
		t.Fatalf("v0.21 capabilities: %+v %v", caps, err)
	}
	st := start(t, c, `{"input":"x"}`, "k")
	noErr(t, s.WaitRunStatus(ctx, st.RunID, "running"))
	es := follow(t, ctx, c, st.RunID)
	defer es.Close()
	_, err := c.RunSteer(ctx, st.RunID, "   ")
	var he *hermes.Error
	if !errors.As(err, &he) || he.HTTPStatus != 400 || he.RemoteCode != "invalid_steer_input" {
		t.Fatalf("blank steer: %v", err)
	}
	sr, err := c.RunSteer(ctx, st.RunID, "focus")
	if err != nil || !sr.Accepted || sr.RunID != st.RunID {
		t.Fatalf("steer %+v %v", sr, err)
	}
	close(release)
	evs := readAll(t, es)
	last := evs[len(evs)-1]
	if last.Name != "run.completed" || last.PendingSteer != "focus" {
		t.Fatalf("last event %+v", last)
	}
	rs, err := c.RunStatus(ctx, st.RunID)
	if err != nil || rs.PendingSteer != "focus" {
		t.Fatalf("status %+v %v", rs, err)
	}
	_, err = c.RunSteer(ctx, st.RunID, "late")
	if !errors.As(err, &he) || he.HTTPStatus != 409 || he.RemoteCode != "run_not_accepting_steer" {
		t.Fatalf("steer a finished run: %v", err)
	}

	_, old := fakeServer(t, hermestest.WithVersion(hermestest.Version019))
	if caps, err := old.Capabilities(ctx); err != nil || caps.RunSteer {
		t.Fatalf("v0.19 capabilities: %+v %v", caps, err)
	}
	if _, err := old.RunSteer(ctx, "run_1", "focus"); !errors.Is(err, hermes.ErrRouteNotFound) {
		t.Fatalf("v0.19 steer: %v", err)
	}
}

// TestRunStatusApproval: while a run waits for a tool approval, Hermes 0.21's status
// carries the approval.request it waits for (RunStatus.Approval, read by ParseRunEvent,
// with the event's request_id); v0.19's carries none.
func TestRunStatusApproval(t *testing.T) {
	for _, v := range []string{hermestest.Version021, hermestest.Version019} {
		t.Run(v, func(t *testing.T) {
			s, c := fakeServer(t, hermestest.WithVersion(v), hermestest.WithAgent(func(context.Context, hermestest.Turn) hermestest.Reply {
				return hermestest.Reply{Text: "cleaned", Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command": "rm -rf build/"}`,
					Approval: &hermestest.Approval{PatternKey: "recursive_delete", Description: "recursive delete"}}}}
			}))
			ctx := fakeCtx(t)
			st := start(t, c, `{"input":"clean up"}`, "k")
			noErr(t, s.WaitRunStatus(ctx, st.RunID, hermes.RunWaitingForApproval))
			rs, err := c.RunStatus(ctx, st.RunID)
			noErr(t, err)
			if v == hermestest.Version019 {
				if rs.Approval != nil {
					t.Fatalf("v0.19 status carries an approval: %s", rs.Approval)
				}
				return
			}
			ev, err := hermes.ParseRunEvent(rs.Approval)
			noErr(t, err)
			if ev.Name != "approval.request" || ev.Approval == nil || ev.Approval.RequestID == "" || ev.Approval.PatternKey != "recursive_delete" {
				t.Fatalf("the status's approval %s reads as %+v", rs.Approval, ev.Approval)
			}
			if ri, _ := s.Run(st.RunID); ri.ApprovalRequestID != ev.Approval.RequestID {
				t.Fatalf("status names request %q, the run waits for %q", ev.Approval.RequestID, ri.ApprovalRequestID)
			}
		})
	}
}

// TestFakeRunApproval: approval.request pauses the run; RunApproval once lets the tool run,
// deny does not; answering a finished run is 409 approval_not_active.
func TestFakeRunApproval(t *testing.T) {
	for _, choice := range []string{"once", "deny"} {
		t.Run(choice, func(t *testing.T) {
			s, c := fakeServer(t, hermestest.WithAgent(func(context.Context, hermestest.Turn) hermestest.Reply {
				return hermestest.Reply{Text: "cleaned", Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command": "rm -rf build/"}`,
					Approval: &hermestest.Approval{PatternKey: "recursive_delete", Description: "recursive delete"}}}}
			}))
			ctx := fakeCtx(t)
			st := start(t, c, `{"input":"clean up"}`, "k")
			es := follow(t, ctx, c, st.RunID)
			defer es.Close()
			var req hermes.RunEvent
			var err error
			for req.Name != "approval.request" {
				req, err = es.Next()
				noErr(t, err)
			}
			a := req.Approval
			if req.Kind != hermes.KindPendingApproval || a == nil || a.Command != "rm -rf build/" || a.PatternKey != "recursive_delete" ||
				!a.AllowPermanent || !a.AllowSession || strings.Join(a.Choices, ",") != "once,session,always,deny" {
				t.Fatalf("approval.request %+v %+v", req, a)
			}
			rs, err := c.RunStatus(ctx, st.RunID)
			if err != nil || rs.Status != hermes.RunWaitingForApproval {
				t.Fatalf("status %+v %v", rs, err)
			}
			ar, err := c.RunApproval(ctx, st.RunID, choice, false)
			if err != nil || ar.Choice != choice || ar.Resolved != 1 || ar.RunID != st.RunID {
				t.Fatalf("approval %+v %v", ar, err)
			}
			rest := readAll(t, es)
			if got := runNames(rest); got != "approval.responded,tool.completed,message.delta,reasoning.available,run.completed" {
				t.Fatalf("events %s", got)
			}
			if rest[0].Choice != choice || rest[0].Resolved != 1 || rest[1].ToolError != (choice == "deny") {
				t.Fatalf("events %+v", rest[:2])
			}
			if want := map[string]int{"once": 1, "deny": 0}[choice]; s.ToolRuns("terminal") != want {
				t.Fatalf("ToolRuns %d, want %d", s.ToolRuns("terminal"), want)
			}
			_, err = c.RunApproval(ctx, st.RunID, "once", false)
			if e := asError(t, err); e.HTTPStatus != 409 || e.RemoteCode != "approval_not_active" || errors.Is(err, hermes.ErrRunNotFound) {
				t.Fatalf("after end: %+v", e)
			}
		})
	}
}

// TestFakeRunIdempotency: without WithRunsIdempotency (v0.16/v0.19) a repeated RunStart starts
// a second run; with it the same key answers the same run_id, Replayed, and starts nothing.
func TestFakeRunIdempotency(t *testing.T) {
	ctx := fakeCtx(t)
	s, c := fakeServer(t)
	caps, err := c.Capabilities(ctx)
	if err != nil || caps.DurableRunIdempotency() || !caps.Runs() {
		t.Fatalf("plain capabilities %+v %v", caps, err)
	}
	a, b := start(t, c, `{"input":"x"}`, "act-1"), start(t, c, `{"input":"x"}`, "act-1")
	if a.RunID == b.RunID || b.Replayed || s.RunsStartedFor("act-1") != 2 {
		t.Fatalf("plain: %+v %+v", a, b)
	}

	s, c = fakeServer(t, hermestest.WithRunsIdempotency())
	caps, err = c.Capabilities(ctx)
	if err != nil || !caps.DurableRunIdempotency() || caps.RunsIdempotency.RetentionSeconds != 86400 {
		t.Fatalf("capabilities %+v %v", caps, err)
	}
	a, b = start(t, c, `{"input":"x"}`, "act-1"), start(t, c, `{"input":"x"}`, "act-1")
	if a.RunID != b.RunID || a.Replayed || !b.Replayed || s.RunsStartedFor("act-1") != 1 || s.RunsStarted() != 1 {
		t.Fatalf("idempotent: %+v %+v", a, b)
	}
	_, err = c.RunStart(ctx, hermes.Request{Input: hermes.DecodedInput(`{"input":"other"}`), IdempotencyKey: "act-1"})
	if e := asError(t, err); e.HTTPStatus != 409 || e.RemoteCode != "idempotency_key_conflict" || !e.NotStarted {
		t.Fatalf("conflict %+v", e)
	}
}

// TestFakeRunFailedAndLostStart: a failing run ends with run.failed (kind error) and status
// failed; a start whose 202 is lost is a transport error that did start the run.
func TestFakeRunFailedAndLostStart(t *testing.T) {
	s, c := fakeServer(t, hermestest.WithAgent(func(context.Context, hermestest.Turn) hermestest.Reply {
		return hermestest.Reply{Fail: "provider down"}
	}))
	ctx := fakeCtx(t)
	st := start(t, c, `{"input":"x"}`, "k")
	es := follow(t, ctx, c, st.RunID)
	evs := readAll(t, es)
	es.Close()
	if len(evs) != 1 || evs[0].Name != "run.failed" || evs[0].Kind != hermes.KindError || evs[0].Error != "provider down" {
		t.Fatalf("events %+v", evs)
	}
	rs, err := c.RunStatus(ctx, st.RunID)
	if err != nil || rs.Status != hermes.RunFailed || rs.Error == nil || *rs.Error != "provider down" || rs.Output != nil {
		t.Fatalf("status %+v %v", rs, err)
	}

	s.InjectFault(hermestest.Fault{Route: "run_start", Drop: true})
	_, err = c.RunStart(ctx, hermes.Request{Input: hermes.DecodedInput(`{"input":"y"}`), IdempotencyKey: "lost"})
	if e := asError(t, err); e.Code != hermes.CodeTransport || e.NotStarted {
		t.Fatalf("lost start %+v", e)
	}
	if s.RunsStartedFor("lost") != 1 {
		t.Fatalf("RunsStartedFor(lost) %d", s.RunsStartedFor("lost"))
	}
	s.InjectFault(hermestest.Fault{Route: "run_start", Status: 429})
	_, err = c.RunStart(ctx, hermes.Request{Input: hermes.DecodedInput(`{"input":"y"}`), IdempotencyKey: "busy"})
	if e := asError(t, err); !e.NotStarted || !e.Retryable(false) || s.RunsStartedFor("busy") != 0 {
		t.Fatalf("429 %+v", e)
	}
	s.InjectFault(hermestest.Fault{Route: "run_events", Drop: true, AfterEvents: 0})
	st = start(t, c, `{"input":"z"}`, "k2")
	es, err = c.RunEvents(ctx, st.RunID)
	noErr(t, err)
	defer es.Close()
	if _, err := es.Next(); asError(t, err).Code != hermes.CodeStreamIncomplete {
		t.Fatalf("dropped stream: %v", err)
	}
}

// TestFakeRunEventsCancel: cancelling the ctx of RunEvents ends Next with cancelled; a
// run_start through Call without a key is an input error.
func TestFakeRunEventsCancel(t *testing.T) {
	s, c := fakeServer(t, hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		<-ctx.Done()
		return hermestest.Reply{}
	}))
	st := start(t, c, `{"input":"x"}`, "k")
	ctx, cancel := context.WithCancel(fakeCtx(t))
	es := follow(t, ctx, c, st.RunID)
	defer es.Close()
	noErr(t, s.WaitRun(fakeCtx(t), st.RunID, func(ri hermestest.RunInfo) bool { return ri.Subscribed }))
	cancel()
	if _, err := es.Next(); asError(t, err).Code != hermes.CodeCancelled {
		t.Fatalf("Next after cancel: %v", err)
	}
	_, err := c.Call(fakeCtx(t), hermes.Request{Operation: "run_start", Input: hermes.DecodedInput(`{"input":"x"}`)}, nil)
	var ie *hermes.InputError
	if !errors.As(err, &ie) || ie.Field != "idempotency_key" {
		t.Fatalf("Call run_start without key: %v", err)
	}
	res, err := c.Call(fakeCtx(t), hermes.Request{Operation: "run_start", Input: hermes.DecodedInput(`{"input":"x"}`), IdempotencyKey: "k2"}, nil)
	if err != nil || res.HTTPStatus != 202 || !strings.Contains(string(res.Output), `"status": "started"`) {
		t.Fatalf("Call run_start %+v %v", res, err)
	}
}

// TestFakeRunApprovalFor (Hermes 0.21): RunApprovalFor answers the request its
// approval.request named, echoing request_id; a request_id the run does not wait for is
// a 409 approval_not_pending and leaves the pending request waiting.
func TestFakeRunApprovalFor(t *testing.T) {
	s, c := fakeServer(t, hermestest.WithVersion(hermestest.Version021), hermestest.WithAgent(func(context.Context, hermestest.Turn) hermestest.Reply {
		return hermestest.Reply{Text: "cleaned", Tools: []hermestest.Tool{{Name: "terminal", Args: `{"command": "rm -rf build/"}`,
			Approval: &hermestest.Approval{}}}}
	}))
	ctx := fakeCtx(t)
	st := start(t, c, `{"input":"clean up"}`, "k")
	es := follow(t, ctx, c, st.RunID)
	defer es.Close()
	var req hermes.RunEvent
	var err error
	for req.Name != "approval.request" {
		req, err = es.Next()
		noErr(t, err)
	}
	rid := req.Approval.RequestID
	if rid == "" {
		t.Fatalf("approval.request without request_id: %s", req.Data)
	}
	_, err = c.RunApprovalFor(ctx, st.RunID, "once", strings.Repeat("f", 32))
	if e := asError(t, err); e.HTTPStatus != 409 || e.RemoteCode != "approval_not_pending" {
		t.Fatalf("wrong request_id: %+v", e)
	}
	if ri, _ := s.Run(st.RunID); ri.PendingApprovals != 1 || ri.ApprovalRequestID != rid {
		t.Fatalf("after a wrong request_id: %+v", ri)
	}
	ar, err := c.RunApprovalFor(ctx, st.RunID, "once", rid)
	if err != nil || ar.RequestID != rid || ar.Resolved != 1 {
		t.Fatalf("approval %+v %v", ar, err)
	}
}
