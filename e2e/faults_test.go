package e2e_test

// The Hermes fault matrix: what each Hermes misbehaviour ends with, per kind of operation.
// Every cell is one action; it checks the terminal result (status, error code, retryable,
// uncertain_outcome), the exact number of Hermes calls, that exactly one result message is
// stored, and that the worker is freed: the fake has no run in flight afterwards and a fresh
// action on the same endpoint (limited to one call at a time) completes.
//
// Documented outcomes (schemas/README.md, "Results"-§6, reference/aip-connector.md §2 and §4):
//
// | Hermes fault                          | chat (unsafe JSON)                  | chat_stream, responses_stream (unsafe streams)    | models (safe JSON)                       |
// |---------------------------------------|-------------------------------------|---------------------------------------------------|------------------------------------------|
// | 500                                   | failed remote_unavailable, 1 call   | failed remote_unavailable, 1 call                 | retried: completed, 2 calls              |
// | 502                                   | failed remote_unavailable, 1 call   | failed remote_unavailable, 1 call                 | retried: completed, 2 calls              |
// | 502 agent_incomplete                  | failed agent_incomplete, 1 call     | failed agent_incomplete, 1 call                   | retried (5xx on a safe read): completed, 2 calls |
// | 503 gateway_draining (Retry-After: 1) | retried after >= 1 s: completed, 2 calls | retried after >= 1 s: completed, 2 calls     | retried after >= 1 s: completed, 2 calls |
// | 503 (plain)                           | failed remote_unavailable, 1 call   | failed remote_unavailable, 1 call                 | retried: completed, 2 calls              |
// | slower than timeout_ms                | failed deadline_exceeded, 1 call    | failed deadline_exceeded, 1 call                  | failed deadline_exceeded, 1 call (certain) |
// | connection reset before a response    | failed transport, 1 call            | failed transport, 1 call                          | retried: completed, 2 calls              |
// | reset mid-stream (after 2 events; JSON: after the work, before the body) | failed transport, 1 call | failed stream_incomplete, 1 call, the 2 events published and a partial aggregate | retried: completed, 2 calls |
// | malformed frame/body (invalid UTF-8)  | completed, output {"text": <lossy body>}, 1 call | failed invalid_response (reason invalid_utf8), 1 call | completed, output {"text": ...}, 1 call |
// | oversized frame/body (> 1 MiB)        | completed, output the whole body (offloaded), 1 call | failed invalid_response (reason frame_too_large), 1 call | completed, output the whole body, 1 call |
// | stall past the deadline               | failed deadline_exceeded, 1 call    | failed deadline_exceeded, 1 call, events so far published | failed deadline_exceeded, 1 call (certain) |
//
// Every failed result in the table has retryable false. uncertain_outcome is true for every
// failure of an unsafe operation (Hermes may have done the work) and false for the safe read.
// The 1 MiB frame cap applies to SSE frames only; a JSON body may be up to 64 MiB, and a
// result too large for one NATS message goes to the object store. Non-JSON bodies of JSON
// operations become {"text": ...} (schemas/README.md, "Results"). A certain non-start (503 gateway_draining,
// 429 from the concurrency gate, a refused connection) is retried for every operation after
// Retry-After, within the action's deadline.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

type opKind int

const (
	unsafeJSON opKind = iota
	unsafeStream
	safeJSON
)

type faultOp struct {
	op    string
	kind  opKind
	input string
}

var faultOps = []faultOp{
	{"chat", unsafeJSON, `{"prompt":"fault matrix one two three four"}`},
	{"chat_stream", unsafeStream, `{"prompt":"fault matrix one two three four"}`},
	{"responses_stream", unsafeStream, `{"input":"fault matrix one two three four"}`},
	{"models", safeJSON, `{}`},
}

// faultWant is the documented outcome of one cell.
type faultWant struct {
	status     string // completed or failed
	code       string
	calls      int
	httpStatus int    // checked when non-zero
	reason     string // details.reason, checked when non-empty
	events     int    // stream events published, checked when >= 0
	minGap     time.Duration
	check      func(t *testing.T, res *events.Result)
}

type faultCase struct {
	name      string
	fault     hermestest.Fault
	timeoutMS int64
	want      func(k opKind) faultWant
}

const oversize = 1<<20 + 1

func failedOnce(code string, status int) func(opKind) faultWant {
	return func(k opKind) faultWant {
		if k == safeJSON {
			return faultWant{status: "completed", calls: 2, events: -1}
		}
		return faultWant{status: "failed", code: code, calls: 1, httpStatus: status, events: 0}
	}
}

