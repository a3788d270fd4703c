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

// TestConfigValidate: each problem is a *ConfigError naming the field's Go path, and the
// whole error wraps ErrInvalidConfig.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name        string
		mod         func(*Config)
		field, want string
	}{
		{"no endpoint", func(c *Config) { c.Endpoints = nil }, "Endpoints", "no Hermes endpoint"},
		{"bad endpoint id", func(c *Config) { c.Endpoints[0].ID = "Primary.1" }, "Endpoints[0].ID", "must match [a-z0-9_-]"},
		{"duplicate endpoint", func(c *Config) { c.Endpoints = append(c.Endpoints, c.Endpoints[0]) }, "Endpoints[1].ID", "configured twice"},
		{"no url", func(c *Config) { c.Endpoints[0].BaseURL = "" }, "Endpoints[0].BaseURL", "is required"},
		{"ftp url", func(c *Config) { c.Endpoints[0].BaseURL = "ftp://h" }, "Endpoints[0].BaseURL", "http:// or https://"},
		{"credentials in url", func(c *Config) { c.Endpoints[0].BaseURL = "http://u:secretpw@h" }, "Endpoints[0].BaseURL", "must not carry credentials"},
		{"query in url", func(c *Config) { c.Endpoints[0].BaseURL = "http://h/?a=1" }, "Endpoints[0].BaseURL", "query or fragment"},
		{"long tenant", func(c *Config) { c.Endpoints[0].TenantID = strings.Repeat("t", events.MaxTenantIDLen+1) }, "Endpoints[0].TenantID",
			"must be at most 256 characters without control characters"},
		{"tenant with a control character", func(c *Config) { c.Endpoints[0].TenantID = "a\nb" }, "Endpoints[0].TenantID", "without control characters"},
		{"endpoint concurrency", func(c *Config) { c.Endpoints[0].MaxConcurrency = -1 }, "Endpoints[0].MaxConcurrency", "must be at least 1"},
		{"heartbeat too slow", func(c *Config) { c.Heartbeat = 20 * time.Second }, "Heartbeat", "at most half of AckWait (30s)"},
		{"heartbeat just over half", func(c *Config) {
			c.AckWait = time.Second
			c.Heartbeat = 501 * time.Millisecond
			c.Lease = 2 * time.Second
		}, "Heartbeat", "at most half of AckWait"},
		{"negative heartbeat", func(c *Config) { c.Heartbeat = -time.Second }, "Heartbeat", "must be positive"},
		{"heartbeat over a quarter of the key ttl", func(c *Config) {
			c.AckWait, c.Heartbeat, c.Lease, c.IdempotencyTTL = time.Hour, 20*time.Minute, 2*time.Hour, time.Hour
		}, "Heartbeat", "must be at most a quarter of IdempotencyTTL (1h0m0s)"},
		{"ack wait too short", func(c *Config) { c.AckWait = 10 * time.Millisecond; c.Heartbeat = time.Millisecond }, "AckWait", "at least 1s"},
		{"lease shorter than ack wait", func(c *Config) { c.Lease = time.Second }, "Lease", "must be at least AckWait (30s)"},
		{"prefix with dot", func(c *Config) { c.Prefix = "a.b" }, "Prefix", "one subject token"},
		{"stream name", func(c *Config) { c.DLQStream = "has space" }, "DLQStream", "must be 1 to 128 letters, digits, - or _"},
		{"same buckets", func(c *Config) { c.KeysBucket = c.Bucket }, "KeysBucket", "must differ from Bucket"},
		{"replica id", func(c *Config) { c.ReplicaID = "a:b" }, "ReplicaID", "must be 1 to 128 letters"},
		{"max deliver", func(c *Config) { c.MaxDeliver = 0 }, "MaxDeliver", "must be -1 (unlimited) or at least 1"},
		{"max attempts", func(c *Config) { c.MaxAttempts = -1 }, "MaxAttempts", "must be at least 1"},
		{"approval ttl", func(c *Config) { c.ApprovalTTL = time.Millisecond }, "ApprovalTTL", "must be at least 1s"},
		{"breaker threshold", func(c *Config) { c.BreakerThreshold = -1 }, "BreakerThreshold", "must be at least 1"},
		{"breaker cooldown", func(c *Config) { c.BreakerCooldown = -time.Second }, "BreakerCooldown", "must be positive"},
		{"breaker max cooldown", func(c *Config) { c.BreakerMaxCooldown = time.Second }, "BreakerMaxCooldown", "must be at least BreakerCooldown (2s)"},
		{"workers", func(c *Config) { c.Workers = -1 }, "Workers", "must be at least 1"},
		{"max ack pending", func(c *Config) { c.MaxAckPending = 1 }, "MaxAckPending", "must be at least Workers (10)"},
		{"negative max ack pending", func(c *Config) { c.MaxAckPending = -1 }, "MaxAckPending", "must be at least 1"},
		{"replicas", func(c *Config) { c.Replicas = 6 }, "Replicas", "must be 1 to 5"},
		{"stream bytes", func(c *Config) { c.OutputMaxBytes = -1 }, "OutputMaxBytes", "must not be negative (0 is unlimited)"},
		{"dlq max age", func(c *Config) { c.DLQMaxAge = time.Second }, "DLQMaxAge", "must be at least 1m"},
		{"key ttl", func(c *Config) { c.IdempotencyTTL = time.Second }, "IdempotencyTTL", "must be at least 1m"},
		{"output max age", func(c *Config) { c.OutputMaxAge = time.Second; c.IdempotencyTTL = time.Minute }, "OutputMaxAge", "must be at least 1m"},
		{"output max age under the key ttl", func(c *Config) { c.OutputMaxAge = time.Hour; c.IdempotencyTTL = 2 * time.Hour },
			"OutputMaxAge", "must be at least IdempotencyTTL (2h0m0s): a key may replay a result kept in the output stream"},
		{"records outlive a parked action", func(c *Config) { c.ApprovalTTL = 25 * time.Hour }, "OutputMaxAge",
			"plus 1h0m0s, the action records' TTL, must be longer than ApprovalTTL (25h0m0s) plus Lease (1m0s)"},
		{"shutdown grace", func(c *Config) { c.ShutdownGrace = -time.Second }, "ShutdownGrace", "must not be negative"},
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
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("no *ConfigError in %v", err)
			}
			found := false
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				if ce, ok := e.(*ConfigError); ok && ce.Field == tt.field && strings.Contains(ce.Reason, tt.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("no *ConfigError with field %s and reason %q in %v", tt.field, tt.want, err)
			}
			if strings.Contains(err.Error(), "secretpw") {
				t.Errorf("error leaks the URL password: %q", err)
			}
		})
	}
}

// TestConfigValidateListsEveryProblem: every problem is reported at once, one a line,
// each reachable as a *ConfigError.
func TestConfigValidateListsEveryProblem(t *testing.T) {
	c := validConfig()
	c.MaxAttempts, c.Replicas, c.Endpoints[0].ID = -1, 9, "A"
	err := c.Validate()
	want := "bridge: invalid configuration:\n  - MaxAttempts: must be at least 1\n  - Replicas: must be 1 to 5\n  - Endpoints[0].ID: must match [a-z0-9_-]{1,128}"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if ce, ok := e.(*ConfigError); ok {
			fields = append(fields, ce.Field)
		}
	}
	if strings.Join(fields, ",") != "MaxAttempts,Replicas,Endpoints[0].ID" {
		t.Errorf("fields %v", fields)
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
	if paused, _, _ := b.pause(now); paused {
		t.Fatal("paused after 2 failures, threshold is 3")
	}
	b.done(now, fail)
	paused, wait, _ := b.pause(now)
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
	if _, wait, _ := b.pause(later); wait != 2*time.Second {
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
	if paused, _, _ := b.pause(later); paused {
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
