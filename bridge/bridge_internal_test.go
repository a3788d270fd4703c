package bridge

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

func validConfig() Config {
	return Config{Endpoints: []Endpoint{{ID: "primary", BaseURL: "http://127.0.0.1:8642"}}}.WithDefaults()
}

func TestConfigDefaults(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"prefix", c.Prefix, "hermes"},
		{"actions stream", c.ActionsStream, "HERMES_ACTIONS"},
		{"output stream", c.OutputStream, "HERMES_OUTPUT"},
		{"consumer", c.Consumer, "hermes-bridge"},
		{"bucket", c.Bucket, "HERMES_IDEMPOTENCY"},
		{"ttl", c.IdempotencyTTL, 24 * time.Hour},
		{"ack wait", c.AckWait, 30 * time.Second},
		{"heartbeat", c.Heartbeat, 10 * time.Second},
		{"workers", c.Workers, 10},
		{"max ack pending", c.MaxAckPending, 1024},
		{"endpoint concurrency", c.Endpoints[0].MaxConcurrency, 10},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

// TestConfigHeartbeatFollowsAckWait: the heartbeat and lease defaults follow a configured
// ack wait, and a heartbeat of exactly half the ack wait is accepted.
func TestConfigHeartbeatFollowsAckWait(t *testing.T) {
	c := Config{AckWait: 3 * time.Second, Endpoints: []Endpoint{{ID: "primary", BaseURL: "http://127.0.0.1:8642"}}}.WithDefaults()
	if c.Heartbeat != time.Second || c.Lease != 6*time.Second {
		t.Errorf("ack wait 3s: heartbeat %s, lease %s; want 1s and 6s", c.Heartbeat, c.Lease)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults for ack wait 3s: %v", err)
	}
	c.Heartbeat = 1500 * time.Millisecond
	if err := c.Validate(); err != nil {
		t.Errorf("heartbeat of half the ack wait rejected: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no endpoint", func(c *Config) { c.Endpoints = nil }, "no Hermes endpoint"},
		{"bad endpoint id", func(c *Config) { c.Endpoints[0].ID = "Primary.1" }, "must match [a-z0-9_-]"},
		{"duplicate endpoint", func(c *Config) { c.Endpoints = append(c.Endpoints, c.Endpoints[0]) }, "configured twice"},
		{"ftp url", func(c *Config) { c.Endpoints[0].BaseURL = "ftp://h" }, "http:// or https://"},
		{"credentials in url", func(c *Config) { c.Endpoints[0].BaseURL = "http://u:secretpw@h" }, "must not carry credentials"},
		{"query in url", func(c *Config) { c.Endpoints[0].BaseURL = "http://h/?a=1" }, "query or fragment"},
		{"heartbeat too slow", func(c *Config) { c.Heartbeat = 20 * time.Second }, "at most half the ack wait"},
		{"heartbeat just over half", func(c *Config) {
			c.AckWait = time.Second
			c.Heartbeat = 501 * time.Millisecond
			c.Lease = 2 * time.Second
		}, "at most half the ack wait"},
		{"negative heartbeat", func(c *Config) { c.Heartbeat = -time.Second }, "must be positive"},
		{"ack wait too short", func(c *Config) { c.AckWait = 10 * time.Millisecond; c.Heartbeat = time.Millisecond }, "at least 1s"},
		{"lease shorter than ack wait", func(c *Config) { c.Lease = time.Second }, "claim lease"},
		{"prefix with dot", func(c *Config) { c.Prefix = "a.b" }, "one subject token"},
		{"max ack pending", func(c *Config) { c.MaxAckPending = 1 }, "max ack pending"},
		{"output max age under the key ttl", func(c *Config) { c.OutputMaxAge = time.Hour; c.IdempotencyTTL = 2 * time.Hour },
			"output max age 1h0m0s (HERMES_BRIDGE_OUTPUT_MAX_AGE) must be at least the idempotency ttl 2h0m0s (HERMES_BRIDGE_IDEMPOTENCY_TTL)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mod(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secretpw") {
				t.Errorf("error leaks the URL password: %q", err)
			}
		})
	}
}

func TestClientErrorInfo(t *testing.T) {
	tests := []struct {
		name          string
		err           error
		safe          bool
		code          string
		retryable     bool
		uncertain     bool
		wantRemote    string
		wantRetryAfMS int64
	}{
		{"input", &hermes.InputError{Field: "input.prompt", Reason: "empty"}, false, "invalid_action", false, false, "", 0},
		{"5xx unsafe", &hermes.Error{Code: "remote_unavailable", HTTPStatus: 500}, false, "remote_unavailable", false, true, "", 0},
		{"5xx safe", &hermes.Error{Code: "remote_unavailable", HTTPStatus: 500}, true, "remote_unavailable", true, false, "", 0},
		{"429 gate unsafe", &hermes.Error{Code: "remote_unavailable", HTTPStatus: 429, NotStarted: true, RemoteCode: "rate_limit_exceeded", RetryAfter: time.Second}, false, "remote_unavailable", true, false, "rate_limit_exceeded", 1000},
		{"4xx", &hermes.Error{Code: "remote_rejected", HTTPStatus: 404, NotStarted: true, RemoteCode: "session_not_found"}, false, "remote_rejected", false, false, "session_not_found", 0},
		{"fork title", &hermes.Error{Code: "remote_rejected", HTTPStatus: 400, RemoteCode: "invalid_title"}, false, "remote_rejected", false, true, "invalid_title", 0},
		{"not a hermes error", errors.New("boom"), false, "internal", false, true, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := clientErrorInfo(tt.err, tt.safe)
			if info.Code != tt.code || info.Retryable != tt.retryable || info.UncertainOutcome != tt.uncertain {
				t.Errorf("got code=%s retryable=%v uncertain=%v, want %s %v %v", info.Code, info.Retryable, info.UncertainOutcome, tt.code, tt.retryable, tt.uncertain)
			}
			if tt.wantRemote != "" && info.Details["remote_code"] != tt.wantRemote {
				t.Errorf("remote_code %v, want %s", info.Details["remote_code"], tt.wantRemote)
			}
			if info.RetryAfterMS != tt.wantRetryAfMS {
				t.Errorf("retry_after_ms %d, want %d", info.RetryAfterMS, tt.wantRetryAfMS)
			}
		})
	}
}