var faultCases = []faultCase{
	{name: "500", fault: hermestest.Fault{Status: 500}, want: failedOnce("remote_unavailable", 500)},
	{name: "502", fault: hermestest.Fault{Status: 502}, want: failedOnce("remote_unavailable", 502)},
	{name: "502_agent_incomplete", fault: hermestest.Fault{Status: 502,
		Body: `{"error":{"message":"agent ended without a final answer","type":"server_error","param":null,"code":"agent_incomplete"}}`},
		want: failedOnce("agent_incomplete", 502)},
	{name: "503_draining", fault: hermestest.Fault{Status: 503}, want: func(opKind) faultWant {
		return faultWant{status: "completed", calls: 2, events: -1, minGap: 900 * time.Millisecond}
	}},
	{name: "503", fault: hermestest.Fault{Status: 503,
		Body: `{"error":{"message":"Service Unavailable","type":"server_error","param":null,"code":null}}`},
		want: failedOnce("remote_unavailable", 503)},
	{name: "slow", fault: hermestest.Fault{Delay: 10 * time.Second}, timeoutMS: 1000, want: func(k opKind) faultWant {
		return faultWant{status: "failed", code: "deadline_exceeded", calls: 1, events: 0}
	}},
	{name: "reset", fault: hermestest.Fault{Reset: true}, want: func(k opKind) faultWant {
		if k == safeJSON {
			return faultWant{status: "completed", calls: 2, events: -1}
		}
		return faultWant{status: "failed", code: "transport", calls: 1, events: 0}
	}},
	{name: "drop_mid_stream", fault: hermestest.Fault{Drop: true, AfterEvents: 2}, want: func(k opKind) faultWant {
		switch k {
		case safeJSON:
			return faultWant{status: "completed", calls: 2, events: -1}
		case unsafeJSON:
			return faultWant{status: "failed", code: "transport", calls: 1, events: -1}
		}
		return faultWant{status: "failed", code: "stream_incomplete", calls: 1, events: 2, httpStatus: 200,
			check: func(t *testing.T, res *events.Result) {
				out := output(t, res)
				if jint(out, "event_count") != 2 || jpath(out, "terminal") != false {
					t.Errorf("partial aggregate %s, want event_count 2, terminal false", res.Output)
				}
			}}
	}},
	{name: "malformed", fault: hermestest.Fault{Malformed: true, AfterEvents: 1}, want: func(k opKind) faultWant {
		if k == unsafeStream {
			return faultWant{status: "failed", code: "invalid_response", calls: 1, events: 1, reason: "invalid_utf8", httpStatus: 200}
		}
		return faultWant{status: "completed", calls: 1, events: -1, check: func(t *testing.T, res *events.Result) {
			text := jstr(output(t, res), "text")
			if !strings.Contains(text, "garbage") || !utf8.ValidString(text) || !strings.Contains(text, "\uFFFD") {
				t.Errorf("output %s, want {\"text\": <the body with invalid bytes replaced>}", truncate(string(res.Output), 200))
			}
		}}
	}},
	{name: "oversized", fault: hermestest.Fault{Oversized: oversize, AfterEvents: 1}, want: func(k opKind) faultWant {
		if k == unsafeStream {
			return faultWant{status: "failed", code: "invalid_response", calls: 1, events: 1, reason: "frame_too_large", httpStatus: 200}
		}
		return faultWant{status: "completed", calls: 1, events: -1, check: func(t *testing.T, res *events.Result) {
			s, ok := output(t, res).(string)
			if !ok || len(s) != oversize || strings.Trim(s, "x") != "" {
				t.Errorf("output is not the %d-byte body (got %d bytes)", oversize, len(res.Output))
			}
		}}
	}},
	{name: "stall", fault: hermestest.Fault{Stall: true, AfterEvents: 1}, timeoutMS: 1000, want: func(k opKind) faultWant {
		w := faultWant{status: "failed", code: "deadline_exceeded", calls: 1, events: -1}
		if k == unsafeStream {
			w.events = 1
		}
		return w
	}},
}

// TestFaultMatrix runs every fault of faultCases against every operation of faultOps, one
// harness per operation (cells of one operation run in order on an endpoint that allows a
// single call at a time, so a worker or slot left behind by a cell blocks the next check).
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	for _, op := range faultOps {
		t.Run(op.op, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, withConfig(func(c *bridge.Config) { c.Endpoints[0].MaxConcurrency = 1 }))
			for _, fc := range faultCases {
				t.Run(fc.name, func(t *testing.T) { runFaultCell(h.at(t), op, fc) })
			}
		})
	}
}

