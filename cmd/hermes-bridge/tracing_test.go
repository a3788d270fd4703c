package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
)

func loadTracingConfig(t *testing.T, environ map[string]string) *Config {
	t.Helper()
	cfg := mustLoadConfig(t, environ)
	noErr(t, cfg.ValidateRun(nil))
	return cfg
}

// Without an OTLP endpoint, or with one that OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER
// turns off, run gets the no-op provider; with one, the SDK's.
func TestTracingSetupProvider(t *testing.T) {
	const ep = "http://127.0.0.1:1"
	for _, c := range []struct {
		name    string
		environ map[string]string
		sdk     bool
	}{
		{"no endpoint", map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, false},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_SDK_DISABLED": "TRUE"}, false},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_EXPORTER": "none"}, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ep + "/v1/traces", "OTEL_SDK_DISABLED": "false"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := loadTracingConfig(t, c.environ)
			tp, stop, err := setupTracing(context.Background(), cfg, "v1.2.3", "replica-1", zerolog.Nop())
			noErr(t, err)
			defer stop(context.Background())
			_, isNoop := tp.(noop.TracerProvider)
			_, isSDK := tp.(*sdktrace.TracerProvider)
			if c.sdk && !isSDK || !c.sdk && !isNoop {
				t.Fatalf("provider %T, want SDK %v", tp, c.sdk)
			}
		})
	}
}

// The resource names the service (hermes-bridge unless OTEL_SERVICE_NAME says
// otherwise), its version and the replica.
func TestTracingResource(t *testing.T) {
	for _, c := range []struct {
		environ map[string]string
		want    string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, "hermes-bridge"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SERVICE_NAME": "bridge-eu"}, "bridge-eu"},
	} {
		cfg := loadTracingConfig(t, c.environ)
		tp, stop, err := setupTracing(context.Background(), cfg, "v1.2.3", "replica-1", zerolog.Nop())
		noErr(t, err)
		rec := tracetest.NewSpanRecorder()
		sdk := tp.(*sdktrace.TracerProvider)
		sdk.RegisterSpanProcessor(rec)
		_, span := tp.Tracer("test").Start(context.Background(), "s")
		span.End()
		got := map[string]string{}
		for _, kv := range rec.Ended()[0].Resource().Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		for k, v := range map[string]string{"service.name": c.want, "service.version": "v1.2.3", "service.instance.id": "replica-1"} {
			if got[k] != v {
				t.Errorf("resource %s = %q, want %q", k, got[k], v)
			}
		}
		sdk.UnregisterSpanProcessor(rec)
		stop(context.Background())
	}
}

// Export headers (which carry collector tokens) never appear in the logs, in the
// config dump or in configuration errors, even when the collector echoes them back
// in its error body.
func TestTracingHeadersNeverLogged(t *testing.T) {
	const token, tenant = "TOKENMARKER0123456789", "TENANTMARKER42"
	var got atomic.Value
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		got.Store(r.Header.Get("Authorization") + " " + r.Header.Get("X-Tenant"))
		// A collector that refuses the token and says what it got.
		http.Error(w, fmt.Sprintf("bad credentials %q for tenant %s", r.Header.Get("Authorization"), r.Header.Get("X-Tenant")), http.StatusUnauthorized)
	}))
	defer srv.Close()
	environ := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":  "authorization=Bearer%20" + token + ",x-tenant=" + tenant,
	}
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // ms: the SDK's periodic export, whose errors go to the handler
	cfg := loadTracingConfig(t, environ)
	var logs syncBuffer
	log := zerolog.New(&logs)
	tp, stop, err := setupTracing(context.Background(), cfg, "v1", "r1", log)
	noErr(t, err)
	_, span := tp.Tracer("test").Start(context.Background(), "s")
	span.End()
	waitFor(t, 10*time.Second, "an export error logged", func() bool { return strings.Contains(logs.String(), "exporting spans failed") })
	stop(context.Background())
	if posts.Load() == 0 || got.Load() != "Bearer "+token+" "+tenant {
		t.Fatalf("the collector got %v (%d posts): the headers were not sent, so this test proves nothing", got.Load(), posts.Load())
	}
	dump := fmt.Sprint(cfg.Dump(nil))
	bad := &Config{OTELEndpoint: srv.URL, OTELHeaders: "authorization " + token}
	verr := bad.ValidateRun(nil)
	if verr == nil || !strings.Contains(verr.Error(), "OTEL_EXPORTER_OTLP_HEADERS") {
		t.Fatalf("malformed headers: %v", verr)
	}
	for what, s := range map[string]string{"logs": logs.String(), "config dump": dump, "validation error": verr.Error()} {
		if strings.Contains(s, token) || strings.Contains(s, tenant) {
			t.Errorf("%s show a header value:\n%s", what, s)
		}
	}
	if !strings.Contains(logs.String(), "[redacted]") {
		t.Errorf("the collector's echo was not redacted but dropped; logs:\n%s", logs.String())
	}
}

// A gRPC protocol is refused with a message that says so; OTEL_* variables are not
// reported as unknown settings.
func TestTracingConfig(t *testing.T) {
	c := &Config{OTELEndpoint: "http://collector:4317", OTELProtocol: "grpc"}
	if err := c.ValidateRun(nil); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: not supported") {
		t.Errorf("grpc: %v", err)
	}
	c = &Config{OTELEndpoint: "collector:4318"}
	if err := c.ValidateRun(nil); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318: must be an http") {
		t.Errorf("endpoint without scheme: %v", err)
	}
	if got := (&Config{OTELEndpoint: "http://c:4318/"}).traceExportURL(); got != "http://c:4318/v1/traces" {
		t.Errorf("export URL %s", got)
	}
	unknown := unknownVariables(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_BSP_SCHEDULE_DELAY": "100",
		"OTEL_EXPORTER_OTLP_TIMEOUT": "1000", "OTEL_SERVICE_NAME": "x"}, nil)
	if len(unknown) != 0 {
		t.Errorf("OTEL_* variables reported unknown: %v", unknown)
	}
}

// The SDK's own error lines (an unreadable certificate, a header it cannot parse) come
// out as JSON warn lines of the log, and without the values they are about.
func TestTracingSDKLogs(t *testing.T) {
	const marker = "SDKHEADERMARKER"
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization "+marker) // the SDK reads the process environment too
	cfg := loadTracingConfig(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
	var logs syncBuffer
	_, stop, err := setupTracing(context.Background(), cfg, "v1", "r1", zerolog.New(&logs))
	noErr(t, err)
	stop(context.Background())
	out := logs.String()
	for _, want := range []string{`"message":"traces: read tls ca cert file"`, `"message":"traces: parse headers"`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s line; logs:\n%s", want, out)
		}
	}
	if strings.Contains(out, marker) {
		t.Errorf("the SDK's log shows a header value:\n%s", out)
	}
}
