package bridge

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("bridge: invalid configuration")

// Endpoint is one Hermes API server the bridge may call.
type Endpoint struct {
	// ID is the endpoint id used in subjects and capability ids: [a-z0-9_-]{1,128}.
	ID string
	// BaseURL is an http(s) origin with an optional path prefix and no credentials.
	BaseURL string
	// Key returns the bearer key at the moment of each request, so a key file can be
	// re-read without restarting. It may return "" for an endpoint without a key.
	Key func() string
	// TenantID, when set, restricts the endpoint to actions carrying that tenant.
	TenantID string
	// MaxConcurrency bounds the calls in flight to this endpoint (default 10): the
	// start and the ceiling of the limit learned from Hermes's 429 gate (limiter.go).
	MaxConcurrency int
	// KeyHint, when set, says where this endpoint's key comes from and what to set or
	// check. It is added to the message of every authentication failure of the
	// endpoint ("no valid API key configured; <KeyHint>") and to its log line, so the
	// operator learns which setting to fix. It must not contain the key.
	KeyHint string
	// KeySource names the key's source for the log ("file:/run/secrets/key",
	// "env:HERMES_API_KEY", "none"); it never appears in results.
	KeySource string
}

// Config is what the bridge is: every value it needs, already parsed by cmd/.
// The zero value of each field means its documented default (see WithDefaults).
type Config struct {
	// Prefix is the first subject token (default "hermes").
	Prefix string
	// ActionsStream captures <prefix>.actions.> (default HERMES_ACTIONS).
	ActionsStream string
	// OutputStream captures events and results (default HERMES_OUTPUT).
	OutputStream string
	// DLQStream captures <prefix>.dlq (default HERMES_DLQ).
	DLQStream string
	// Consumer is the durable pull consumer shared by every replica (default hermes-bridge).
	Consumer string
	// Bucket is the KV bucket of action records, the park index and idempotency keys
	// (default HERMES_IDEMPOTENCY), kept RecordsTTL: longer than the results they stand
	// for; each key expires IdempotencyTTL after its last write.
	Bucket string
	// KeysBucket is the KV bucket of idempotency keys of a deployment that has one
	// (default HERMES_KEYS): earlier releases made it, and a bridge makes it where the
	// server takes no message TTLs. Where it exists, keys live there, kept
	// IdempotencyTTL, and an unsafe keyed action claims its key and its record in two
	// writes; the bridge never creates it otherwise.
	KeysBucket string

	// OutputMaxAge bounds how long events and results can be replayed (default 24h).
	OutputMaxAge time.Duration
	// DLQMaxAge bounds how long dead letters are kept (default 7 days).
	DLQMaxAge time.Duration
	// ActionsMaxAge bounds how long actions stay in their stream (default 24h).
	ActionsMaxAge time.Duration
	// ActionsMaxBytes, OutputMaxBytes and DLQMaxBytes bound the size of the three
	// streams in bytes (0, the default: unlimited). A full stream discards its oldest
	// messages: actions whether handled or not, events and results before OutputMaxAge.
	// Lowering a limit below what a stream holds needs AllowRetentionShrink.
	ActionsMaxBytes, OutputMaxBytes, DLQMaxBytes int64
	// IdempotencyTTL is how long an idempotency key is remembered after its last write
	// (default 24h): its message TTL in the records bucket, or the keys bucket's TTL.
	// Action records are kept RecordsTTL.
	IdempotencyTTL time.Duration
	// Storage is the storage of streams and bucket (default file).
	Storage jetstream.StorageType
	// Replicas of streams and bucket (default 1).
	Replicas int

	// Provision creates or updates streams, consumer and bucket at start. When false the
	// bridge only binds to them and fails with a clear error if one is missing.
	Provision bool
	// AllowRetentionShrink lets provisioning shorten the max age of a stream, or the TTL
	// of the bucket or the object store, that holds data: the server then deletes every
	// message older than the new value at once. Without it Run refuses to start
	// (ErrRetentionShrink) and changes nothing. Lengthening a retention, or shortening
	// that of an empty resource, needs no permission; every change is logged.
	AllowRetentionShrink bool

	// AckWait is the consumer's ack wait (default 30s). Heartbeats (InProgress) are sent
	// every Heartbeat (default AckWait/3), which must be less than AckWait/2.
	AckWait   time.Duration
	Heartbeat time.Duration
	// MaxDeliver is the consumer's delivery limit (default -1: unlimited). The bridge
	// bounds its own work with MaxAttempts and the action's deadline, and must see every
	// action again until it is settled, so a finite MaxDeliver is only a last resort
	// against a message that crashes every replica.
	MaxDeliver int
	// MaxAttempts bounds the Hermes calls of one action that failed with a retryable
	// error (default 5). Deliveries spent waiting (a paused endpoint, a busy claim, a
	// 429 of Hermes's concurrency gate) do not count.
	MaxAttempts int

	// BreakerThreshold consecutive endpoint failures (transport errors and 5xx) pause the
	// endpoint for BreakerCooldown, doubling up to BreakerMaxCooldown while it keeps
	// failing (defaults 5, 2s, 60s). While paused its actions wait (NakWithDelay) instead
	// of calling Hermes; other endpoints keep flowing.
	BreakerThreshold                    int
	BreakerCooldown, BreakerMaxCooldown time.Duration

	// CapabilitiesTTL is how long an endpoint's GET /v1/capabilities answer is reused
	// (default 30s): an endpoint upgraded under the running bridge (durable runs
	// idempotency) is noticed at most this long after its upgrade.
	CapabilitiesTTL time.Duration

	// ApprovalTTL is how long a parked action waits for an approval decision, and how
	// old a pre-approval's decided_at may be (default 15m, schemas/README.md, "Approvals").
	ApprovalTTL time.Duration
	// NoPreApprovals ignores approvals carried inside actions: every action that needs
	// approval is parked until a decision arrives on its approvals subject. Use it when
	// the publishers of actions must not approve their own deletions (a publisher can
	// always compute the input's hash).
	NoPreApprovals bool

	// ObjectBucket is the JetStream object store holding outputs and events too large for
	// one message (default HERMES_OUTPUT_OBJECTS, kept OutputMaxAge).
	ObjectBucket string

	// Hook, when set, is called at fixed points of every action (see Point). It exists
	// for fault-injection tests and must return quickly.
	Hook func(p Point, actionID string)
	// Metrics, when set, receives the bridge's Prometheus collectors (the
	// hermes_bridge_* metrics, see deploy/README.md, "Metrics"); nil records nothing. New
	// fails if they are already registered there: use one registry per Bridge.
	Metrics prometheus.Registerer
	// MetricsInterval is how often the consumer's pending and ack-pending counts are
	// sampled for the metrics (default 5s).
	MetricsInterval time.Duration
	// TracerProvider, when set, receives the spans of action handling (one trace per
	// action, continuing its traceparent; see deploy/README.md, "Traces"); nil records none.
	TracerProvider trace.TracerProvider
	// Workers bounds actions handled at once by this replica (default: sum of endpoint
	// MaxConcurrency).
	Workers int
	// MaxAckPending is the consumer's limit of unacknowledged actions across every replica
	// (default: the larger of 1024 and 8 times what one replica holds, see
	// DefaultMaxAckPending). Replicas share it: N replicas run at full concurrency only
	// when it is at least N times HeldPerReplica.
	MaxAckPending int
	// Lease is how long a claim stays valid without renewal (default 2*AckWait). It must
	// hold RenewalGap(Heartbeat, Lease, one ping interval), and the connection given to
	// New should use NATSLiveness(Lease).Options() (see NATSLiveness).
	Lease time.Duration

	// ReplicaID names this process in claims (default: a random id).
	ReplicaID string
	// Version is the bridge's version, announced by its micro service (as a semantic
	// version; anything else is announced as 0.0.0-dev, and in full in the metadata).
	Version string
	// Source is the CloudEvents source of everything the bridge publishes (default "hermes-bridge").
	Source string
	// ShutdownGrace bounds how long in-flight actions may run after shutdown starts (default 30s).
	ShutdownGrace time.Duration

	// RetryBase and RetryMax bound the exponential backoff of retries (defaults 500ms and 30s).
	RetryBase, RetryMax time.Duration

	Endpoints []Endpoint
}