func runFaultCell(h *harness, op faultOp, fc faultCase) {
	t := h.t
	want := fc.want(op.kind)
	before := len(h.requests(op.op))
	f := fc.fault
	f.Route = op.op
	h.fake.InjectFault(f)
	defer h.fake.ClearFaults()

	var mods []func(*events.Action)
	timeout := 30 * time.Second
	if fc.timeoutMS > 0 {
		mods = append(mods, withTimeoutMS(fc.timeoutMS))
		timeout = time.Duration(fc.timeoutMS) * time.Millisecond
	}
	start := time.Now()
	res, evs := h.call(op.op, op.input, mods...)
	took := time.Since(start)

	if res.Status != want.status {
		t.Fatalf("status %q (error %s), want %s %s", res.Status, errString(res.Error), want.status, want.code)
	}
	if want.status == "completed" {
		if res.Error != nil {
			t.Errorf("completed with error %s", errString(res.Error))
		}
	} else {
		e := requireFailed(t, res, want.code)
		if e.Retryable {
			t.Errorf("error %s: retryable, want false", errString(e))
		}
		if wantUncertain := op.kind != safeJSON; e.UncertainOutcome != wantUncertain {
			t.Errorf("error %s: uncertain_outcome %v, want %v", errString(e), e.UncertainOutcome, wantUncertain)
		}
		if want.httpStatus != 0 && e.HTTPStatus != want.httpStatus {
			t.Errorf("error %s: http_status %d, want %d", errString(e), e.HTTPStatus, want.httpStatus)
		}
		if want.reason != "" && detail(e, "reason") != want.reason {
			t.Errorf("error %s: details.reason %q, want %q", errString(e), detail(e, "reason"), want.reason)
		}
		if e.Message == "" {
			t.Errorf("error without a message")
		}
	}
	if fc.timeoutMS > 0 && took > timeout+5*time.Second {
		t.Errorf("settled after %s for a %s deadline", took, timeout)
	}
	if op.kind == unsafeStream && want.events >= 0 {
		if len(evs) != want.events {
			t.Errorf("%d events published, want %d", len(evs), want.events)
		}
		for i, e := range evs {
			if e.Sequence != int64(i) {
				t.Errorf("event %d has sequence %d", i, e.Sequence)
			}
		}
	}
	if want.check != nil {
		want.check(t, res)
	}

	// Exactly one result, and the right number of Hermes calls once the consumer is idle.
	h.requireResults(1, 15*time.Second, res.ActionID)
	rs := h.requests(op.op)[before:]
	if len(rs) != want.calls {
		t.Errorf("%d Hermes calls, want %d", len(rs), want.calls)
	}
	if want.minGap > 0 && len(rs) >= 2 {
		if gap := rs[1].Time.Sub(rs[0].Time); gap < want.minGap {
			t.Errorf("retried after %s, want at least %s (Retry-After)", gap, want.minGap)
		}
	}
	if h.fake.PendingFaults() != 0 {
		t.Errorf("the injected fault was not consumed")
	}

	// The worker is freed: no run left in flight at the fake, and a fresh action on the
	// same single-slot endpoint completes.
	h.fake.ClearFaults()
	h.eventually(10*time.Second, func() error {
		if n := h.fake.InFlight(); n != 0 {
			return fmt.Errorf("fake has %d runs in flight", n)
		}
		return nil
	})
	freshStart := time.Now()
	fresh, _ := h.call(op.op, op.input)
	requireCompleted(t, fresh)
	if d := time.Since(freshStart); d > 10*time.Second {
		t.Errorf("the fresh action took %s", d)
	}
}

// TestRetryAfterBeyondDeadline: a 429 from the concurrency gate whose Retry-After is longer
// than what is left of the action's deadline is not waited for: the action settles at once,
// failed remote_unavailable, retryable and certain (Hermes never started), with the
// server's retry_after_ms, after exactly one call.
func TestRetryAfterBeyondDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, op := range []string{"chat", "chat_stream"} {
		t.Run(op, func(t *testing.T) {
			h := h.at(t)
			before := h.fake.Calls(op)
			h.fake.InjectFault(hermestest.Fault{Route: op, Status: http.StatusTooManyRequests,
				Header: http.Header{"Retry-After": {"30"}}})
			start := time.Now()
			res, _ := h.call(op, `{"prompt":"gated for longer than the deadline"}`, withTimeoutMS(5000))
			e := requireFailed(t, res, "remote_unavailable")
			if !e.Retryable || e.UncertainOutcome || e.HTTPStatus != 429 || e.RetryAfterMS != 30000 {
				t.Errorf("error %s, want 429 retryable, certain, retry_after_ms 30000", errString(e))
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("settled after %s: the bridge waited for a Retry-After past the deadline", d)
			}
			h.waitIdle(10 * time.Second)
			wantEq(t, h.fake.Calls(op)-before, 1, "%d calls, want 1")
			wantEq(t, h.results(res.ActionID), 1, "%d result messages, want 1")
		})
	}
	t.Run("stream_gate_retried", func(t *testing.T) {
		// The gate's 429 on an unsafe stream is retried after Retry-After like on chat.
		h := h.at(t)
		before := len(h.requests("responses_stream"))
		h.fake.InjectFault(hermestest.Fault{Route: "responses_stream", Status: http.StatusTooManyRequests})
		res, evs := h.call("responses_stream", `{"input":"after the gate"}`)
		requireCompleted(t, res)
		if len(evs) == 0 {
			t.Errorf("no events")
		}
		rs := h.requests("responses_stream")[before:]
		requireEq(t, len(rs), 2, "%d calls, want 2")
		if gap := rs[1].Time.Sub(rs[0].Time); gap < 900*time.Millisecond {
			t.Errorf("retried after %s; Retry-After: 1 was not honoured", gap)
		}
	})
}
