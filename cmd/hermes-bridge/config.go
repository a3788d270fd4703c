package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/caarlos0/env/v11"
	"github.com/goccy/go-yaml"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
)

// Config is the process configuration read from the environment. Its struct tags are
// the single source of the variable names, defaults and descriptions: parsing, the
// `run --help` listing and the tables of deploy/README.md and README.md are all derived from them.
//
// Fields tagged secret:"true" hold secrets; they are never printed (see Config.Dump).
type Config struct {
	// NATS connection (an existing server or cluster). Unset NATS_URL: `run` starts an
	// embedded server and `call`/`watch` connect to it.
	NATSURL          string `env:"NATS_URL" desc:"NATS server URL(s), comma-separated. Unset: run starts an embedded server; call/watch connect to nats://HERMES_BRIDGE_NATS_HOST:HERMES_BRIDGE_NATS_PORT"`
	NATSCreds        string `env:"NATS_CREDS" desc:"NATS credentials file (JWT + nkey seed)"`
	NATSNKey         string `env:"NATS_NKEY" desc:"NATS nkey seed file"`
	NATSUser         string `env:"NATS_USER" desc:"NATS user name (with NATS_PASSWORD or NATS_PASSWORD_FILE)"`
	NATSPassword     string `env:"NATS_PASSWORD" secret:"true" desc:"NATS password (prefer NATS_PASSWORD_FILE)"`
	NATSPasswordFile string `env:"NATS_PASSWORD_FILE" desc:"file holding the NATS password"`
	NATSToken        string `env:"NATS_TOKEN" secret:"true" desc:"NATS authentication token (prefer NATS_TOKEN_FILE)"`
	NATSTokenFile    string `env:"NATS_TOKEN_FILE" desc:"file holding the NATS token"`
	NATSTLSCA        string `env:"NATS_TLS_CA" desc:"PEM file of the CA(s) that sign the NATS server certificate"`
	NATSTLSCert      string `env:"NATS_TLS_CERT" desc:"PEM client certificate for mutual TLS (with NATS_TLS_KEY)"`
	NATSTLSKey       string `env:"NATS_TLS_KEY" desc:"PEM private key of NATS_TLS_CERT"`
	NATSInboxPrefix  string `env:"NATS_INBOX_PREFIX" desc:"inbox prefix for replies, acks and pulled messages (default _INBOX); a user whose permissions do not allow _INBOX.> needs its own, e.g. _INBOX_dashboard (see deploy/). The client commands also take --inbox-prefix"`
	NATSContext      string `env:"NATS_CONTEXT" desc:"natscli context (nats context add) to connect with: its server and credentials where no NATS_* variable sets them; run then connects to that server instead of starting the embedded one. The client commands also take --context, and use the context selected with 'nats context select' when neither is given; run does not"`
	// NATSConnectWait bounds how long run retries its first connection to an external
	// server (see connectFirst).
	NATSConnectWait time.Duration `env:"HERMES_BRIDGE_NATS_CONNECT_WAIT" envDefault:"30s" desc:"run with an external server (NATS_URL or NATS_CONTEXT): how long the first connection is retried while the server is not up yet, before run gives up; 0 tries once"`

	// Embedded NATS server (only when NATS_URL is unset).
	DataDir  string `env:"HERMES_BRIDGE_DATA_DIR" envDefault:"./data/nats" desc:"embedded server: JetStream store directory (created if missing)"`
	NATSHost string `env:"HERMES_BRIDGE_NATS_HOST" envDefault:"127.0.0.1" desc:"embedded server: listen address"`
	NATSPort int    `env:"HERMES_BRIDGE_NATS_PORT" envDefault:"4222" desc:"embedded server: client port; -1 picks a free port (the URL is printed)"`

	// Bridge resources.
	Prefix        string `env:"HERMES_BRIDGE_PREFIX" envDefault:"hermes" desc:"first subject token (hermes.actions.<endpoint>.<op>, ...)"`
	ActionsStream string `env:"HERMES_BRIDGE_ACTIONS_STREAM" envDefault:"HERMES_ACTIONS" desc:"stream capturing <prefix>.actions.>"`
	OutputStream  string `env:"HERMES_BRIDGE_OUTPUT_STREAM" envDefault:"HERMES_OUTPUT" desc:"stream capturing <prefix>.out.> (the bridge publishes events, results and batch commits there; the stream stores them as <prefix>.events.<id> and <prefix>.results.<id> and republishes what it stored), with allow_batched"`
	DLQStream     string `env:"HERMES_BRIDGE_DLQ_STREAM" envDefault:"HERMES_DLQ" desc:"stream capturing <prefix>.dlq"`
	Consumer      string `env:"HERMES_BRIDGE_CONSUMER" envDefault:"hermes-bridge" desc:"durable pull consumer shared by every replica"`
	Bucket        string `env:"HERMES_BRIDGE_BUCKET" envDefault:"HERMES_IDEMPOTENCY" desc:"KV bucket of action records, idempotency keys and the park index, kept HERMES_BRIDGE_OUTPUT_MAX_AGE plus 1h (longer than the results; keys expire HERMES_BRIDGE_IDEMPOTENCY_TTL after their last write)"`
	KeysBucket    string `env:"HERMES_BRIDGE_KEYS_BUCKET" envDefault:"HERMES_KEYS" desc:"KV bucket of idempotency keys where it exists (earlier releases); otherwise keys live in HERMES_BRIDGE_BUCKET"`
	ObjectBucket  string `env:"HERMES_BRIDGE_OBJECT_BUCKET" envDefault:"HERMES_OUTPUT_OBJECTS" desc:"object store for outputs and events larger than one message"`
	Provision     bool   `env:"HERMES_BRIDGE_PROVISION" envDefault:"true" desc:"create or update streams, consumer and bucket at start; false binds only to operator-provisioned ones"`
	// AllowRetentionShrink is the explicit permission provisioning needs to shorten a
	// retention (see bridge.Config.AllowRetentionShrink).
	AllowRetentionShrink bool `env:"HERMES_BRIDGE_ALLOW_RETENTION_SHRINK" envDefault:"false" desc:"let provisioning shorten the max age or TTL of a stream or bucket that holds data (older messages are deleted at once); false refuses to start, naming each one"`

	// Bridge behaviour.
	AckWait            time.Duration `env:"HERMES_BRIDGE_ACK_WAIT" envDefault:"30s" desc:"consumer ack wait (at least 1s). The claim lease is twice it and must hold 5/4 × heartbeat + dead-server detection (3 × the ping interval, lease/8 within 250ms to 10s) + reconnect wait (one ping interval, at most 1s, plus a tenth) + one store request (lease/8, at most 5s); every term follows the lease, so every ack wait of at least 1s holds it with the default heartbeat"`
	Heartbeat          time.Duration `env:"HERMES_BRIDGE_HEARTBEAT" desc:"in-progress heartbeat interval; at most half the ack wait (default ack wait / 3); 5/4 of it counts in the lease (see HERMES_BRIDGE_ACK_WAIT)"`
	MaxDeliver         int           `env:"HERMES_BRIDGE_MAX_DELIVER" envDefault:"-1" desc:"consumer delivery limit; -1 (unlimited) keeps every action until it is settled"`
	MaxAttempts        int           `env:"HERMES_BRIDGE_MAX_ATTEMPTS" envDefault:"5" desc:"Hermes calls of one action that failed retryably, before it settles failed"`
	PreApprovals       bool          `env:"HERMES_BRIDGE_PRE_APPROVALS" envDefault:"true" desc:"accept approvals carried inside actions; false parks every response_delete and session_delete until a decision arrives on its approvals subject"`
	ApprovalTTL        time.Duration `env:"HERMES_BRIDGE_APPROVAL_TTL" envDefault:"15m" desc:"how long a parked response_delete or session_delete waits for a decision, and the age limit of a pre-approval"`
	BreakerThreshold   int           `env:"HERMES_BRIDGE_BREAKER_THRESHOLD" envDefault:"5" desc:"consecutive endpoint failures (transport, 5xx) that pause the endpoint"`
	BreakerCooldown    time.Duration `env:"HERMES_BRIDGE_BREAKER_COOLDOWN" envDefault:"2s" desc:"first pause of a failing endpoint; doubles while it keeps failing"`
	BreakerMaxCooldown time.Duration `env:"HERMES_BRIDGE_BREAKER_MAX_COOLDOWN" envDefault:"1m" desc:"longest pause of a failing endpoint"`
	Workers            int           `env:"HERMES_BRIDGE_WORKERS" desc:"actions handled at once by this replica (default: sum of the endpoints' max concurrency)"`
	MaxAckPending      int           `env:"HERMES_BRIDGE_MAX_ACK_PENDING" desc:"consumer limit of unacknowledged actions over all replicas (default: the larger of 1024 and 8 x (workers + min(workers, 64)), room for 8 replicas)"`
	IdempotencyTTL     time.Duration `env:"HERMES_BRIDGE_IDEMPOTENCY_TTL" envDefault:"24h" desc:"how long an idempotency key is remembered after its action's last write (at least 1m)"`
	OutputMaxAge       time.Duration `env:"HERMES_BRIDGE_OUTPUT_MAX_AGE" envDefault:"24h" desc:"how long events and results can be replayed (at least HERMES_BRIDGE_IDEMPOTENCY_TTL)"`
	DLQMaxAge          time.Duration `env:"HERMES_BRIDGE_DLQ_MAX_AGE" envDefault:"168h" desc:"how long dead letters are kept (at least 1m)"`
	ActionsMaxBytes    byteSize      `env:"HERMES_BRIDGE_ACTIONS_MAX_BYTES" envDefault:"unlimited" desc:"size limit of the actions stream, e.g. 10GiB; when full its oldest actions are discarded, handled or not"`
	OutputMaxBytes     byteSize      `env:"HERMES_BRIDGE_OUTPUT_MAX_BYTES" envDefault:"unlimited" desc:"size limit of the output stream, e.g. 10GiB; when full it refuses new events and results (the bridge retries storing a result) rather than discard a result an idempotency key may replay"`
	DLQMaxBytes        byteSize      `env:"HERMES_BRIDGE_DLQ_MAX_BYTES" envDefault:"unlimited" desc:"size limit of the dead-letter stream, e.g. 1GiB; when full its oldest dead letters are discarded"`
	Storage            string        `env:"HERMES_BRIDGE_STORAGE" envDefault:"file" desc:"storage of streams and bucket: file or memory"`
	Replicas           int           `env:"HERMES_BRIDGE_REPLICAS" envDefault:"1" desc:"replicas of streams and bucket (1 to 5; clustered JetStream for more than 1)"`
	ShutdownGrace      time.Duration `env:"HERMES_BRIDGE_SHUTDOWN_GRACE" envDefault:"30s" desc:"how long in-flight actions may finish after SIGINT/SIGTERM"`
	ReplicaID          string        `env:"HERMES_BRIDGE_REPLICA_ID" desc:"name of this process in claims and logs (default: random)"`
	LogLevel           string        `env:"HERMES_BRIDGE_LOG_LEVEL" envDefault:"info" desc:"trace, debug, info, warn or error"`
	LogFormat          string        `env:"HERMES_BRIDGE_LOG_FORMAT" envDefault:"auto" desc:"json, console, or auto: console when stderr is a terminal, else json (the console's startup line lists only the settings that differ from their defaults)"`
	// HTTPAddr is the operations listener; unset means DefaultHTTPAddr, set and empty
	// turns it off (see LoadConfig).
	HTTPAddr string `env:"HERMES_BRIDGE_HTTP_ADDR" desc:"operations HTTP listener (/metrics, /healthz, /readyz); unset: 127.0.0.1:9464 (if that port is taken, run goes on without it and says so); set to empty to turn it off; use :9464 to serve other hosts (Prometheus, probes)"`

	// Dashboard (/ui on the operations listener; see bridge/ui and deploy/README.md, "Dashboard").
	UI                 string `env:"HERMES_BRIDGE_UI" envDefault:"auto" desc:"dashboard page at /ui on the operations listener: auto (served when run starts the embedded server, or HERMES_BRIDGE_UI_NATS_URL is set), true or false"`
	UIWebSocketPort    int    `env:"HERMES_BRIDGE_UI_WS_PORT" envDefault:"-1" desc:"embedded server: port of the NATS WebSocket listener (no TLS, on HERMES_BRIDGE_NATS_HOST, open only to the /ui page's origin) the dashboard reads through; -1 picks a free port"`
	UINATSURL          string `env:"HERMES_BRIDGE_UI_NATS_URL" desc:"dashboard: NATS WebSocket URL(s) the browser connects to, comma-separated (wss://nats.example:443); unset with the embedded server: its WebSocket listener"`
	UINATSUser         string `env:"HERMES_BRIDGE_UI_NATS_USER" desc:"dashboard: NATS user the browser connects as (the read-only dashboard role of deploy/): it is handed to every browser that can reach /ui"`
	UINATSPasswordFile string `env:"HERMES_BRIDGE_UI_NATS_PASSWORD_FILE" desc:"dashboard: file holding the password of HERMES_BRIDGE_UI_NATS_USER (served to the page in /ui/config.json)"`
	UIInboxPrefix      string `env:"HERMES_BRIDGE_UI_INBOX_PREFIX" envDefault:"_INBOX_dashboard" desc:"dashboard: inbox prefix of the page's connection (the dashboard role allows _INBOX_dashboard.>)"`

	// Hermes endpoints: a file, or the single-endpoint shortcut below.
	EndpointsFile        string `env:"HERMES_ENDPOINTS_FILE" desc:"JSON or YAML file listing the Hermes endpoints (excludes HERMES_URL)"`
	HermesURL            string `env:"HERMES_URL" desc:"single endpoint: Hermes API server base URL (unset and no endpoints file: http://127.0.0.1:8642)"`
	HermesAPIKey         string `env:"HERMES_API_KEY" secret:"true" desc:"single endpoint: API key (prefer HERMES_API_KEY_FILE)"`
	HermesAPIKeyFile     string `env:"HERMES_API_KEY_FILE" desc:"single endpoint: file holding the API key (re-read on SIGHUP)"`
	HermesEndpointID     string `env:"HERMES_ENDPOINT_ID" envDefault:"primary" desc:"single endpoint: endpoint id used in subjects"`
	HermesTenantID       string `env:"HERMES_TENANT_ID" desc:"single endpoint: only actions carrying this tenant_id are accepted"`
	HermesMaxConcurrency int    `env:"HERMES_MAX_CONCURRENCY" envDefault:"10" desc:"single endpoint: calls in flight at once"`

	// Traces (OpenTelemetry, OTLP over HTTP; see tracing.go). The standard variables:
	// run reads these, and the SDK reads the other OTEL_* variables it knows
	// (OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_BSP_*, ...) from the process environment.
	OTELEndpoint           string `env:"OTEL_EXPORTER_OTLP_ENDPOINT" desc:"traces: OTLP/HTTP collector base URL, e.g. http://collector:4318 (spans go to its /v1/traces); unset, and no OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: tracing is off"`
	OTELTracesEndpoint     string `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" desc:"traces: full OTLP/HTTP traces URL, e.g. http://collector:4318/v1/traces (takes precedence over OTEL_EXPORTER_OTLP_ENDPOINT)"`
	OTELHeaders            string `env:"OTEL_EXPORTER_OTLP_HEADERS" secret:"true" desc:"traces: headers of the export requests, key=value,... (URL-encoded values), e.g. authorization=Bearer%20..."`
	OTELTracesHeaders      string `env:"OTEL_EXPORTER_OTLP_TRACES_HEADERS" secret:"true" desc:"traces: headers of the export requests, added to (and overriding) OTEL_EXPORTER_OTLP_HEADERS"`
	OTELProtocol           string `env:"OTEL_EXPORTER_OTLP_PROTOCOL" desc:"traces: http/protobuf (default) or http/json; grpc is not supported"`
	OTELTracesProtocol     string `env:"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" desc:"traces: as OTEL_EXPORTER_OTLP_PROTOCOL, for traces only (takes precedence)"`
	OTELServiceName        string `env:"OTEL_SERVICE_NAME" desc:"traces: service.name of the resource (default hermes-bridge)"`
	OTELResourceAttributes string `env:"OTEL_RESOURCE_ATTRIBUTES" desc:"traces: more resource attributes, key=value,... (service.version and service.instance.id default to the version and HERMES_BRIDGE_REPLICA_ID)"`
	OTELTracesSampler      string `env:"OTEL_TRACES_SAMPLER" desc:"traces: sampler, as the OpenTelemetry SDK reads it (default parentbased_always_on: the publisher's sampled flag decides)"`
	OTELTracesSamplerArg   string `env:"OTEL_TRACES_SAMPLER_ARG" desc:"traces: the sampler's argument, e.g. 0.1 for traceidratio"`
	OTELTracesExporter     string `env:"OTEL_TRACES_EXPORTER" desc:"traces: otlp (default) or none (tracing off)"`
	OTELSDKDisabled        string `env:"OTEL_SDK_DISABLED" desc:"traces: true turns tracing off"`

	// natsCtx is the NATS context the command connects with (NATS_CONTEXT, or a client
	// command's --context or selected context), nil for none: set before validation.
	natsCtx *natsContext
}

