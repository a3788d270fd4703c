package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("FAKE_HERMES_KEY", "env-key-0123456789abcdef")
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.addr != "127.0.0.1:8642" || o.key != "env-key-0123456789abcdef" || o.hermesVersion != "0.19.0" || o.maxRuns != -1 || o.keepalive != 30*time.Second {
		t.Errorf("defaults %+v", o)
	}
	o, err = parseFlags([]string{"--key", "flag-key-0123456789abcdef", "--hermes-version", "0.16.0", "--max-concurrent-runs", "3", "--deltas", "4", "--delta-delay", "5ms"}, io.Discard)
	if err != nil || o.key != "flag-key-0123456789abcdef" || o.hermesVersion != "0.16.0" || o.maxRuns != 3 || o.deltas != 4 || o.deltaDelay != 5*time.Millisecond {
		t.Errorf("flags %+v %v", o, err)
	}
	if o, err = parseFlags([]string{"--hermes-version", "0.21.3"}, io.Discard); err != nil || o.hermesVersion != "0.21.3" {
		t.Errorf("--hermes-version 0.21.3: %+v %v", o, err)
	}
	for _, bad := range [][]string{{"--hermes-version", "1.0"}, {"--key", "short"}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("help err %v", err)
	}
	for _, want := range []string{"Examples:", "-addr", "-max-concurrent-runs", "FAKE_HERMES_KEY", "0.21.3"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
}

func TestRun(t *testing.T) {
	o, err := parseFlags([]string{"--addr", "127.0.0.1:0", "--key", "run-key-0123456789abcdef", "--deltas", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, func(u string) { urls <- u }) }()
	url := <-urls
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `{"status": "ok", "platform": "hermes-agent", "version": "0.19.0"}` {
		t.Errorf("health %s", b)
	}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"a b c d"}]}`))
	req.Header.Set("Authorization", "Bearer run-key-0123456789abcdef")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := strings.Count(string(b), `"delta": {"content": `); n != 2 {
		t.Errorf("%d content deltas, want 2:\n%s", n, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHelpText: every default is printed once, and the curl example works as pasted
// against the defaults (it used $FAKE_HERMES_KEY, usually unset) (issue 13).
func TestHelpText(t *testing.T) {
	t.Setenv("FAKE_HERMES_KEY", "")
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("help err %v", err)
	}
	h := help.String()
	for _, line := range strings.Split(h, "\n") {
		if strings.Count(line, "default") > 1 {
			t.Errorf("a default is printed twice: %q", line)
		}
	}
	if strings.Contains(h, "$FAKE_HERMES_KEY\"") || !strings.Contains(h, "Bearer "+hermestest.DefaultAPIKey) {
		t.Errorf("the curl example does not use the default key:\n%s", h)
	}
	for _, want := range []string{"FAKE_HERMES_KEY", "FAKE_HERMES_ADDR", hermestest.DefaultAPIKey, "127.0.0.1:8642"} {
		if !strings.Contains(h, want) {
			t.Errorf("help lacks %q:\n%s", want, h)
		}
	}
}

// TestStartLines: on start fake-hermes prints the line to paste into the bridge's
// terminal: the key when it is the public default (HERMES_URL only when the address is
// not the bridge's default), never a key given by the user.
func TestStartLines(t *testing.T) {
	for _, tt := range []struct {
		name, addrEnv, keyEnv string
		args                  []string
		url                   string
		want, not             string
	}{
		{"defaults", "", "", nil, "http://127.0.0.1:8642",
			"export HERMES_API_KEY=" + hermestest.DefaultAPIKey + "\n", "HERMES_URL"},
		{"other port", "", "", []string{"--addr", "127.0.0.1:0"}, "http://127.0.0.1:40123",
			"export HERMES_URL=http://127.0.0.1:40123 HERMES_API_KEY=" + hermestest.DefaultAPIKey + "\n", ""},
		{"address from the environment", "127.0.0.1:0", "", nil, "http://127.0.0.1:40124",
			"export HERMES_URL=http://127.0.0.1:40124 HERMES_API_KEY=" + hermestest.DefaultAPIKey + "\n", ""},
		{"key from the environment", "", "env-key-0123456789abcdef", nil, "http://127.0.0.1:8642",
			`export HERMES_API_KEY="$FAKE_HERMES_KEY"` + "\n", "env-key-0123456789abcdef"},
		{"key from the flag", "", "", []string{"--key", "flag-key-0123456789abcdef"}, "http://127.0.0.1:8642",
			"export HERMES_API_KEY=<the --key value>\n", "flag-key-0123456789abcdef"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("FAKE_HERMES_ADDR", tt.addrEnv)
			t.Setenv("FAKE_HERMES_KEY", tt.keyEnv)
			o, err := parseFlags(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			got := startLines(o, tt.url)
			if !strings.Contains(got, "listening on "+tt.url) || !strings.HasSuffix(got, tt.want) {
				t.Errorf("start lines:\n%s\nwant the URL and a last line %q", got, tt.want)
			}
			if tt.not != "" && strings.Contains(got, tt.not) {
				t.Errorf("start lines contain %q:\n%s", tt.not, got)
			}
		})
	}
}
