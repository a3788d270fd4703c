package bridge

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Span names of an action's trace (README "Traces"). One delivery of an action is one
// root span (SpanAction, kind consumer), continuing the action's traceparent; its
// children are the claim, the idempotency key's claim, the Hermes call (kind client,
// named "<method> <route template>"), the publishing of a stream's events (one span for
// all of them) and the settle.
const (
	SpanAction   = "hermes-bridge.action"
	SpanClaim    = "hermes-bridge.claim"
	SpanClaimKey = "hermes-bridge.claim_key"
	SpanEvents   = "hermes-bridge.events"
	SpanSettle   = "hermes-bridge.settle"
)

// Attribute keys of the bridge's own attributes (the others follow the OpenTelemetry
// semantic conventions). No attribute ever holds content (prompts, inputs, outputs,
// tool data), keys, tokens, session ids or idempotency keys.
const (
	AttrActionID   = "hermes.action_id"
	AttrCapability = "hermes.capability"
	AttrEndpoint   = "hermes.endpoint"
	AttrOperation  = "hermes.operation"
	AttrStatus     = "hermes.status"
	AttrErrorCode  = "hermes.error_code"
	AttrAttempt    = "hermes.attempt"
	AttrDelivery   = "hermes.delivery"
	AttrDecision   = "hermes.decision"
	AttrReplay     = "hermes.replay"
	AttrDuplicate  = "hermes.duplicate"
	AttrVerdict    = "hermes.verdict"
	AttrTakeover   = "hermes.takeover"
	AttrEventCount = "hermes.event_count"
)

// tracerName is the instrumentation scope of the bridge's spans.
const tracerName = "github.com/hermes-bridge/hermes-bridge/bridge"

// tracing starts the spans of action handling. A nil *tracing (no TracerProvider
// configured) starts none; every method is safe on it and then costs a nil check.
// Child spans are started only under a recording span, so that a non-recording
// provider (the no-op one, or a trace the sampler dropped) costs a context lookup per
// child and builds no attributes.
type tracing struct {
	tr    trace.Tracer
	prop  propagation.TraceContext
	peers map[string]peer // endpoint id: the Hermes server's address
}

// peer is a Hermes server's address, for server.address and server.port.
type peer struct {
	host string
	port int
}

// newTracing returns the tracing of a bridge with endpoints eps, nil when tp is nil or
// the no-op provider (whose spans never record: reading the traceparent would be
// wasted).
func newTracing(tp trace.TracerProvider, eps map[string]*endpoint) *tracing {
	if _, isNoop := tp.(noop.TracerProvider); tp == nil || isNoop {
		return nil
	}
	t := &tracing{tr: tp.Tracer(tracerName), peers: make(map[string]peer, len(eps))}
	for id, ep := range eps {
		t.peers[id] = peerOf(ep.cfg.BaseURL)
	}
	return t
}

// peerOf is the host and port of an http(s) base URL (port from the scheme if absent).
func peerOf(base string) peer {
	u, err := url.Parse(base)
	if err != nil {
		return peer{}
	}
	p := peer{host: u.Hostname()}
	if s := u.Port(); s != "" {
		p.port, _ = strconv.Atoi(s)
	} else if u.Scheme == "https" {
		p.port = 443
	} else {
		p.port = 80
	}
	return p
}

// traceCarrier reads an action's trace context extension attributes for the W3C
// TraceContext propagator, without building a map.
type traceCarrier struct{ tc *events.TraceContext }

func (c traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.tc.Traceparent
	case "tracestate":
		return c.tc.Tracestate
	}
	return ""
}
func (c traceCarrier) Set(string, string) {}
func (c traceCarrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// startAction starts the root span of one delivery of an action received on subject:
// a child of the action's traceparent, or a new trace without one. The returned
// context carries the span; endAction ends it.
func (t *tracing) startAction(ctx context.Context, j *job, subject string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, nil
	}
	if j.trace.Traceparent != "" {
		ctx = t.prop.Extract(ctx, traceCarrier{&j.trace})
	}
	ctx, span := t.tr.Start(ctx, SpanAction, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.operation", "process"),
			attribute.String(AttrActionID, j.actionID),
			attribute.Int(AttrDelivery, j.delivery()),
		)
	}
	return ctx, span
}

// endAction ends the root span of j with what its delivery came to: capability,
// endpoint, operation, status, error code, attempt and decision. Its status is Error
// with the error code when the delivery failed or will retry with a code; the
// description is the code, never an error text (Hermes error bodies may echo input).
func (t *tracing) endAction(span trace.Span, j *job, d decision) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String(AttrCapability, j.capID),
			attribute.String(AttrEndpoint, j.endpointID),
			attribute.String(AttrOperation, j.op),
			attribute.String(AttrStatus, j.status),
			attribute.String(AttrErrorCode, j.code),
			attribute.Int(AttrAttempt, j.attempt()),
			attribute.String(AttrDecision, d.String()),
			attribute.Bool(AttrReplay, j.replayOf != ""),
			attribute.Bool(AttrDuplicate, strings.HasPrefix(j.status, "duplicate:")),
		)
		if j.code != "" && (j.status == events.StatusFailed || j.status == "retrying") {
			span.SetStatus(codes.Error, j.code)
		}
	}
	span.End()
}

// child starts a child span of the span in ctx. It returns ctx and a nil span (which
// the end functions accept) when that span does not record: nothing is allocated
// for a trace that is not recorded.
func (t *tracing) child(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if t == nil || !parent.IsRecording() {
		return ctx, nil
	}
	return t.tr.Start(ctx, name, trace.WithSpanKind(kind))
}

