package bridge

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

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
	// MaxConcurrency bounds the calls in flight to this endpoint (default 10).
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
	// Bucket is the KV bucket of action records and the park index (default
	// HERMES_IDEMPOTENCY), kept RecordsTTL: longer than the results they stand for.
	Bucket string
	// KeysBucket is the KV bucket of idempotency keys (default HERMES_KEYS), kept
	// IdempotencyTTL: never longer than the results they replay.
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
	// IdempotencyTTL is the keys bucket's TTL: how long an idempotency key is remembered
	// after its last write (default 24h). Action records are kept RecordsTTL.
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
	// error (default 5). Deliveries spent waiting (a paused endpoint, a busy claim) do
	// not count.
	MaxAttempts int

	// BreakerThreshold consecutive endpoint failures (transport errors and 5xx) pause the
	// endpoint for BreakerCooldown, doubling up to BreakerMaxCooldown while it keeps
	// failing (defaults 5, 2s, 60s). While paused its actions wait (NakWithDelay) instead
	// of calling Hermes; other endpoints keep flowing.
	BreakerThreshold                    int
	BreakerCooldown, BreakerMaxCooldown time.Duration

	// ApprovalTTL is how long a parked action waits for an approval decision, and how
	// old a pre-approval's decided_at may be (default 15m, CONTRACT §7).
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
	// hermes_bridge_* metrics, see the README's "Operating"); nil records nothing. New
	// fails if they are already registered there: use one registry per Bridge.
	Metrics prometheus.Registerer
	// MetricsInterval is how often the consumer's pending and ack-pending counts are
	// sampled for the metrics (default 5s).
	MetricsInterval time.Duration
	// TracerProvider, when set, receives the spans of action handling (one trace per
	// action, continuing its traceparent; see the README's "Traces"); nil records none.
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

// WithDefaults returns c with every zero field set to its default.
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

func (c Config) WithDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defd := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Prefix, "hermes")
	defd(&c.MetricsInterval, 5*time.Second)
	def(&c.ActionsStream, "HERMES_ACTIONS")
	def(&c.OutputStream, "HERMES_OUTPUT")
	def(&c.DLQStream, "HERMES_DLQ")
	def(&c.Consumer, "hermes-bridge")
	def(&c.Bucket, "HERMES_IDEMPOTENCY")
	def(&c.KeysBucket, "HERMES_KEYS")
	def(&c.ObjectBucket, "HERMES_OUTPUT_OBJECTS")
	def(&c.Source, "hermes-bridge")
	defd(&c.OutputMaxAge, 24*time.Hour)
	defd(&c.DLQMaxAge, 7*24*time.Hour)
	defd(&c.ActionsMaxAge, 24*time.Hour)
	defd(&c.IdempotencyTTL, 24*time.Hour)
	defd(&c.AckWait, 30*time.Second)
	defd(&c.Heartbeat, c.AckWait/3)
	defd(&c.Lease, 2*c.AckWait)
	defd(&c.ShutdownGrace, 30*time.Second)
	defd(&c.RetryBase, 500*time.Millisecond)
	defd(&c.RetryMax, 30*time.Second)
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = -1
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = 5
	}
	defd(&c.BreakerCooldown, 2*time.Second)
	defd(&c.ApprovalTTL, 15*time.Minute)
	defd(&c.BreakerMaxCooldown, time.Minute)
	eps := make([]Endpoint, len(c.Endpoints))
	copy(eps, c.Endpoints)
	total := 0
	for i := range eps {
		if eps[i].MaxConcurrency == 0 {
			eps[i].MaxConcurrency = 10
		}
		total += eps[i].MaxConcurrency
	}
	c.Endpoints = eps
	if c.Workers == 0 {
		c.Workers = total
		if c.Workers == 0 {
			c.Workers = 1
		}
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending(c.Workers)
	}
	return c
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

