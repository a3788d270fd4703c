package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
)

// syncBuffer is a goroutine-safe bytes.Buffer for captured output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	noErr(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// mustLoadConfig loads the configuration from environ, failing the test on an error.
func mustLoadConfig(t *testing.T, environ map[string]string) *Config {
	t.Helper()
	cfg, err := LoadConfig(environ)
	noErr(t, err)
	return cfg
}

func TestLoadConfigDefaults(t *testing.T) {
	cfg := mustLoadConfig(t, map[string]string{})
	want := Config{
		DataDir: "./data/nats", NATSHost: "127.0.0.1", NATSPort: 4222, Prefix: "hermes",
		ActionsStream: "HERMES_ACTIONS", OutputStream: "HERMES_OUTPUT", DLQStream: "HERMES_DLQ",
		Consumer: "hermes-bridge", Bucket: "HERMES_IDEMPOTENCY", KeysBucket: "HERMES_KEYS", Provision: true, AckWait: 30 * time.Second,
		MaxDeliver: -1, MaxAttempts: 5, ApprovalTTL: 15 * time.Minute, PreApprovals: true, BreakerThreshold: 5, BreakerCooldown: 2 * time.Second, BreakerMaxCooldown: time.Minute, ObjectBucket: "HERMES_OUTPUT_OBJECTS", IdempotencyTTL: 24 * time.Hour, OutputMaxAge: 24 * time.Hour, DLQMaxAge: 7 * 24 * time.Hour, Storage: "file",
		Replicas: 1, ShutdownGrace: 30 * time.Second, LogLevel: "info", LogFormat: "auto", NATSConnectWait: 30 * time.Second,
		HermesEndpointID: "primary", HermesMaxConcurrency: 10, HTTPAddr: DefaultHTTPAddr,
		UI: "auto", UIWebSocketPort: -1, UIInboxPrefix: "_INBOX_dashboard",
	}
	if !reflect.DeepEqual(*cfg, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", *cfg, want)
	}
	if err := cfg.ValidateRun(nil); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

// The env defaults must agree with the bridge's own defaults, so the README table
// and `run --help` tell the truth.
func TestDefaultsMatchBridge(t *testing.T) {
	cfg := mustLoadConfig(t, map[string]string{})
	eps := []bridge.Endpoint{{ID: "primary", BaseURL: DefaultHermesURL, MaxConcurrency: 10}}
	ours := cfg.BridgeConfig(eps, "r1")
	theirs := bridge.Config{Endpoints: eps, ReplicaID: "r1", Provision: true}.WithDefaults()
	ours = ours.WithDefaults()
	ours.Endpoints, theirs.Endpoints = nil, nil
	if !reflect.DeepEqual(ours, theirs) {
		t.Fatalf("env defaults differ from bridge defaults:\n env    %+v\n bridge %+v", ours, theirs)
	}
}

func TestLoadConfigValues(t *testing.T) {
	cfg, err := LoadConfig(map[string]string{
		"NATS_URL": "nats://a:4222,nats://b:4222", "HERMES_BRIDGE_ACK_WAIT": "1m", "HERMES_BRIDGE_PROVISION": "false",
		"HERMES_BRIDGE_WORKERS": "4", "HERMES_BRIDGE_STORAGE": "memory", "HERMES_ENDPOINT_ID": "edge",
		"HERMES_BRIDGE_ALLOW_RETENTION_SHRINK": "true",
	})
	noErr(t, err)
	if cfg.AckWait != time.Minute || cfg.Provision || cfg.Workers != 4 || cfg.HermesEndpointID != "edge" || cfg.NATSURL != "nats://a:4222,nats://b:4222" ||
		!cfg.AllowRetentionShrink {
		t.Fatalf("unexpected %+v", cfg)
	}
	bc := cfg.BridgeConfig(nil, "x")
	if bc.Storage.String() != "Memory" || bc.AckWait != time.Minute || bc.Provision || !bc.AllowRetentionShrink {
		t.Fatalf("bridge config %+v", bc)
	}
}

func TestParseErrorsNameTheVariable(t *testing.T) {
	_, err := LoadConfig(map[string]string{
		"HERMES_BRIDGE_ACK_WAIT": "soon", "HERMES_BRIDGE_WORKERS": "many", "HERMES_BRIDGE_PROVISION": "perhaps",
		"HERMES_BRIDGE_ALLOW_RETENTION_SHRINK": "yes please",
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"HERMES_BRIDGE_ACK_WAIT=soon: must be a duration",
		"HERMES_BRIDGE_WORKERS=many: must be an integer",
		"HERMES_BRIDGE_PROVISION=perhaps: must be true or false",
		"HERMES_BRIDGE_ALLOW_RETENTION_SHRINK=yes please: must be true or false",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestValidationMessages(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		environ map[string]string
		want    []string
	}{
		{"ack wait", map[string]string{"HERMES_BRIDGE_ACK_WAIT": "500ms"}, []string{"HERMES_BRIDGE_ACK_WAIT=500ms: must be at least 1s"}},
		{"heartbeat", map[string]string{"HERMES_BRIDGE_ACK_WAIT": "10s", "HERMES_BRIDGE_HEARTBEAT": "6s"},
			[]string{"HERMES_BRIDGE_HEARTBEAT=6s: must be positive and at most half of HERMES_BRIDGE_ACK_WAIT (10s)"}},
		{"several at once", map[string]string{"HERMES_BRIDGE_MAX_DELIVER": "0", "HERMES_BRIDGE_REPLICAS": "7", "HERMES_BRIDGE_STORAGE": "disk",
			"HERMES_BRIDGE_LOG_FORMAT": "xml", "HERMES_BRIDGE_LOG_LEVEL": "loud", "HERMES_BRIDGE_IDEMPOTENCY_TTL": "10s"},
			[]string{"HERMES_BRIDGE_MAX_DELIVER=0: must be -1 (unlimited) or at least 1", "HERMES_BRIDGE_REPLICAS=7: must be 1 to 5",
				"HERMES_BRIDGE_STORAGE=disk: must be file or memory", "HERMES_BRIDGE_LOG_FORMAT=xml: must be json, console or auto",
				"HERMES_BRIDGE_LOG_LEVEL=loud", "HERMES_BRIDGE_IDEMPOTENCY_TTL=10s: must be at least 1m"}},
		{"names", map[string]string{"HERMES_BRIDGE_PREFIX": "a.b", "HERMES_BRIDGE_BUCKET": "has space"},
			[]string{"HERMES_BRIDGE_PREFIX=a.b: must be 1 to 128 letters", "HERMES_BRIDGE_BUCKET=has space: must be"}},
		{"output max age vs key ttl", map[string]string{"HERMES_BRIDGE_OUTPUT_MAX_AGE": "1h", "HERMES_BRIDGE_IDEMPOTENCY_TTL": "2h"},
			[]string{"HERMES_BRIDGE_OUTPUT_MAX_AGE=1h0m0s: must be at least HERMES_BRIDGE_IDEMPOTENCY_TTL (2h0m0s)"}},
		{"workers vs pending", map[string]string{"HERMES_BRIDGE_WORKERS": "8", "HERMES_BRIDGE_MAX_ACK_PENDING": "4"},
			[]string{"HERMES_BRIDGE_MAX_ACK_PENDING=4: must be at least HERMES_BRIDGE_WORKERS (8)"}},
		{"port", map[string]string{"HERMES_BRIDGE_NATS_PORT": "0"}, []string{"HERMES_BRIDGE_NATS_PORT=0: must be 1 to 65535, or -1"}},
		{"nats auth without url", map[string]string{"NATS_CREDS": "/x.creds"},
			[]string{"NATS_CREDS is set but neither NATS_URL nor NATS_CONTEXT is", "NATS_CREDS=/x.creds: file does not exist"}},
		{"nats auth conflicts", map[string]string{"NATS_URL": "nats://h:4222", "NATS_TOKEN": "t0k", "NATS_USER": "u",
			"NATS_PASSWORD": "p", "NATS_PASSWORD_FILE": writeFile(t, dir, "pw", "p\n"), "NATS_TLS_CERT": writeFile(t, dir, "c.pem", "x")},
			[]string{"NATS authentication: set only one of NATS_USER, NATS_TOKEN", "NATS_PASSWORD and NATS_PASSWORD_FILE are both set",
				"NATS_TLS_CERT and NATS_TLS_KEY must be set together"}},
		{"nats url", map[string]string{"NATS_URL": "http://h:4222"}, []string{"NATS_URL=http://h:4222: scheme must be nats, tls, ws or wss"}},
		{"inbox prefix", map[string]string{"NATS_INBOX_PREFIX": "_INBOX_x.>"}, []string{"NATS_INBOX_PREFIX=_INBOX_x.>: must be a subject such as _INBOX_dashboard"}},
		{"inbox prefix dot", map[string]string{"NATS_INBOX_PREFIX": "_INBOX_x."}, []string{"NATS_INBOX_PREFIX=_INBOX_x.: must be a subject"}},
		{"hermes url", map[string]string{"HERMES_URL": "ftp://h"}, []string{"HERMES_URL=ftp://h: must start with http:// or https://"}},
		{"hermes url creds", map[string]string{"HERMES_URL": "http://u:hunter2@h"}, []string{"HERMES_URL=http://redacted@h: must not carry credentials"}},
		{"both endpoint sources", map[string]string{"HERMES_URL": "http://h", "HERMES_ENDPOINTS_FILE": "/e.json"},
			[]string{"HERMES_ENDPOINTS_FILE and HERMES_URL are both set"}},
		{"shortcut with file", map[string]string{"HERMES_API_KEY_FILE": "/k", "HERMES_ENDPOINTS_FILE": "/e.json"},
			[]string{"HERMES_API_KEY_FILE is set with HERMES_ENDPOINTS_FILE"}},
		{"both keys", map[string]string{"HERMES_API_KEY": "k", "HERMES_API_KEY_FILE": "/k"}, []string{"HERMES_API_KEY and HERMES_API_KEY_FILE are both set"}},
		{"endpoint id", map[string]string{"HERMES_ENDPOINT_ID": "Primary"}, []string{`HERMES_ENDPOINT_ID=Primary: must match [a-z0-9_-]{1,128}`}},
		{"concurrency", map[string]string{"HERMES_MAX_CONCURRENCY": "0"}, []string{"HERMES_MAX_CONCURRENCY=0: must be at least 1"}},
		{"bad key", map[string]string{"HERMES_API_KEY": "two words"}, []string{"HERMES_API_KEY: the key contains whitespace"}},
		{"parse error plus others", map[string]string{"HERMES_BRIDGE_ACK_WAIT": "x", "HERMES_BRIDGE_REPLICAS": "9"},
			[]string{"HERMES_BRIDGE_ACK_WAIT=x: must be a duration", "HERMES_BRIDGE_REPLICAS=9"}},
		{"zero where the bridge would default", map[string]string{"HERMES_BRIDGE_MAX_ATTEMPTS": "0", "HERMES_BRIDGE_REPLICAS": "0",
			"HERMES_BRIDGE_BREAKER_COOLDOWN": "0s", "HERMES_BRIDGE_APPROVAL_TTL": "0s", "HERMES_BRIDGE_OUTPUT_STREAM": "0"},
			[]string{"HERMES_BRIDGE_MAX_ATTEMPTS=0: must be at least 1", "HERMES_BRIDGE_REPLICAS=0: must be 1 to 5",
				"HERMES_BRIDGE_BREAKER_COOLDOWN=0s: must be positive", "HERMES_BRIDGE_APPROVAL_TTL=0s: must be at least 1s"}},
		{"bridge rules", map[string]string{"HERMES_BRIDGE_BREAKER_MAX_COOLDOWN": "1s", "HERMES_BRIDGE_WORKERS": "-1",
			"HERMES_BRIDGE_MAX_ACK_PENDING": "-1", "HERMES_BRIDGE_SHUTDOWN_GRACE": "-1s", "HERMES_BRIDGE_REPLICA_ID": "a.b",
			"HERMES_BRIDGE_OUTPUT_MAX_AGE": "30s", "HERMES_BRIDGE_KEYS_BUCKET": "HERMES_IDEMPOTENCY"},
			[]string{"HERMES_BRIDGE_BREAKER_MAX_COOLDOWN=1s: must be at least HERMES_BRIDGE_BREAKER_COOLDOWN (2s)",
				"HERMES_BRIDGE_WORKERS=-1: must be at least 1 (0, the default: the sum of the endpoints' max concurrency)",
				"HERMES_BRIDGE_MAX_ACK_PENDING=-1: must be at least 1 (0, the default: room for 8 replicas)",
				"HERMES_BRIDGE_SHUTDOWN_GRACE=-1s: must not be negative", "HERMES_BRIDGE_REPLICA_ID=a.b: must be 1 to 128 letters, digits, - or _",
				"HERMES_BRIDGE_OUTPUT_MAX_AGE=30s: must be at least 1m",
				"HERMES_BRIDGE_KEYS_BUCKET=HERMES_IDEMPOTENCY: must differ from HERMES_BRIDGE_BUCKET (the records bucket)"}},
		{"records outlive a parked action", map[string]string{"HERMES_BRIDGE_APPROVAL_TTL": "48h"},
			[]string{"HERMES_BRIDGE_OUTPUT_MAX_AGE=24h0m0s: plus 1h0m0s, the action records' TTL, must be longer than " +
				"HERMES_BRIDGE_APPROVAL_TTL (48h0m0s) plus 2 × HERMES_BRIDGE_ACK_WAIT (1m0s)"}},
		{"heartbeat and key ttl", map[string]string{"HERMES_BRIDGE_ACK_WAIT": "1h", "HERMES_BRIDGE_HEARTBEAT": "20m", "HERMES_BRIDGE_IDEMPOTENCY_TTL": "1h"},
			[]string{"HERMES_BRIDGE_HEARTBEAT=20m0s: must be at most a quarter of HERMES_BRIDGE_IDEMPOTENCY_TTL (1h0m0s)"}},
		{"tenant", map[string]string{"HERMES_TENANT_ID": "a\x01"}, []string{`HERMES_TENANT_ID="a\x01": must be at most 256 characters without control characters`}},
		{"max ack pending under the default workers", map[string]string{"HERMES_BRIDGE_MAX_ACK_PENDING": "5"},
			[]string{"HERMES_BRIDGE_MAX_ACK_PENDING=5: must be at least HERMES_BRIDGE_WORKERS (10)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := prepareRun(tt.environ)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("missing %q in:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "two words") {
				t.Errorf("secret in error: %v", err)
			}
		})
	}
}

// A value that failed to parse is reported once, not again as its zero value.
func TestParseErrorNotRepeated(t *testing.T) {
	_, err := prepareRun(map[string]string{"HERMES_BRIDGE_ACK_WAIT": "x"})
	if err == nil || strings.Count(err.Error(), "HERMES_BRIDGE_ACK_WAIT") != 1 {
		t.Fatalf("want one message about HERMES_BRIDGE_ACK_WAIT, got:\n%v", err)
	}
}

// A rule that compares with a variable whose own value is refused is not reported
// again, nor is one that compares with a variable that failed to parse (which holds
// its default).
func TestProblemReportedOnce(t *testing.T) {
	for _, c := range []struct {
		environ map[string]string
		want    string
	}{
		{map[string]string{"HERMES_BRIDGE_ACK_WAIT": "0s"}, "invalid configuration:\n  - HERMES_BRIDGE_ACK_WAIT=0s: must be at least 1s"},
		{map[string]string{"HERMES_BRIDGE_IDEMPOTENCY_TTL": "0s"}, "invalid configuration:\n  - HERMES_BRIDGE_IDEMPOTENCY_TTL=0s: must be at least 1m"},
		{map[string]string{"HERMES_BRIDGE_IDEMPOTENCY_TTL": "x", "HERMES_BRIDGE_OUTPUT_MAX_AGE": "2h"},
			"invalid configuration:\n  - HERMES_BRIDGE_IDEMPOTENCY_TTL=x: must be a duration such as 500ms, 30s, 5m or 24h"},
		{map[string]string{"HERMES_MAX_CONCURRENCY": "-3"}, "invalid configuration:\n  - HERMES_MAX_CONCURRENCY=-3: must be at least 1"},
	} {
		if _, err := prepareRun(c.environ); err == nil || err.Error() != c.want {
			t.Errorf("%v:\n got %v\nwant %s", c.environ, err, c.want)
		}
	}
}

// call and watch check the names they use, in the words of their variables.
func TestValidateClientNames(t *testing.T) {
	cfg := mustLoadConfig(t, map[string]string{"HERMES_BRIDGE_PREFIX": "a.b", "HERMES_BRIDGE_OBJECT_BUCKET": "x y", "HERMES_BRIDGE_BUCKET": "not checked"})
	want := "invalid configuration:\n  - HERMES_BRIDGE_PREFIX=a.b: must be 1 to 128 letters, digits, - or _: one subject token" +
		"\n  - HERMES_BRIDGE_OBJECT_BUCKET=x y: must be 1 to 128 letters, digits, - or _"
	if err := cfg.ValidateClient(); err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestEndpointsFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := writeFile(t, dir, "key", "file-key-0123456789\n")
	environ := map[string]string{"SECOND_KEY": "env-key-0123456789"}
	docs := map[string]string{
		"eps.json": `{"endpoints":[{"id":"primary","base_url":"http://127.0.0.1:8642","api_key_file":"` + keyFile + `","tenant_id":"acme","max_concurrency":4},
			{"id":"second","base_url":"https://h.example/hermes","api_key_env":"SECOND_KEY"}]}`,
		"eps.yaml": "endpoints:\n  - id: primary\n    base_url: http://127.0.0.1:8642\n    api_key_file: " + keyFile +
			"\n    tenant_id: acme\n    max_concurrency: 4\n  - id: second\n    base_url: https://h.example/hermes\n    api_key_env: SECOND_KEY\n",
		"array.yml": "- id: primary\n  base_url: http://127.0.0.1:8642\n  api_key_file: " + keyFile +
			"\n  tenant_id: acme\n  max_concurrency: 4\n- {id: second, base_url: 'https://h.example/hermes', api_key_env: SECOND_KEY}\n",
		"array-no-ext": `[{"id":"primary","base_url":"http://127.0.0.1:8642","api_key_file":"` + keyFile + `","tenant_id":"acme","max_concurrency":4},
			{"id":"second","base_url":"https://h.example/hermes","api_key_env":"SECOND_KEY"}]`,
		"yaml-no-ext": "endpoints:\n- id: primary\n  base_url: http://127.0.0.1:8642\n  api_key_file: " + keyFile +
			"\n  tenant_id: acme\n  max_concurrency: 4\n- id: second\n  base_url: https://h.example/hermes\n  api_key_env: SECOND_KEY\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			environ := maps(environ, map[string]string{"HERMES_ENDPOINTS_FILE": writeFile(t, dir, name, doc)})
			p, err := prepareRun(environ)
			noErr(t, err)
			eps := p.bridge.Endpoints
			if len(eps) != 2 || eps[0].ID != "primary" || eps[0].TenantID != "acme" || eps[0].MaxConcurrency != 4 ||
				eps[1].ID != "second" || eps[1].BaseURL != "https://h.example/hermes" {
				t.Fatalf("endpoints %+v", eps)
			}
			if k := eps[0].Key(); k != "file-key-0123456789" {
				t.Fatalf("file key %q", k)
			}
			if k := eps[1].Key(); k != "env-key-0123456789" {
				t.Fatalf("env key %q", k)
			}
		})
	}
}

