package e2e_test

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// startFakeHermes builds cmd/fake-hermes and runs it with args on a free loopback port
// until the test ends; it returns its base URL.
func startFakeHermes(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the fake-hermes binary; skipped in -short mode")
	}
	bin := filepath.Join(t.TempDir(), "fake-hermes")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../cmd/fake-hermes").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fake-hermes: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	requireOK(t, err)
	requireOK(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("fake-hermes did not print its address within 30s")
		return ""
	}
}

// TestFakeHermesApprovalFlag: `fake-hermes --approval CMD`, the command line a user
// runs to try the governed run's approvals without Go, makes the bridge's run park on a
// pending_approval naming the command; approving it lets the run complete.
func TestFakeHermesApprovalFlag(t *testing.T) {
	t.Parallel()
	url := startFakeHermes(t, "--approval", "rm -rf build/")
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.Endpoints[0].BaseURL = url
		c.Endpoints[0].Key = func() string { return hermestest.DefaultAPIKey }
	}))
	id := h.publish("run", events.Action{Input: mustJSON(t, map[string]any{"input": "clean the build"}), IdempotencyKey: "k-fake-flag"})
	res, _, pend := h.followDeciding(id, func(p *events.Result) *events.Approval {
		return &events.Approval{Decision: events.DecisionApprove, Approver: "ops", InputSHA256: jstr(output(t, p), "input_sha256"), Choice: events.ChoiceOnce}
	})
	requireCompleted(t, res)
	requireEq(t, len(pend), 1, "%d pending results, want 1")
	if c := jstr(output(t, pend[0]), "approval", "command"); c != "rm -rf build/" {
		t.Fatalf("the pending approval names %q, want the --approval command", c)
	}
	if o := output(t, res); jstr(o, "output") != "stub reply: clean the build" || jpath(o, "tools_ran") != true {
		t.Errorf("run output %s: want the stub reply, after the tool ran", res.Output)
	}
}
