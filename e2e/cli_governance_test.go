package e2e_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// cli runs one hermes-bridge client command against the harness's NATS server and
// returns its stdout, stderr and exit code.
func (h *harness) cli(args ...string) (string, string, int) {
	h.t.Helper()
	return h.cliEnv([]string{"NATS_URL=" + h.ns.ClientURL()}, args...)
}

// cliEnv is cli with env (NAME=value entries, NATS_URL among them) added to the
// minimal environment.
func (h *harness) cliEnv(env []string, args ...string) (string, string, int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bridgeBinary(h.t), args...)
	// XDG_CONFIG_HOME: no natscli context of this machine's user (a selected one) is used.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "USER=e2e-approver",
		"XDG_CONFIG_HOME=" + h.t.TempDir()}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errb, strings.NewReader("")
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			h.t.Fatalf("hermes-bridge %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// TestCLIGovernance drives the real binaries: a `run` process parks a session_delete,
// `pending` lists it, `approve` shows the request, publishes the decision and follows the
// action to its result; `deny` and `cancel` do what they say.
func TestCLIGovernance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutBridge())
	h.startProc()
	for _, sid := range []string{"cli-1", "cli-2", "cli-3"} {
		h.callOK("session_create", map[string]any{"body": map[string]any{"id": sid}}, withKey("create-"+sid))
	}
	park := func(sid string) string {
		id := h.publish("session_delete", events.Action{Input: mustJSON(t, map[string]any{"session_id": sid}), IdempotencyKey: "del-" + sid})
		h.pendingOf(id)
		return id
	}
	approved, denied, cancelled := park("cli-1"), park("cli-2"), park("cli-3")

	out, errOut, code := h.cli("pending")
	if code != 0 {
		t.Fatalf("pending: exit %d: %s", code, errOut)
	}
	for _, id := range []string{approved, denied, cancelled} {
		if !strings.Contains(out, id) {
			t.Errorf("pending does not list %s:\n%s", id, out)
		}
	}

	// Without --yes and without a terminal the request is shown and nothing is decided.
	out, _, code = h.cli("approve", approved)
	if code != 2 || !strings.Contains(out, "session_delete") || !strings.Contains(out, "cli-1") {
		t.Fatalf("approve without --yes: exit %d, output:\n%s", code, out)
	}
	out, errOut, code = h.cli("approve", approved, "--yes", "--reason", "ticket OPS-42")
	if code != 0 {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, `"status": "completed"`) {
		t.Errorf("approve did not print the completed result:\n%s", out)
	}

	_, errOut, code = h.cli("deny", denied, "--yes", "--reason", "wrong session")
	if code != 0 {
		t.Fatalf("deny: exit %d: %s", code, errOut)
	}
	res, _ := h.follow(denied)
	requireFailed(t, res, "approval_denied")

	out, errOut, code = h.cli("cancel", cancelled)
	if code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: exit %d: %s %s", code, out, errOut)
	}
	res, _ = h.follow(cancelled)
	wantEq(t, res.Status, events.StatusCancelled, "cancelled parked action: %s")
	wantEq(t, h.fake.Calls("session_delete"), 1, "session_delete calls %d, want 1 (only the approved one)")
	out, _, code = h.cli("pending")
	if code != 0 || strings.Contains(out, approved) || strings.Contains(out, denied) || strings.Contains(out, cancelled) {
		t.Errorf("pending after the decisions (exit %d):\n%s", code, out)
	}
}
