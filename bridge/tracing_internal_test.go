package bridge

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

const (
	testTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	testParentSpan = "00f067aa0ba902b7"
	testTP         = "00-" + testTraceID + "-" + testParentSpan + "-01"
)

// tracedJob is a driver of a session_chat action of endpoint primary whose request
// carries the action's traceparent, as validate leaves it.
func tracedJob(t testing.TB, tp trace.TracerProvider) *steppedDriver {
	t.Helper()
	br := &Bridge{subjects: events.Subjects{Prefix: "hermes"}, beats: newHeartbeats(time.Hour),
		eps: map[string]*endpoint{"primary": {cfg: Endpoint{ID: "primary", BaseURL: "http://hermes.internal:8642"}}}}
	br.tracing = newTracing(tp, br.eps)
	return &steppedDriver{driver: &driver{b: br}}
}

// oneAction runs the spans of one action claimed on the ordinary path, called and
// settled: the job is stepped as the driver steps it, and the call's spans are made as
// call makes them.
func oneAction(t testing.TB, sd *steppedDriver, res *hermes.Result, callErr error) {
	b := sd.b
	d := newSteppedDriver(t, b, "act-1")
	d.md = &jetstream.MsgMetadata{NumDelivered: 1}
	d.trace = events.TraceContext{Traceparent: testTP, Tracestate: "vendor=x"}
	p, err := hermes.Prepare(d.request())
	noErr(t, err)
	d.prepared = p
	sd.driver = d.driver
	var ctx context.Context
	ctx, d.span = b.tracing.startAction(context.Background(), d.driver, "hermes.actions.primary.session_chat")
	d.spanCtx = ctx
	d.feed(core.Event{Kind: core.EvValidated})
	d.feed(core.Event{Kind: core.EvAdmit, Status: core.Busy}) // the ordinary path: claim first
	d.feed(core.Event{Kind: core.EvStore, Status: core.OK, Rev: 1})
	d.feed(core.Event{Kind: core.EvLog, Status: core.NotFound})
	d.feed(core.Event{Kind: core.EvAdmit, Status: core.OK})
	d.feed(core.Event{Kind: core.EvStore, Status: core.OK, Rev: 2})
	_, hspan := b.tracing.startCall(ctx, d.driver)
	endCall(hspan, res, callErr)
	ans := &core.CallAnswer{Responded: res != nil, Result: resultOf(d.driver, res, callErr)}
	d.feed(core.Event{Kind: core.EvCall, Call: ans})
	effs := d.feed(core.Event{Kind: core.EvLog, Status: core.OK, Log: core.LogEntry{Seq: 9}})
	for _, e := range effs {
		if e.Kind == core.EffFinish {
			b.tracing.endAction(d.span, d.driver, d.job.Outcome(), e)
			return
		}
	}
	t.Fatalf("the job did not finish; it awaits %s", d.job.Awaiting())
}