func maps(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func TestEndpointsFileErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, doc, want string }{
		{"unknown field.json", `{"endpoints":[{"id":"a","base_url":"http://h","colour":"red"}]}`, `unknown field "colour"`},
		{"inline key.json", `{"endpoints":[{"id":"a","base_url":"http://h","api_key":"sekrit-value"}]}`, "use api_key_file or api_key_env"},
		{"unknown top.yaml", "endpoint:\n  - id: a\n", `unknown field "endpoint"`},
		{"empty.json", ``, "file is empty"},
		{"none.json", `{"endpoints":[]}`, "lists no endpoint"},
		{"bad.json", `{"endpoints":[`, "invalid endpoints document"},
		{"bad.yaml", "endpoints: [\n", "not valid YAML"},
		{"trailing.json", `{"endpoints":[{"id":"a","base_url":"http://h"}]} {}`, "trailing data"},
		{"both keys.json", `{"endpoints":[{"id":"a","base_url":"http://h","api_key_file":"/k","api_key_env":"K"}]}`, "set only one of api_key_file and api_key_env"},
		{"env unset.json", `{"endpoints":[{"id":"a","base_url":"http://h","api_key_env":"NOT_SET_ANYWHERE"}]}`, "api_key_env names NOT_SET_ANYWHERE, which is not set"},
		{"dup.json", `[{"id":"a","base_url":"http://h"},{"id":"a","base_url":"http://h"}]`, "HERMES_ENDPOINTS_FILE endpoints[1].id=a: is configured twice"},
		{"bad id.json", `[{"id":"A!","base_url":"http://h"}]`, "HERMES_ENDPOINTS_FILE endpoints[0].id=A!: must match [a-z0-9_-]{1,128}"},
		{"no url.json", `[{"id":"a"}]`, "HERMES_ENDPOINTS_FILE endpoints[0].base_url: is required"},
		{"neg conc.json", `[{"id":"a","base_url":"http://h","max_concurrency":-1}]`, "HERMES_ENDPOINTS_FILE endpoints[0].max_concurrency=-1: must be at least 1"},
		{"missing key file.json", `[{"id":"a","base_url":"http://h","api_key_file":"` + filepath.Join(dir, "nope") + `"}]`,
			"key file " + filepath.Join(dir, "nope") + ": file does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := prepareRun(map[string]string{"HERMES_ENDPOINTS_FILE": writeFile(t, dir, tt.name, tt.doc)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want %q, got %v", tt.want, err)
			}
			if !strings.Contains(err.Error(), "HERMES_ENDPOINTS_FILE") && !strings.Contains(err.Error(), "key file") {
				t.Errorf("error does not name its source: %v", err)
			}
			if strings.Contains(err.Error(), "sekrit-value") {
				t.Errorf("secret in error: %v", err)
			}
		})
	}
	_, err := prepareRun(map[string]string{"HERMES_ENDPOINTS_FILE": filepath.Join(dir, "absent.json")})
	if err == nil || !strings.Contains(err.Error(), "HERMES_ENDPOINTS_FILE="+filepath.Join(dir, "absent.json")+": file does not exist") {
		t.Fatalf("absent file: %v", err)
	}
}

