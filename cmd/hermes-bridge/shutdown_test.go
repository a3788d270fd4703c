package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShutdownSignalLogged (issue 13): the moment SIGINT or SIGTERM arrives, run logs
// which signal, the grace period with its unit and what happens next, instead of up to
// 30 s of silence.
func TestShutdownSignalLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	p, err := prepareRun(map[string]string{
		"HERMES_BRIDGE_DATA_DIR": t.TempDir(), "HERMES_BRIDGE_NATS_PORT": "-1",
		"HERMES_BRIDGE_SHUTDOWN_GRACE": "2s", "HERMES_URL": "http://127.0.0.1:1",
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- runService(ctx, p, newLogger(p.cfg, logs, p.replicaID), logs, nil) }()
	waitFor(t, 20*time.Second, "bridge started", func() bool { return strings.Contains(logs.String(), `"bridge started"`) })
	cancel(signalReceived{syscall.SIGINT})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"signal"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
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
