package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
)

// TestShutdownSignalLogged (issue 13): the moment SIGINT or SIGTERM arrives, run logs
// which signal, the grace period with its unit and what happens next, instead of up to
// 30 s of silence.
func TestShutdownSignalLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	r := startRunInProcess(t, map[string]string{"HERMES_BRIDGE_SHUTDOWN_GRACE": "2s", "HERMES_URL": "http://127.0.0.1:1"})
	noErr(t, r.stop(t, signalReceived{syscall.SIGINT}))
	logs := r.logs
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"signal"`) {
			noErr(t, json.Unmarshal([]byte(l), &line))
			break
		}
	}
	msg, _ := line["message"].(string)
	if line["signal"] != "SIGINT" || line["grace"] != "2s" || !strings.HasPrefix(msg, "SIGINT received") {
		t.Fatalf("signal line %v; logs:\n%s", line, logs.String())
	}
	for _, want := range []string{"2s", "HERMES_BRIDGE_SHUTDOWN_GRACE", "again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("signal line %q lacks %q", msg, want)
		}
	}
	if i, j := strings.Index(logs.String(), `"signal"`), strings.Index(logs.String(), `"bridge stopped"`); i < 0 || j < i {
		t.Errorf("the signal line does not come before \"bridge stopped\":\n%s", logs.String())
	}
}
