package main

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/time/rate"
)

// Tracing (OpenTelemetry). `run` exports the bridge's spans over OTLP/HTTP when an
// OTLP endpoint is set, and uses the no-op provider otherwise. It reads the variables
// of Config's "Traces" group from its environment; the SDK reads the others it knows
// (sampler, batch processor, exporter timeout, compression, certificates, resource)
// from the process environment, which is the same in production.

// traceFlushTimeout bounds the export of the spans still buffered at shutdown.
const traceFlushTimeout = 5 * time.Second

// defaultServiceName is the resource's service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES name another.
const defaultServiceName = "hermes-bridge"

// tracingEnabled reports whether c asks for traces: an OTLP endpoint is set, and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none turns them off.
func (c *Config) tracingEnabled() bool {
	if c.OTELEndpoint == "" && c.OTELTracesEndpoint == "" {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(c.OTELSDKDisabled), "true") {
		return false
	}
	return !strings.EqualFold(strings.TrimSpace(c.OTELTracesExporter), "none")
}

// traceExportURL is where spans are posted: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is,
// else OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended (the OTLP rule).
func (c *Config) traceExportURL() string {
	if c.OTELTracesEndpoint != "" {
		return c.OTELTracesEndpoint
	}
	return strings.TrimRight(c.OTELEndpoint, "/") + "/v1/traces"
}

// traceProtocol is the OTLP protocol in force for traces ("" means http/protobuf).
func (c *Config) traceProtocol() (key, value string) {
	if c.OTELTracesProtocol != "" {
		return "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", c.OTELTracesProtocol
	}
	return "OTEL_EXPORTER_OTLP_PROTOCOL", c.OTELProtocol
}

// validateTracing checks the tracing variables when tracing is on. Messages name the
// variable and never show a header's content.
func (c *Config) validateTracing(p *ConfigError) {
	if !c.tracingEnabled() {
		return
	}
	for _, kv := range [][2]string{{"OTEL_EXPORTER_OTLP_ENDPOINT", c.OTELEndpoint}, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.OTELTracesEndpoint}} {
		if kv[1] == "" {
			continue
		}
		if u, err := url.Parse(kv[1]); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("%s=%s: must be an http:// or https:// URL, e.g. http://collector:4318", kv[0], redactURL(kv[1]))
		}
	}
	switch key, v := c.traceProtocol(); v {
	case "", "http/protobuf", "http/json":
	case "grpc":
		p.add("%s=grpc: not supported; use OTLP over HTTP (http/protobuf, the collector's port 4318)", key)
	default:
		p.add("%s=%s: must be http/protobuf or http/json", key, v)
	}
	if v := strings.TrimSpace(c.OTELTracesExporter); v != "" && !strings.EqualFold(v, "otlp") {
		p.add("OTEL_TRACES_EXPORTER=%s: must be otlp or none", v)
	}
	if _, err := c.traceHeaders(); err != nil {
		p.add("%s", err.Error())
	}
}

