package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestUnknownVariables (issue 13): HERMES_* and NATS_* variables that no setting reads
// are reported, with the setting they most likely misspell; the known names are the
// Config struct tags (plus the variables an endpoints file names).
func TestUnknownVariables(t *testing.T) {
	environ := map[string]string{
		"HERMES_BRIDGE_ACK_WIAT":  "1s",          // transposition
		"HERMES_BRIDGE_WORKER":    "3",           // a letter missing
		"HERMES_APIKEY":           "secret-key",  // an underscore missing
		"HERMES_NATS_PORT":        "4333",        // BRIDGE_ missing
		"HERMES_BRIDGE_NATS_URL":  "nats://x:1",  // BRIDGE_ too much
		"HERMES_HOME":             "/opt/hermes", // someone else's: nothing close
		"NATS_CA":                 "ca.pem",      // natscli's name of NATS_TLS_CA
		"HERMES_URL":              "http://x",    // known
		"NATS_URL":                "nats://x",    // known
		"HERMES_RESEARCH_KEY":     "k",           // named by the endpoints file
		"PATH":                    "/usr/bin",    // not ours
		"hermes_url":              "http://x",    // not ours (names are case-sensitive)
		"HERMES_BRIDGE_LOG_LEVEL": "debug",       // known
	}
	got := unknownVariables(environ, []EndpointSpec{{APIKeyEnv: "HERMES_RESEARCH_KEY"}})
	want := []unknownVar{
		{"HERMES_APIKEY", "HERMES_API_KEY"},
		{"HERMES_BRIDGE_ACK_WIAT", "HERMES_BRIDGE_ACK_WAIT"},
		{"HERMES_BRIDGE_NATS_URL", "NATS_URL"},
		{"HERMES_BRIDGE_WORKER", "HERMES_BRIDGE_WORKERS"},
		{"HERMES_HOME", ""},
		{"HERMES_NATS_PORT", "HERMES_BRIDGE_NATS_PORT"},
		{"NATS_CA", "NATS_TLS_CA"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("unknownVariables =\n  %v\nwant\n  %v", got, want)
	}
	// Every variable of the Config struct is known: no hand-written list to forget.
	all := map[string]string{}
	for _, f := range configFields() {
		all[f.Key] = "x"
	}
	if got := unknownVariables(all, nil); len(got) != 0 {
		t.Errorf("settings reported as unknown: %v", got)
	}
}

// TestRunReportsUnknownVariables: `run` logs one warning per unknown variable, naming
// it and the likely setting, never its value, and starts all the same.
func TestRunReportsUnknownVariables(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	logs := startRunInProcess(t, map[string]string{
		"HERMES_URL": "http://127.0.0.1:1", "HERMES_BRIDGE_SHUTDOWN_GRAC": "1s", "HERMES_API_KEI": "MARKER-SECRET-0123456789",
	}).logs
	found := map[string]string{}
	for _, l := range strings.Split(logs.String(), "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) != nil || line["variable"] == nil {
			continue
		}
		if line["level"] != "warn" {
			t.Errorf("not a warning: %s", l)
		}
		v, _ := line["variable"].(string)
		s, _ := line["did_you_mean"].(string)
		found[v] = s
		if msg, _ := line["message"].(string); !strings.Contains(msg, v) || !strings.Contains(msg, "ignored") || !strings.Contains(msg, s) {
			t.Errorf("message %q", msg)
		}
	}
	if found["HERMES_BRIDGE_SHUTDOWN_GRAC"] != "HERMES_BRIDGE_SHUTDOWN_GRACE" || found["HERMES_API_KEI"] != "HERMES_API_KEY" || len(found) != 2 {
		t.Errorf("reported %v", found)
	}
	if strings.Contains(logs.String(), "MARKER-SECRET") {
		t.Errorf("a value was logged")
	}
}