// startClaim starts the span of the action's claim in the ledger.
func (t *tracing) startClaim(ctx context.Context) (context.Context, trace.Span) {
	return t.child(ctx, SpanClaim, trace.SpanKindInternal)
}

// endClaim ends a claim span with the ledger's verdict, or Error when the claim failed.
func endClaim(span trace.Span, out kvstore.Outcome, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, "kv_error")
	} else {
		span.SetAttributes(attribute.String(AttrVerdict, out.Verdict.String()),
			attribute.Bool(AttrTakeover, out.Claim != nil && out.Claim.TookOver()))
	}
	span.End()
}

// endStart ends the claim span of a one-write start (kvstore.Ledger.Start): verdict
// start, or not_fresh when the ordinary path claims the action after it.
func endStart(span trace.Span, err error) {
	if span == nil {
		return
	}
	switch {
	case err == nil:
		span.SetAttributes(attribute.String(AttrVerdict, "start"))
	case errors.Is(err, kvstore.ErrNotFresh):
		span.SetAttributes(attribute.String(AttrVerdict, "not_fresh"))
	default:
		span.SetStatus(codes.Error, "kv_error")
	}
	span.End()
}

// startClaimKey starts the span of the idempotency key's claim.
func (t *tracing) startClaimKey(ctx context.Context) (context.Context, trace.Span) {
	return t.child(ctx, SpanClaimKey, trace.SpanKindInternal)
}

// endClaimKey ends a key claim span with its verdict (never the key).
func endClaimKey(span trace.Span, ko kvstore.KeyOutcome, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, "kv_error")
	} else {
		span.SetAttributes(attribute.String(AttrVerdict, [...]string{"held", "replay", "conflict"}[ko.Verdict]))
	}
	span.End()
}

// startCall starts the client span of j's Hermes request and, when it records,
// writes its context into the request's traceparent (and tracestate) headers, so that
// Hermes continues the trace under it. Otherwise the headers stay the action's own.
// The span carries the route template (url.template), never the path: session and
// response ids are in paths.
func (t *tracing) startCall(ctx context.Context, j *job) (context.Context, trace.Span) {
	if j.prepared == nil {
		return ctx, nil
	}
	ctx, span := t.child(ctx, "", trace.SpanKindClient)
	if span == nil {
		return ctx, nil
	}
	spec, pr := j.prepared.Spec, t.peers[j.endpointID]
	span.SetName(spec.Method + " " + spec.Path)
	span.SetAttributes(
		attribute.String("http.request.method", spec.Method),
		attribute.String("url.template", spec.Path),
		attribute.String("server.address", pr.host),
		attribute.Int("server.port", pr.port),
		attribute.String(AttrEndpoint, j.endpointID),
		attribute.String(AttrOperation, j.op),
		attribute.String(AttrCapability, j.capID),
		attribute.Int(AttrAttempt, j.attempt()),
	)
	t.prop.Inject(ctx, propagation.HeaderCarrier(j.prepared.Header))
	return ctx, span
}

// endCall ends a Hermes client span with the response status and the error code of a
// failed call (Error status, described by the code).
func endCall(span trace.Span, res *hermes.Result, err error) {
	if span == nil {
		return
	}
	status := 0
	var he *hermes.Error
	isHE := errors.As(err, &he)
	if res != nil {
		status = res.HTTPStatus
	} else if isHE {
		status = he.HTTPStatus
	}
	if status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	if err != nil {
		code := "internal"
		if isHE {
			code = he.Code
		}
		errType := code
		if status >= 400 {
			errType = strconv.Itoa(status)
		}
		span.SetAttributes(attribute.String(AttrErrorCode, code), attribute.String("error.type", errType))
		span.SetStatus(codes.Error, code)
	}
	span.End()
}

// startEvents starts the span of publishing j's stream events (one span for all of
// them) under the action's span.
func (t *tracing) startEvents(ctx context.Context, j *job) trace.Span {
	_, span := t.child(ctx, SpanEvents, trace.SpanKindProducer)
	if span != nil {
		span.SetAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", j.b.subjects.Events(j.actionID)),
			attribute.String("messaging.operation", "publish"),
		)
	}
	return span
}

// endEvents ends an events span with the number of events published; Error when
// storing them failed.
func endEvents(span trace.Span, n int64, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int64(AttrEventCount, n), attribute.Int64("messaging.batch.message_count", n))
	if err != nil {
		span.SetStatus(codes.Error, "publish_failed")
	}
	span.End()
}

// startSettle starts the span of settling j with res: the result's write to the
// ledger and its publish.
func (t *tracing) startSettle(ctx context.Context, j *job, res *events.Result) (context.Context, trace.Span) {
	ctx, span := t.child(ctx, SpanSettle, trace.SpanKindProducer)
	if span == nil {
		return ctx, nil
	}
	code := ""
	if res.Error != nil {
		code = res.Error.Code
	}
	span.SetAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", j.resultSubject()),
		attribute.String("messaging.operation", "publish"),
		attribute.String(AttrStatus, res.Status),
		attribute.String(AttrErrorCode, code),
		attribute.Bool(AttrReplay, res.ReplayOf != nil),
	)
	return ctx, span
}

// endSettle ends a settle span with the delivery's decision: Error when the result
// could not be stored (the delivery is retried).
func endSettle(span trace.Span, d decision) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String(AttrDecision, d.String()))
	if d.kind == nak {
		span.SetStatus(codes.Error, "settle_failed")
	}
	span.End()
}