// traceHeaders returns the headers of the export requests: OTEL_EXPORTER_OTLP_HEADERS,
// then OTEL_EXPORTER_OTLP_TRACES_HEADERS. Their format is key=value pairs separated
// by commas, values URL-encoded. The error names the variable and the pair's
// position, never its content (headers often carry tokens).
func (c *Config) traceHeaders() (map[string]string, error) {
	h := map[string]string{}
	for _, kv := range [][2]string{{"OTEL_EXPORTER_OTLP_HEADERS", c.OTELHeaders}, {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", c.OTELTracesHeaders}} {
		if strings.TrimSpace(kv[1]) == "" {
			continue
		}
		for i, pair := range strings.Split(kv[1], ",") {
			k, v, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			val, err := url.PathUnescape(strings.TrimSpace(v))
			if !ok || k == "" || err != nil {
				return nil, errors.New(kv[0] + ": entry " + strconv.Itoa(i+1) + " is not key=value with a URL-encoded value (content not shown)")
			}
			h[k] = val
		}
	}
	return h, nil
}

// setupTracing returns the tracer provider for the bridge and the function that
// flushes and stops it. With tracing off (see Config.tracingEnabled) that is the no-op
// provider, which records nothing and costs nothing, and a shutdown that does
// nothing. With tracing on it is an SDK provider with a batch span processor and an
// OTLP/HTTP exporter, whose resource names service.name (hermes-bridge unless the
// environment says otherwise), service.version and service.instance.id (replica).
// Export errors are logged through log, at most once a minute, without the export
// headers. The shutdown function waits at most traceFlushTimeout for the last spans
// and logs if they could not be sent.
func setupTracing(ctx context.Context, c *Config, version, replica string, log zerolog.Logger) (trace.TracerProvider, func(context.Context), error) {
	if !c.tracingEnabled() {
		return noop.NewTracerProvider(), func(context.Context) {}, nil
	}
	headers, err := c.traceHeaders()
	if err != nil {
		return nil, nil, err
	}
	errs := newExportErrors(log, headers)
	otel.SetErrorHandler(errs)
	otel.SetLogger(logr.New(&otelLog{log: log, errs: errs}))

	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(c.traceExportURL())}
	if len(headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(headers))
	}
	if _, proto := c.traceProtocol(); proto == "http/json" {
		opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, errors.New(errs.redact("traces: OTLP exporter: " + err.Error()))
	}
	ropts := []resource.Option{
		resource.WithTelemetrySDK(),
		resource.WithAttributes(
			attribute.String("service.name", defaultServiceName),
			attribute.String("service.version", version),
			attribute.String("service.instance.id", replica),
		),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
	}
	if c.OTELServiceName != "" {
		ropts = append(ropts, resource.WithAttributes(attribute.String("service.name", c.OTELServiceName)))
	}
	res, err := resource.New(ctx, ropts...)
	if err != nil {
		log.Warn().Err(err).Msg("traces: some resource attributes could not be read (OTEL_RESOURCE_ATTRIBUTES); going on without them")
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info().Str("endpoint", redactURL(c.traceExportURL())).Msg("traces: exporting spans over OTLP/HTTP")
	shutdown := func(ctx context.Context) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn().Str("error", errs.redact(err.Error())).Str("timeout", traceFlushTimeout.String()).
				Msg("traces: the last spans could not be exported before shutdown")
		}
	}
	return tp, shutdown, nil
}

// exportErrors logs the SDK's errors (failed exports, mostly), at most once a minute
// with the number of errors since the last line, never showing a header value.
type exportErrors struct {
	log        zerolog.Logger
	secrets    []string
	every      rate.Sometimes
	suppressed atomic.Int64
}

func newExportErrors(log zerolog.Logger, headers map[string]string) *exportErrors {
	e := &exportErrors{log: log, every: rate.Sometimes{First: 1, Interval: time.Minute}}
	for _, v := range headers {
		// The whole value, its encoded forms, and each of its words (a token after
		// "Bearer", say): any of them may come back in a collector's error body.
		for _, s := range append([]string{v, url.QueryEscape(v), url.PathEscape(v)}, strings.Fields(v)...) {
			if len(s) >= 4 {
				e.secrets = append(e.secrets, s)
			}
		}
	}
	return e
}

// Handle logs err (otel.ErrorHandler).
func (e *exportErrors) Handle(err error) {
	logged := false
	e.every.Do(func() {
		logged = true
		e.log.Warn().Str("error", e.redact(err.Error())).Int64("others_since_last_line", e.suppressed.Swap(0)).
			Msg("traces: exporting spans failed; spans are dropped until the collector answers")
	})
	if !logged {
		e.suppressed.Add(1)
	}
}

// redact replaces every header value in s.
func (e *exportErrors) redact(s string) string {
	for _, v := range e.secrets {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// otelLog is the OpenTelemetry SDK's internal logger (otel.SetLogger): its errors and
// warnings (an unreadable certificate file, say) become warn lines of the JSON log,
// redacted as export errors are, instead of plain lines on stderr; its info and debug
// lines go to debug. Key-value pairs are dropped (they may hold a configuration value).
type otelLog struct {
	log  zerolog.Logger
	errs *exportErrors
}

func (*otelLog) Init(logr.RuntimeInfo) {}

// Enabled: the SDK logs warnings at V(1), info at V(4) and debug at V(8).
func (l *otelLog) Enabled(level int) bool {
	return level <= 1 || l.log.GetLevel() <= zerolog.DebugLevel
}

func (l *otelLog) Info(level int, msg string, _ ...any) {
	ev := l.log.Debug()
	if level <= 1 {
		ev = l.log.Warn()
	}
	ev.Str("component", "opentelemetry").Msg("traces: " + l.errs.redact(msg))
}

func (l *otelLog) Error(err error, msg string, _ ...any) {
	ev := l.log.Warn().Str("component", "opentelemetry")
	if err != nil {
		ev = ev.Str("error", l.errs.redact(err.Error()))
	}
	ev.Msg("traces: " + l.errs.redact(msg))
}

func (l *otelLog) WithValues(...any) logr.LogSink { return l }
func (l *otelLog) WithName(string) logr.LogSink   { return l }
