package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing modes of the bridge under test (-tracing).
const (
	tracingNoop = "noop" // the no-op provider: what `run` uses when no OTLP endpoint is set
	tracingOff  = "off"  // no provider at all
	tracingOTLP = "otlp" // the SDK, every action sampled, batch processor, OTLP/HTTP to an in-process sink
)

// traceSink is an in-process OTLP/HTTP collector that reads every export request and
// throws it away: the bridge pays for building, batching, encoding and posting the
// spans, not for a collector's storage.
type traceSink struct {
	srv      *httptest.Server
	requests atomic.Int64
	bytes    atomic.Int64
}

func newTraceSink() *traceSink {
	s := &traceSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	return s
}

// tracerProvider returns the bridge's provider for mode, a function that flushes and
// stops it, and the sink (nil unless mode is otlp).
func tracerProvider(ctx context.Context, mode string) (trace.TracerProvider, func(), *traceSink, error) {
	switch mode {
	case tracingOff:
		return nil, func() {}, nil, nil
	case tracingNoop:
		return noop.NewTracerProvider(), func() {}, nil, nil
	}
	sink := newTraceSink()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(sink.srv.URL+"/v1/traces"))
	if err != nil {
		sink.srv.Close()
		return nil, nil, nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "hermes-bridge-bench"))))
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
		sink.srv.Close()
	}
	return tp, stop, sink, nil
}
