package hermestest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// transcript is one recorded exchange from testdata/.
type transcript struct {
	name    string
	method  string
	url     string
	header  http.Header
	body    string
	hasBody bool
	status  int
	rheader http.Header
	rbody   string
}

// shellWords splits a printf-%q style command (backslash escapes only).
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			in = true
		case c == ' ':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

func parseTranscript(t *testing.T, path string) (*transcript, bool) {
	t.Helper()
	raw, err := os.ReadFile(path)
	noErr(t, err)
	lines := strings.Split(strings.ReplaceAll(string(raw), "\r\n", "\n"), "\n")
	tr := &transcript{name: filepath.Base(path), method: "GET", header: http.Header{}, rheader: http.Header{}}
	i := 0
	for ; i < len(lines); i++ {
		if cmd, ok := strings.CutPrefix(lines[i], "### command: "); ok {
			w := shellWords(cmd)
			for j := 1; j < len(w); j++ {
				switch w[j] {
				case "-H":
					j++
					k, v, _ := strings.Cut(w[j], ":")
					tr.header.Add(k, strings.TrimSpace(v))
				case "-d":
					j++
					tr.body, tr.hasBody = w[j], true
					if tr.method == "GET" {
						tr.method = "POST"
					}
				case "-X":
					j++
					tr.method = w[j]
				case "-N", "-sS", "-D", "-":
				default:
					if strings.HasPrefix(w[j], "http") {
						tr.url = w[j]
					}
				}
			}
		}
		if strings.HasPrefix(lines[i], "HTTP/1.1 ") {
			break
		}
	}
	if tr.url == "" || i == len(lines) {
		return nil, false
	}
	fmt.Sscanf(lines[i], "HTTP/1.1 %d", &tr.status)
	for i++; i < len(lines) && lines[i] != ""; i++ {
		k, v, _ := strings.Cut(lines[i], ":")
		tr.rheader.Add(k, strings.TrimSpace(v))
	}
	var body []string
	for i++; i < len(lines) && !strings.HasPrefix(lines[i], "### curl exit"); i++ {
		body = append(body, lines[i])
	}
	tr.rbody = strings.Join(body, "\n")
	return tr, true
}

// shape describes a JSON value's structure: object keys in order (recursively), array element shapes.
func shape(t *testing.T, data []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var b strings.Builder
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch x := tok.(type) {
		case json.Delim:
			if x == '{' {
				b.WriteString("{")
				for dec.More() {
					k, _ := dec.Token()
					fmt.Fprintf(&b, "%s:", k)
					if err := walk(); err != nil {
						return err
					}
					b.WriteString(",")
				}
				dec.Token()
				b.WriteString("}")
			} else {
				b.WriteString("[")
				n := 0
				for dec.More() {
					if n == 0 {
						if err := walk(); err != nil {
							return err
						}
					} else {
						// later elements: same structure expected, not re-described
						var skip json.RawMessage
						if err := dec.Decode(&skip); err != nil {
							return err
						}
					}
					n++
				}
				dec.Token()
				b.WriteString("]")
			}
		case string:
			b.WriteString("s")
		case json.Number:
			b.WriteString("n")
		case bool:
			b.WriteString("b")
		case nil:
			b.WriteString("null")
		}
		return nil
	}
	if err := walk(); err != nil {
		return "!" + string(data)
	}
	return b.String()
}

var idRe = regexp.MustCompile(`(resp_[0-9a-f]{28}|api_\d+_[0-9a-f]{8}|run_[0-9a-f]{32})`)

var (
	tsRe    = regexp.MustCompile(`\b\d{10}\.\d+\b`)
	tokenRe = regexp.MustCompile(`"(input|output|total)_tokens": \d+`)
)

// maskVolatile maps the fake's ids back to the transcript's and masks float
// timestamps and token counts, so that the rest compares byte for byte.
func maskVolatile(got string, ids map[string]string) string {
	for from, to := range ids {
		got = strings.ReplaceAll(got, to, from)
	}
	return tokenRe.ReplaceAllString(tsRe.ReplaceAllString(got, "<ts>"), `"${1}_tokens": <n>`)
}

// collectIDs maps ids found in the transcript body to ids at the same
// position in the fake's body.
func collectIDs(want, got string, m map[string]string) {
	w := idRe.FindAllString(want, -1)
	g := idRe.FindAllString(got, -1)
	for i := 0; i < len(w) && i < len(g); i++ {
		if _, ok := m[w[i]]; !ok {
			m[w[i]] = g[i]
		}
	}
}

func mediaType(v string) string {
	mt, _, _ := strings.Cut(v, ";")
	return strings.TrimSpace(mt)
}