// RecordMargin is how much longer than a result an action record is kept: more than
// any delay between a record's last write (its owner renews it while it runs) and the
// append of its result.
const RecordMargin = time.Hour

// RecordsTTL is the records bucket's TTL: OutputMaxAge + RecordMargin. Records
// outlive the results they stand for, so a record created afresh proves that no
// result of the action is stored, and no delivery needs to read the result log first;
// keys (IdempotencyTTL, at most OutputMaxAge) never outlive the results they replay.
func (c Config) RecordsTTL() time.Duration { return c.OutputMaxAge + RecordMargin }

// core is the configuration of the jobs (bridge/core).
func (c Config) core() core.Config {
	return core.Config{Lease: c.Lease, Heartbeat: c.Heartbeat, ApprovalTTL: c.ApprovalTTL,
		MaxAttempts: c.MaxAttempts, RetryBase: c.RetryBase, RetryMax: c.RetryMax, SettleFor: settleFor,
		NoPreApprovals: c.NoPreApprovals, DecisionTries: decisionTries, ParkingWait: parkingWait(c.Lease),
		StoreBound: StoreRequestBound(c.Lease)}
}

// settleFor is the least time a job retries storing a result.
const settleFor = 30 * time.Second

// decisionTries is how many deliveries a decision that finds nothing to decide is
// retried (it may have overtaken its action) before it is dead-lettered.
const decisionTries = 30

