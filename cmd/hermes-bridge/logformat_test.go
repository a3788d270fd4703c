package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestRunLogFormat (issue 26, item 13): run logs JSON when stderr is not a terminal
// (auto, the default), with the whole configuration first; the console format, forced
// or on a terminal, starts with a short line of the settings that differ from their
// defaults. Secrets appear in neither.
func TestRunLogFormat(t *testing.T) {
	started := func(r *asyncRun) string {
		t.Helper()
		waitFor(t, 30*time.Second, "the bridge started", func() bool {
			select {
			case <-r.stopped:
				t.Fatalf("run stopped: %v\n%s", r.err, r.logs.String())
			default:
			}
			return strings.Contains(r.logs.String(), "bridge started")
		})
		return r.logs.String()
	}
	env := map[string]string{"HERMES_BRIDGE_NATS_PORT": "-1", "HERMES_BRIDGE_REPLICAS": "1", "HERMES_BRIDGE_WORKERS": "3",
		"HERMES_API_KEY": "key-SECRET-0123456789"}

	logs := started(startRunAsync(t, env))
	first, _, _ := strings.Cut(logs[strings.Index(logs, "{"):], "\n")
	var line struct {
		Msg    string         `json:"message"`
		Config map[string]any `json:"config"`
	}
	if err := json.Unmarshal([]byte(first), &line); err != nil || line.Msg != "starting hermes-bridge" || line.Config["HERMES_BRIDGE_ACK_WAIT"] != "30s" {
		t.Fatalf("auto on a buffer: first line %s (%v)", first, err)
	}

	env["HERMES_BRIDGE_LOG_FORMAT"] = "console"
	logs = started(startRunAsync(t, env))
	first, _, _ = strings.Cut(logs, "\n")
	if !strings.Contains(first, "starting hermes-bridge (settings that differ from the defaults") ||
		!strings.Contains(first, `"HERMES_BRIDGE_WORKERS":3`) || strings.Contains(first, "HERMES_BRIDGE_ACK_WAIT") ||
		strings.Contains(first, "HERMES_BRIDGE_REPLICAS") || len(first) > 700 {
		t.Errorf("console: first line (%d bytes):\n%s", len(first), first)
	}
	if strings.Contains(logs, "SECRET") || strings.HasPrefix(strings.TrimSpace(logs), "{") {
		t.Errorf("console logs:\n%s", logs)
	}
}
