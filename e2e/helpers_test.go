package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// at returns a view of h whose helpers report to t (a subtest). Every view shares the
// servers, the fake, the bridges and the log buffer.
func (h *harness) at(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}

// publishTo publishes an action for op on endpoint ep and returns its id.
func (h *harness) publishTo(ep, op string, a events.Action, opts ...client.PublishOption) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := h.client.Publish(ctx, ep, op, a, opts...)
	if err != nil {
		h.t.Fatalf("publish %s.%s: %v", ep, op, err)
	}
	return id
}

// callOn publishes an action on endpoint ep and follows it to its terminal result.
func (h *harness) callOn(ep, op string, input any, mod ...func(*events.Action)) (*events.Result, []*events.EventData) {
	h.t.Helper()
	a := events.Action{Input: mustJSON(h.t, input)}
	for _, f := range mod {
		f(&a)
	}
	return h.follow(h.publishTo(ep, op, a))
}

// callOnOK is callOn that fails unless the result is completed (see requireCompleted).
func (h *harness) callOnOK(ep, op string, input any, mod ...func(*events.Action)) *events.Result {
	h.t.Helper()
	res, _ := h.callOn(ep, op, input, mod...)
	requireCompleted(h.t, res)
	return res
}

// publishRaw publishes a hand-made message on subject (no Nats-Msg-Id unless hdr has one).
func (h *harness) publishRaw(subject string, hdr nats.Header, data []byte) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: hdr, Data: data}); err != nil {
		h.t.Fatalf("publish raw on %s: %v", subject, err)
	}
}

// waitIdle waits until the bridge consumer has no undelivered and no unacknowledged action.
func (h *harness) waitIdle(timeout time.Duration) {
	h.t.Helper()
	h.eventually(timeout, h.consumerIdle)
}

// consumerIdle is waitIdle's condition, as an error: nil once the bridge consumer has
// no undelivered and no unacknowledged action.
func (h *harness) consumerIdle() error {
	cfg := h.cfg.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := h.js.Consumer(ctx, cfg.ActionsStream, cfg.Consumer)
	if err != nil {
		return err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		return fmt.Errorf("consumer: %d pending, %d awaiting ack", info.NumPending, info.NumAckPending)
	}
	return nil
}

// requireResults waits until the bridge is idle (see waitIdle) and then checks that
// want result messages are stored for each action of ids.
func (h *harness) requireResults(want int, timeout time.Duration, ids ...string) {
	h.t.Helper()
	h.waitIdle(timeout)
	for _, id := range ids {
		if n := h.results(id); n != want {
			h.t.Errorf("%s: %d result messages stored, want %d", id, n, want)
		}
	}
}