// DefaultHermesURL is used when neither HERMES_ENDPOINTS_FILE nor HERMES_URL is set:
// the Hermes API server's default port on this machine.
const DefaultHermesURL = "http://127.0.0.1:8642"

// DefaultHTTPAddr is the operations listener when HERMES_BRIDGE_HTTP_ADDR is unset:
// loopback only, so nothing is exposed unless asked for.
const DefaultHTTPAddr = "127.0.0.1:9464"

// maxKeyLen bounds an API key.
const maxKeyLen = 16 << 10

// LoadConfig parses the configuration from environ (a name->value map such as
// env.ToMap(os.Environ())). Parse errors name the variable and the value (never
// the value of a secret). On a parse error the returned Config is still usable
// for further validation: the fields that failed are zero, and the problems
// Validate* would report that name them are suppressed (see ConfigError.merge).
func LoadConfig(environ map[string]string) (*Config, error) {
	cfg, err := env.ParseAsWithOptions[Config](env.Options{Environment: environ})
	if _, set := environ["HERMES_BRIDGE_HTTP_ADDR"]; !set {
		cfg.HTTPAddr = DefaultHTTPAddr
	}
	if err != nil {
		return &cfg, parseProblems(err, environ)
	}
	return &cfg, nil
}

// parseProblems rewrites caarlos0/env errors so each names its variable.
func parseProblems(err error, environ map[string]string) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return &ConfigError{Problems: []string{err.Error()}}
	}
	ce := &ConfigError{failed: map[string]bool{}}
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			key := envKey(pe.Name)
			reason := "invalid value"
			switch pe.Type {
			case reflect.TypeFor[time.Duration]():
				reason = "must be a duration such as 500ms, 30s, 5m or 24h"
			case reflect.TypeFor[int]():
				reason = "must be an integer"
			case reflect.TypeFor[bool]():
				reason = "must be true or false"
			case reflect.TypeFor[byteSize]():
				reason = "must be a size such as 512MiB, 10GB or 1073741824 (bytes), or unlimited"
			}
			ce.Problems = append(ce.Problems, fmt.Sprintf("%s=%s: %s", key, shown(key, environ[key]), reason))
			ce.failed[key] = true
			continue
		}
		ce.Problems = append(ce.Problems, e.Error())
	}
	return ce
}