func TestKeyFileValidation(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, content, want string }{
		{"empty", "", "the key is empty"},
		{"newline only", "\n", "the key is empty"},
		{"space", "abc def\n", "whitespace or control"},
		{"two lines", "abc\ndef\n", "whitespace or control"},
		{"huge", strings.Repeat("k", maxKeyLen+10), "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, dir, tt.name, tt.content)
			_, err := readKeyFile(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("want %q naming %s, got %v", tt.want, path, err)
			}
			if c := strings.TrimSpace(tt.content); c != "" && strings.Contains(err.Error(), c) {
				t.Fatalf("content leaked: %v", err)
			}
		})
	}
	ok := writeFile(t, dir, "crlf", "k-0123456789\r\n")
	if v, err := readKeyFile(ok); err != nil || v != "k-0123456789" {
		t.Fatalf("crlf: %q %v", v, err)
	}
}

func TestKeyringReload(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "key", "first-key-0000\n")
	specs := []EndpointSpec{
		{ID: "a", BaseURL: "http://h", APIKeyFile: path},
		{ID: "b", BaseURL: "http://h", APIKeyEnv: "B_KEY"},
		{ID: "c", BaseURL: "http://h"},
	}
	kr, err := newKeyring(specs, map[string]string{"B_KEY": "b-key-1111"})
	noErr(t, err)
	a, b, c := kr.source("a"), kr.source("b"), kr.source("c")
	if a.Key() != "first-key-0000" || b.Key() != "b-key-1111" || c.Key() != "" {
		t.Fatalf("keys %q %q %q", a.Key(), b.Key(), c.Key())
	}
	writeFile(t, dir, "key", "second-key-0000\n")
	if a.Key() != "first-key-0000" {
		t.Fatal("key changed before reload")
	}

	// Reload through the SIGHUP loop (a channel stands in for the signal).
	logs := &syncBuffer{}
	log := zerolog.New(logs)
	hup := make(chan os.Signal)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); reloadLoop(ctx, hup, kr, log) }()
	hup <- os.Interrupt
	hup <- os.Interrupt // the second send returns only after the first reload finished
	cancel()
	<-done
	if a.Key() != "second-key-0000" {
		t.Fatalf("after reload: %q", a.Key())
	}
	if !strings.Contains(logs.String(), "reloaded 1 endpoint keys") || strings.Contains(logs.String(), "second-key") {
		t.Fatalf("logs: %s", logs.String())
	}

	// A broken file keeps the previous key and names the path.
	writeFile(t, dir, "key", "bad key\n")
	n, err := kr.Reload()
	if n != 0 || err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "keeping the previous key") {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if strings.Contains(err.Error(), "bad key") || a.Key() != "second-key-0000" {
		t.Fatalf("err=%v key=%q", err, a.Key())
	}
}

