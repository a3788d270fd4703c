package browser

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The hermes-bridge binary of the enclosing repository, built once per test run with
// -race, as the in-process run it replaces was.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain removes the binary built by bridgeBinary.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// repoRoot is the directory of the hermes-bridge module this module sits in (../..
// from the test's directory).
func repoRoot() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	if !bytes.HasPrefix(mod, []byte("module github.com/hermes-bridge/hermes-bridge\n")) {
		return "", fmt.Errorf("%s/go.mod is not the hermes-bridge module", root)
	}
	return root, nil
}

// bridgeBinary builds ./cmd/hermes-bridge of the repository on first use and returns
// its path; a failed build fails the test.
func bridgeBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			binErr = err
			return
		}
		if binDir, binErr = os.MkdirTemp("", "hermes-bridge-browser-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "hermes-bridge")
		cmd := exec.Command("go", "build", "-race", "-o", binPath, "./cmd/hermes-bridge")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build -race ./cmd/hermes-bridge: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("building hermes-bridge: %v", binErr)
	}
	return binPath
}

var natsLine = regexp.MustCompile(`embedded NATS server listening on (\S+)`)

// startBridge runs `hermes-bridge run` with environ (embedded NATS on a free port and a
// temporary store unless environ says otherwise; nothing from the test's own
// environment but PATH and HOME) until the test ends, and waits until it logs that the
// bridge started. It returns the embedded server's URL ("" with NATS_URL) and the
// process's output, stderr and stdout together. At the end of the test the process gets
// SIGTERM and must exit 0 within 30 s (a data race it detects exits 66).
func startBridge(t *testing.T, environ map[string]string) (string, *syncBuffer) {
	t.Helper()
	env := map[string]string{
		"HERMES_BRIDGE_DATA_DIR":       t.TempDir(),
		"HERMES_BRIDGE_NATS_PORT":      "-1",
		"HERMES_BRIDGE_SHUTDOWN_GRACE": "5s",
		"PATH":                         os.Getenv("PATH"),
		"HOME":                         os.Getenv("HOME"),
	}
	for k, v := range environ {
		env[k] = v
	}
	cmd := exec.Command(bridgeBinary(t), "run")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start hermes-bridge run: %v", err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
			if waitErr != nil {
				t.Errorf("hermes-bridge run ended with %v:\n%s", waitErr, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
			_ = cmd.Process.Kill()
			<-done
		}
	})
	exited := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	waitFor(t, 60*time.Second, "bridge started", func() bool {
		if exited() {
			t.Fatalf("run stopped early: %v\n%s", waitErr, logs.String())
		}
		return strings.Contains(logs.String(), `"message":"bridge started"`)
	})
	if _, ok := env["NATS_URL"]; ok {
		return "", logs
	}
	m := natsLine.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no embedded server line:\n%s", logs.String())
	}
	return m[1], logs
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a goroutine-safe bytes.Buffer for captured output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