// ConfigError lists every configuration problem found.
type ConfigError struct {
	Problems []string
	failed   map[string]bool // variables that could not be parsed
}

// merge appends the problems of err, dropping those that name a variable that
// already failed to parse (its zero value would only cause a second message).
func (e *ConfigError) merge(err error) {
	for _, p := range asProblems(err) {
		if !slices.ContainsFunc(variableRE.FindAllString(p, -1), func(key string) bool { return e.failed[key] }) {
			e.Problems = append(e.Problems, p)
		}
	}
}

// variableRE matches the names of variables in a message.
var variableRE = regexp.MustCompile(`[A-Z][A-Z0-9_]*[A-Z0-9]`)

func asProblems(err error) []string {
	if err == nil {
		return nil
	}
	var ce *ConfigError
	if errors.As(err, &ce) {
		return ce.Problems
	}
	return []string{err.Error()}
}

func (e *ConfigError) Error() string {
	return "invalid configuration:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// field describes one variable of Config.
type field struct {
	Name, Key, Default, Desc string
	Secret                   bool
}

// configFields lists Config's variables in declaration order.
func configFields() []field {
	t := reflect.TypeFor[Config]()
	out := make([]field, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if key == "" {
			continue
		}
		out = append(out, field{Name: f.Name, Key: key, Default: f.Tag.Get("envDefault"),
			Desc: f.Tag.Get("desc"), Secret: f.Tag.Get("secret") == "true"})
	}
	return out
}

func envKey(fieldName string) string {
	for _, f := range configFields() {
		if f.Name == fieldName {
			return f.Key
		}
	}
	return fieldName
}

// shown returns v for messages (quoted if it has unprintable characters), or a
// placeholder when key names a secret.
func shown(key, v string) string {
	if slices.ContainsFunc(configFields(), func(f field) bool { return f.Key == key && f.Secret }) {
		return "[redacted]"
	}
	if strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(v)
	}
	return v
}