// The startup config dump never contains a secret, whatever variable holds it.
func TestDumpRedactsSecrets(t *testing.T) {
	dir := t.TempDir()
	const marker = "SuperSecret-7f3a"
	environ := map[string]string{
		"NATS_URL":       "nats://bridge:" + marker + "@nats.example:4222,nats://other:4222",
		"NATS_USER":      "bridge",
		"NATS_PASSWORD":  marker + "pw",
		"NATS_TOKEN":     marker + "tok",
		"HERMES_API_KEY": marker + "key",
		"HERMES_URL":     "http://127.0.0.1:8642",
	}
	cfg := mustLoadConfig(t, environ)
	specs, _, err := cfg.EndpointSpecs()
	noErr(t, err)
	logs := &syncBuffer{}
	lg := zerolog.New(logs)
	lg.Info().Interface("config", cfg.Dump(specs)).Msg("starting")
	out := logs.String()
	if strings.Contains(out, marker) {
		t.Fatalf("secret in dump: %s", out)
	}
	for _, want := range []string{`"NATS_PASSWORD":"[redacted]"`, `"NATS_TOKEN":"[redacted]"`, `"HERMES_API_KEY":"[redacted]"`,
		`nats://redacted@nats.example:4222`, `"key":"env:HERMES_API_KEY"`, `"NATS_USER":"bridge"`} {
		if !strings.Contains(out, want) {
			t.Errorf("dump lacks %s: %s", want, out)
		}
	}

	// The whole `run` startup log with a key file: neither the key nor the file content.
	keyPath := writeFile(t, dir, "k", marker+"file\n")
	p, err := prepareRun(map[string]string{"HERMES_API_KEY_FILE": keyPath, "HERMES_URL": "http://127.0.0.1:1"})
	noErr(t, err)
	logs = &syncBuffer{}
	lg = zerolog.New(logs)
	lg.Info().Interface("config", p.cfg.Dump(p.specs)).Msg("starting")
	if strings.Contains(logs.String(), marker) || !strings.Contains(logs.String(), `"key":"file:`+keyPath+`"`) {
		t.Fatalf("dump: %s", logs.String())
	}
}

