package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	dto "github.com/prometheus/client_model/go"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// serveOps serves the operations endpoints of reg and ready on a loopback port until
// the test ends, and returns the base URL.
func serveOps(t *testing.T, reg interface {
	Gather() ([]*dto.MetricFamily, error)
}, ready func(context.Context) error) string {
	t.Helper()
	srv, err := opshttp.Listen("127.0.0.1:0", opshttp.Handler(reg, ready))
	requireOK(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("ops shutdown: %v", err)
		}
	})
	return "http://" + srv.Addr()
}

// scrape fetches base/metrics over HTTP and parses the text exposition.
func scrape(t *testing.T, base string) scraped {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	requireOK(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	requireOK(t, err, "parse /metrics: %v")
	return scraped(fams)
}

type scraped map[string]*dto.MetricFamily

// find returns the sample of family name whose labels include want (name=value pairs).
func (s scraped) find(name string, want ...string) *dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if v, ok := got[want[i]]; !ok || v != want[i+1] {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's sample count; -1 when the
// series does not exist.
func (s scraped) value(name string, labels ...string) float64 {
	m := s.find(name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// sum adds the values of every series of family name.
func (s scraped) sum(name string) float64 {
	f := s[name]
	if f == nil {
		return -1
	}
	var n float64
	for _, m := range f.Metric {
		switch {
		case m.Counter != nil:
			n += m.Counter.GetValue()
		case m.Histogram != nil:
			n += float64(m.Histogram.GetSampleCount())
		}
	}
	return n
}

// TestMetrics drives a known mix of actions through the bridge (completed chats and a
// stream, a replay and a conflict on one key, a Hermes 400, an invalid action, an
// unreadable message, an endpoint whose 500s open its breaker), then scrapes /metrics
// over HTTP and checks the exact counts, that the histograms saw the calls, and that no
// label holds an action id, a key or a prompt.
func TestMetrics(t *testing.T) {
	t.Parallel()
	fakeB := hermestest.NewServer()
	t.Cleanup(fakeB.Close)
	keyB := fakeB.APIKey()
	reg := opshttp.NewRegistry()
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.Metrics = reg
		c.MetricsInterval = 50 * time.Millisecond
		c.MaxAttempts = 2
		c.BreakerThreshold = 2
		c.BreakerCooldown = time.Minute // stays open for the test
		c.BreakerMaxCooldown = time.Minute
		c.Endpoints = append(c.Endpoints, bridge.Endpoint{ID: "b", BaseURL: fakeB.URL,
			Key: func() string { return keyB }, MaxConcurrency: 2})
	}))
	h.state.mu.Lock()
	rb := h.state.bridges[0]
	h.state.mu.Unlock()
	base := serveOps(t, reg, rb.b.Health)

	const secret = "metrics-marker-prompt-7f3a"
	for i := range 3 {
		h.callOK("chat", fmt.Sprintf(`{"prompt":"%s %d"}`, secret, i))
	}
	first := h.callOK("chat", `{"prompt":"keyed `+secret+`"}`, withKey("metrics-key-"+secret))
	replay := h.callOK("chat", `{"prompt":"keyed `+secret+`"}`, withKey("metrics-key-"+secret))
	if replay.ReplayOf == nil {
		t.Fatalf("second keyed chat is not a replay")
	}
	conflict, _ := h.call("chat", `{"prompt":"changed `+secret+`"}`, withKey("metrics-key-"+secret))
	requireFailed(t, conflict, "idempotency_conflict")

	h.fake.InjectFault(hermestest.Fault{Route: "chat", Status: http.StatusBadRequest, Times: 1})
	rejected, _ := h.call("chat", `{"prompt":"rejected `+secret+`"}`)
	if rejected.Error == nil {
		t.Fatalf("the 400 chat did not fail: %s", rejected.Status)
	}
	code400 := rejected.Error.Code

	invalid, _ := h.call("chat", `{"temperature":"hot"}`)
	requireFailed(t, invalid, "invalid_action")
	// An endpoint nobody configured is counted as "unknown": subjects cannot grow labels.
	nowhere, _ := h.callOn("nowhere-"+secret, "chat", `{"prompt":"x"}`)
	requireFailed(t, nowhere, "invalid_action")

	stream, evs := h.call("chat_stream", `{"prompt":"stream `+secret+`"}`)
	requireCompleted(t, stream)

	h.publishRaw(chatSubject, nats.Header{}, []byte("not an action "+secret))
	h.dlq(1, 20*time.Second)

	fakeB.InjectFault(hermestest.Fault{Route: "models", Status: http.StatusInternalServerError, Times: 1 << 20})
	broken, _ := h.callOn("b", "models", `{}`)
	requireFailed(t, broken, broken.Error.Code)
	codeB := broken.Error.Code
	h.waitIdle(10 * time.Second)

	var s scraped
	h.eventually(10*time.Second, func() error { // the consumer gauges are sampled
		s = scrape(t, base)
		if v := s.value(bridge.MetricInFlight); v != 0 {
			return fmt.Errorf("in flight %v", v)
		}
		if p, a := s.value(bridge.MetricPending), s.value(bridge.MetricAckPending); p != 0 || a != 0 {
			return fmt.Errorf("consumer pending %v, ack pending %v", p, a)
		}
		return nil
	})

	counts := []struct {
		name   string
		labels []string
		want   float64
	}{
		{bridge.MetricActionsSettled, []string{"endpoint", "primary", "operation", "chat", "status", "completed", "code", ""}, 5},
		{bridge.MetricActionsSettled, []string{"endpoint", "primary", "operation", "chat", "status", "failed", "code", "idempotency_conflict"}, 1},
		{bridge.MetricActionsSettled, []string{"endpoint", "primary", "operation", "chat", "status", "failed", "code", code400}, 1},
		{bridge.MetricActionsSettled, []string{"endpoint", "primary", "operation", "chat", "status", "failed", "code", "invalid_action"}, 1},
		{bridge.MetricActionsSettled, []string{"endpoint", "primary", "operation", "chat_stream", "status", "completed", "code", ""}, 1},
		{bridge.MetricActionsSettled, []string{"endpoint", "unknown", "operation", "chat", "status", "failed", "code", "invalid_action"}, 1},
		{bridge.MetricActionsSettled, []string{"endpoint", "b", "operation", "models", "status", "failed", "code", codeB}, 1},
		{bridge.MetricReplays, nil, 1},
		{bridge.MetricConflicts, nil, 1},
		{bridge.MetricDLQ, nil, 1},
		{bridge.MetricEventsPublished, nil, float64(len(evs))},
		{bridge.MetricRedeliveries, nil, 1}, // endpoint b's first 500 is retried (MaxAttempts 2)
		{bridge.MetricTakeovers, nil, 0},
		{bridge.MetricWaiting, nil, 0},
		{bridge.MetricBreakerState, []string{"endpoint", "b"}, 1},
		{bridge.MetricBreakerState, []string{"endpoint", "primary"}, 0},
		{bridge.MetricBreakerOpens, []string{"endpoint", "b"}, 1},
		{bridge.MetricBreakerOpens, []string{"endpoint", "primary"}, 0},
		// histograms: sample counts
		{bridge.MetricHermesRequest, []string{"endpoint", "primary", "operation", "chat", "class", "2xx"}, 4},
		{bridge.MetricHermesRequest, []string{"endpoint", "primary", "operation", "chat", "class", "4xx"}, 1},
		{bridge.MetricHermesRequest, []string{"endpoint", "primary", "operation", "chat_stream", "class", "2xx"}, 1},
		{bridge.MetricHermesRequest, []string{"endpoint", "b", "operation", "models", "class", "5xx"}, 2},
		{bridge.MetricFirstEvent, []string{"endpoint", "primary", "operation", "chat_stream"}, 1},
		{bridge.MetricApprovals, []string{"outcome", "approve"}, 0},
	}
	for _, c := range counts {
		if got := s.value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := s.sum(bridge.MetricActionsSettled); got != 11 {
		t.Errorf("%s over every series = %v, want 11", bridge.MetricActionsSettled, got)
	}
	if got := s.sum(bridge.MetricHermesRequest); got != 8 {
		t.Errorf("%s samples = %v, want 8 (the fake saw %d chat, %d chat_stream, %d models on b)", bridge.MetricHermesRequest, got,
			h.fake.Calls("chat"), h.fake.Calls("chat_stream"), fakeB.Calls("models"))
	}
	for _, op := range []string{"create", "get", "update"} {
		if n := s.value(bridge.MetricKVSeconds, "op", op); n <= 0 {
			t.Errorf("%s{op=%q} saw %v operations", bridge.MetricKVSeconds, op, n)
		}
	}
	if s["go_goroutines"] == nil || s["process_cpu_seconds_total"] == nil {
		t.Errorf("the Go and process collectors are missing")
	}

	// No label value is an action id, a key or content.
	ids := []string{first.ActionID, replay.ActionID, conflict.ActionID, rejected.ActionID, stream.ActionID, broken.ActionID, nowhere.ActionID}
	for name, f := range s {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				v := l.GetValue()
				if strings.Contains(v, secret) || strings.Contains(v, "metrics-key") {
					t.Errorf("%s has label %s=%q", name, l.GetName(), v)
				}
				for _, id := range ids {
					if v == id {
						t.Errorf("%s has an action id as label %s", name, l.GetName())
					}
				}
			}
		}
	}

	// The text exposition follows the conventions: counters end in _total.
	for name, f := range s {
		if strings.HasPrefix(name, "hermes_bridge_") && f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s does not end in _total", name)
		}
	}

	resp, err := http.Get(base + "/healthz")
	requireOK(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s", resp.Status)
	}
}