func (e *ConfigError) add(format string, args ...any) {
	e.Problems = append(e.Problems, fmt.Sprintf(format, args...))
}

// err returns e, or nil when it lists no problem.
func (e *ConfigError) err() error {
	if len(e.Problems) == 0 {
		return nil
	}
	return e
}

// ValidateClient checks what `call` and `watch` use: the NATS connection settings and
// the subject prefix and output stream names.
func (c *Config) ValidateClient() error {
	var p ConfigError
	c.validateNATS(&p)
	c.validateBridge(&p, nil, func(field string) bool {
		return field == "Prefix" || field == "OutputStream" || field == "ObjectBucket"
	})
	return p.err()
}

// ValidateRun checks everything `run` uses. specs are the endpoints it serves
// (EndpointSpecs), nil when they could not be read and their rules are left out;
// validateSpecs checks what only the command knows of them (their keys).
func (c *Config) ValidateRun(specs []EndpointSpec) error {
	var p ConfigError
	c.validateNATS(&p)
	c.validateService(&p)
	c.validateBridge(&p, specs, func(field string) bool { return specs != nil || !strings.HasPrefix(field, "Endpoints") })
	c.validateTracing(&p)
	c.validateUI(&p)
	return p.err()
}

// external reports whether the command connects to an external server (NATS_URL, or a
// NATS context), not to run's embedded one.
func (c *Config) external() bool { return c.NATSURL != "" || c.natsCtx != nil }

