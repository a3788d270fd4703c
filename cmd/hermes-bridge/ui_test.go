package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestUIEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, true}, // embedded server
		{map[string]string{"NATS_URL": "nats://n:4222"}, false},
		{map[string]string{"NATS_URL": "nats://n:4222", "HERMES_BRIDGE_UI_NATS_URL": "wss://n:443"}, true},
		{map[string]string{"HERMES_BRIDGE_UI": "false"}, false},
		{map[string]string{"HERMES_BRIDGE_HTTP_ADDR": ""}, false},
		{map[string]string{"HERMES_BRIDGE_UI": "true", "NATS_URL": "nats://n:4222", "HERMES_BRIDGE_UI_NATS_URL": "wss://n"}, true},
	} {
		if got := mustLoadConfig(t, tc.env).uiEnabled(); got != tc.want {
			t.Errorf("%v: uiEnabled %v, want %v", tc.env, got, tc.want)
		}
	}
}

func TestValidateUI(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "dash.pw")
	noErr(t, os.WriteFile(pw, []byte("dash-secret\n"), 0o600))
	for _, tc := range []struct {
		env  map[string]string
		want string // "" = valid
	}{
		{map[string]string{}, ""},
		{map[string]string{"HERMES_BRIDGE_UI": "maybe"}, "HERMES_BRIDGE_UI=maybe: must be auto, true or false"},
		{map[string]string{"HERMES_BRIDGE_UI": "true", "NATS_URL": "nats://n:4222"}, "set HERMES_BRIDGE_UI_NATS_URL"},
		{map[string]string{"HERMES_BRIDGE_UI": "true", "HERMES_BRIDGE_HTTP_ADDR": ""}, "HERMES_BRIDGE_HTTP_ADDR is empty"},
		{map[string]string{"HERMES_BRIDGE_UI_NATS_URL": "nats://n:4222"}, "must be a ws:// or wss:// URL"},
		{map[string]string{"HERMES_BRIDGE_UI_NATS_URL": "wss://u:p@n:443"}, "without credentials"},
		{map[string]string{"HERMES_BRIDGE_UI_NATS_URL": "wss://n:443, ws://m:80"}, ""},
		{map[string]string{"HERMES_BRIDGE_UI_WS_PORT": "0"}, "HERMES_BRIDGE_UI_WS_PORT=0"},
		{map[string]string{"HERMES_BRIDGE_UI_NATS_USER": "dashboard"}, "must be set together"},
		{map[string]string{"HERMES_BRIDGE_UI_NATS_USER": "dashboard", "HERMES_BRIDGE_UI_NATS_PASSWORD_FILE": pw + ".missing"}, "file does not exist"},
		{map[string]string{"HERMES_BRIDGE_UI_NATS_USER": "dashboard", "HERMES_BRIDGE_UI_NATS_PASSWORD_FILE": pw}, ""},
		{map[string]string{"HERMES_BRIDGE_UI_INBOX_PREFIX": "_INBOX.>"}, "HERMES_BRIDGE_UI_INBOX_PREFIX"},
	} {
		var p ConfigError
		mustLoadConfig(t, tc.env).validateUI(&p)
		got := strings.Join(p.Problems, "\n")
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%v: problems %q, want %q", tc.env, got, tc.want)
		}
		if strings.Contains(got, "dash-secret") {
			t.Errorf("a problem shows the password: %s", got)
		}
	}
}

// The page's config never carries the bridge's own NATS credentials or a Hermes key;
// the dashboard credential only when one is configured for the page.
func TestUIConfigSecrets(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "dash.pw")
	noErr(t, os.WriteFile(pw, []byte("dash-secret\n"), 0o600))
	bridgeSecrets := map[string]string{
		"NATS_URL": "nats://bridge:url-secret@n:4222", "NATS_USER": "bridge", "NATS_PASSWORD": "bridge-secret",
		"HERMES_API_KEY": "hermes-key-0123456789", "HERMES_BRIDGE_UI_NATS_URL": "wss://nats.example.com:443",
	}
	uc, err := mustLoadConfig(t, bridgeSecrets).uiConfig("")
	noErr(t, err)
	b, _ := json.Marshal(uc)
	for _, s := range []string{"bridge-secret", "url-secret", "hermes-key", `"user"`, `"password"`} {
		if strings.Contains(string(b), s) {
			t.Fatalf("config.json %s contains %q", b, s)
		}
	}
	if !slices.Equal(uc.Servers, []string{"wss://nats.example.com:443"}) || uc.InboxPrefix != "_INBOX_dashboard" || uc.Prefix != "hermes" || uc.OutputStream != "HERMES_OUTPUT" {
		t.Fatalf("config %+v", uc)
	}
	// The embedded server's WebSocket URL when none is configured.
	if uc, _ := mustLoadConfig(t, map[string]string{}).uiConfig("ws://127.0.0.1:4223"); !slices.Equal(uc.Servers, []string{"ws://127.0.0.1:4223"}) {
		t.Fatalf("embedded: servers %v", uc.Servers)
	}
	// A parked action may wait longer than the hour the page replays: it replays that long.
	if uc, _ := mustLoadConfig(t, map[string]string{"HERMES_BRIDGE_APPROVAL_TTL": "2h30m"}).uiConfig("ws://h:1"); uc.HistoryMinutes != 150 {
		t.Fatalf("history %d minutes with a 2h30m approval TTL, want 150", uc.HistoryMinutes)
	}
	withUser := map[string]string{"HERMES_BRIDGE_UI_NATS_USER": "dashboard", "HERMES_BRIDGE_UI_NATS_PASSWORD_FILE": pw}
	for k, v := range bridgeSecrets {
		withUser[k] = v
	}
	uc, err = mustLoadConfig(t, withUser).uiConfig("")
	if err != nil || uc.User != "dashboard" || uc.Password != "dash-secret" {
		t.Fatalf("with a dashboard credential: %+v %v", uc, err)
	}
	b, _ = json.Marshal(uc)
	for _, s := range []string{"bridge-secret", "url-secret", "hermes-key"} {
		if strings.Contains(string(b), s) {
			t.Fatalf("config.json %s contains %q", b, s)
		}
	}
	// The startup dump redacts nothing new, and shows no password file content.
	dump, _ := json.Marshal(mustLoadConfig(t, withUser).Dump(nil))
	if strings.Contains(string(dump), "dash-secret") {
		t.Fatalf("config dump shows the dashboard password: %s", dump)
	}
}

func TestUIOrigins(t *testing.T) {
	loop := []string{"http://127.0.0.1:9464", "http://localhost:9464", "http://[::1]:9464"}
	for addr, want := range map[string][]string{
		"127.0.0.1:9464": loop,
		"0.0.0.0:9464":   loop,
		"[::]:9464":      loop,
		"10.1.2.3:9464":  append(slices.Clone(loop), "http://10.1.2.3:9464"),
		"ops.local:9464": append(slices.Clone(loop), "http://ops.local:9464"),
		"nonsense":       nil,
	} {
		if got := uiOrigins(addr); !slices.Equal(got, want) {
			t.Errorf("uiOrigins(%q) = %v, want %v", addr, got, want)
		}
	}
}