func runConformance(t *testing.T, dir, version string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.txt"))
	sort.Strings(files)
	srv := hermestest.NewServer(hermestest.WithVersion(version))
	defer srv.Close()
	ids := map[string]string{}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, f := range files {
		tr, ok := parseTranscript(t, f)
		if !ok {
			continue
		}
		t.Run(tr.name, func(t *testing.T) {
			u := tr.url[strings.Index(tr.url[8:], "/")+8:]
			body := tr.body
			for from, to := range ids {
				u = strings.ReplaceAll(u, from, to)
				body = strings.ReplaceAll(body, from, to)
			}
			var rd io.Reader
			if tr.hasBody {
				rd = strings.NewReader(body)
			}
			req, _ := http.NewRequest(tr.method, srv.URL+u, rd)
			for k, vs := range tr.header {
				for _, v := range vs {
					req.Header.Add(k, strings.ReplaceAll(v, "$KEY", srv.APIKey()))
				}
			}
			if tr.hasBody && req.Header.Get("Content-Type") == "" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			resp, err := client.Do(req)
			noErr(t, err)
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			noErr(t, err)
			got := string(raw)
			if resp.StatusCode != tr.status {
				t.Fatalf("status %d, transcript %d; body %s", resp.StatusCode, tr.status, got)
			}
			if resp.Header.Get("Content-Type") != tr.rheader.Get("Content-Type") {
				t.Errorf("content type %q, transcript %q", resp.Header.Get("Content-Type"), tr.rheader.Get("Content-Type"))
			}
			for _, h := range []string{"X-Content-Type-Options", "Content-Security-Policy", "Cache-Control", "X-Accel-Buffering", "X-Hermes-Session-Id", "Retry-After"} {
				if (resp.Header.Get(h) == "") != (tr.rheader.Get(h) == "") {
					t.Errorf("header %s: got %q, transcript %q", h, resp.Header.Get(h), tr.rheader.Get(h))
				}
			}
			collectIDs(tr.rbody, got, ids)
			if strings.HasPrefix(tr.name, "4") { // runs: every byte but ids, timestamps and token counts
				if a, b := maskVolatile(got, ids), maskVolatile(tr.rbody, nil); a != b {
					t.Errorf("masked body:\n got  %q\n want %q", a, b)
				}
				for _, h := range []string{"Content-Type", "Cache-Control", "X-Accel-Buffering", "X-Frame-Options", "Referrer-Policy", "Strict-Transport-Security", "Permissions-Policy", "X-XSS-Protection"} {
					if resp.Header.Get(h) != tr.rheader.Get(h) {
						t.Errorf("header %s: got %q, transcript %q", h, resp.Header.Get(h), tr.rheader.Get(h))
					}
				}
				if cl := tr.rheader.Get("Content-Length"); cl != "" && tr.name != "42_runs_get.txt" && resp.Header.Get("Content-Length") != cl {
					t.Errorf("Content-Length %q, transcript %q", resp.Header.Get("Content-Length"), cl)
				}
				if te := tr.rheader.Get("Transfer-Encoding"); te != "" && (len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != te) {
					t.Errorf("Transfer-Encoding %v, transcript %q", resp.TransferEncoding, te)
				}
			}
			if mediaType(tr.rheader.Get("Content-Type")) == "text/event-stream" {
				wf, gf := sseFrames(tr.rbody), sseFrames(got)
				if len(wf) != len(gf) {
					t.Fatalf("%d SSE frames, transcript %d:\n%s", len(gf), len(wf), got)
				}
				for i := range wf {
					if wf[i].event != gf[i].event {
						t.Errorf("frame %d: event %q, transcript %q", i, gf[i].event, wf[i].event)
					}
					if wf[i].data == "[DONE]" || gf[i].data == "[DONE]" {
						if wf[i].data != gf[i].data {
							t.Errorf("frame %d: data %q, transcript %q", i, gf[i].data, wf[i].data)
						}
						continue
					}
					if a, b := shape(t, []byte(gf[i].data)), shape(t, []byte(wf[i].data)); a != b {
						t.Errorf("frame %d shape:\n got  %s\n want %s", i, a, b)
					}
				}
				return
			}
			if a, b := shape(t, raw), shape(t, []byte(tr.rbody)); a != b {
				t.Errorf("body shape:\n got  %s\n want %s\n body %s", a, b, got)
			}
			// Volatile-free bodies must match byte for byte.
			switch tr.name {
			case "01_health.txt", "03_models_noauth.txt", "03b_models_wrongkey.txt", "02_health_detailed_nokey.txt",
				"05_capabilities.txt", "13_chat_completions_badjson.txt", "14_chat_completions_wrongkey.txt":
				if got != tr.rbody {
					t.Errorf("body:\n got  %s\n want %s", got, tr.rbody)
				}
			}
		})
	}
}

func TestConformanceV019(t *testing.T) { runConformance(t, "v0.19", hermestest.Version019) }
func TestConformanceV016(t *testing.T) { runConformance(t, "v0.16", hermestest.Version016) }

// TestConcurrencyGate reproduces 60_concurrency_chat_completions.txt: 14
// parallel chats against a slow agent give 10x200 and 4x429 Retry-After: 1.
func TestConcurrencyGate(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, blockingAgent(release))
	results := make(chan result, 14)
	for i := range 14 {
		go func() {
			results <- do(t, srv, "POST", "/v1/chat/completions", fmt.Sprintf(`{"model":"hermes-agent","messages":[{"role":"user","content":"req %d"}]}`, i))
		}()
	}
	const want429 = `{"error": {"message": "Too many concurrent runs (max 10)", "type": "rate_limit_error", "param": null, "code": "rate_limit_exceeded"}}`
	for i := range 4 {
		if r := <-results; r.status != 429 || r.header.Get("Retry-After") != "1" || r.body != want429 {
			t.Fatalf("early result %d: %+v", i, r)
		}
	}
	noErr(t, srv.WaitInFlight(testCtx(t), 10))
	close(release)
	for range 10 {
		if r := <-results; r.status != 200 || r.header.Get("Retry-After") != "" {
			t.Errorf("late result: %+v", r)
		}
	}
	if srv.Calls("chat") != 14 {
		t.Errorf("Calls(chat)=%d", srv.Calls("chat"))
	}
}