func TestTimeoutFor(t *testing.T) {
	chat, _ := hermes.Lookup("chat")
	stream, _ := hermes.Lookup("chat_stream")
	if got := timeoutFor(chat, nil); got != 60*time.Second {
		t.Errorf("chat default %s", got)
	}
	if got := timeoutFor(stream, nil); got != 300*time.Second {
		t.Errorf("stream default %s", got)
	}
}

func TestBreaker(t *testing.T) {
	now := time.Unix(1000, 0)
	fail := &hermes.Error{Code: hermes.CodeTransport}
	b := newBreaker(3, time.Second, 4*time.Second)
	for i := 0; i < 2; i++ {
		if ok, _ := b.allow(now); !ok {
			t.Fatalf("closed breaker refused call %d", i)
		}
		b.done(now, fail)
	}
	if paused, _ := b.pausedFor(now); paused {
		t.Fatal("paused after 2 failures, threshold is 3")
	}
	b.done(now, fail)
	paused, wait := b.pausedFor(now)
	if !paused || wait != time.Second {
		t.Fatalf("after 3 failures: paused %v for %s, want 1s", paused, wait)
	}
	if ok, _ := b.allow(now.Add(500 * time.Millisecond)); ok {
		t.Fatal("open breaker let a call through")
	}
	// Half-open: one probe, the others wait.
	later := now.Add(time.Second)
	if ok, _ := b.allow(later); !ok {
		t.Fatal("half-open breaker refused the probe")
	}
	if ok, _ := b.allow(later); ok {
		t.Fatal("half-open breaker let a second call through")
	}
	b.done(later, fail) // the probe fails: reopen with twice the cooldown
	if _, wait := b.pausedFor(later); wait != 2*time.Second {
		t.Fatalf("reopened for %s, want 2s", wait)
	}
	_, _, code := b.pause(later)
	if code != hermes.CodeTransport {
		t.Errorf("last failure code %q", code)
	}
	later = later.Add(2 * time.Second)
	if ok, _ := b.allow(later); !ok {
		t.Fatal("second probe refused")
	}
	b.done(later, nil) // the probe succeeds: closed again
	if paused, _ := b.pausedFor(later); paused {
		t.Fatal("still paused after a successful probe")
	}
	if ok, _ := b.allow(later); !ok {
		t.Fatal("closed breaker refused a call")
	}
}

func TestEndpointFailure(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&hermes.Error{Code: hermes.CodeTransport}, true},
		{&hermes.Error{Code: hermes.CodeRemoteUnavailable, HTTPStatus: 503}, true},
		{&hermes.Error{Code: hermes.CodeRemoteUnavailable, HTTPStatus: 429}, false},
		{&hermes.Error{Code: hermes.CodeRemoteRejected, HTTPStatus: 404}, false},
		{&hermes.Error{Code: hermes.CodeAgentIncomplete, HTTPStatus: 502}, false},
		{errors.New("other"), false},
	}
	for _, tt := range tests {
		if got := endpointFailure(tt.err); got != tt.want {
			t.Errorf("endpointFailure(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestEventKindsMatchTheWire: the bridge publishes hermes.Event.Kind as the wire's kind,
// so the client's kinds (hermes, which does not import events) must be the contract's.
func TestEventKindsMatchTheWire(t *testing.T) {
	pairs := [][2]string{
		{hermes.KindData, events.KindData}, {hermes.KindProgress, events.KindProgress},
		{hermes.KindTool, events.KindTool}, {hermes.KindThought, events.KindThought},
		{hermes.KindPendingApproval, events.KindPendingApproval}, {hermes.KindError, events.KindError},
		{hermes.KindDone, events.KindDone},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("hermes kind %q, wire kind %q", p[0], p[1])
		}
	}
}

// TestInvalidActionMessage: the message names the field once, also when the reason
// already starts with it (issue 13: "capability_id: capability_id does not match ...");
// details keep the field and the reason as they are.
func TestInvalidActionMessage(t *testing.T) {
	for _, tt := range []struct{ field, reason, want string }{
		{"capability_id", "capability_id does not match the subject's capability cap:x",
			"invalid action: capability_id does not match the subject's capability cap:x"},
		{"input", "input is not valid JSON", "invalid action: input is not valid JSON"},
		{"specversion", "specversion must be 1.0", "invalid action: specversion must be 1.0"},
		{"input.prompt", "must not be blank", "invalid action: input.prompt: must not be blank"},
		{"source", "ce-source header is missing", "invalid action: source: ce-source header is missing"},
		{"input", "input_sha256 is required", "invalid action: input: input_sha256 is required"},
		{"", "the parked action cannot be resumed", "invalid action: the parked action cannot be resumed"},
	} {
		e := invalidAction(tt.field, tt.reason)
		if e.Message != tt.want {
			t.Errorf("invalidAction(%q, %q).Message = %q, want %q", tt.field, tt.reason, e.Message, tt.want)
		}
		if e.Details["field"] != tt.field || e.Details["reason"] != tt.reason {
			t.Errorf("details %v", e.Details)
		}
	}
}
