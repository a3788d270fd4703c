package ui_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/bridge/ui"
)

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConfigJSON(t *testing.T) {
	h := ui.New()
	// Before the WebSocket URL is known: 503, not a half-filled config.
	if r := get(t, h, "GET", "/ui/config.json"); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("before Set: %d %q", r.StatusCode, r.Header.Get("Cache-Control"))
	}
	h.Set(ui.Config{Servers: []string{"ws://127.0.0.1:4223"}, Prefix: "hermes", OutputStream: "HERMES_OUTPUT"})
	r := get(t, h, "GET", "/ui/config.json")
	b := body(t, r)
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("config.json: %d %v", r.StatusCode, r.Header)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(b), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"servers": []any{"ws://127.0.0.1:4223"}, "inboxPrefix": "_INBOX_dashboard", "prefix": "hermes",
		"outputStream": "HERMES_OUTPUT", "dlqStream": "HERMES_DLQ", "maxActions": float64(2000), "historyMinutes": float64(60)}
	if len(got) != len(want) {
		t.Fatalf("config.json = %s, want exactly %v", b, want)
	}
	for k, v := range want {
		if gv, _ := json.Marshal(got[k]); string(gv) != mustJSON(t, v) {
			t.Fatalf("config.json %s = %s, want %v (%s)", k, gv, v, b)
		}
	}
	// No credential configured: none in the file.
	for _, k := range []string{"user", "password", "pass", "token"} {
		if _, ok := got[k]; ok {
			t.Fatalf("config.json has %q without a dashboard credential: %s", k, b)
		}
	}
	// A dashboard credential configured for the page: handed over, and only then.
	h.Set(ui.Config{Servers: []string{"wss://nats.example.com"}, User: "dashboard", Password: "pw-dash", Prefix: "hermes", OutputStream: "HERMES_OUTPUT"})
	b = body(t, get(t, h, "GET", "/ui/config.json"))
	if !strings.Contains(b, `"user":"dashboard"`) || !strings.Contains(b, `"password":"pw-dash"`) {
		t.Fatalf("config.json with a credential: %s", b)
	}
}

func TestRoutesAndHeaders(t *testing.T) {
	h := ui.New()
	h.Set(ui.Config{Servers: []string{"ws://127.0.0.1:4223", "wss://nats.example.com:443/path"}})
	csp := "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' ws://127.0.0.1:4223 wss://nats.example.com:443; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"
	for _, tc := range []struct {
		path, ctype string
		status      int
	}{
		{"/ui/", "text/html; charset=utf-8", 200},
		{"/ui/index.html", "text/html; charset=utf-8", 200},
		{"/ui/app.js", "text/javascript; charset=utf-8", 200},
		{"/ui/nats.js", "text/javascript; charset=utf-8", 200},
		{"/ui/app.css", "text/css; charset=utf-8", 200},
		{"/ui/config.json", "application/json", 200},
		{"/ui/missing.js", "", 404},
		{"/ui/../ui.go", "", 404},
		{"/ui", "", http.StatusMovedPermanently},
	} {
		r := get(t, h, "GET", tc.path)
		if r.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, r.StatusCode, tc.status)
		}
		if tc.ctype != "" && r.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, r.Header.Get("Content-Type"), tc.ctype)
		}
		if got := r.Header.Get("Content-Security-Policy"); got != csp {
			t.Errorf("%s: CSP %q\nwant %q", tc.path, got, csp)
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("Referrer-Policy") != "no-referrer" || r.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", tc.path, r.Header)
		}
		if tc.status == 200 && tc.path != "/ui/config.json" && r.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("%s: Cache-Control %q, want no-cache (revalidate by ETag)", tc.path, r.Header.Get("Cache-Control"))
		}
	}
	if r := get(t, h, "GET", "/ui"); r.Header.Get("Location") != "/ui/" {
		t.Errorf("/ui redirects to %q", r.Header.Get("Location"))
	}
	// ETag revalidation.
	r := get(t, h, "GET", "/ui/app.js")
	etag := r.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	if r := get(t, h, "GET", "/ui/app.js", "If-None-Match", etag); r.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %d, want 304", r.StatusCode)
	}
	// Read only: no method but GET and HEAD.
	if r := get(t, h, "POST", "/ui/config.json"); r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", r.StatusCode)
	}
	if r := get(t, h, "HEAD", "/ui/"); r.StatusCode != 200 {
		t.Errorf("HEAD: %d", r.StatusCode)
	}
}

// The CSP ignores servers that are not WebSocket URLs (they would widen connect-src).
func TestCSPOnlyWebSocketServers(t *testing.T) {
	got := ui.CSP([]string{"https://evil.example", "ws://ok:1", "javascript:alert(1)", "wss://"})
	if !strings.Contains(got, "connect-src 'self' ws://ok:1;") {
		t.Fatalf("CSP %q", got)
	}
}

// The page never writes: its script has no publish, request or cancel call, and puts
// wire data in the DOM as text only (no innerHTML, no inline handlers or eval).
func TestPageReadsOnly(t *testing.T) {
	h := ui.New()
	h.Set(ui.Config{Servers: []string{"ws://127.0.0.1:1"}})
	app := body(t, get(t, h, "GET", "/ui/app.js"))
	for _, bad := range []*regexp.Regexp{regexp.MustCompile(`\.publish\(`), regexp.MustCompile(`\.request\(`),
		regexp.MustCompile(`\.publishMessage\(`), regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write`),
		regexp.MustCompile(`\beval\(|new Function\(`)} {
		if bad.MatchString(app) {
			t.Errorf("app.js matches %s", bad)
		}
	}
	index := body(t, get(t, h, "GET", "/ui/"))
	if regexp.MustCompile(`(?i)<script>|\son[a-z]+=|style=`).MatchString(index) {
		t.Errorf("index.html has inline script, handlers or styles (the CSP forbids them)")
	}
	if !strings.Contains(index, `src="app.js"`) || !strings.Contains(index, `href="app.css"`) {
		t.Errorf("index.html does not load app.js and app.css")
	}
	if !strings.Contains(app, `from "./nats.js"`) {
		t.Errorf("app.js does not import the vendored client")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