// readyz returns /readyz's status code and body.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	requireOK(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadiness: /readyz is 503 before Run has bound the consumer, 200 once it
// consumes, and 503 again as soon as shutdown begins, while an in-flight action still
// holds Run in its grace period; /healthz stays 200 throughout.
func TestReadiness(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutBridge())
	nc, _ := natsembed.Connect(t, h.ns)
	cfg := h.cfg
	cfg.ShutdownGrace = 20 * time.Second
	b, err := bridge.New(nc, cfg, zerolog.New(h.logs))
	requireOK(t, err)
	base := serveOps(t, opshttp.NewRegistry(), b.Health)
	if code, body := readyz(t, base); code != http.StatusServiceUnavailable {
		t.Fatalf("before Run: /readyz %d %q, want 503", code, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}) // closed when Run has returned runErr
	var runErr error
	go func() { defer close(done); runErr = b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
	h.eventually(10*time.Second, func() error {
		if code, body := readyz(t, base); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})

	// An action that takes a while keeps Run in its grace period after the cancel.
	h.fake.InjectFault(hermestest.Fault{Route: "models", Delay: 3 * time.Second})
	id := h.publish("models", events.Action{Input: mustJSON(t, `{}`)})
	h.until(10*time.Second, "a models call", func() bool { return h.fake.Calls("models") > 0 })
	cancel()
	h.eventually(5*time.Second, func() error {
		if code, body := readyz(t, base); code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d %q after shutdown began", code, body)
		}
		return nil
	})
	select {
	case <-done:
		t.Fatalf("Run returned before /readyz was checked during the drain")
	default:
	}
	if code, body := readyz(t, base); !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz during drain: %d %q", code, body)
	}
	<-done
	if runErr != nil {
		t.Fatalf("Run: %v", runErr)
	}
	h.followOK(id)
	if code, _ := readyz(t, base); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after Run returned: %d", code)
	}
}