func (c *Config) validateNATS(p *ConfigError) {
	if c.NATSURL != "" {
		checkNATSURLs(p, "NATS_URL", c.NATSURL)
	}
	if !c.external() {
		for _, k := range []struct{ key, v string }{
			{"NATS_CREDS", c.NATSCreds}, {"NATS_NKEY", c.NATSNKey}, {"NATS_USER", c.NATSUser},
			{"NATS_PASSWORD", c.NATSPassword}, {"NATS_PASSWORD_FILE", c.NATSPasswordFile},
			{"NATS_TOKEN", c.NATSToken}, {"NATS_TOKEN_FILE", c.NATSTokenFile},
			{"NATS_TLS_CA", c.NATSTLSCA}, {"NATS_TLS_CERT", c.NATSTLSCert}, {"NATS_TLS_KEY", c.NATSTLSKey},
		} {
			if k.v != "" {
				p.add("%s is set but neither NATS_URL nor NATS_CONTEXT is: connection settings apply only to an external NATS server", k.key)
			}
		}
		if c.NATSHost == "" {
			p.add("HERMES_BRIDGE_NATS_HOST is empty: must be a listen address such as 127.0.0.1")
		}
		if c.NATSPort != -1 && (c.NATSPort < 1 || c.NATSPort > 65535) {
			p.add("HERMES_BRIDGE_NATS_PORT=%d: must be 1 to 65535, or -1 for a free port", c.NATSPort)
		}
	}
	if c.NATSInboxPrefix != "" && !validInboxPrefix(c.NATSInboxPrefix) {
		p.add("NATS_INBOX_PREFIX=%s: %s", shown("NATS_INBOX_PREFIX", c.NATSInboxPrefix), inboxPrefixRule)
	}
	methods := []string{}
	if c.NATSCreds != "" {
		methods = append(methods, "NATS_CREDS")
	}
	if c.NATSNKey != "" {
		methods = append(methods, "NATS_NKEY")
	}
	if c.NATSUser != "" || c.NATSPassword != "" || c.NATSPasswordFile != "" {
		methods = append(methods, "NATS_USER")
	}
	if c.NATSToken != "" || c.NATSTokenFile != "" {
		methods = append(methods, "NATS_TOKEN")
	}
	if len(methods) > 1 {
		p.add("NATS authentication: set only one of %s", strings.Join(methods, ", "))
	}
	if c.NATSPassword != "" && c.NATSPasswordFile != "" {
		p.add("NATS_PASSWORD and NATS_PASSWORD_FILE are both set: use one")
	}
	if c.NATSToken != "" && c.NATSTokenFile != "" {
		p.add("NATS_TOKEN and NATS_TOKEN_FILE are both set: use one")
	}
	if c.NATSUser == "" && (c.NATSPassword != "" || c.NATSPasswordFile != "") {
		p.add("NATS_PASSWORD is set but NATS_USER is not")
	}
	if c.NATSUser != "" && c.NATSPassword == "" && c.NATSPasswordFile == "" {
		p.add("NATS_USER is set but neither NATS_PASSWORD nor NATS_PASSWORD_FILE is")
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		p.add("NATS_TLS_CERT and NATS_TLS_KEY must be set together")
	}
	for _, k := range []struct{ key, path string }{
		{"NATS_CREDS", c.NATSCreds}, {"NATS_NKEY", c.NATSNKey}, {"NATS_PASSWORD_FILE", c.NATSPasswordFile},
		{"NATS_TOKEN_FILE", c.NATSTokenFile}, {"NATS_TLS_CA", c.NATSTLSCA}, {"NATS_TLS_CERT", c.NATSTLSCert},
		{"NATS_TLS_KEY", c.NATSTLSKey},
	} {
		p.file(k.key, k.path)
	}
}

// file adds the problem of the file path that variable key names, if set: it does not
// exist, cannot be read or is a directory.
func (p *ConfigError) file(key, path string) {
	if path == "" {
		return
	}
	if st, err := os.Stat(path); err != nil {
		p.add("%s=%s: %s", key, path, fileProblem(err))
	} else if st.IsDir() {
		p.add("%s=%s: is a directory, not a file", key, path)
	}
}

