package e2e_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The real hermes-bridge binary, built once per test run with -race and the
// faulthooks tag (HERMES_BRIDGE_CRASH_AT makes it SIGKILL itself at a bridge.Point).
var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// bridgeBinary builds the binary on first use. Tests that need it skip in -short mode.
func bridgeBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the hermes-bridge binary; skipped in -short mode")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "hermes-bridge-e2e-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "hermes-bridge")
		cmd := exec.Command("go", "build", "-race", "-tags", "faulthooks", "-o", binPath, "../cmd/hermes-bridge")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("building hermes-bridge: %v", binErr)
	}
	return binPath
}

// TestMain removes the binaries built by bridgeBinary and natsCLI.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{binDir, natsDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// proc is one hermes-bridge run process connected to the harness's NATS server and
// fake Hermes.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the Wait error, after done

	mu    sync.Mutex
	lines []string
	seen  chan struct{} // closed and replaced on every new log line
}

// procOption changes the environment of a bridge process.
type procOption func(env map[string]string)

func withEnv(k, v string) procOption { return func(env map[string]string) { env[k] = v } }

// crashAt makes the process kill itself the n-th time an action reaches point.
func crashAt(point string, n int) procOption {
	return withEnv("HERMES_BRIDGE_CRASH_AT", fmt.Sprintf("%s:%d", point, n))
}

// startProc runs `hermes-bridge run` against h's NATS server and fake and waits until
// the bridge reports it started. The process is killed at cleanup if still running.
func (h *harness) startProc(opts ...procOption) *proc {
	h.t.Helper()
	p := h.launchProc(opts...)
	p.waitLog(30*time.Second, `"message":"bridge started"`)
	return p
}

// launchProc is startProc without the wait: the process may still be starting, or
// failing to.
func (h *harness) launchProc(opts ...procOption) *proc {
	h.t.Helper()
	bin := bridgeBinary(h.t)
	env := map[string]string{
		"NATS_URL":                        h.ns.ClientURL(),
		"HERMES_URL":                      h.fake.URL,
		"HERMES_API_KEY":                  h.fake.APIKey(),
		"HERMES_BRIDGE_ACK_WAIT":          "2s",
		"HERMES_BRIDGE_SHUTDOWN_GRACE":    "5s",
		"HERMES_BRIDGE_LOG_LEVEL":         "debug",
		"HERMES_BRIDGE_BREAKER_THRESHOLD": "1000",
		"HERMES_BRIDGE_HTTP_ADDR":         "127.0.0.1:0", // a port of its own: processes run in parallel
		"PATH":                            os.Getenv("PATH"),
		"HOME":                            os.Getenv("HOME"),
	}
	for _, o := range opts {
		o(env)
	}
	cmd := exec.Command(bin, "run")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	requireOK(h.t, err)
	cmd.Stdout = io.Discard
	p := &proc{t: h.t, cmd: cmd, done: make(chan struct{}), seen: make(chan struct{})}
	requireOK(h.t, cmd.Start(), "start hermes-bridge: %v")
	go p.read(stderr)
	h.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if h.t.Failed() {
			h.t.Logf("hermes-bridge (pid %d) log:\n%s", p.cmd.Process.Pid, strings.Join(p.log(), "\n"))
		}
	})
	return p
}

func (p *proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		close(p.seen)
		p.seen = make(chan struct{})
		p.mu.Unlock()
	}
	p.err = p.cmd.Wait()
	close(p.done)
}

func (p *proc) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLog waits for a log line containing sub, or for the process to exit.
func (p *proc) waitLog(timeout time.Duration, sub string) {
	p.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for i := 0; ; {
		p.mu.Lock()
		for ; i < len(p.lines); i++ {
			if strings.Contains(p.lines[i], sub) {
				p.mu.Unlock()
				return
			}
		}
		seen := p.seen
		p.mu.Unlock()
		select {
		case <-seen:
		case <-p.done:
			p.t.Fatalf("hermes-bridge exited (%v) before logging %q:\n%s", p.err, sub, strings.Join(p.log(), "\n"))
		case <-deadline.C:
			p.t.Fatalf("hermes-bridge did not log %q within %s:\n%s", sub, timeout, strings.Join(p.log(), "\n"))
		}
	}
}

// waitExit waits for the process to end and returns how: killed by SIGKILL, or its
// exit code.
func (p *proc) waitExit(timeout time.Duration) (killed bool, code int) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("hermes-bridge still running after %s", timeout)
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws.Signaled() && ws.Signal() == syscall.SIGKILL, p.cmd.ProcessState.ExitCode()
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.waitExit(30 * time.Second)
}

// terminate sends SIGTERM (graceful shutdown) and returns the exit code.
func (p *proc) terminate(timeout time.Duration) int {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_, code := p.waitExit(timeout)
	return code
}

// withoutEnv removes a variable that startProc sets by default (NATS_URL for the
// embedded server).
func withoutEnv(k string) procOption { return func(env map[string]string) { delete(env, k) } }

// actionLines returns the parsed "action" log lines of the process for one action id.
func (p *proc) actionLines(id string) []logLine {
	var out []logLine
	for _, ln := range p.log() {
		var l logLine
		if json.Unmarshal([]byte(ln), &l) != nil {
			continue // the crash hook and the embedded server print plain lines
		}
		if l.str("message") == "action" && l.str("action_id") == id {
			out = append(out, l)
		}
	}
	return out
}

// logIndex returns the index of the first log line containing sub, or -1.
func (p *proc) logIndex(sub string) int {
	for i, ln := range p.log() {
		if strings.Contains(ln, sub) {
			return i
		}
	}
	return -1
}