// Every secret field is marked, so Dump and error messages redact it.
func TestSecretFieldsMarked(t *testing.T) {
	want := map[string]bool{"NATS_PASSWORD": true, "NATS_TOKEN": true, "HERMES_API_KEY": true,
		"OTEL_EXPORTER_OTLP_HEADERS": true, "OTEL_EXPORTER_OTLP_TRACES_HEADERS": true} // collector tokens
	for _, f := range configFields() {
		if f.Secret != want[f.Key] {
			t.Errorf("%s: secret=%v, want %v", f.Key, f.Secret, want[f.Key])
		}
		if f.Desc == "" {
			t.Errorf("%s has no desc tag", f.Key)
		}
	}
}

func TestNATSOptionsReadSecretFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{NATSURL: "nats://h:4222", NATSUser: "u", NATSPasswordFile: filepath.Join(dir, "missing")}
	if _, err := envConn(t, cfg).natsOptions("t", clientLiveness, zerolog.Nop(), nil); err == nil || !strings.Contains(err.Error(), "NATS_PASSWORD_FILE="+filepath.Join(dir, "missing")) {
		t.Fatalf("missing password file: %v", err)
	}
	cfg.NATSPasswordFile = writeFile(t, dir, "pw", "pw-0123\n")
	opts, err := envConn(t, cfg).natsOptions("t", clientLiveness, zerolog.Nop(), nil)
	if err != nil || len(opts) < 6 {
		t.Fatalf("opts %d err %v", len(opts), err)
	}
	cfg = &Config{NATSURL: "nats://h:4222", NATSTokenFile: writeFile(t, dir, "tok", "a b\n")}
	if _, err := envConn(t, cfg).natsOptions("t", clientLiveness, zerolog.Nop(), nil); err == nil || strings.Contains(err.Error(), "a b") {
		t.Fatalf("bad token file: %v", err)
	}
}