func fileProblem(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "file does not exist"
	case errors.Is(err, os.ErrPermission):
		return "file is not readable (permission denied)"
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// validateService checks the settings of `run` the bridge does not read: the operations
// listener, the storage's name and the log.
func (c *Config) validateService(p *ConfigError) {
	if c.HTTPAddr != "" {
		if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil || port == "" {
			p.add("HERMES_BRIDGE_HTTP_ADDR=%s: must be host:port (for example 127.0.0.1:9464 or :9464), or empty to turn the listener off", c.HTTPAddr)
		}
	}
	if c.Storage != "file" && c.Storage != "memory" {
		p.add("HERMES_BRIDGE_STORAGE=%s: must be file or memory", c.Storage)
	}
	if _, err := zerolog.ParseLevel(strings.ToLower(c.LogLevel)); err != nil || c.LogLevel == "" {
		p.add("HERMES_BRIDGE_LOG_LEVEL=%s: must be trace, debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "json" && c.LogFormat != "console" && c.LogFormat != "auto" {
		p.add("HERMES_BRIDGE_LOG_FORMAT=%s: must be json, console or auto", c.LogFormat)
	}
	if c.NATSConnectWait < 0 {
		p.add("HERMES_BRIDGE_NATS_CONNECT_WAIT=%s: must not be negative", c.NATSConnectWait)
	}
}

// validateBridge checks c, with the endpoints of specs, by the bridge's rules
// (bridge.Config.Validate, their one place), and adds each problem of a field keep
// accepts in the words of the variables: "HERMES_BRIDGE_WORKERS=-1: must be at least
// 1", the fields a rule compares with named by their variables too.
func (c *Config) validateBridge(p *ConfigError, specs []EndpointSpec, keep func(field string) bool) {
	bc := c.judgedConfig(specs)
	var all interface{ Unwrap() []error }
	if !errors.As(bc.Validate(), &all) {
		return
	}
	for _, err := range all.Unwrap() {
		var ce *bridge.ConfigError
		if errors.As(err, &ce) && keep(ce.Field) {
			p.add("%s: %s", c.setting(bc, ce.Field), settingNames().Replace(ce.Reason))
		}
	}
}

// judgedConfig is the bridge configuration `run` serves with the bridge's defaults,
// except that a variable with a default of its own keeps the value read: set to 0 it
// is judged as 0, where the bridge would take a zero field for its default.
func (c *Config) judgedConfig(specs []EndpointSpec) bridge.Config {
	eps := make([]bridge.Endpoint, len(specs))
	for i, s := range specs {
		eps[i] = bridge.Endpoint{ID: s.ID, BaseURL: s.BaseURL, TenantID: s.TenantID, MaxConcurrency: s.MaxConcurrency}
	}
	bc := c.BridgeConfig(eps, c.ReplicaID).WithDefaults()
	c.copyTo(&bc, func(f field) bool { return f.Default != "" })
	if c.EndpointsFile == "" && len(eps) == 1 {
		bc.Endpoints[0].MaxConcurrency = eps[0].MaxConcurrency // HERMES_MAX_CONCURRENCY has a default
	}
	return bc
}

// shortcutFields are the Config fields of the single endpoint's variables, by
// bridge.Endpoint field.
var shortcutFields = map[string]string{"ID": "HermesEndpointID", "BaseURL": "HermesURL", "TenantID": "HermesTenantID",
	"MaxConcurrency": "HermesMaxConcurrency"}

// settingNames replaces the names of bridge.Config fields with the variables that set
// them (the env tags of the Config fields of the same name); the claim lease is twice
// the ack wait. A longer name is tried first, so that none is taken for the start of
// another.
var settingNames = sync.OnceValue(func() *strings.Replacer {
	names := [][2]string{{"Lease", "2 × HERMES_BRIDGE_ACK_WAIT"}}
	for _, f := range configFields() {
		if _, ok := reflect.TypeFor[bridge.Config]().FieldByName(f.Name); ok {
			names = append(names, [2]string{f.Name, f.Key})
		}
	}
	slices.SortStableFunc(names, func(a, b [2]string) int { return len(b[0]) - len(a[0]) })
	var pairs []string
	for _, n := range names {
		pairs = append(pairs, n[0], n[1])
	}
	return strings.NewReplacer(pairs...)
})

// setting names the variable, or the endpoints file's entry, that sets field (a
// bridge.ConfigError's), with its value in bc: "HERMES_BRIDGE_WORKERS=-1",
// "HERMES_ENDPOINTS_FILE endpoints[1].base_url=ftp://h".
func (c *Config) setting(bc bridge.Config, field string) string {
	name, v := settingNames().Replace(field), reflect.ValueOf(bc).FieldByName(field)
	var i int
	var sub string
	if n, _ := fmt.Sscanf(field, "Endpoints[%d].%s", &i, &sub); n == 2 && i < len(bc.Endpoints) {
		v = reflect.ValueOf(bc.Endpoints[i]).FieldByName(sub)
		if c.EndpointsFile != "" {
			f, _ := reflect.TypeFor[EndpointSpec]().FieldByName(sub)
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			name = fmt.Sprintf("HERMES_ENDPOINTS_FILE endpoints[%d].%s", i, tag)
		} else {
			name = envKey(shortcutFields[sub])
		}
	}
	if !v.IsValid() {
		return name
	}
	value := fmt.Sprint(v.Interface())
	if sub == "BaseURL" {
		value = redactURL(value)
	}
	if value == "" {
		return name
	}
	return name + "=" + shown(name, value)
}

// BridgeConfig maps c and the endpoints onto bridge.Config: every bridge field that a
// variable sets takes the value of the Config field of the same name (the names
// settingNames translates), HERMES_BRIDGE_STORAGE and HERMES_BRIDGE_PRE_APPROVALS are
// mapped to Storage and NoPreApprovals. Zero values keep the bridge's own defaults.
func (c *Config) BridgeConfig(eps []bridge.Endpoint, replicaID string) bridge.Config {
	bc := bridge.Config{Storage: jetstream.FileStorage, NoPreApprovals: !c.PreApprovals, Endpoints: eps}
	if c.Storage == "memory" {
		bc.Storage = jetstream.MemoryStorage
	}
	c.copyTo(&bc, func(field) bool { return true })
	bc.ReplicaID = replicaID
	return bc
}

// copyTo sets each field of bc named like a field f of Config that keep(f) accepts to
// that field's value (converted: a byteSize to int64).
func (c *Config) copyTo(bc *bridge.Config, keep func(field) bool) {
	from, to := reflect.ValueOf(c).Elem(), reflect.ValueOf(bc).Elem()
	for _, f := range configFields() {
		v, dst := from.FieldByName(f.Name), to.FieldByName(f.Name)
		if dst.IsValid() && keep(f) && v.Type().ConvertibleTo(dst.Type()) {
			dst.Set(v.Convert(dst.Type()))
		}
	}
}

// ---- Endpoints ----

// EndpointSpec is one entry of the endpoints file.
type EndpointSpec struct {
	ID             string `json:"id"`
	BaseURL        string `json:"base_url"`
	APIKeyFile     string `json:"api_key_file,omitempty"`
	APIKeyEnv      string `json:"api_key_env,omitempty"`
	TenantID       string `json:"tenant_id,omitempty"`
	MaxConcurrency int    `json:"max_concurrency,omitempty"`

	// apiKey is set only by the HERMES_API_KEY shortcut (never read from a file).
	apiKey string
}

type endpointsFile struct {
	Endpoints []EndpointSpec `json:"endpoints"`
}

// ReadEndpointsFile reads a JSON or YAML endpoints file: {"endpoints": [...]} or a bare
// array. The format is chosen by the extension (.json, .yaml, .yml), else by content.
// Unknown fields are rejected.
func ReadEndpointsFile(path string) ([]EndpointSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("HERMES_ENDPOINTS_FILE=%s: %s", path, fileProblem(err))
	}
	specs, err := parseEndpoints(data, filepath.Ext(path))
	if err != nil {
		return nil, fmt.Errorf("HERMES_ENDPOINTS_FILE=%s: %w", path, err)
	}
	return specs, nil
}

func parseEndpoints(data []byte, ext string) ([]EndpointSpec, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("file is empty")
	}
	ext = strings.ToLower(ext)
	if ext == ".yaml" || ext == ".yml" || ext != ".json" && trimmed[0] != '{' && trimmed[0] != '[' {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("not valid YAML: %s", firstLine(err.Error()))
		}
		trimmed = bytes.TrimSpace(j)
	}
	var specs []EndpointSpec
	var err error
	if len(trimmed) > 0 && trimmed[0] == '[' {
		err = strictJSON(trimmed, &specs)
	} else {
		var f endpointsFile
		err = strictJSON(trimmed, &f)
		specs = f.Endpoints
	}
	if err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, errors.New("lists no endpoint")
	}
	return specs, nil
}

