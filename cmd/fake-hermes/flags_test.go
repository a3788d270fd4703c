package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestVersionFlag: --version prints fake-hermes's own version (as hermes-bridge version
// does) and exits 0; the old --version <hermes version> says to use --hermes-version.
func TestVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := cli(t.Context(), []string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("--version exit %d: %s", code, errb.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "fake-hermes ") || !strings.Contains(got, runtime.Version()) || strings.Contains(got, hermestest.Version019) {
		t.Errorf("--version printed %q, want fake-hermes's own version line", got)
	}
	out.Reset()
	errb.Reset()
	if code := cli(t.Context(), []string{"--version", "0.16.0"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--hermes-version 0.16.0") {
		t.Errorf("--version 0.16.0: exit %d, %q; want 2 and a pointer to --hermes-version", code, errb.String())
	}
}

func TestVersionFrom(t *testing.T) {
	for _, c := range []struct {
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{"v1.2.3", nil, "v1.2.3 "},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0 "},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}}, "dev (0123456789ab, modified) "},
	} {
		if got := versionFrom(c.stamped, c.bi); !strings.HasPrefix(got, c.want) {
			t.Errorf("versionFrom(%q) = %q, want it to start %q", c.stamped, got, c.want)
		}
	}
}

func TestParseFault(t *testing.T) {
	for spec, want := range map[string]hermestest.Fault{
		"status=500":                     {Status: 500},
		"route=chat_stream,after=3,drop": {Route: "chat_stream", AfterEvents: 3, Drop: true},
		"delay=2s,times=every":           {Delay: 2 * time.Second, Times: math.MaxInt},
		"route=chat,status=429,times=2":  {Route: "chat", Status: 429, Times: 2},
		"reset":                          {Reset: true},
		"after=1,stall":                  {AfterEvents: 1, Stall: true},
		"malformed, oversized=70000":     {Malformed: true, Oversized: 70000},
	} {
		got, err := parseFault(spec)
		if err != nil || got.Route != want.Route || got.Times != want.Times || got.Delay != want.Delay || got.Status != want.Status ||
			got.Reset != want.Reset || got.AfterEvents != want.AfterEvents || got.Drop != want.Drop || got.Stall != want.Stall ||
			got.Malformed != want.Malformed || got.Oversized != want.Oversized {
			t.Errorf("parseFault(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for _, bad := range []string{"", "route=chat", "status=99", "status=five", "drop=1", "route=", "times=-1", "delay=soon", "bogus", "oversized=0"} {
		if _, err := parseFault(bad); err == nil {
			t.Errorf("parseFault(%q) accepted", bad)
		}
	}
	if _, err := parseFlags([]string{"--fault", "bogus"}, io.Discard); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("--fault bogus: %v", err)
	}
}

// startFake runs fake-hermes with args on a free loopback port until the test ends and
// returns its base URL and start lines.
func startFake(t *testing.T, args ...string) (string, string) {
	t.Helper()
	o, err := parseFlags(append([]string{"--addr", "127.0.0.1:0"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, func(u string) { urls <- u }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case u := <-urls:
		return u, startLines(o, u)
	case err := <-done:
		t.Fatalf("fake-hermes: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("fake-hermes did not listen within 10s")
	}
	return "", ""
}

// post sends an authorized request with the default key and returns the response.
func post(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+hermestest.DefaultAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestApprovalFlag: with --approval, a run (/v1/runs, what hermes-bridge's run
// operation posts) plays the terminal tool and stops at approval.request until a
// decision comes, then completes; the start lines say so.
func TestApprovalFlag(t *testing.T) {
	url, lines := startFake(t, "--approval", "rm -rf build/")
	if !strings.Contains(lines, "rm -rf build/; a run (/v1/runs) waits for its approval") {
		t.Errorf("start lines do not announce the approval:\n%s", lines)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := post(t, ctx, url+"/v1/runs", `{"input":"clean the build"}`)
	var started struct {
		RunID string `json:"run_id"`
	}
	err := json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted || started.RunID == "" {
		t.Fatalf("POST /v1/runs: %d %+v %v", resp.StatusCode, started, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/runs/"+started.RunID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+hermestest.DefaultAPIKey)
	evResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer evResp.Body.Close()
	sc := bufio.NewScanner(evResp.Body)
	readUntil := func(what string) string {
		t.Helper()
		var seen strings.Builder
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), what) {
				return seen.String()
			}
		}
		t.Fatalf("the run's events ended (%v) before %q:\n%s", sc.Err(), what, seen.String())
		return ""
	}
	if seen := readUntil("approval.request"); !strings.Contains(seen, "tool.started") || !strings.Contains(seen, "rm -rf build/") {
		t.Fatalf("before approval.request, no tool.started for the command:\n%s", seen)
	}
	ar := post(t, ctx, url+"/v1/runs/"+started.RunID+"/approval", `{"choice":"once"}`)
	ar.Body.Close()
	if ar.StatusCode != http.StatusOK {
		t.Fatalf("approval: %d", ar.StatusCode)
	}
	readUntil("run.completed")
}

// TestFaultFlags: --fault plays its effect on the next matching requests, then the
// fake answers normally; the start lines list the faults.
func TestFaultFlags(t *testing.T) {
	url, lines := startFake(t, "--fault", "route=chat,status=500", "--fault", "route=chat_stream,after=2,drop",
		"--fault", "route=health,delay=300ms", "--fault", "route=models,reset")
	for _, want := range []string{"fault: the next chat request: HTTP 500", "fault: the next chat_stream request: dropped after 2 events",
		"fault: the next health request: headers after 300ms", "fault: the next models request: connection reset"} {
		if !strings.Contains(lines, want) {
			t.Errorf("start lines lack %q:\n%s", want, lines)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chat := `{"messages":[{"role":"user","content":"a b c d e f"}]}`
	for i, want := range []int{500, 200} {
		resp := post(t, ctx, url+"/v1/chat/completions", chat)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("chat %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	stream := `{"stream":true,"messages":[{"role":"user","content":"a b c d e f"}]}`
	for i, wantDone := range []bool{false, true} {
		resp := post(t, ctx, url+"/v1/chat/completions", stream)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if done := err == nil && strings.Contains(string(b), "[DONE]"); done != wantDone {
			t.Errorf("chat_stream %d: complete %v (%v), want %v:\n%s", i, done, err, wantDone, b)
		}
	}
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := time.Since(start); d < 300*time.Millisecond || resp.StatusCode != 200 {
		t.Errorf("health with a 300ms delay: %d after %s", resp.StatusCode, d)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+hermestest.DefaultAPIKey)
	// A new connection: net/http resends a request that failed on a reused one.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := fresh.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("models with a reset: %d, want the connection closed", resp.StatusCode)
	}
}

// TestSlowStreamFlags: --deltas, --delta-delay and --delay shape every stream.
func TestSlowStreamFlags(t *testing.T) {
	url, _ := startFake(t, "--deltas", "3", "--delta-delay", "100ms", "--delay", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	resp := post(t, ctx, url+"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"a b c d e f"}]}`)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"delta": {"content": `); n != 3 {
		t.Errorf("%d content deltas, want 3:\n%s", n, b)
	}
	if d := time.Since(start); d < 400*time.Millisecond { // 200ms think time, then two gaps of 100ms
		t.Errorf("the stream took %s, want at least 400ms", d)
	}
}