func TestClientURL(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{NATSHost: "127.0.0.1", NATSPort: 4222}, "nats://127.0.0.1:4222"},
		{Config{NATSHost: "0.0.0.0", NATSPort: 5222}, "nats://127.0.0.1:5222"},
		{Config{NATSHost: "::1", NATSPort: 4222}, "nats://[::1]:4222"},
		{Config{NATSURL: "nats://x:1"}, "nats://x:1"},
	} {
		got, err := tt.cfg.clientURL()
		if err != nil || got != tt.want {
			t.Errorf("%+v: %q %v", tt.cfg, got, err)
		}
	}
	if _, err := (&Config{NATSPort: -1}).clientURL(); err == nil {
		t.Error("port -1 without NATS_URL: no error")
	}
}

func TestDefaultEndpoint(t *testing.T) {
	p, err := prepareRun(map[string]string{})
	noErr(t, err)
	if !p.defaulted || len(p.bridge.Endpoints) != 1 || p.bridge.Endpoints[0].BaseURL != DefaultHermesURL || p.bridge.Endpoints[0].ID != "primary" {
		t.Fatalf("plan %+v", p.bridge.Endpoints)
	}
	b, _ := json.Marshal(p.cfg.Dump(p.specs))
	if !strings.Contains(string(b), `"key":"none"`) {
		t.Fatalf("dump %s", b)
	}
}

