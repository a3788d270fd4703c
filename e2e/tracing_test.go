package e2e_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// otlpReceiver is an in-process OTLP/HTTP collector: it decodes the protobuf export
// requests posted to /v1/traces (gzip or not) and keeps their spans and raw bytes.
type otlpReceiver struct {
	srv *httptest.Server

	mu    sync.Mutex
	spans []*tracepb.Span
	raw   [][]byte // each request's decoded (uncompressed) body
	bad   []string // requests that were not a valid export
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	fail := func(why string) {
		r.mu.Lock()
		r.bad = append(r.bad, why)
		r.mu.Unlock()
		http.Error(w, why, http.StatusBadRequest)
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		fail(req.Method + " " + req.URL.Path)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		fail("content type " + ct)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			fail("gzip: " + err.Error())
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		fail("read: " + err.Error())
		return
	}
	var ex coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &ex); err != nil {
		fail("protobuf: " + err.Error())
		return
	}
	r.mu.Lock()
	r.raw = append(r.raw, b)
	for _, rs := range ex.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// trace returns the spans received for trace id tid (hex).
func (r *otlpReceiver) trace(tid string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if hex.EncodeToString(s.TraceId) == tid {
			out = append(out, s)
		}
	}
	return out
}

// tracerProvider is an SDK provider exporting to r with gzip, in short batches.
func (r *otlpReceiver) tracerProvider(t *testing.T) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(r.srv.URL+"/v1/traces"),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	requireOK(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(50*time.Millisecond)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	})
	return tp
}

// publisherTrace starts and ends a "publisher" span of its own tracer and returns the
// trace context a publisher would put on its action, with the span's ids.
func publisherTrace(tp *sdktrace.TracerProvider) (tc events.TraceContext, traceID, spanID string) {
	ctx, span := tp.Tracer("publisher").Start(context.Background(), "publish action")
	defer span.End()
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	sc := span.SpanContext()
	return events.TraceContext{Traceparent: carrier["traceparent"]}, sc.TraceID().String(), sc.SpanID().String()
}

// Markers planted in everything a span must never hold.
const (
	markPrompt  = "PROMPTMARKER"
	markOutput  = "OUTPUTMARKER"
	markTool    = "TOOLMARKER"
	markKey     = "APIKEYMARKER0123456789"
	markSession = "SESSIONMARKER"
	markSKey    = "SESSKEYMARKER"
	markIdem    = "IDEMMARKER"
	markFault   = "FAULTMARKER"
)

var traceMarkers = []string{markPrompt, markOutput, markTool, markKey, markSession, markSKey, markIdem, markFault}

