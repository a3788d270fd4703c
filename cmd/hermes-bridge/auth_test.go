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

// inProcessRun is the `run` logic running in-process.
type inProcessRun struct {
	url    string // of the NATS server
	logs   *syncBuffer
	p      *runPlan
	cancel context.CancelCauseFunc
	done   chan error
}

// stop cancels the run with cause and returns what it returned; it fails the test if the
// run does not stop within 30 s.
func (r *inProcessRun) stop(t *testing.T, cause error) error {
	t.Helper()
	r.cancel(cause)
	select {
	case err := <-r.done:
		r.done <- err // for a later stop
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
		return nil
	}
}

// startRunInProcess runs the `run` logic in-process with environ (embedded NATS on a free
// port and a temporary store unless environ says otherwise) until the test ends, and
// returns once the bridge has started.
func startRunInProcess(t *testing.T, environ map[string]string) *inProcessRun {
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
	noErr(t, err)
	r := &inProcessRun{logs: &syncBuffer{}, p: p, done: make(chan error, 1)}
	ctx, cancel := context.WithCancelCause(context.Background())
	r.cancel = cancel
	urlc := make(chan string, 1)
	go func() {
		r.done <- runService(ctx, p, newLogger(p.cfg, r.logs, p.replicaID), r.logs, func(u string) { urlc <- u })
	}()
	t.Cleanup(func() { r.stop(t, nil) })
	select {
	case r.url = <-urlc:
		waitFor(t, 20*time.Second, "bridge started", func() bool { return strings.Contains(r.logs.String(), `"bridge started"`) })
		return r
	case err := <-r.done:
		t.Fatalf("run stopped early: %v\n%s", err, r.logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("run did not connect:\n%s", r.logs.String())
	}
	return nil
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
			r := startRunInProcess(t, tt.env)
			logs := r.logs
			code, out, errOut := runMain(context.Background(), map[string]string{"NATS_URL": r.url}, "",
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
