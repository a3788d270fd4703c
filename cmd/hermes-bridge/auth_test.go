package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// startRunInProcess runs the `run` logic in-process with environ (embedded NATS on a free
// port and a temporary store unless environ says otherwise) until the test ends. It
// returns the NATS URL and the log buffer.
func startRunInProcess(t *testing.T, environ map[string]string) (string, *syncBuffer) {
	t.Helper()
	env := map[string]string{
		"HERMES_BRIDGE_DATA_DIR":       t.TempDir(),
		"HERMES_BRIDGE_NATS_PORT":      "-1",
		"HERMES_BRIDGE_SHUTDOWN_GRACE": "5s",
	}
	for k, v := range environ {
		env[k] = v
	}
	p, err := prepareRun(env)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := newLogger(p.cfg, logs, p.replicaID)
	ctx, cancel := context.WithCancel(context.Background())
	urlc := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- runService(ctx, p, log, logs, func(u string) { urlc <- u }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	})
	select {
	case url := <-urlc:
		waitFor(t, 20*time.Second, "bridge started", func() bool { return strings.Contains(logs.String(), `"bridge started"`) })
		return url, logs
	case err := <-done:
		t.Fatalf("run stopped early: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("run did not connect:\n%s", logs.String())
	}
	return "", nil
}

// TestAuthenticationFailureNamesTheVariables (issue 13): `run` against a Hermes that
// wants a key, with none configured (or a wrong one), used to end every action with
// "authentication: no valid API key configured" and nothing in the log. The result's
// message and a log line now say which variables set the key, the log line names the
// key's source, and neither holds the key.
func TestAuthenticationFailureNamesTheVariables(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	fake := hermestest.NewServer()
	defer fake.Close()
	for _, tt := range []struct {
		name      string
		env       map[string]string
		result    []string // in the result's error message
		logSource string   // the key source in the log line
	}{
		{"no key", map[string]string{"HERMES_URL": fake.URL},
			[]string{"no valid API key configured", "set HERMES_API_KEY_FILE", "HERMES_API_KEY"}, "none"},
		{"wrong key", map[string]string{"HERMES_URL": fake.URL, "HERMES_API_KEY": "wrong-key-0123456789-SECRET"},
			[]string{"HTTP 401", "HERMES_API_KEY"}, "env:HERMES_API_KEY"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url, logs := startRunInProcess(t, tt.env)
			code, out, errOut := runMain(context.Background(), map[string]string{"NATS_URL": url}, "",
				"call", "--op", "models", "--json", "--action-id", "auth-"+strings.ReplaceAll(tt.name, " ", "-"))
			if code != exitFailed {
				t.Fatalf("call exit %d, want %d\n%s\n%s", code, exitFailed, out, errOut)
			}
			var res events.Result
			if err := json.Unmarshal([]byte(out), &res); err != nil || res.Error == nil || res.Error.Code != "authentication" {
				t.Fatalf("result %s (%v)", out, err)
			}
			for _, want := range tt.result {
				if !strings.Contains(res.Error.Message, want) {
					t.Errorf("result message %q lacks %q", res.Error.Message, want)
				}
			}
			var line map[string]any
			waitFor(t, 10*time.Second, "the authentication log line", func() bool {
				for _, l := range strings.Split(logs.String(), "\n") {
					if strings.Contains(l, `"code":"authentication"`) && strings.Contains(l, "HERMES_API_KEY") {
						return json.Unmarshal([]byte(l), &line) == nil
					}
				}
				return false
			})
			if line["level"] != "warn" || line["endpoint"] != "primary" || line["key"] != tt.logSource {
				t.Errorf("log line %v: want level warn, endpoint primary, key %s", line, tt.logSource)
			}
			if strings.Contains(logs.String(), "SECRET") || strings.Contains(out, "SECRET") {
				t.Errorf("the key appears in the log or the result")
			}
		})
	}
}
