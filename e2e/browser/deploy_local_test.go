package browser

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats-server/v2/server"
)

// trySection returns the fenced sh blocks of deploy/README.md's "Trying it locally", in
// order, each as its text.
func trySection(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Trying it locally\n")
	if !ok {
		t.Fatal("deploy/README.md has no section \"### Trying it locally\"")
	}
	if i := regexp.MustCompile(`\n#{2,3} `).FindStringIndex(section); i != nil {
		section = section[:i[0]] // up to the next heading of its level or above
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatal("\"Trying it locally\" has no sh block")
	}
	return blocks
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

var (
	fakeOnce sync.Once
	fakeErr  error
)

// fakeHermesBinary builds ./cmd/fake-hermes of the repository next to the
// hermes-bridge binary (bridgeBinary) on first use and returns their directory.
func fakeHermesBinary(t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Dir(bridgeBinary(t))
	fakeOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "fake-hermes"), "./cmd/fake-hermes")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fakeErr = fmt.Errorf("go build ./cmd/fake-hermes: %w\n%s", err, out)
		}
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return dir
}

// shellBlock is one block run by bash in its own process group, in a terminal of its
// own.
type shellBlock struct {
	text string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// runBlock starts text in bash (set -euo pipefail) in dir with env; the process group is
// stopped at the end of the test (SIGTERM, then SIGKILL after 30 s).
func runBlock(t *testing.T, dir string, env []string, text string) *shellBlock {
	t.Helper()
	b := &shellBlock{text: text, out: &syncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command("bash", "-c", "set -euo pipefail\n"+text)
	b.cmd.Dir, b.cmd.Env, b.cmd.Stdout, b.cmd.Stderr = dir, env, b.out, b.out
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
		if t.Failed() {
			t.Logf("block\n%s\noutput:\n%s", b.text, b.out)
		}
	})
	return b
}

// wait waits for the block to end and fails unless it exited 0.
func (b *shellBlock) wait(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(d):
		t.Fatalf("block\n%s\ndid not finish within %s:\n%s", b.text, d, b.out)
	}
	if b.err != nil {
		t.Fatalf("block\n%s\nfailed: %v\n%s", b.text, b.err, b.out)
	}
	return b.out.String()
}

// until waits until the block's output contains want; it fails if the block ends first.
func (b *shellBlock) until(t *testing.T, d time.Duration, want string) {
	t.Helper()
	waitFor(t, d, fmt.Sprintf("%q from\n%s", want, b.text), func() bool {
		select {
		case <-b.done:
			if !strings.Contains(b.out.String(), want) {
				t.Fatalf("block\n%s\nended (%v) before printing %q:\n%s", b.text, b.err, want, b.out)
			}
		default:
		}
		return strings.Contains(b.out.String(), want)
	})
}