// envConn is the connection the environment's cfg sets, without flags or a context.
func envConn(t *testing.T, cfg *Config) *natsConn {
	t.Helper()
	c, err := resolveConn(cfg, connFlags{}, nil)
	noErr(t, err)
	return c
}

// connOptions applies the options natsOptions builds for live.
func connOptions(t *testing.T, live bridge.Liveness) nats.Options {
	t.Helper()
	opts, err := envConn(t, &Config{NATSURL: "nats://h:4222"}).natsOptions("t", live, zerolog.Nop(), nil)
	noErr(t, err)
	o := nats.GetDefaultOptions()
	for _, f := range opts {
		noErr(t, f(&o))
	}
	return o
}

// TestNATSOptionsDetectDeadServerWithinLease: run's connection gives a server that stops
// answering up (and tries another one of the cluster) after 3/8 of the lease, so that
// with the default configuration the heartbeats go on well before another replica may
// take the bridge's actions over; the client commands keep a ping every 10s.
func TestNATSOptionsDetectDeadServerWithinLease(t *testing.T) {
	lease := bridge.Config{}.WithDefaults().Lease
	o := connOptions(t, bridge.NATSLiveness(lease))
	detect := o.PingInterval * time.Duration(o.MaxPingsOut+1)
	if o.PingInterval != 7500*time.Millisecond || o.MaxPingsOut != 2 || detect > lease/2 {
		t.Errorf("ping every %s, %d outstanding: a dead server is noticed after %s; the lease is %s",
			o.PingInterval, o.MaxPingsOut, detect, lease)
	}
	if o.ReconnectWait != time.Second || o.ReconnectJitter != 100*time.Millisecond || o.ReconnectJitterTLS != 100*time.Millisecond {
		t.Errorf("reconnect wait %s, jitter %s (TLS %s); want 1s, 100ms, 100ms", o.ReconnectWait, o.ReconnectJitter, o.ReconnectJitterTLS)
	}
	c := connOptions(t, clientLiveness)
	d := nats.GetDefaultOptions()
	if c.PingInterval != 10*time.Second || c.MaxPingsOut != 2 || c.ReconnectWait != time.Second ||
		c.ReconnectJitter != d.ReconnectJitter || c.ReconnectJitterTLS != d.ReconnectJitterTLS {
		t.Errorf("client commands: ping every %s, %d outstanding, reconnect wait %s, jitter %s/%s; want 10s, 2, 1s and nats.go's jitter",
			c.PingInterval, c.MaxPingsOut, c.ReconnectWait, c.ReconnectJitter, c.ReconnectJitterTLS)
	}
}