// The spans of one action continue its traceparent: the root's parent is the
// publisher's span, claim, Hermes call and settle are the root's children, the Hermes
// request carries the client span's context, and the client span names the route
// template, never the path with the session id.
func TestTracingSpanTree(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	j := tracedJob(t, tp)
	oneAction(t, j, &hermes.Result{HTTPStatus: 200}, nil)
	spans := rec.Ended()
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
		if got := s.SpanContext().TraceID().String(); got != testTraceID {
			t.Errorf("span %s: trace id %s, want %s", s.Name(), got, testTraceID)
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), "SESSION-SECRET") {
				t.Errorf("span %s: attribute %s holds the session id", s.Name(), kv.Key)
			}
		}
	}
	root := byName[SpanAction]
	if root == nil || len(spans) != 4 {
		t.Fatalf("spans %d, root %v", len(spans), root)
	}
	if got := root.Parent().SpanID().String(); got != testParentSpan || !root.Parent().IsRemote() {
		t.Errorf("root parent %s (remote %v), want %s", got, root.Parent().IsRemote(), testParentSpan)
	}
	if root.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("root kind %v", root.SpanKind())
	}
	call := byName["POST /api/sessions/{session_id}/chat"]
	if call == nil {
		t.Fatalf("no client span named after the route template; spans: %v", names(spans))
	}
	for _, name := range []string{SpanClaim, SpanSettle, call.Name()} {
		s := byName[name]
		if s == nil || s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the root", name)
		}
	}
	if call.SpanKind() != trace.SpanKindClient {
		t.Errorf("client span kind %v", call.SpanKind())
	}
	want := "00-" + testTraceID + "-" + call.SpanContext().SpanID().String() + "-01"
	if got := http.Header(j.prepared.Header).Get("Traceparent"); got != want {
		t.Errorf("Hermes request traceparent %q, want %q (the client span)", got, want)
	}
	if got := http.Header(j.prepared.Header).Get("Tracestate"); got != "vendor=x" {
		t.Errorf("Hermes request tracestate %q", got)
	}
	attrs := map[string]string{}
	for _, kv := range call.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{"url.template": "/api/sessions/{session_id}/chat", "http.request.method": "POST",
		"http.response.status_code": "200", "server.address": "hermes.internal", "server.port": "8642",
		AttrEndpoint: "primary", AttrOperation: "session_chat"} {
		if attrs[k] != v {
			t.Errorf("client span %s = %q, want %q", k, attrs[k], v)
		}
	}
}

// A failed Hermes call makes the client span and the root Error, described by the
// error code only (Hermes error bodies may echo the input).
func TestTracingFailedCall(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	j := tracedJob(t, tp)
	he := &hermes.Error{Code: hermes.CodeRemoteRejected, HTTPStatus: 400, Message: "echo: SESSION-SECRET"}
	oneAction(t, j, nil, he)
	for _, s := range rec.Ended() {
		if s.Name() == SpanClaim || s.Name() == SpanSettle {
			continue
		}
		if s.Status().Code != codes.Error || s.Status().Description != hermes.CodeRemoteRejected {
			t.Errorf("span %s: status %v %q, want Error %q", s.Name(), s.Status().Code, s.Status().Description, hermes.CodeRemoteRejected)
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), "SESSION-SECRET") {
				t.Errorf("span %s: attribute %s holds the error text", s.Name(), kv.Key)
			}
		}
	}
}

// Without a provider, or with the no-op one, the Hermes request keeps the action's
// own traceparent.
func TestTracingDisabledKeepsTraceparent(t *testing.T) {
	for name, tp := range map[string]trace.TracerProvider{"nil": nil, "noop": noop.NewTracerProvider()} {
		j := tracedJob(t, tp)
		oneAction(t, j, &hermes.Result{HTTPStatus: 200}, nil)
		if got := http.Header(j.prepared.Header).Get("Traceparent"); got != testTP {
			t.Errorf("%s: traceparent %q, want the action's %q", name, got, testTP)
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// discardExporter drops every span: the SDK's cost without the export's.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracingPerAction is what tracing adds to one action: a root span continuing
// the traceparent, the claim, one Hermes call (with the traceparent injected), the
// settle. "nil" is no provider, "noop" the no-op provider that `run` uses when no
// OTLP endpoint is set, "sdk" the SDK (always sampled, batch processor) exporting to
// a discarding exporter.
func BenchmarkTracingPerAction(b *testing.B) {
	res := &hermes.Result{HTTPStatus: 200}
	run := func(b *testing.B, tp trace.TracerProvider) {
		j := tracedJob(b, tp)
		b.ReportAllocs()
		for b.Loop() {
			oneAction(b, j, res, nil)
		}
	}
	b.Run("nil", func(b *testing.B) { run(b, nil) })
	b.Run("noop", func(b *testing.B) { run(b, noop.NewTracerProvider()) })
	b.Run("sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		run(b, tp)
	})
}