func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if strings.Contains(msg, `unknown field "api_key"`) {
			msg += " (keys are never written inline: use api_key_file or api_key_env)"
		}
		return fmt.Errorf("invalid endpoints document: %s", msg)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid endpoints document: trailing data after the document")
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// EndpointSpecs returns the endpoints `run` serves: the endpoints file, the
// HERMES_URL shortcut, or the default local Hermes (defaulted reports that case).
func (c *Config) EndpointSpecs() (specs []EndpointSpec, defaulted bool, err error) {
	var p ConfigError
	shortcutKeys := []struct{ key, v string }{
		{"HERMES_API_KEY", c.HermesAPIKey}, {"HERMES_API_KEY_FILE", c.HermesAPIKeyFile},
		{"HERMES_TENANT_ID", c.HermesTenantID},
	}
	if c.EndpointsFile != "" {
		if c.HermesURL != "" {
			p.add("HERMES_ENDPOINTS_FILE and HERMES_URL are both set: use one")
		}
		for _, k := range shortcutKeys {
			if k.v != "" {
				p.add("%s is set with HERMES_ENDPOINTS_FILE: it applies only to the single endpoint of HERMES_URL; set api_key_file, api_key_env or tenant_id in the file", k.key)
			}
		}
		if err := p.err(); err != nil {
			return nil, false, err
		}
		specs, err := ReadEndpointsFile(c.EndpointsFile)
		if err != nil {
			return nil, false, &ConfigError{Problems: []string{err.Error()}}
		}
		return specs, false, nil
	}
	u := c.HermesURL
	if u == "" {
		u, defaulted = DefaultHermesURL, true
	}
	if c.HermesAPIKey != "" && c.HermesAPIKeyFile != "" {
		p.add("HERMES_API_KEY and HERMES_API_KEY_FILE are both set: use one")
	}
	if err := p.err(); err != nil {
		return nil, false, err
	}
	return []EndpointSpec{{
		ID: c.HermesEndpointID, BaseURL: u, APIKeyFile: c.HermesAPIKeyFile,
		TenantID: c.HermesTenantID, MaxConcurrency: c.HermesMaxConcurrency, apiKey: c.HermesAPIKey,
	}}, defaulted, nil
}