// parkingWait is how long a decision waits once for a parking that may be under way.
func parkingWait(lease time.Duration) time.Duration { return min(lease, 5*time.Second) }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def(&c.Prefix, "hermes")
	def(&c.MetricsInterval, 5*time.Second)
	def(&c.ActionsStream, "HERMES_ACTIONS")
	def(&c.OutputStream, "HERMES_OUTPUT")
	def(&c.DLQStream, "HERMES_DLQ")
	def(&c.Consumer, "hermes-bridge")
	def(&c.Bucket, "HERMES_IDEMPOTENCY")
	def(&c.KeysBucket, "HERMES_KEYS")
	def(&c.ObjectBucket, "HERMES_OUTPUT_OBJECTS")
	def(&c.Source, "hermes-bridge")
	def(&c.OutputMaxAge, 24*time.Hour)
	def(&c.DLQMaxAge, 7*24*time.Hour)
	def(&c.ActionsMaxAge, 24*time.Hour)
	def(&c.IdempotencyTTL, 24*time.Hour)
	def(&c.AckWait, 30*time.Second)
	def(&c.Heartbeat, c.AckWait/3)
	def(&c.Lease, 2*c.AckWait)
	def(&c.ShutdownGrace, 30*time.Second)
	def(&c.RetryBase, 500*time.Millisecond)
	def(&c.RetryMax, 30*time.Second)
	def(&c.Replicas, 1)
	def(&c.MaxDeliver, -1)
	def(&c.MaxAttempts, 5)
	def(&c.BreakerThreshold, 5)
	def(&c.BreakerCooldown, 2*time.Second)
	def(&c.ApprovalTTL, 15*time.Minute)
	def(&c.BreakerMaxCooldown, time.Minute)
	def(&c.CapabilitiesTTL, 30*time.Second)
	c.Endpoints = slices.Clone(c.Endpoints)
	total := 0
	for i := range c.Endpoints {
		def(&c.Endpoints[i].MaxConcurrency, 10)
		total += max(c.Endpoints[i].MaxConcurrency, 0) // a negative one is refused by Validate
	}
	def(&c.Workers, max(total, 1))
	def(&c.MaxAckPending, DefaultMaxAckPending(c.Workers))
	return c
}