// opsURL waits for the process's operations listener and returns its base URL.
func (p *proc) opsURL(timeout time.Duration) string {
	p.t.Helper()
	p.waitLog(timeout, `"message":"operations HTTP listener started"`)
	for _, l := range p.log() {
		var line struct {
			Message string `json:"message"`
			Addr    string `json:"addr"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && line.Message == "operations HTTP listener started" {
			return "http://" + line.Addr
		}
	}
	p.t.Fatal("no address in the listener's log line")
	return ""
}

// TestOpsListenerProcess runs the real `hermes-bridge run`: its listener (on the port
// HERMES_BRIDGE_HTTP_ADDR=127.0.0.1:0 chose) serves /healthz, /readyz turns 200 once
// the bridge consumes, /metrics counts an action, and on SIGTERM /readyz turns 503 at
// once while an in-flight action still keeps the process in its grace period; the
// process then exits 0.
func TestOpsListenerProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutBridge())
	p := h.launchProc(withEnv("HERMES_BRIDGE_SHUTDOWN_GRACE", "20s"))
	base := p.opsURL(30 * time.Second)
	seen503 := false
	h.eventually(30*time.Second, func() error {
		code, body := readyz(t, base)
		if code != http.StatusOK {
			seen503 = seen503 || code == http.StatusServiceUnavailable
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	t.Logf("/readyz answered 503 before 200: %v", seen503)
	resp, err := http.Get(base + "/healthz")
	requireOK(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s", resp.Status)
	}

	h.callOK("chat", `{"prompt":"counted"}`)
	var s scraped
	h.eventually(10*time.Second, func() error { // counted right after the result is stored
		s = scrape(t, base)
		if v := s.value(bridge.MetricActionsSettled, "endpoint", "primary", "operation", "chat", "status", "completed"); v != 1 {
			return fmt.Errorf("settled chats %v, want 1", v)
		}
		return nil
	})
	if s["process_resident_memory_bytes"] == nil {
		t.Errorf("no process collector")
	}

	h.fake.InjectFault(hermestest.Fault{Route: "models", Delay: 3 * time.Second})
	id := h.publish("models", events.Action{Input: mustJSON(t, `{}`)})
	h.until(10*time.Second, "a models call", func() bool { return h.fake.Calls("models") > 0 })
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	h.eventually(5*time.Second, func() error {
		if code, body := readyz(t, base); code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d %q after SIGTERM", code, body)
		}
		return nil
	})
	select {
	case <-p.done:
		t.Fatalf("the process exited before /readyz was checked during the drain")
	default:
	}
	if _, code := p.waitExit(30 * time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
	h.followOK(id)
}

// TestMetricsGovernance: approval decisions and cancel requests are counted by their
// bounded outcome.
func TestMetricsGovernance(t *testing.T) {
	t.Parallel()
	reg := opshttp.NewRegistry()
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.Metrics = reg
		c.ApprovalTTL = time.Minute
	}))
	base := serveOps(t, reg, func(context.Context) error { return nil })

	id, out := parkedDelete(t, h, "metrics-sess", "metrics-del")
	h.decide(id, events.DecisionDeny, out.InputSHA256)
	res, _ := h.follow(id)
	requireFailed(t, res, "approval_denied")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct{ id, want string }{{"metrics-nobody", events.CancelUnknown}, {id, events.CancelAlreadySettled}} {
		r, err := h.client.Cancel(ctx, c.id)
		if err != nil || r.State != c.want {
			t.Fatalf("cancel %s: %+v %v, want %s", c.id, r, err, c.want)
		}
	}
	h.waitIdle(10 * time.Second)

	s := scrape(t, base)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{bridge.MetricApprovals, []string{"outcome", "deny"}, 1},
		{bridge.MetricApprovals, []string{"outcome", "approve"}, 0},
		{bridge.MetricCancels, []string{"state", events.CancelUnknown}, 1},
		{bridge.MetricCancels, []string{"state", events.CancelAlreadySettled}, 1},
		{bridge.MetricActionsSettled, []string{"operation", "session_create", "status", "completed"}, 1},
		{bridge.MetricActionsSettled, []string{"operation", "session_delete", "status", "failed", "code", "approval_denied"}, 1},
		{bridge.MetricHermesRequest, []string{"operation", "session_create", "class", "2xx"}, 1},
		{bridge.MetricHermesRequest, []string{"operation", "session_delete", "class", "2xx"}, 0},
	} {
		if got := s.value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