// Validate reports every problem of c (after defaults) in one error wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !validToken(c.Prefix) {
		add("subject prefix %q must be one subject token of letters, digits, - or _", c.Prefix)
	}
	for name, v := range map[string]string{"actions stream": c.ActionsStream, "output stream": c.OutputStream,
		"dlq stream": c.DLQStream, "consumer": c.Consumer, "bucket": c.Bucket, "keys bucket": c.KeysBucket, "object bucket": c.ObjectBucket} {
		if !validToken(v) {
			add("%s name %q must be letters, digits, - or _", name, v)
		}
	}
	if c.AckWait < time.Second {
		add("ack wait %s must be at least 1s", c.AckWait)
	}
	if c.Heartbeat <= 0 || c.Heartbeat*2 > c.AckWait {
		add("heartbeat %s must be positive and at most half the ack wait %s", c.Heartbeat, c.AckWait)
	}
	if c.Lease < c.AckWait {
		add("claim lease %s must be at least the ack wait %s", c.Lease, c.AckWait)
	}
	// The lease must outlast a replica whose NATS server stops answering (see
	// NATSLiveness), with its renewal answered within a ping interval once it is through.
	// With the default lease (2 × AckWait) and a heartbeat of at most half the ack wait
	// this always holds; a shorter Lease may break it.
	if live := NATSLiveness(c.Lease); c.AckWait >= time.Second && c.Heartbeat > 0 && c.Heartbeat*2 <= c.AckWait &&
		RenewalGap(c.Heartbeat, c.Lease, live.PingInterval) > c.Lease {
		ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
		add("claim lease %s must hold what a claim may go unrenewed when a NATS server stops answering: "+
			"5/4 × heartbeat %s + dead-server detection %s (3 × ping interval %s, lease/8 within %s to %s) + reconnect wait %s + "+
			"the renewal, one ping interval = %s (HERMES_BRIDGE_ACK_WAIT, HERMES_BRIDGE_HEARTBEAT)",
			ms(c.Lease), ms(c.Heartbeat), ms(live.DeadServerDetection()), ms(live.PingInterval), MinPingInterval, MaxPingInterval,
			ms(live.ReconnectDelay()), ms(RenewalGap(c.Heartbeat, c.Lease, live.PingInterval)))
	}
	if c.MaxDeliver < -1 || c.MaxDeliver == 0 {
		add("max deliver %d must be -1 (unlimited) or at least 1", c.MaxDeliver)
	}
	if c.MaxAttempts < 1 {
		add("max attempts %d must be at least 1", c.MaxAttempts)
	}
	if c.ApprovalTTL < time.Second {
		add("approval ttl %s must be at least 1s", c.ApprovalTTL)
	}
	if c.BreakerThreshold < 1 {
		add("breaker threshold %d must be at least 1", c.BreakerThreshold)
	}
	if c.BreakerCooldown <= 0 || c.BreakerMaxCooldown < c.BreakerCooldown {
		add("breaker cooldown %s must be positive and at most the maximum cooldown %s", c.BreakerCooldown, c.BreakerMaxCooldown)
	}
	if c.Workers < 1 {
		add("workers %d must be at least 1", c.Workers)
	}
	if c.MaxAckPending < c.Workers {
		add("max ack pending %d must be at least the workers %d", c.MaxAckPending, c.Workers)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		add("replicas %d must be between 1 and 5", c.Replicas)
	}
	for name, v := range map[string]int64{"actions": c.ActionsMaxBytes, "output": c.OutputMaxBytes, "dlq": c.DLQMaxBytes} {
		if v < 0 {
			add("%s stream max bytes %d must not be negative (0 is unlimited)", name, v)
		}
	}
	if c.DLQMaxAge < time.Minute {
		add("dlq max age %s must be at least 1m", c.DLQMaxAge)
	}
	if c.IdempotencyTTL < time.Minute {
		add("idempotency ttl %s must be at least 1m", c.IdempotencyTTL)
	}
	// A parked action's record is not rewritten while it waits, and a running action's
	// records are rewritten every heartbeat: the records' TTL must outlast both.
	if c.RecordsTTL() <= c.ApprovalTTL+c.Lease {
		add("output max age %s (HERMES_BRIDGE_OUTPUT_MAX_AGE) plus %s, the action records' TTL, must be longer than the approval window %s (HERMES_BRIDGE_APPROVAL_TTL) plus the claim lease %s, or a parked action's record expires before its decision", c.OutputMaxAge, RecordMargin, c.ApprovalTTL, c.Lease)
	}
	if c.Heartbeat*4 > c.IdempotencyTTL {
		add("heartbeat %s must be at most a quarter of the idempotency ttl %s, so that a running action's records are renewed before they expire", c.Heartbeat, c.IdempotencyTTL)
	}
	if c.OutputMaxAge < c.IdempotencyTTL {
		// A key's record may point at a result kept in the output stream (CONTRACT §5).
		add("output max age %s (HERMES_BRIDGE_OUTPUT_MAX_AGE) must be at least the idempotency ttl %s (HERMES_BRIDGE_IDEMPOTENCY_TTL): a key may replay a result kept in the output stream",
			c.OutputMaxAge, c.IdempotencyTTL)
	}
	if c.Bucket == c.KeysBucket {
		add("the records bucket and the keys bucket must differ (both are %q)", c.Bucket)
	}
	if len(c.Endpoints) == 0 {
		add("no Hermes endpoint is configured")
	}
	seen := map[string]bool{}
	for i, ep := range c.Endpoints {
		if !events.ValidEndpointID(ep.ID) {
			add("endpoint %d: id %q must match [a-z0-9_-]{1,128}", i, ep.ID)
		}
		if seen[ep.ID] {
			add("endpoint %q is configured twice", ep.ID)
		}
		seen[ep.ID] = true
		if err := ValidateBaseURL(ep.BaseURL); err != nil {
			add("endpoint %q: %v", ep.ID, err)
		}
		if ep.MaxConcurrency < 1 {
			add("endpoint %q: max_concurrency %d must be at least 1", ep.ID, ep.MaxConcurrency)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n  - %s", ErrInvalidConfig, strings.Join(problems, "\n  - "))
}

// ValidateBaseURL checks that raw is an http(s) origin with an optional path prefix and
// no credentials, query or fragment. The error never repeats the URL's userinfo.
func ValidateBaseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("base_url is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("base_url must start with http:// or https://")
	}
	if u.Host == "" {
		return errors.New("base_url has no host")
	}
	if u.User != nil {
		return errors.New("base_url must not carry credentials; use a key file or variable")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return errors.New("base_url must not have a query or fragment")
	}
	return nil
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