// TestTryingItLocally runs deploy/README.md's "Trying it locally" as pasted, block by
// block, each in a terminal of its own: the passwords file; the server, from the
// documented command line through nats-server's own parsing, in this process; the
// fake Hermes; the bridge as the bridge user with its dashboard; a second replica; a
// streamed chat as agent-chat. Every port the blocks name is moved to a free one, and the
// WebSocket listener's allowed_origins with them. The bridges must start with their
// dashboards and a Hermes key (the one the fake prints); both pages connect as the
// dashboard user; a page served from an origin the listener does not list says why it
// was refused and what to change (the browser parts need Chromium).
func TestTryingItLocally(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documented commands with the hermes-bridge and fake-hermes binaries")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks := trySection(t, root)
	bin := fakeHermesBinary(t, root)
	work := t.TempDir() // the blocks write data/ here, as they would in the repository
	if err := os.Symlink(filepath.Join(root, "deploy"), filepath.Join(work, "deploy")); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"HERMES_BRIDGE_SHUTDOWN_GRACE=2s"}

	// The documented ports, each moved to a free one: NATS, its WebSocket listener, the
	// fake Hermes, and the two replicas' operations listeners.
	ports := map[string]int{"4333": freePort(t), "4343": freePort(t), "8643": freePort(t), "9465": freePort(t), "9466": freePort(t)}
	hostPort := regexp.MustCompile(`127\.0\.0\.1:(\d+)`)
	mapPorts := func(text string) string {
		return hostPort.ReplaceAllStringFunc(text, func(hp string) string {
			p := strings.TrimPrefix(hp, "127.0.0.1:")
			n, ok := ports[p]
			if !ok {
				t.Fatalf("the blocks name 127.0.0.1:%s, a port this test does not move: add it to the test's map", p)
			}
			return "127.0.0.1:" + strconv.Itoa(n)
		})
	}

	var setup, natsCmd, fake, call string
	var bridges []string
	serverLine := regexp.MustCompile(`(?m)^go run github\.com/nats-io/nats-server/v2 (-c deploy/nats-server-local\.conf)$`)
	for _, b := range blocks {
		switch {
		case strings.Contains(b, "openssl rand"):
			setup = b
		case serverLine.MatchString(b):
			natsCmd = serverLine.FindStringSubmatch(b)[1]
		case strings.Contains(b, "nats-server-teams-local.conf"): // e2e/deploy_local_test.go parses it
		case regexp.MustCompile(`(?m)^fake-hermes\b`).MatchString(b):
			fake = b
		case strings.Contains(b, "hermes-bridge run"):
			bridges = append(bridges, b)
		case strings.Contains(b, "hermes-bridge call"):
			call = b
		default:
			t.Fatalf("a block this test does not know how to run:\n%s", b)
		}
	}
	if setup == "" || natsCmd == "" || fake == "" || call == "" || len(bridges) != 2 {
		t.Fatalf("want the passwords, the server, fake-hermes, two bridges and a call; found %d bridges in:\n%s",
			len(bridges), strings.Join(blocks, "\n"))
	}

	// The passwords: a file each terminal sources, and the dashboard's for the page.
	runBlock(t, work, env, setup).wait(t, 30*time.Second)
	pwFile, err := os.ReadFile(filepath.Join(work, "data", "local-passwords.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^export ([A-Z_]+)=(\S+)$`).FindAllStringSubmatch(string(pwFile), -1) {
		t.Setenv(m[1], m[2]) // what the server's terminal has after sourcing it
	}
	if fi, err := os.Stat(filepath.Join(work, "data", "dashboard.pw")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("data/dashboard.pw: %v, %v; want a file only its owner reads", fi, err)
	}

	// The server: the documented command line through nats-server's own parsing.
	args := strings.Fields(natsCmd)
	args[1] = filepath.Join(work, args[1])
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts, err := server.ConfigureOptions(fs, args, func() {}, func() {}, func() {})
	if err != nil {
		t.Fatalf("nats-server %s: %v", natsCmd, err)
	}
	if opts.Port != 4333 || opts.Websocket.Port != 4343 {
		t.Fatalf("the server listens on %d, WebSocket %d; the blocks name 4333 and 4343", opts.Port, opts.Websocket.Port)
	}
	opts.Port, opts.Websocket.Port, opts.StoreDir = ports["4333"], ports["4343"], t.TempDir()
	for i, o := range opts.Websocket.AllowedOrigins {
		for from, to := range ports {
			o = strings.Replace(o, ":"+from, ":"+strconv.Itoa(to), 1)
		}
		opts.Websocket.AllowedOrigins[i] = o
	}
	opts.NoSigs = true
	srvLog := &syncBuffer{}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.SetLoggerV2(lineLogger{srvLog}, false, false, false)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats-server not ready:\n%s", srvLog)
	}

	// The fake Hermes prints the export line the bridges' blocks carry.
	f := runBlock(t, work, env, mapPorts(fake))
	f.until(t, 60*time.Second, "listening on")
	export := regexp.MustCompile(`(?m)^\s*(export HERMES_URL=\S+ HERMES_API_KEY=\S+)$`).FindStringSubmatch(f.out.String())
	if export == nil {
		t.Fatalf("fake-hermes prints no export line with HERMES_URL and HERMES_API_KEY:\n%s", f.out)
	}

	pages := make([]string, len(bridges))
	for i, text := range bridges {
		text = mapPorts(text)
		if !strings.Contains(text, export[1]) {
			t.Fatalf("bridge block %d does not set what fake-hermes prints (%s):\n%s", i, export[1], text)
		}
		b := runBlock(t, work, env, text)
		b.until(t, 120*time.Second, `"message":"bridge started"`)
		out := b.out.String()
		m := regexp.MustCompile(`dashboard on (http://\S+/ui/) \(NATS over \S+, as user dashboard\)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("bridge %d serves no dashboard as the dashboard user:\n%s", i, out)
		}
		pages[i] = m[1]
		for _, bad := range []string{"endpoint has no API key", "NO operations HTTP listener"} {
			if strings.Contains(out, bad) {
				t.Errorf("bridge %d says %q:\n%s", i, bad, out)
			}
		}
	}
	out := runBlock(t, work, env, mapPorts(call)).wait(t, 60*time.Second)
	if !strings.Contains(out, "stub reply: Summarize the incident notes.") || !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("the chat did not stream to completion:\n%s", out)
	}

	// A third bridge served from a port the listener does not list: its page is refused.
	other := freePort(t)
	third := runBlock(t, work, env, strings.Replace(mapPorts(bridges[1]), "127.0.0.1:"+strconv.Itoa(ports["9466"]), "127.0.0.1:"+strconv.Itoa(other), 1))
	third.until(t, 120*time.Second, `"message":"bridge started"`)
	refused := fmt.Sprintf("http://127.0.0.1:%d", other)

	if !chromiumPresent() {
		t.Log("headless Chromium is not installed: the pages are not opened; /ui/check is asked instead")
		for _, p := range pages {
			checkOriginOverHTTP(t, p, strings.TrimSuffix(p, "/ui/"), "accepted")
		}
		checkOriginOverHTTP(t, refused+"/ui/", refused, "origin_refused")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	br := newBrowser(t, ctx, srvLog)
	defer br.close()
	for _, p := range pages {
		if err := chromedp.Do(br.ctx, chromedp.Navigate(p)); err != nil {
			t.Fatal(err)
		}
		br.poll("the page "+p+" to connect", `document.getElementById("conn").dataset.state === "connected"`)
	}
	if err := chromedp.Do(br.ctx, chromedp.Navigate(refused+"/ui/")); err != nil {
		t.Fatal(err)
	}
	br.poll("the refused page to say why", fmt.Sprintf(`(() => { const p = document.getElementById("problem");
		return !p.hidden && p.dataset.result === "origin_refused" && p.textContent.includes("refuses pages from %s") &&
			p.textContent.includes('add "%s" to allowed_origins') })()`, refused, refused))
	br.shot("dashboard-origin-refused.png")
	if !strings.Contains(srvLog.String(), "origin not allowed") {
		t.Errorf("the server did not log the refused origin:\n%s", srvLog)
	}
}

// chromiumPresent reports whether a headless Chromium is installed.
func chromiumPresent() bool {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if _, err := exec.LookPath(name); err == nil {
			return true
		}
	}
	return os.Getenv("HERMES_BRIDGE_UI_TEST") == "require" // then newBrowser fails, saying so
}

// checkOriginOverHTTP asks page's /ui/check what the WebSocket listener says to origin.
func checkOriginOverHTTP(t *testing.T, page, origin, want string) {
	t.Helper()
	resp, err := http.Get(page + "check?origin=" + url.QueryEscape(origin))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"result":"`+want+`"`) {
		t.Errorf("%scheck for %s: %s, want %s", page, origin, body, want)
	}
}