// One trace per action, exported over OTLP/HTTP to a real receiver: every span of an
// action carries the publisher's trace id, the root's parent is the publisher's span,
// claim, Hermes call, events and settle are the root's children, the Hermes request
// carries the client span's context, attributes carry capability, endpoint, status
// and error code, and no span holds a prompt, output, tool data, API key, session id,
// session key, idempotency key or Hermes error text.
func TestTracingOTLP(t *testing.T) {
	recv := newOTLPReceiver(t)
	tp := recv.tracerProvider(t)
	pubTP := sdktrace.NewTracerProvider() // the publisher's own SDK, exporting nowhere
	agent := func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		r := hermestest.Reply{Text: markOutput + " answer to " + turn.UserText}
		if turn.Route == "chat_stream" {
			r.Tools = []hermestest.Tool{{Name: "terminal", Args: `{"command":"` + markTool + `"}`, Output: markTool + " out"}}
		}
		return r
	}
	h := newHarness(t, withFake(hermestest.WithAPIKey(markKey), hermestest.WithAgent(agent)),
		withConfig(func(c *bridge.Config) { c.TracerProvider = tp }))

	type traced struct {
		name, op     string
		id, tid, sid string
		res          *events.Result
	}
	run := func(name, op string, input map[string]any, mod ...func(*events.Action)) *traced {
		t.Helper()
		tc, tid, sid := publisherTrace(pubTP)
		a := events.Action{Input: mustJSON(t, input)}
		for _, f := range mod {
			f(&a)
		}
		id := h.publish(op, a, client.WithTrace(tc))
		res, _ := h.follow(id)
		return &traced{name: name, op: op, id: id, tid: tid, sid: sid, res: res}
	}

	// A session to chat in (no traceparent: a trace of its own).
	create := h.publish("session_create", events.Action{Input: mustJSON(t, map[string]any{"body": map[string]any{"id": markSession + "-1"}}),
		IdempotencyKey: markIdem + "-create"})
	requireCompleted(t, func() *events.Result { r, _ := h.follow(create); return r }())

	chat := run("chat", "chat", map[string]any{"prompt": markPrompt + " chat", "session_key": markSKey + "-1"}, withKey(markIdem+"-chat"))
	stream := run("chat_stream", "chat_stream", map[string]any{"prompt": markPrompt + " stream"})
	session := run("session_chat", "session_chat", map[string]any{"session_id": markSession + "-1", "prompt": markPrompt + " session",
		"session_key": markSKey + "-2"}, withKey(markIdem+"-session"))
	h.fake.InjectFault(hermestest.Fault{Route: "chat", Status: 400,
		Body: `{"error":{"message":"` + markFault + ` cannot take ` + markPrompt + `","type":"invalid_request_error"}}`})
	failed := run("failed chat", "chat", map[string]any{"prompt": markPrompt + " refused"})
	for _, c := range []*traced{chat, stream, session} {
		requireCompleted(t, c.res)
	}
	requireFailed(t, failed.res, "remote_rejected")

	// The markers did reach Hermes and come back: a test that cannot see them proves nothing.
	for _, r := range h.fake.Requests() {
		if r.Route == "session_chat" && !strings.Contains(r.Path, markSession) {
			t.Fatalf("session_chat path %s has no session id", r.Path)
		}
	}
	if !strings.Contains(string(chat.res.Output), markOutput) || !strings.Contains(string(stream.res.Output), markOutput) {
		t.Fatalf("outputs hold no marker: %s", chat.res.Output)
	}

	// Every traced action: root + claim + Hermes call + settle (+ events for a stream),
	// all ended and exported. Each is unsafe and starts at once: its one claim span
	// covers its key too (no claim_key span).
	want := map[*traced]int{chat: 4, stream: 5, session: 4, failed: 4}
	h.eventually(20*time.Second, func() error {
		for c, n := range want {
			if got := len(recv.trace(c.tid)); got < n {
				return fmt.Errorf("%s: %d spans exported, want %d", c.name, got, n)
			}
		}
		return nil
	})

	for c := range want {
		t.Run(c.name, func(t *testing.T) {
			spans := recv.trace(c.tid)
			var root *tracepb.Span
			for _, s := range spans {
				if s.Name == bridge.SpanAction {
					if root != nil {
						t.Fatalf("two root spans")
					}
					root = s
				}
			}
			if root == nil {
				t.Fatalf("no %s span; spans %v", bridge.SpanAction, spanNames(spans))
			}
			if got := hex.EncodeToString(root.ParentSpanId); got != c.sid {
				t.Errorf("root parent %s, want the publisher's span %s", got, c.sid)
			}
			wantEq(t, root.Kind, tracepb.Span_SPAN_KIND_CONSUMER, "root kind %v")
			ra := spanAttrs(root)
			for k, v := range map[string]string{"messaging.system": "nats", "messaging.operation": "process",
				"messaging.destination.name": "hermes.actions.primary." + c.op, bridge.AttrActionID: c.id,
				bridge.AttrCapability: "cap:hermes_agent:primary:" + c.op, bridge.AttrEndpoint: "primary",
				bridge.AttrOperation: c.op, bridge.AttrStatus: c.res.Status, bridge.AttrDecision: "ack"} {
				if ra[k] != v {
					t.Errorf("root %s = %q, want %q", k, ra[k], v)
				}
			}
			byName := map[string]*tracepb.Span{}
			for _, s := range spans {
				byName[s.Name] = s
				if s != root && !bytes.Equal(s.ParentSpanId, root.SpanId) {
					t.Errorf("span %s: parent %x, want the root %x", s.Name, s.ParentSpanId, root.SpanId)
				}
			}
			for _, name := range []string{bridge.SpanClaim, bridge.SpanSettle} {
				if byName[name] == nil {
					t.Errorf("no %s span; spans %v", name, spanNames(spans))
				}
			}
			wantEq(t, spanAttrs(byName[bridge.SpanClaim])[bridge.AttrVerdict], "start", "claim verdict %q, want start (the one-write start)")
			if byName[bridge.SpanClaimKey] != nil {
				t.Errorf("a %s span beside a start's claim span", bridge.SpanClaimKey)
			}
			if sa := spanAttrs(byName[bridge.SpanSettle]); sa[bridge.AttrStatus] != c.res.Status {
				t.Errorf("settle status %q, want %q", sa[bridge.AttrStatus], c.res.Status)
			}
			route := map[string]string{"chat": "POST /v1/chat/completions", "chat_stream": "POST /v1/chat/completions",
				"session_chat": "POST /api/sessions/{session_id}/chat"}[c.op]
			call := byName[route]
			if call == nil {
				t.Fatalf("no Hermes client span %q; spans %v", route, spanNames(spans))
			}
			ca := spanAttrs(call)
			wantStatus := "200"
			if c == failed {
				wantStatus = "400"
			}
			for k, v := range map[string]string{"url.template": strings.TrimPrefix(route, "POST "), "http.request.method": "POST",
				"http.response.status_code": wantStatus, "server.address": "127.0.0.1", bridge.AttrEndpoint: "primary",
				bridge.AttrOperation: c.op} {
				if ca[k] != v {
					t.Errorf("client span %s = %q, want %q", k, ca[k], v)
				}
			}
			wantEq(t, call.Kind, tracepb.Span_SPAN_KIND_CLIENT, "client span kind %v")
			// Hermes got the client span's context, in the publisher's trace.
			wantTP := "00-" + c.tid + "-" + hex.EncodeToString(call.SpanId) + "-01"
			found := false
			for _, r := range h.fake.Requests() {
				found = found || r.Header.Get("Traceparent") == wantTP
			}
			if !found {
				t.Errorf("no Hermes request carries traceparent %s", wantTP)
			}
			if c.op == "chat_stream" {
				ev := byName[bridge.SpanEvents]
				if ev == nil {
					t.Fatalf("no %s span", bridge.SpanEvents)
				}
				if n := spanAttrs(ev)[bridge.AttrEventCount]; n == "" || n == "0" {
					t.Errorf("events span count %q", n)
				}
			}
			if c == failed {
				for _, s := range []*tracepb.Span{root, call} {
					if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.Status.GetMessage() != "remote_rejected" {
						t.Errorf("span %s: status %v %q, want Error remote_rejected", s.Name, s.Status.GetCode(), s.Status.GetMessage())
					}
				}
				if ra[bridge.AttrErrorCode] != "remote_rejected" || ca[bridge.AttrErrorCode] != "remote_rejected" {
					t.Errorf("error code: root %q, client %q", ra[bridge.AttrErrorCode], ca[bridge.AttrErrorCode])
				}
			} else if root.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("root of a completed action has status Error")
			}
		})
	}

	// An action without a traceparent starts a trace of its own: a root without parent.
	recv.mu.Lock()
	var createRoot *tracepb.Span
	for _, s := range recv.spans {
		if s.Name == bridge.SpanAction && spanAttrs(s)[bridge.AttrActionID] == create {
			createRoot = s
		}
	}
	recv.mu.Unlock()
	if createRoot == nil || len(createRoot.ParentSpanId) != 0 {
		t.Errorf("session_create root %v: want a root span without parent", createRoot)
	}

	// Nothing exported holds a marker: names, attributes, events, statuses, resource,
	// checked on the raw bytes of every export request.
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.bad) > 0 {
		t.Errorf("bad export requests: %v", recv.bad)
	}
	for _, b := range recv.raw {
		for _, m := range traceMarkers {
			if bytes.Contains(b, []byte(m)) {
				t.Errorf("an exported span holds marker %s", m)
			}
		}
	}
}

func spanAttrs(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	if s == nil {
		return out
	}
	for _, kv := range s.Attributes {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = fmt.Sprint(v.BoolValue)
		default:
			out[kv.Key] = fmt.Sprint(v)
		}
	}
	return out
}

func spanNames(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