// validateSpecs checks what only the command knows of the endpoints: where their keys
// come from (bridge.Config.Validate checks the rest, see validateBridge).
func validateSpecs(specs []EndpointSpec, fromFile bool, environ map[string]string) error {
	var p ConfigError
	for i, s := range specs {
		if !fromFile {
			if s.apiKey != "" {
				if err := checkKey(s.apiKey); err != nil {
					p.add("HERMES_API_KEY: the key %v", err)
				}
			}
			continue
		}
		where := fmt.Sprintf("HERMES_ENDPOINTS_FILE endpoints[%d]", i)
		if s.APIKeyFile != "" && s.APIKeyEnv != "" {
			p.add("%s: set only one of api_key_file and api_key_env", where)
		}
		if s.APIKeyEnv != "" {
			if !envNameRE.MatchString(s.APIKeyEnv) {
				p.add("%s: api_key_env %q is not an environment variable name", where, s.APIKeyEnv)
			} else if v, ok := environ[s.APIKeyEnv]; !ok || v == "" {
				p.add("%s: api_key_env names %s, which is not set", where, s.APIKeyEnv)
			} else if err := checkKey(v); err != nil {
				p.add("%s: the key in %s %v", where, s.APIKeyEnv, err)
			}
		}
	}
	return p.err()
}

// checkKey validates a bearer key; the error never contains the key.
func checkKey(k string) error {
	switch {
	case k == "":
		return errors.New("is empty")
	case len(k) > maxKeyLen:
		return fmt.Errorf("is longer than %d bytes", maxKeyLen)
	case strings.IndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return errors.New("contains whitespace or control characters")
	}
	return nil
}

// redactURL removes credentials from a URL for messages and logs: the whole login
// part, because NATS reads a user without a password as a token.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if err != nil && strings.Contains(raw, "@") {
			return "[unparseable URL redacted]"
		}
		return raw
	}
	u.User = url.User("redacted")
	return u.String()
}

// ---- Config dump ----

// Dump returns the configuration for the startup log: every variable that is set or
// has a default, secrets replaced by "[redacted]", URLs without passwords, and the
// endpoints with the source of their key (never the key).
func (c *Config) Dump(specs []EndpointSpec) map[string]any {
	out := map[string]any{}
	v := reflect.ValueOf(c).Elem()
	for _, f := range configFields() {
		key, fv := f.Key, v.FieldByName(f.Name)
		if fv.IsZero() && f.Default == "" {
			continue
		}
		switch {
		case f.Secret:
			out[key] = "[redacted]"
		case fv.Kind() == reflect.String && (strings.HasSuffix(key, "_URL") || strings.HasSuffix(key, "_ENDPOINT")):
			out[key] = redactURLs(fv.String())
		case fv.Type().Implements(reflect.TypeFor[fmt.Stringer]()): // durations, sizes
			out[key] = fv.Interface().(fmt.Stringer).String()
		default:
			out[key] = fv.Interface()
		}
	}
	eps := make([]map[string]any, 0, len(specs))
	for _, s := range specs {
		ep := map[string]any{"id": s.ID, "base_url": redactURL(s.BaseURL), "key": s.keySource(), "max_concurrency": s.MaxConcurrency}
		if s.TenantID != "" {
			ep["tenant_id"] = s.TenantID
		}
		eps = append(eps, ep)
	}
	out["endpoints"] = eps
	return out
}

// DumpChanged is Dump reduced to the variables whose value differs from their default,
// and the endpoints: the short configuration line of a console log.
func (c *Config) DumpChanged(specs []EndpointSpec) map[string]any {
	def, _ := LoadConfig(map[string]string{})
	all, base := c.Dump(specs), def.Dump(nil)
	for k, v := range all {
		if k != "endpoints" && reflect.DeepEqual(v, base[k]) {
			delete(all, k)
		}
	}
	return all
}

// consoleLog reports whether run logs in the console format on w: set so, or "auto"
// and w is a terminal.
func (c *Config) consoleLog(w io.Writer) bool {
	return c.LogFormat == "console" || c.LogFormat == "auto" && isTerminal(w)
}

// ---- NATS options ----

// clientLiveness is the liveness of the client commands' connections (call, watch,
// status, approve and the other commands): they hold no claims, so no lease bounds them,
// and a server that stops answering is given up after about 30 s, as before `run`'s own
// connection followed its lease (bridge.NATSLiveness).
var clientLiveness = bridge.Liveness{PingInterval: 10 * time.Second, MaxPingsOut: 2, ReconnectWait: time.Second}

// inboxPrefixRule says what validInboxPrefix accepts.
const inboxPrefixRule = "must be a subject such as _INBOX_dashboard: dot-separated tokens without wildcards or spaces"

// validInboxPrefix reports whether p can prefix inbox subjects (nats.CustomInboxPrefix
// refuses wildcards and a trailing dot; spaces and empty tokens make invalid subjects).
func validInboxPrefix(p string) bool {
	for _, tok := range strings.Split(p, ".") {
		if tok == "" || strings.ContainsAny(tok, "*>") || strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return false
		}
	}
	return true
}

// clientURL is where `call` and `watch` connect.
func (c *Config) clientURL() (string, error) {
	if c.NATSURL != "" {
		return c.NATSURL, nil
	}
	if c.NATSPort == -1 {
		return "", errors.New("NATS_URL is not set and HERMES_BRIDGE_NATS_PORT=-1: set NATS_URL (or --server) to the URL `run` printed")
	}
	host := c.NATSHost
	if host == "0.0.0.0" || host == "::" || host == "" {
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(c.NATSPort)), nil
}

// secretOrFile returns the secret read from path (the variable key) when path is set,
// else value.
func secretOrFile(value, key, path string) (string, error) {
	if path == "" {
		return value, nil
	}
	return readSecretFile(key, path)
}

// readSecretFile reads a one-line secret; errors name the variable and path only.
func readSecretFile(key, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s=%s: %s", key, path, fileProblem(err))
	}
	s := strings.TrimRight(string(b), "\r\n")
	if err := checkKey(s); err != nil {
		return "", fmt.Errorf("%s=%s: the secret in this file %v", key, path, err)
	}
	return s, nil
}