// TestRunConnectionFollowsLease: `run` connects with the liveness of its own lease,
// twice HERMES_BRIDGE_ACK_WAIT.
func TestRunConnectionFollowsLease(t *testing.T) {
	for _, c := range []struct {
		ackWait string
		ping    time.Duration
	}{{"30s", 7500 * time.Millisecond}, {"6s", 1500 * time.Millisecond}, {"1s", 250 * time.Millisecond}, {"10m", 10 * time.Second}} {
		p, err := prepareRun(map[string]string{"HERMES_BRIDGE_ACK_WAIT": c.ackWait})
		if err != nil {
			t.Fatalf("%s: %v", c.ackWait, err)
		}
		if got := bridge.NATSLiveness(p.bridge.WithDefaults().Lease).PingInterval; got != c.ping {
			t.Errorf("HERMES_BRIDGE_ACK_WAIT=%s: ping every %s, want %s", c.ackWait, got, c.ping)
		}
	}
}

// TestLeaseBudgetHoldsForEveryAcceptedAckWait: with the lease at twice the ack wait and
// the heartbeat at most half of it, every ack wait from 1s up holds the budget of
// bridge.Config.Validate (a renewal answered within a ping interval), which `run`
// checks: the ack waits of the project's tests and chaos runs (1s to 5s) pass.
func TestLeaseBudgetHoldsForEveryAcceptedAckWait(t *testing.T) {
	var acks []time.Duration
	for d := time.Second; d <= 10*time.Minute; d += d/10 + 100*time.Millisecond {
		acks = append(acks, d)
	}
	for _, ack := range acks {
		for _, hb := range []time.Duration{0, time.Millisecond, ack / 3, ack / 2} {
			env := map[string]string{"HERMES_BRIDGE_ACK_WAIT": ack.String()}
			if hb != 0 {
				env["HERMES_BRIDGE_HEARTBEAT"] = hb.String()
			}
			if _, err := prepareRun(env); err != nil {
				t.Errorf("%v: %v", env, err)
			}
		}
	}
}

// HERMES_BRIDGE_HTTP_ADDR: unset is the loopback default, set and empty turns the
// listener off, and a value that is not host:port is refused naming the variable.
func TestHTTPAddr(t *testing.T) {
	for _, c := range []struct {
		environ map[string]string
		want    string
		bad     bool
	}{
		{map[string]string{}, DefaultHTTPAddr, false},
		{map[string]string{"HERMES_BRIDGE_HTTP_ADDR": ""}, "", false},
		{map[string]string{"HERMES_BRIDGE_HTTP_ADDR": ":9999"}, ":9999", false},
		{map[string]string{"HERMES_BRIDGE_HTTP_ADDR": "localhost"}, "localhost", true},
	} {
		cfg := mustLoadConfig(t, c.environ)
		if cfg.HTTPAddr != c.want {
			t.Errorf("%v: HTTPAddr %q, want %q", c.environ, cfg.HTTPAddr, c.want)
		}
		err := cfg.ValidateRun(nil)
		if c.bad != (err != nil && strings.Contains(err.Error(), "HERMES_BRIDGE_HTTP_ADDR")) {
			t.Errorf("%v: ValidateRun: %v", c.environ, err)
		}
	}
}

// TestRunLogsLeaseLiveness: `run` with a short ack wait (which holds the lease budget:
// every term follows the lease) starts without a warning about it, and its connection
// pings every eighth of the lease.
func TestRunLogsLeaseLiveness(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	logs := startRunInProcess(t, map[string]string{
		"HERMES_URL": "http://127.0.0.1:1", "HERMES_BRIDGE_ACK_WAIT": "2s", "HERMES_BRIDGE_HTTP_ADDR": "",
	}).logs
	var warned, connected bool // warned: a warning naming the ack wait
	for _, l := range strings.Split(logs.String(), "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) != nil {
			continue
		}
		msg, _ := line["message"].(string)
		switch {
		case line["level"] == "warn" && strings.Contains(msg, "HERMES_BRIDGE_ACK_WAIT"):
			warned = true
		case msg == "connected to NATS":
			connected = line["ping_interval"] == "500ms" && line["dead_server_after"] == "1.5s"
		}
	}
	if warned || !connected {
		t.Errorf("warned %v, connected with pings of lease/8 %v:\n%s", warned, connected, logs.String())
	}
}

// TestSettingNames: the names of bridge.Config fields in a reason become the variables
// that set them, each whole.
func TestSettingNames(t *testing.T) {
	if got := settingNames().Replace("must be at least IdempotencyTTL (1h) and KeysBucket, Bucket, Lease"); got !=
		"must be at least HERMES_BRIDGE_IDEMPOTENCY_TTL (1h) and HERMES_BRIDGE_KEYS_BUCKET, HERMES_BRIDGE_BUCKET, 2 × HERMES_BRIDGE_ACK_WAIT" {
		t.Errorf("renamed: %s", got)
	}
}
