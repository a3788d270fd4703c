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

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// Span names of an action's trace (deploy/README.md, "Traces"). One delivery of an action is one
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
func (t *tracing) startAction(ctx context.Context, d *driver, subject string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, nil
	}
	if d.trace.Traceparent != "" {
		ctx = t.prop.Extract(ctx, traceCarrier{&d.trace})
	}
	ctx, span := t.tr.Start(ctx, SpanAction, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		delivery := 0
		if d.md != nil {
			delivery = int(d.md.NumDelivered)
		}
		span.SetAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.operation", "process"),
			attribute.String(AttrActionID, d.id),
			attribute.Int(AttrDelivery, delivery),
		)
	}
	return ctx, span
}

// endAction ends the root span of d with what its delivery came to: capability,
// endpoint, operation, status, error code, attempt and decision. Its status is Error
// with the error code when the delivery failed or will retry with a code; the
// description is the code, never an error text (Hermes error bodies may echo input).
func (t *tracing) endAction(span trace.Span, d *driver, o core.Outcome, e core.Effect) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String(AttrCapability, o.CapabilityID),
			attribute.String(AttrEndpoint, d.act.endpointID),
			attribute.String(AttrOperation, d.act.op),
			attribute.String(AttrStatus, o.Status),
			attribute.String(AttrErrorCode, o.Code),
			attribute.Int(AttrAttempt, o.Attempt),
			attribute.String(AttrDecision, e.Ack.String()),
			attribute.Bool(AttrReplay, o.ReplayOf != ""),
			attribute.Bool(AttrDuplicate, strings.HasPrefix(o.Status, "duplicate:")),
		)
		if o.Code != "" && (o.Status == events.StatusFailed || o.Status == "retrying") {
			span.SetStatus(codes.Error, o.Code)
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

// Child spans of the ledger's steps: the claim of the action (a one-write start, or the
// ordinary claim), the claim of its idempotency key, and the settle. Each spans the rows
// of the job's transition table that make it (spanOf); the driver starts and ends them
// as the job moves between rows (traceStep).

// spanOf names the child span that row belongs to, "" for none.
func spanOf(row string) string {
	switch row {
	case "start_key_create", "start_key_get", "start_record":
		return spanStart
	case "begin_create", "examine_get", "examine_log", "take_released", "owner_wait",
		"lease_log", "lease_log_retry", "take_over":
		return SpanClaim
	case "key_create", "key_get", "key_holder_log", "key_holder_wait", "key_free":
		return SpanClaimKey
	case "fenced", "fence_retry", "appended", "append_conflict", "append_retry", "key_freed", "unpark_get", "unpark_del":
		return SpanSettle
	}
	return ""
}

// spanStart is the claim span of a one-write start (named SpanClaim).
const spanStart = "start"

// traceStep starts or ends the child span of the row the job awaits now (under d.mu).
func (t *tracing) traceStep(d *driver) {
	if t == nil || d.span == nil || !d.span.IsRecording() {
		return
	}
	g := spanOf(d.job.Awaiting())
	if g == d.spanGroup {
		return
	}
	if d.child != nil {
		endChild(d.child, d.spanGroup, d.job.Outcome(), g)
	}
	d.child, d.spanGroup = nil, g
	if g == "" {
		return
	}
	name := g
	if g == spanStart {
		name = SpanClaim
	}
	_, d.child = t.child(d.spanCtx, name, trace.SpanKindInternal)
}

// endChild ends the span of group g with what the job came to; next is the group the
// job went on to.
func endChild(span trace.Span, g string, o core.Outcome, next string) {
	switch g {
	case spanStart:
		v := "start"
		if next != "" || !o.Dispatched {
			v = "not_fresh"
		}
		span.SetAttributes(attribute.String(AttrVerdict, v))
	case SpanClaim:
		v := "run"
		switch {
		case strings.HasPrefix(o.Status, "duplicate:"+events.StatusPendingApproval):
			v = "parked"
		case strings.HasPrefix(o.Status, "duplicate:"):
			v = "done"
		case o.Uncertain:
			v = "uncertain"
		case !o.Claimed:
			v = "none"
		}
		span.SetAttributes(attribute.String(AttrVerdict, v), attribute.Bool(AttrTakeover, o.Verdict == core.VerdictTakeover))
	case SpanClaimKey:
		v := "held"
		switch {
		case o.ReplayOf != "":
			v = "replay"
		case o.Code == "idempotency_conflict":
			v = "conflict"
		}
		span.SetAttributes(attribute.String(AttrVerdict, v))
	case SpanSettle:
		span.SetAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation", "publish"),
			attribute.String(AttrStatus, strings.TrimPrefix(o.Status, "superseded:")),
			attribute.String(AttrErrorCode, o.Code),
			attribute.Bool(AttrReplay, o.ReplayOf != ""),
		)
		if !o.Settled && !strings.HasPrefix(o.Status, "superseded:") {
			span.SetStatus(codes.Error, "settle_failed")
		}
	}
	span.End()
}

// startCall starts the client span of j's Hermes request and, when it records,
// writes its context into the request's traceparent (and tracestate) headers, so that
// Hermes continues the trace under it. Otherwise the headers stay the action's own.
// The span carries the route template (url.template), never the path: session and
// response ids are in paths.
func (t *tracing) startCall(ctx context.Context, d *driver) (context.Context, trace.Span) {
	if d.prepared == nil {
		return ctx, nil
	}
	ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(d.spanCtx))
	ctx, span := t.child(ctx, "", trace.SpanKindClient)
	if span == nil {
		return ctx, nil
	}
	spec, pr := d.prepared.Spec, t.peers[d.act.endpointID]
	span.SetName(spec.Method + " " + spec.Path)
	span.SetAttributes(
		attribute.String("http.request.method", spec.Method),
		attribute.String("url.template", spec.Path),
		attribute.String("server.address", pr.host),
		attribute.Int("server.port", pr.port),
		attribute.String(AttrEndpoint, d.act.endpointID),
		attribute.String(AttrOperation, d.act.op),
		attribute.String(AttrCapability, d.act.capID),
		attribute.Int(AttrAttempt, d.job.Outcome().Attempt),
	)
	t.prop.Inject(ctx, propagation.HeaderCarrier(d.prepared.Header))
	return ctx, span
}

// endCall ends a Hermes client span with the response status and the error code of a
// failed call (Error status, described by the code).
func endCall(span trace.Span, res *hermes.Result, err error) {
	if span == nil {
		return
	}
	status := 0
	he, isHE := errors.AsType[*hermes.Error](err)
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

// startEvents starts the span of publishing d's stream events (one span for all of
// them) under the action's span.
func (t *tracing) startEvents(d *driver) trace.Span {
	if !d.act.spec.Stream {
		return nil
	}
	_, span := t.child(d.spanCtx, SpanEvents, trace.SpanKindProducer)
	if span != nil {
		span.SetAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", d.b.subjects.Events(d.id)),
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
