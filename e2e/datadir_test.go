package e2e_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

var listeningRE = regexp.MustCompile(`embedded NATS server listening on (nats://\S+)`)

// embeddedURL returns the URL the process's embedded NATS server printed.
func (p *proc) embeddedURL() string {
	p.t.Helper()
	for _, ln := range p.log() {
		if m := listeningRE.FindStringSubmatch(ln); m != nil {
			return m[1]
		}
	}
	p.t.Fatalf("no 'embedded NATS server listening on' line:\n%s", strings.Join(p.log(), "\n"))
	return ""
}

// TestDataDirLocked: two `run` processes on one data directory (issue 13, item 1). The
// second exits 1 with a message naming the directory, the first one's pid and URL, and
// what to do instead; the first keeps serving. After the first is SIGKILLed, the kernel
// has released its lock and a new process starts on the same directory.
func TestDataDirLocked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutBridge())
	dir := t.TempDir()
	embedded := []procOption{withoutEnv("NATS_URL"), withEnv("HERMES_BRIDGE_DATA_DIR", dir), withEnv("HERMES_BRIDGE_NATS_PORT", "-1")}
	first := h.startProc(embedded...)
	url := first.embeddedURL()

	second := h.launchProc(embedded...)
	if killed, code := second.waitExit(30 * time.Second); killed || code != 1 {
		t.Fatalf("second run on the same data directory: killed %v, exit %d; want exit 1:\n%s", killed, code, strings.Join(second.log(), "\n"))
	}
	msg := strings.Join(second.log(), "\n")
	for _, want := range []string{
		"hermes-bridge run: embedded NATS server: natsembed: store directory " + dir + " is in use by another process",
		fmt.Sprintf("(pid %d, its NATS server listens on %s)", first.cmd.Process.Pid, url),
		"Two servers must never share a data directory",
		"for a second replica on this machine set NATS_URL=" + url + " to use the first one's server",
		"or set HERMES_BRIDGE_DATA_DIR to another directory for a separate bridge",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("second run's output lacks %q:\n%s", want, msg)
		}
	}
	if second.logIndex(`"message":"bridge started"`) >= 0 {
		t.Fatalf("the second run started a bridge")
	}

	// The first one still serves: an action completes through its server.
	out, errOut, code := h.cliEnv([]string{"NATS_URL=" + url}, "call", "--op", "chat", "--prompt", "still there?", "--json")
	if code != 0 || !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("call through the first run: exit %d\n%s\n%s", code, out, errOut)
	}

	// A SIGKILLed holder does not block the next start.
	first.kill()
	third := h.startProc(embedded...)
	out, errOut, code = h.cliEnv([]string{"NATS_URL=" + third.embeddedURL()}, "call", "--op", "chat", "--prompt", "after the kill", "--json")
	if code != 0 || !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("call through the run started after the kill: exit %d\n%s\n%s", code, out, errOut)
	}
}