// dlqNow returns every message stored in the dead-letter stream now.
func (h *harness) dlqNow() ([]*jetstream.RawStreamMsg, error) {
	s, err := h.js.Stream(context.Background(), h.cfg.WithDefaults().DLQStream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(context.Background())
	if err != nil {
		return nil, err
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// dlq returns every message stored in the dead-letter stream, once there are at least n.
func (h *harness) dlq(n int, timeout time.Duration) []*jetstream.RawStreamMsg {
	h.t.Helper()
	var out []*jetstream.RawStreamMsg
	h.eventually(timeout, func() error {
		var err error
		if out, err = h.dlqNow(); err != nil {
			return err
		}
		if len(out) < n {
			return fmt.Errorf("dlq has %d messages, want %d", len(out), n)
		}
		return nil
	})
	return out
}

// dlqWithin returns the dead-letter messages once there are at least n, or what is
// there after d; it does not fail the test by itself.
func (h *harness) dlqWithin(n int, d time.Duration) []*jetstream.RawStreamMsg {
	deadline := time.Now().Add(d)
	for {
		out, _ := h.dlqNow()
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requests returns the fake's recorded requests for a route key.
func (h *harness) requests(route string) []hermestest.Recorded {
	var out []hermestest.Recorded
	for _, r := range h.fake.Requests() {
		if r.Route == route {
			out = append(out, r)
		}
	}
	return out
}

// lastRequest returns the newest request on route and checks that the route received
// exactly want requests in total.
func (h *harness) lastRequest(route string, want int) hermestest.Recorded {
	h.t.Helper()
	rs := h.requests(route)
	if len(rs) != want {
		h.t.Fatalf("%s: fake received %d requests, want %d", route, len(rs), want)
	}
	return rs[len(rs)-1]
}

// logLine is one parsed JSON log line of the bridge.
type logLine map[string]any

func (l logLine) str(k string) string  { s, _ := l[k].(string); return s }
func (l logLine) num(k string) float64 { f, _ := l[k].(float64); return f }

// logLines parses the bridge's captured log output.
func (h *harness) logLines() []logLine {
	h.t.Helper()
	var out []logLine
	for _, ln := range strings.Split(h.logs.String(), "\n") {
		if strings.TrimSpace(ln) == "" {
			continue
		}
		var l logLine
		if err := json.Unmarshal([]byte(ln), &l); err != nil {
			h.t.Fatalf("log line is not JSON: %v: %q", err, ln)
		}
		out = append(out, l)
	}
	return out
}

// actionLogs returns the "action" log lines of one action id.
func (h *harness) actionLogs(id string) []logLine {
	var out []logLine
	for _, l := range h.logLines() {
		if l.str("message") == "action" && l.str("action_id") == id {
			out = append(out, l)
		}
	}
	return out
}

// closedPortURL returns an http URL on a loopback port nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	requireOK(t, err, "listen: %v")
	addr := ln.Addr().String()
	requireOK(t, ln.Close(), "close: %v")
	return "http://" + addr
}

func withTimeoutMS(ms int64) func(*events.Action) {
	return func(a *events.Action) { a.TimeoutMS = &ms }
}

func withCapability(c string) func(*events.Action) {
	return func(a *events.Action) { a.CapabilityID = c }
}

// jsonValue decodes raw into a generic value.
func jsonValue(t *testing.T, raw []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode JSON %q: %v", truncate(string(raw), 200), err)
	}
	return v
}

// jpath walks v along keys (strings for objects, ints for arrays); nil when absent.
func jpath(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// jstr returns the string at path ("" when absent or not a string).
func jstr(v any, path ...any) string { s, _ := jpath(v, path...).(string); return s }

// jint returns the integer at path (-1 when absent or not an integer).
func jint(v any, path ...any) int64 {
	switch n := jpath(v, path...).(type) {
	case json.Number:
		i, err := n.Int64()
		if err != nil {
			return -1
		}
		return i
	case float64:
		return int64(n)
	}
	return -1
}

// body decodes a recorded request body as a JSON object.
func body(t *testing.T, r hermestest.Recorded) map[string]any {
	t.Helper()
	m, ok := jsonValue(t, r.Body).(map[string]any)
	if !ok {
		t.Fatalf("%s %s: body is not a JSON object: %q", r.Method, r.Path, truncate(string(r.Body), 200))
	}
	return m
}

// output decodes a result's output.
func output(t *testing.T, r *events.Result) any {
	t.Helper()
	if len(r.Output) == 0 {
		return nil
	}
	return jsonValue(t, r.Output)
}

// requireCompleted fails unless r is a completed result without error or replay.
func requireCompleted(t *testing.T, r *events.Result) {
	t.Helper()
	if r.Status != events.StatusCompleted || r.Error != nil {
		t.Fatalf("action %s: status %q, error %s", r.ActionID, r.Status, errString(r.Error))
	}
}

// requireFailed fails unless r failed with code; it returns the error.
func requireFailed(t *testing.T, r *events.Result, code string) *events.ErrorInfo {
	t.Helper()
	if r.Status != events.StatusFailed || r.Error == nil || r.Error.Code != code {
		t.Fatalf("action %s: status %q, error %s; want failed %s", r.ActionID, r.Status, errString(r.Error), code)
	}
	return r.Error
}

// requireOK stops the test unless err is nil; format, when given, describes the
// failure with err as its one argument.
func requireOK(t *testing.T, err error, format ...string) {
	t.Helper()
	switch {
	case err == nil:
	case len(format) == 0:
		t.Fatal(err)
	default:
		t.Fatalf(format[0], err)
	}
}

// wantEq reports an error of t unless got equals want; format describes the failure,
// with got as its one argument.
func wantEq[T comparable](t *testing.T, got, want T, format string) {
	t.Helper()
	if got != want {
		t.Errorf(format, got)
	}
}

// requireEq is wantEq that stops the test.
func requireEq[T comparable](t *testing.T, got, want T, format string) {
	t.Helper()
	if got != want {
		t.Fatalf(format, got)
	}
}

func errString(e *events.ErrorInfo) string {
	if e == nil {
		return "<nil>"
	}
	b, _ := json.Marshal(e)
	return string(b)
}

func detail(e *events.ErrorInfo, k string) string {
	if e == nil || e.Details == nil {
		return ""
	}
	switch v := e.Details[k].(type) {
	case nil:
		return ""
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

// runParallel runs each function as a parallel subtest under its name, in name order.
func runParallel(t *testing.T, subtests map[string]func(*testing.T)) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(subtests)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			subtests[name](t)
		})
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// checkStream checks a completed stream: contiguous sequences from 0, every event of
// this action, last kind done, text assembled, and the result's aggregate output.
func checkStream(t *testing.T, res *events.Result, evs []*events.EventData, op, wantText string) {
	t.Helper()
	requireCompleted(t, res)
	if len(evs) == 0 {
		t.Fatalf("%s: no events", op)
	}
	var text strings.Builder
	for i, e := range evs {
		if e.Sequence != int64(i) {
			t.Fatalf("%s: event %d has sequence %d", op, i, e.Sequence)
		}
		if e.ActionID != res.ActionID {
			t.Fatalf("%s: event %d has action id %q, want %q", op, i, e.ActionID, res.ActionID)
		}
		text.WriteString(e.Text)
	}
	if k := evs[len(evs)-1].Kind; k != events.KindDone {
		t.Errorf("%s: last event kind %q, want done", op, k)
	}
	if wantText != "" && text.String() != wantText {
		t.Errorf("%s: assembled text %q, want %q", op, text.String(), wantText)
	}
	out := output(t, res)
	if got := jint(out, "event_count"); got != int64(len(evs)) {
		t.Errorf("%s: output event_count %d, events received %d", op, got, len(evs))
	}
	if jpath(out, "terminal") != true || jpath(out, "truncated") != false {
		t.Errorf("%s: output terminal=%v truncated=%v, want true/false", op, jpath(out, "terminal"), jpath(out, "truncated"))
	}
	if got := jstr(out, "text"); got != text.String() {
		t.Errorf("%s: output text %q, events text %q", op, got, text.String())
	}
	if jstr(out, "operation") != op || jstr(out, "endpoint_id") != "primary" || jint(out, "http_status") != 200 {
		t.Errorf("%s: output operation/endpoint/status = %v/%v/%v", op, jpath(out, "operation"), jpath(out, "endpoint_id"), jpath(out, "http_status"))
	}
}

// binaryHeader builds binary-mode ce- headers by hand.
func binaryHeader(id, typ, subject string) nats.Header {
	h := nats.Header{}
	h.Set("ce-specversion", "1.0")
	if id != "" {
		h.Set("ce-id", id)
	}
	h.Set("ce-source", "e2e-raw")
	if typ != "" {
		h.Set("ce-type", typ)
	}
	if subject != "" {
		h.Set("ce-subject", subject)
	}
	h.Set("content-type", "application/json")
	return h
}

// scriptedAgent is the fake's agent for tests that need slow or failing turns, chosen by
// the user text's prefix: "slow:" waits 700ms before answering, "block:" never answers
// (until the client goes away), "fail:" fails without text (chat: 502 agent_incomplete);
// anything else gets the stub reply.
func scriptedAgent(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
	r := hermestest.StubAgent(ctx, turn)
	switch {
	case strings.HasPrefix(turn.UserText, "slow:"):
		r.Delay = 700 * time.Millisecond
	case strings.HasPrefix(turn.UserText, "block:"):
		<-ctx.Done()
		return hermestest.Reply{}
	case strings.HasPrefix(turn.UserText, "fail:"):
		return hermestest.Reply{Fail: "scripted failure"}
	}
	return r
}

// sameJSON reports whether a and b are the same JSON value (RFC 8785 canonical forms equal).
func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	ca, err := events.Canonicalize(a)
	if err != nil {
		t.Fatalf("canonicalize %q: %v", truncate(string(a), 100), err)
	}
	cb, err := events.Canonicalize(b)
	if err != nil {
		t.Fatalf("canonicalize %q: %v", truncate(string(b), 100), err)
	}
	return bytes.Equal(ca, cb)
}

// stopBridge stops the i-th started bridge replica and waits for it.
func (h *harness) stopBridge(i int) {
	h.t.Helper()
	h.state.mu.Lock()
	rb := h.state.bridges[i]
	h.state.mu.Unlock()
	rb.stop(h.t)
}

// lastOutput returns the newest message stored on an output subject.
func (h *harness) lastOutput(subject string) *jetstream.RawStreamMsg {
	h.t.Helper()
	s, err := h.js.Stream(context.Background(), h.cfg.WithDefaults().OutputStream)
	requireOK(h.t, err, "output stream: %v")
	m, err := s.GetLastMsgForSubject(context.Background(), subject)
	if err != nil {
		h.t.Fatalf("last message on %s: %v", subject, err)
	}
	return m
}

// preApproved adds a valid pre-approval (schemas/README.md, "Approvals") for the action's input, so that
// response_delete and session_delete run at once instead of being parked. Apply it after
// the input is set.
func preApproved(a *events.Action) {
	h, err := events.InputSHA256(a.Input)
	if err != nil {
		panic(err)
	}
	now := time.Now().UTC()
	a.Approval = &events.Approval{Decision: events.DecisionApprove, Approver: "e2e", InputSHA256: h, DecidedAt: &now}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// hermesCalls counts the requests the fake received: per route, and for the unsafe chat
// routes per idempotency key and per action marker (every match of marker in the body).
type hermesCalls struct {
	byRoute, byKey, byMarker map[string]int
}

func countHermesCalls(reqs []hermestest.Recorded, marker *regexp.Regexp) hermesCalls {
	c := hermesCalls{byRoute: map[string]int{}, byKey: map[string]int{}, byMarker: map[string]int{}}
	for _, rq := range reqs {
		c.byRoute[rq.Route]++
		if rq.Route != "chat" && rq.Route != "chat_stream" {
			continue
		}
		if rq.IdempotencyKey != "" {
			c.byKey[rq.IdempotencyKey]++
		}
		for _, mk := range marker.FindAllString(string(rq.Body), -1) {
			c.byMarker[mk]++
		}
	}
	return c
}

// duplicates calls report(name, n) for every name counted more than once, and returns
// the number of calls beyond the first.
func duplicates(counts map[string]int, report func(name string, n int)) int {
	extra := 0
	for name, n := range counts {
		if n > 1 {
			extra += n - 1
			report(name, n)
		}
	}
	return extra
}
