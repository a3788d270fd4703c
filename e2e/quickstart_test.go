package e2e_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// quickStartBlocks returns the fenced sh blocks of the README's Quick start section, in
// order, each as its lines.
func quickStartBlocks(t *testing.T, readme string) [][]string {
	t.Helper()
	b, err := os.ReadFile(readme)
	requireOK(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Quick start\n")
	if !ok {
		t.Fatal("README.md has no Quick start section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks [][]string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, strings.Split(strings.TrimRight(m[1], "\n"), "\n"))
	}
	if len(blocks) == 0 {
		t.Fatal("the Quick start has no sh block")
	}
	return blocks
}

// A block whose last command is one of these keeps running (a terminal of its own): it is
// started in the background and is ready once its output matches.
var quickStartServers = []struct {
	command, ready *regexp.Regexp
}{
	{regexp.MustCompile(`^fake-hermes\b`), regexp.MustCompile(`listening on http://`)},
	{regexp.MustCompile(`^make run\b|^hermes-bridge run\b`), regexp.MustCompile(`"message":"bridge started"`)},
}

// freeLoopbackPort returns a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	requireOK(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// quickStartBlock is one block being run by bash in its own process group.
type quickStartBlock struct {
	lines []string
	cmd   *exec.Cmd
	out   *syncBuffer
	done  chan struct{}
	err   error // the Wait error, once done
}

func (b *quickStartBlock) text() string { return strings.Join(b.lines, "\n") }

// waitOutput waits until the block's output matches re, or it exits, or d passes.
func (b *quickStartBlock) waitOutput(t *testing.T, re *regexp.Regexp, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !re.MatchString(b.out.String()) {
		select {
		case <-b.done:
			if re.MatchString(b.out.String()) {
				return
			}
			t.Fatalf("block\n%s\nexited (%v) before its output matched %q:\n%s", b.text(), b.err, re, b.out)
		case <-deadline:
			t.Fatalf("block\n%s\ndid not print %q within %s:\n%s", b.text(), re, d, b.out)
		case <-tick.C:
		}
	}
}

// interrupt sends SIGINT to the block's process group, as Ctrl-C in its terminal does,
// and waits for it to end.
func (b *quickStartBlock) interrupt(t *testing.T, d time.Duration) {
	t.Helper()
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-b.done:
	case <-time.After(d):
		t.Fatalf("block\n%s\ndid not stop within %s of SIGINT:\n%s", b.text(), d, b.out)
	}
}

// TestReadmeQuickStart runs the README's Quick start as a new user pastes it, block by
// block, taken from README.md so that the two cannot drift apart: make demo; make install
// and the PATH line (into a temporary GOPATH); fake-hermes and hermes-bridge run (the
// installed binaries) in terminals of their own; the call, which must stream the chat and
// complete. Then Ctrl-C (SIGINT to each process group) stops the bridge and fake-hermes
// cleanly. The blocks build the binaries at most once: no block after the first build
// relinks ./bin/hermes-bridge or ./bin/fake-hermes.
//
// No command is changed. Everything listens on loopback only, on free ports, through the
// environment the blocks run in: FAKE_HERMES_ADDR and HERMES_URL move the fake,
// HERMES_BRIDGE_NATS_PORT the embedded NATS server, HERMES_BRIDGE_DATA_DIR its store, and
// GOPATH and GOBIN the installed binaries. HERMES_*, NATS_* and FAKE_HERMES_* from the
// caller's environment are dropped. An export line of a block holds in the blocks after it
// (as if exported in each terminal).
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and installs the binaries and runs make; skipped in -short mode")
	}
	for _, tool := range []string{"bash", "make", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	root, err := filepath.Abs("..")
	requireOK(t, err)
	blocks := quickStartBlocks(t, filepath.Join(root, "README.md"))
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	requireOK(t, err)

	tmp := t.TempDir()
	gopath := filepath.Join(tmp, "gopath")
	fakePort, natsPort := freeLoopbackPort(t), freeLoopbackPort(t)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "HERMES_"), strings.HasPrefix(k, "NATS_"), strings.HasPrefix(k, "FAKE_HERMES_"),
			k == "GOPATH", k == "GOBIN", k == "GOMODCACHE", k == "MAKEFLAGS", k == "MFLAGS", k == "MAKELEVEL":
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"GOPATH="+gopath, "GOBIN="+filepath.Join(gopath, "bin"), "GOMODCACHE="+strings.TrimSpace(string(modcache)),
		fmt.Sprintf("FAKE_HERMES_ADDR=127.0.0.1:%d", fakePort),
		fmt.Sprintf("HERMES_URL=http://127.0.0.1:%d", fakePort),
		fmt.Sprintf("HERMES_BRIDGE_NATS_PORT=%d", natsPort),
		"HERMES_BRIDGE_DATA_DIR="+filepath.Join(tmp, "nats"),
	)
	state := filepath.Join(tmp, "exports.sh")
	requireOK(t, os.WriteFile(state, nil, 0o600))
	env = append(env, "QUICKSTART_EXPORTS="+state)

	// start runs one block in bash, in its own process group, with the exports of the
	// blocks before it; the exports of its own lines are saved for the blocks after it.
	start := func(lines []string) *quickStartBlock {
		script := []string{"set -euo pipefail", `source "$QUICKSTART_EXPORTS"`}
		for _, l := range lines {
			script = append(script, l)
			if strings.HasPrefix(strings.TrimSpace(l), "export ") {
				script = append(script, `export -p > "$QUICKSTART_EXPORTS"`)
			}
		}
		b := &quickStartBlock{lines: lines, out: &syncBuffer{}, done: make(chan struct{})}
		b.cmd = exec.Command("bash", "-c", strings.Join(script, "\n"))
		b.cmd.Dir, b.cmd.Env, b.cmd.Stdout, b.cmd.Stderr = root, env, b.out, b.out
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		requireOK(t, b.cmd.Start())
		go func() { b.err = b.cmd.Wait(); close(b.done) }()
		t.Cleanup(func() {
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
			if t.Failed() {
				t.Logf("block\n%s\noutput:\n%s", b.text(), b.out)
			}
		})
		return b
	}

	// The go command the blocks find on PATH logs what it links (go build and go install
	// with -x print a link command only when they link): a second block that links is a
	// second build. Its output is shown only when it fails.
	realGo, err := exec.LookPath("go")
	requireOK(t, err)
	shim, goLog := filepath.Join(tmp, "shim"), filepath.Join(tmp, "go-x.log")
	requireOK(t, os.MkdirAll(shim, 0o755))
	requireOK(t, os.WriteFile(filepath.Join(shim, "go"), []byte(`#!/usr/bin/env bash
case "$1" in
build|install)
	out=$(mktemp); st=0
	"$QUICKSTART_GO" "$1" -x "${@:2}" 2>"$out" || st=$?
	cat "$out" >>"$QUICKSTART_GOLOG"; [ "$st" = 0 ] || cat "$out" >&2; rm -f "$out"; exit "$st" ;;
esac
exec "$QUICKSTART_GO" "$@"
`), 0o755))
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + shim + ":" + strings.TrimPrefix(kv, "PATH=")
		}
	}
	env = append(env, "QUICKSTART_GO="+realGo, "QUICKSTART_GOLOG="+goLog)
	links := func() int {
		b, _ := os.ReadFile(goLog)
		return len(regexp.MustCompile(`(?m)/link -o `).FindAll(b, -1))
	}
	linked, builtBy := 0, ""

	began := time.Now()
	var servers []*quickStartBlock
	var fake *quickStartBlock
	for _, lines := range blocks {
		last := ""
		for _, l := range lines {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				last = l
			}
		}
		b := start(lines)
		server := false
		for _, s := range quickStartServers {
			if s.command.MatchString(last) {
				server = true
				b.waitOutput(t, s.ready, untilDeadline(t)) // make run builds first
				servers = append(servers, b)
				if strings.HasPrefix(last, "fake-hermes") {
					fake = b
				}
			}
		}
		if server {
			continue
		}
		select {
		case <-b.done:
		case <-time.After(untilDeadline(t)): // make demo and make install build
			t.Fatalf("block\n%s\ndid not finish before the test's deadline:\n%s", b.text(), b.out)
		}
		if b.err != nil {
			t.Fatalf("block\n%s\nfailed: %v\n%s", b.text(), b.err, b.out)
		}
		if n := links(); n > linked {
			if builtBy != "" {
				t.Errorf("the Quick start builds twice: block\n%s\nlinked again after block\n%s\nhad built", b.text(), builtBy)
			}
			linked, builtBy = n, b.text()
		}
		out := b.out.String()
		switch {
		case strings.Contains(b.text(), "make demo"):
			if !strings.Contains(out, `"status": "completed"`) {
				t.Errorf("make demo did not complete its chat:\n%s", out)
			}
		case strings.Contains(b.text(), "hermes-bridge call"):
			if !strings.Contains(out, "stub reply: Summarize the incident notes.") || !strings.Contains(out, `"status": "completed"`) {
				t.Errorf("the call did not stream a completed chat:\n%s", out)
			}
		}
		if strings.Contains(b.text(), "hermes-bridge version") {
			if v := regexp.MustCompile(`hermes-bridge (\S+)`).FindStringSubmatch(out); v == nil || v[1] == "dev" {
				t.Errorf("hermes-bridge version is not stamped:\n%s", out)
			}
		}
	}
	if fake == nil || len(servers) != 2 {
		t.Fatalf("the Quick start starts %d servers (fake-hermes: %v), want fake-hermes and the bridge", len(servers), fake != nil)
	}

	// The key the README exports is the one fake-hermes prints.
	exports, _ := os.ReadFile(state)
	key := regexp.MustCompile(`HERMES_API_KEY="([^"]*)"`).FindSubmatch(exports)
	if key == nil {
		t.Fatalf("the Quick start exports no HERMES_API_KEY; exports:\n%s", exports)
	}
	if want := fmt.Sprintf("export HERMES_URL=http://127.0.0.1:%d HERMES_API_KEY=%s\n", fakePort, key[1]); !strings.Contains(fake.out.String(), want) {
		t.Errorf("fake-hermes does not print the line the README exports, %q:\n%s", want, fake.out)
	}

	// Ctrl-C in each terminal, the bridge first.
	for i := len(servers) - 1; i >= 0; i-- {
		b := servers[i]
		b.interrupt(t, 45*time.Second)
		out := b.out.String()
		var ee *exec.ExitError
		if b.err != nil && !(errors.As(b.err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT) {
			t.Errorf("block\n%s\nended with %v after SIGINT, want exit 0 or death by SIGINT:\n%s", b.text(), b.err, out)
		}
		if strings.Contains(out, "make: ***") {
			t.Errorf("make reports an error after a clean shutdown:\n%s", out)
		}
		if b != fake {
			for _, want := range []string{`"message":"SIGINT received`, `"message":"embedded NATS server stopped"`} {
				if !strings.Contains(out, want) {
					t.Errorf("the bridge's log lacks %s:\n%s", want, out)
				}
			}
			if strings.Contains(out, "is not a hermes-bridge setting") {
				t.Errorf("the Quick start's environment has variables the bridge does not know:\n%s", out)
			}
		}
	}
	t.Logf("the Quick start took %s and linked %d binaries, in one block: %q", time.Since(began).Round(time.Second), linked, builtBy)
}