// def sets *p to v when it is the zero value.
func def[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// prefetch is how many deliveries one replica asks for ahead of its workers.
func prefetch(workers int) int { return min(workers, 64) }

// HeldPerReplica is the most unacknowledged deliveries one replica with workers holds at
// once: one per worker plus its prefetched ones.
func HeldPerReplica(workers int) int { return workers + prefetch(workers) }

// DefaultMaxAckPending is the consumer limit used when none is set: room for eight
// replicas of this size at full concurrency, and at least 1024, so that adding replicas
// adds concurrency without tuning.
func DefaultMaxAckPending(workers int) int { return max(1024, 8*HeldPerReplica(workers)) }

// ConfigError is one problem of a Config: the field and the rule its value breaks.
// Validate returns one for each problem, wrapped with ErrInvalidConfig.
type ConfigError struct {
	// Field is the field's Go path in Config: "AckWait", "Endpoints[2].MaxConcurrency".
	Field string
	// Reason states the rule, never the field's own value. It names each other field
	// it compares the value with by its Go path, followed by that field's value in
	// parentheses ("must be at least IdempotencyTTL (24h0m0s)"), so that a caller can
	// put its own names for the fields (cmd/hermes-bridge: the environment variables).
	Reason string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Reason }

// tokenRule is what validToken accepts.
const tokenRule = "must be 1 to 128 letters, digits, - or _"

// Validate reports every problem of c (after defaults): nil, or an error wrapping
// ErrInvalidConfig and one *ConfigError per problem, listed one a line.
func (c Config) Validate() error {
	var errs []any
	add := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if !validToken(c.Prefix) {
		add("Prefix", tokenRule+": one subject token")
	}
	for _, n := range []struct{ field, v string }{{"ActionsStream", c.ActionsStream}, {"OutputStream", c.OutputStream},
		{"DLQStream", c.DLQStream}, {"Consumer", c.Consumer}, {"Bucket", c.Bucket}, {"KeysBucket", c.KeysBucket},
		{"ObjectBucket", c.ObjectBucket}} {
		if !validToken(n.v) {
			add(n.field, tokenRule)
		}
	}
	if c.Bucket == c.KeysBucket && validToken(c.Bucket) {
		add("KeysBucket", "must differ from Bucket (the records bucket)")
	}
	if c.ReplicaID != "" && !validToken(c.ReplicaID) {
		add("ReplicaID", tokenRule)
	}
	if c.AckWait < time.Second {
		add("AckWait", "must be at least 1s")
	}
	// A rule that compares with another field does so once that field is valid: its own
	// problem is reported, and the comparison would only repeat it.
	if c.Heartbeat <= 0 || c.AckWait >= time.Second && c.Heartbeat*2 > c.AckWait {
		add("Heartbeat", "must be positive and at most half of AckWait (%s)", c.AckWait)
	}
	if c.Lease < c.AckWait {
		add("Lease", "must be at least AckWait (%s)", c.AckWait)
	}
	// The lease must outlast a replica whose NATS server stops answering (see
	// NATSLiveness), with its renewal answered within a ping interval once it is through.
	// With the default lease (2 × AckWait) and a heartbeat of at most half the ack wait
	// this always holds; a shorter Lease may break it.
	if live := NATSLiveness(c.Lease); c.AckWait >= time.Second && c.Heartbeat > 0 && c.Heartbeat*2 <= c.AckWait &&
		RenewalGap(c.Heartbeat, c.Lease, live.PingInterval) > c.Lease {
		ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
		add("Lease", "must hold what a claim may go unrenewed when a NATS server stops answering: "+
			"5/4 × Heartbeat (%s) + dead-server detection %s (3 × ping interval %s, lease/8 within %s to %s) + reconnect wait %s + "+
			"the renewal, one ping interval = %s",
			ms(c.Heartbeat), ms(live.DeadServerDetection()), ms(live.PingInterval), MinPingInterval, MaxPingInterval,
			ms(live.ReconnectDelay()), ms(RenewalGap(c.Heartbeat, c.Lease, live.PingInterval)))
	}
	if c.MaxDeliver < -1 || c.MaxDeliver == 0 {
		add("MaxDeliver", "must be -1 (unlimited) or at least 1")
	}
	if c.MaxAttempts < 1 {
		add("MaxAttempts", "must be at least 1")
	}
	if c.ApprovalTTL < time.Second {
		add("ApprovalTTL", "must be at least 1s")
	}
	if c.BreakerThreshold < 1 {
		add("BreakerThreshold", "must be at least 1")
	}
	if c.BreakerCooldown <= 0 {
		add("BreakerCooldown", "must be positive")
	}
	if c.CapabilitiesTTL <= 0 {
		add("CapabilitiesTTL", "must be positive")
	}
	if c.BreakerCooldown > 0 && c.BreakerMaxCooldown < c.BreakerCooldown {
		add("BreakerMaxCooldown", "must be at least BreakerCooldown (%s)", c.BreakerCooldown)
	}
	if c.Workers < 1 {
		add("Workers", "must be at least 1 (0, the default: the sum of the endpoints' max concurrency)")
	}
	if c.MaxAckPending < 1 {
		add("MaxAckPending", "must be at least 1 (0, the default: room for 8 replicas)")
	} else if c.MaxAckPending < c.Workers {
		add("MaxAckPending", "must be at least Workers (%d)", c.Workers)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		add("Replicas", "must be 1 to 5")
	}
	for _, n := range []struct {
		field string
		v     int64
	}{{"ActionsMaxBytes", c.ActionsMaxBytes}, {"OutputMaxBytes", c.OutputMaxBytes}, {"DLQMaxBytes", c.DLQMaxBytes}} {
		if n.v < 0 {
			add(n.field, "must not be negative (0 is unlimited)")
		}
	}
	if c.DLQMaxAge < time.Minute {
		add("DLQMaxAge", "must be at least 1m")
	}
	if c.IdempotencyTTL < time.Minute {
		add("IdempotencyTTL", "must be at least 1m")
	}
	if c.OutputMaxAge < time.Minute {
		add("OutputMaxAge", "must be at least 1m")
	} else if c.OutputMaxAge < c.IdempotencyTTL {
		// A key's record may point at a result kept in the output stream (schemas/README.md, "Delivery guarantees").
		add("OutputMaxAge", "must be at least IdempotencyTTL (%s): a key may replay a result kept in the output stream", c.IdempotencyTTL)
	}
	// A parked action's record is not rewritten while it waits, and a running action's
	// records are rewritten every heartbeat: the records' TTL must outlast both.
	if c.RecordsTTL() <= c.ApprovalTTL+c.Lease {
		add("OutputMaxAge", "plus %s, the action records' TTL, must be longer than ApprovalTTL (%s) plus Lease (%s), "+
			"or a parked action's record expires before its decision", RecordMargin, c.ApprovalTTL, c.Lease)
	}
	if c.IdempotencyTTL >= time.Minute && c.Heartbeat*4 > c.IdempotencyTTL {
		add("Heartbeat", "must be at most a quarter of IdempotencyTTL (%s), so that a running action's records are renewed before they expire", c.IdempotencyTTL)
	}
	if c.ShutdownGrace < 0 {
		add("ShutdownGrace", "must not be negative")
	}
	if len(c.Endpoints) == 0 {
		add("Endpoints", "no Hermes endpoint is configured")
	}
	seen := map[string]bool{}
	for i, ep := range c.Endpoints {
		at := fmt.Sprintf("Endpoints[%d].", i)
		if !events.ValidEndpointID(ep.ID) {
			add(at+"ID", "must match [a-z0-9_-]{1,128}")
		} else if seen[ep.ID] {
			add(at+"ID", "is configured twice")
		}
		seen[ep.ID] = true
		if reason := baseURLProblem(ep.BaseURL); reason != "" {
			add(at+"BaseURL", "%s", reason)
		}
		if utf8.RuneCountInString(ep.TenantID) > events.MaxTenantIDLen || strings.IndexFunc(ep.TenantID, unicode.IsControl) >= 0 {
			add(at+"TenantID", "must be at most %d characters without control characters", events.MaxTenantIDLen)
		}
		if ep.MaxConcurrency < 1 {
			add(at+"MaxConcurrency", "must be at least 1")
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:"+strings.Repeat("\n  - %w", len(errs)), append([]any{ErrInvalidConfig}, errs...)...)
}

// baseURLProblem says why raw is not an http(s) origin with an optional path prefix and
// no credentials, query or fragment ("" if it is). It never repeats the URL.
func baseURLProblem(raw string) string {
	if raw == "" {
		return "is required"
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "is not a valid URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must start with http:// or https://"
	case u.Host == "":
		return "has no host"
	case u.User != nil:
		return "must not carry credentials; use a key file or variable"
	case u.RawQuery != "" || u.Fragment != "":
		return "must not have a query or fragment"
	}
	return ""
}

func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
