package main

import (
	"context"
	"encoding/json"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// noErr fails the test at once on an error.
func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runMain runs the CLI in-process.
func runMain(ctx context.Context, environ map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	out, errb := &syncBuffer{}, &syncBuffer{}
	code = Main(ctx, args, environ, stdio{in: strings.NewReader(stdin), out: out, err: errb})
	return code, out.String(), errb.String()
}

// TestHelp: each command line exits 0 with every wanted text in its output.
func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Commands:", "run", "call", "watch", "version", "Examples:", "pending", "approve", "deny", "cancel", "steer",
			"hermes-bridge approve 3xTnq8v2...", "status", "hermes-bridge status 3xTnq8v2..."}},
		{[]string{"-h"}, []string{"Commands:"}},
		{[]string{"help"}, []string{"Commands:"}},
		{[]string{"help", "help"}, []string{"Commands:"}},
		{[]string{"run", "--help"}, []string{"hermes-bridge run", "Examples:", "Environment:", "HERMES_BRIDGE_ACK_WAIT", "30s", "SIGHUP"}},
		{[]string{"run", "-h"}, []string{"Environment:"}},
		{[]string{"help", "run"}, []string{"Environment:", "HERMES_ENDPOINTS_FILE"}},
		{[]string{"call", "--help"}, []string{"hermes-bridge call [flags]", "--prompt string", "--no-follow", "--structured", "--events", "--deadline duration", "--timeout duration", "Connecting to NATS", "--context string", "--creds string", "Examples:", "chat_stream", `(default "primary")`, "--inbox-prefix string", "NATS_INBOX_PREFIX"}},
		{[]string{"call", "-h"}, []string{"-endpoint"}},
		{[]string{"help", "call"}, []string{"-input"}},
		{[]string{"watch", "--help"}, []string{"hermes-bridge watch [flags] <action_id>", "--json", "--events", "--wait duration", "--inbox-prefix string", "Examples:"}},
		{[]string{"watch", "x", "--help"}, []string{"<action_id>"}},
		{[]string{"help", "watch"}, []string{"<action_id>"}},
		{[]string{"version", "--help"}, []string{"hermes-bridge version"}},
		{[]string{"help", "version"}, []string{"Prints the version"}},
		{[]string{"pending", "--help"}, []string{"hermes-bridge pending [flags]", "park.<action_id>", "--json", "--server string", "--inbox-prefix string", "Examples:"}},
		{[]string{"help", "pending"}, []string{"HERMES_IDEMPOTENCY"}},
		{[]string{"approve", "--help"}, []string{"hermes-bridge approve [flags] <action_id>", "--reason string", "--approver string", "--yes", "--no-follow", "--json", "--wait duration", "--inbox-prefix string", "input_sha256", "Exit status", "Examples:"}},
		{[]string{"approve", "x", "-h"}, []string{"<action_id>"}},
		{[]string{"help", "approve"}, []string{"--yes"}},
		{[]string{"deny", "--help"}, []string{"hermes-bridge deny [flags] --reason <text> <action_id>", "approval_denied", "--reason string", "--inbox-prefix string", "Examples:"}},
		{[]string{"help", "deny"}, []string{"--approver"}},
		{[]string{"steer", "--help"}, []string{"hermes-bridge steer [flags] <action_id> <text>", "not_running", "steer_unsupported",
			"--timeout duration", `(default "15s")`, "Examples:"}},
		{[]string{"help", "steer"}, []string{"pending_steer", "--inbox-prefix string"}},
		{[]string{"cancel", "--help"}, []string{"hermes-bridge cancel [flags] <action_id>", "already settled", "unknown", "--timeout duration", `(default "5s")`, "Examples:"}},
		{[]string{"help", "cancel"}, []string{"--timeout", "--inbox-prefix string"}},
		{[]string{"status", "--help"}, []string{"hermes-bridge status [flags] <action_id>", "possibly-stale", "--json", "--timeout duration", `(default "5s")`, "--inbox-prefix string", "Exit status", "Examples:"}},
		{[]string{"help", "status"}, []string{"<prefix>.status"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := runMain(context.Background(), nil, "", tt.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr %s", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("help lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runMain(context.Background(), nil, "", "version")
	if code != exitOK || !strings.HasPrefix(out, "hermes-bridge ") || !strings.Contains(out, "go1.") {
		t.Fatalf("exit %d out %q", code, out)
	}
	code, out, _ = runMain(context.Background(), nil, "", "--version")
	if code != exitOK || !strings.HasPrefix(out, "hermes-bridge ") {
		t.Fatalf("--version: exit %d out %q", code, out)
	}
}

// TestUsageErrors: each command line is a usage error (exit 2, nothing on stdout) whose
// message holds the wanted text; flag values of the wrong kind saying
// what is expected (issue 13: `call --timeout 1`).
func TestUsageErrors(t *testing.T) {
	const duration = "must be a duration with a unit, such as 30s, 5m or 1h30m"
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{nil, "Commands:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"run", "--bogus"}, "unknown flag --bogus"},
		{[]string{"run", "extra"}, `unexpected argument "extra"`},
		{[]string{"call", "--bogus"}, "unknown flag --bogus"},
		{[]string{"call", "--timeout", "soon"}, `invalid value "soon" for flag --timeout`},
		{[]string{"call", "--op", "dance"}, `unknown operation "dance"`},
		{[]string{"call", "--endpoint", "Bad!"}, `--endpoint "Bad!" must match`},
		{[]string{"call", "--prompt", "a", "--input", "{}"}, "--prompt and --input exclude each other"},
		{[]string{"call", "--input", "[1]"}, "--input must be a JSON object"},
		{[]string{"call", "--input", "{nope"}, "--input is not valid JSON"},
		{[]string{"call", "--input", "@" + filepath.Join(dir, "missing.json")}, "file does not exist"},
		{[]string{"call", "--op", "session_create"}, "needs an idempotency key: add --key"},
		{[]string{"call", "--action-id", "a.b"}, "--action-id must match"},
		{[]string{"call", "--timeout", "-1s"}, "--deadline must be between"},
		{[]string{"call", "--deadline", "25h"}, "--deadline must be between"},
		{[]string{"pending", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"approve", "a", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"deny", "a", "--reason", "r", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"call", "--op"}, "flag needs an argument: --op"},
		{[]string{"call", "--json", "--events"}, "--json and --events exclude each other"},
		{[]string{"call", "positional"}, `unexpected argument "positional"`},
		{[]string{"watch"}, "missing the action id"},
		{[]string{"watch", "a", "b"}, `unexpected argument "b"`},
		{[]string{"watch", "a.b"}, "action id must match"},
		{[]string{"watch", "--nope", "a"}, "unknown flag --nope"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"watch", "--inbox-prefix", "_INBOX.*", "a"}, `hermes-bridge watch: --inbox-prefix "_INBOX.*" must be a subject such as _INBOX_dashboard`},
		{[]string{"call", "--inbox-prefix", "has space"}, `--inbox-prefix "has space" must be a subject`},
		{[]string{"pending", "--bogus"}, "unknown flag --bogus"},
		{[]string{"pending", "extra"}, `unexpected argument "extra"`},
		{[]string{"approve"}, "missing the action id"},
		{[]string{"approve", "--bogus", "a"}, "unknown flag --bogus"},
		{[]string{"approve", "a", "b"}, `unexpected argument "b"`},
		{[]string{"approve", "a.b"}, "action id must match"},
		{[]string{"approve", "a", "--wait", "-1s"}, "--wait must not be negative"},
		{[]string{"approve", "a", "--reason", "x\x1by"}, "--reason must be at most 1024 characters"},
		{[]string{"approve", "a", "--approver", strings.Repeat("x", 300)}, "--approver must be at most 256"},
		{[]string{"deny", "a"}, "--reason is required"},
		{[]string{"deny", "a", "--reason", "  "}, "--reason is required"},
		{[]string{"deny", "a", "--no-follow", "--reason", "r"}, "unknown flag --no-follow"},
		{[]string{"deny"}, "missing the action id"},
		{[]string{"cancel"}, "missing the action id"},
		{[]string{"steer"}, "missing the action id"},
		{[]string{"steer", "a"}, "missing the text (or - to read it from stdin)"},
		{[]string{"steer", "a", "two", "words"}, `unexpected argument "words"`},
		{[]string{"steer", "a b", "x"}, "the action id must match"},
		{[]string{"steer", "a", "   "}, "the text must not be empty or only white space"},
		{[]string{"steer", "a", "x", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"cancel", "--bogus", "a"}, "unknown flag --bogus"},
		{[]string{"cancel", "a", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"cancel", "a", "--timeout", "soon"}, `invalid value "soon" for flag --timeout`},
		{[]string{"status"}, "missing the action id"},
		{[]string{"status", "a", "b"}, `unexpected argument "b"`},
		{[]string{"status", "a.b"}, "action id must match"},
		{[]string{"status", "a", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"call", "--timeout", "1"}, `invalid value "1" for flag --timeout: ` + duration},
		{[]string{"call", "--wait", "soon"}, `invalid value "soon" for flag --wait: ` + duration},
		{[]string{"watch", "--wait", "5", "some-id"}, `invalid value "5" for flag --wait: ` + duration},
		{[]string{"cancel", "--timeout", "2", "some-id"}, `invalid value "2" for flag --timeout: ` + duration},
		{[]string{"call", "--json=maybe"}, `invalid boolean value "maybe" for flag --json: must be true or false`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := runMain(context.Background(), map[string]string{}, "", tt.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %s", code, exitUsage, errOut)
			}
			if !strings.Contains(errOut, tt.want) {
				t.Fatalf("stderr lacks %q:\n%s", tt.want, errOut)
			}
			if out != "" {
				t.Fatalf("stdout not empty on usage error: %q", out)
			}
		})
	}
}

func TestConfigErrorExitCodes(t *testing.T) {
	code, _, errOut := runMain(context.Background(), map[string]string{"HERMES_BRIDGE_ACK_WAIT": "100ms", "HERMES_API_KEY": "has space-Secret"}, "", "run")
	if code != exitUsage || !strings.Contains(errOut, "HERMES_BRIDGE_ACK_WAIT=100ms: must be at least 1s") {
		t.Fatalf("exit %d stderr %s", code, errOut)
	}
	if strings.Contains(errOut, "Secret") {
		t.Fatalf("secret printed: %s", errOut)
	}
	// call validates the connection settings it uses.
	code, _, errOut = runMain(context.Background(), map[string]string{"NATS_TOKEN": "t"}, "", "call", "--prompt", "x")
	if code != exitUsage || !strings.Contains(errOut, "NATS_TOKEN is set but neither NATS_URL nor NATS_CONTEXT is") {
		t.Fatalf("exit %d stderr %s", code, errOut)
	}
	// Connection refused is a connection error: exit 2 with a hint.
	code, _, errOut = runMain(context.Background(), map[string]string{"HERMES_BRIDGE_NATS_PORT": "1"}, "", "call", "--prompt", "x")
	if code != exitUsage || !strings.Contains(errOut, "cannot connect to NATS at nats://127.0.0.1:1") || !strings.Contains(errOut, "hermes-bridge run") {
		t.Fatalf("exit %d stderr %s", code, errOut)
	}
	code, _, errOut = runMain(context.Background(), map[string]string{}, "", "watch", "--server", "nats://127.0.0.1:1", "abc")
	if code != exitUsage || !strings.Contains(errOut, "cannot connect") {
		t.Fatalf("watch: exit %d stderr %s", code, errOut)
	}
}

func TestInputSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "in.json")
	noErr(t, os.WriteFile(file, []byte(`{"query":"from file"}`+"\n"), 0o600))
	for _, tt := range []struct {
		o     cmdOptions
		stdin string
		want  string
	}{
		{cmdOptions{prompt: "hi \"there\""}, "", `{"prompt":"hi \"there\""}`},
		{cmdOptions{input: `{"a":1}`}, "", `{"a":1}`},
		{cmdOptions{input: "@" + file}, "", `{"query":"from file"}`},
		{cmdOptions{input: "-"}, " {\"x\":true}\n", `{"x":true}`},
		{cmdOptions{}, "", `{}`},
	} {
		tt.o.op, tt.o.endpoint = "chat", "primary"
		a, err := tt.o.action(strings.NewReader(tt.stdin))
		noErr(t, err)
		if string(a.Input) != tt.want {
			t.Errorf("input %s, want %s", a.Input, tt.want)
		}
	}
	o := cmdOptions{op: "session_create", endpoint: "primary", key: "k1", tenant: "acme", timeout: 1500e6}
	a, err := o.action(strings.NewReader(""))
	if err != nil || a.IdempotencyKey != "k1" || a.TenantID != "acme" || a.TimeoutMS == nil || *a.TimeoutMS != 1500 {
		t.Fatalf("action %+v err %v", a, err)
	}
}

func TestParseArgsInterspersed(t *testing.T) {
	var o cmdOptions
	fs := clientCommands["watch"].flagSet("watch", &o)
	pos, err := parseArgs(fs, []string{"abc", "--json", "--wait", "5s"})
	if err != nil || len(pos) != 1 || pos[0] != "abc" || !o.jsonOut || o.wait.String() != "5s" {
		t.Fatalf("pos %v err %v o %+v", pos, err, o)
	}
	fs = clientCommands["watch"].flagSet("watch", &o)
	pos, err = parseArgs(fs, []string{"--", "-weird"})
	if err != nil || len(pos) != 1 || pos[0] != "-weird" {
		t.Fatalf("pos %v err %v", pos, err)
	}
	fs = newFlagSet("x")
	if _, err := parseArgs(fs, []string{"-h"}); err != flag.ErrHelp {
		t.Fatalf("help: %v", err)
	}
}

func TestStatusCodes(t *testing.T) {
	for status, want := range map[string]int{
		events.StatusCompleted: exitOK, events.StatusFailed: exitFailed, events.StatusCancelled: exitCancelled,
	} {
		if got := statusCode(status); got != want {
			t.Errorf("%s: %d, want %d", status, got, want)
		}
	}
}

func TestPrinterModes(t *testing.T) {
	res := &events.Result{ActionID: "a1", CapabilityID: "cap:hermes_agent:primary:chat_stream", Status: events.StatusFailed,
		Output: json.RawMessage(`null`), Error: &events.ErrorInfo{Code: "stream_incomplete", Message: "closed early", Category: "temporary"}}
	evs := []*events.EventData{
		{ActionID: "a1", Sequence: 0, Kind: "data", Event: events.SSE{Data: json.RawMessage(`{"delta":"Hel"}`)}, Text: "Hel"},
		{ActionID: "a1", Sequence: 1, Kind: "progress", Event: events.SSE{Event: "tool.progress", Data: json.RawMessage(`{}`)}},
		{ActionID: "a1", Sequence: 2, Kind: "data", Event: events.SSE{Data: json.RawMessage(`{"delta":"lo"}`)}, Text: "lo"},
	}
	run := func(o cmdOptions) (string, string) {
		out, errb := &syncBuffer{}, &syncBuffer{}
		p := newPrinter(out, errb, &o)
		for _, e := range evs {
			noErr(t, p.event(e))
		}
		noErr(t, p.result(res))
		return out.String(), errb.String()
	}
	out, errOut := run(cmdOptions{})
	if !strings.HasPrefix(out, "Hello\n{\n  \"action_id\": \"a1\"") || !strings.Contains(errOut, "action a1 failed: stream_incomplete: closed early") {
		t.Fatalf("text mode:\n%s\n--\n%s", out, errOut)
	}
	out, _ = run(cmdOptions{jsonOut: true})
	var r events.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Status != "failed" || strings.Contains(out, "Hello") {
		t.Fatalf("json mode: %s %v", out, err)
	}
	out, _ = run(cmdOptions{eventsOut: true})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("events mode: %d lines:\n%s", len(lines), out)
	}
	for i, l := range lines[:3] {
		var e events.EventData
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Sequence != int64(i) {
			t.Fatalf("line %d: %s %v", i, l, err)
		}
	}
	if !strings.Contains(lines[3], `"status":"failed"`) {
		t.Fatalf("result line %s", lines[3])
	}
}

// `run` that cannot start exits 1 with a clear message (here: the port is taken).
func TestRunPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	noErr(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	code, _, errOut := runMain(context.Background(), map[string]string{
		"HERMES_BRIDGE_DATA_DIR": t.TempDir(), "HERMES_BRIDGE_NATS_PORT": strconv.Itoa(port),
	}, "", "run")
	if code != exitFailed || !strings.Contains(errOut, "hermes-bridge run: embedded NATS server on 127.0.0.1:"+strconv.Itoa(port)) ||
		!strings.Contains(errOut, "set HERMES_BRIDGE_NATS_PORT") {
		t.Fatalf("exit %d stderr:\n%s", code, errOut)
	}
}

func TestPrinterPending(t *testing.T) {
	pend := &events.Result{ActionID: "a2", Status: events.StatusPendingApproval,
		Output: json.RawMessage(`{"capability_id":"cap:hermes_agent:primary:response_delete","input":{},"input_sha256":"abc123","expires_at":"2026-01-01T00:15:00Z"}`)}
	out, errb := &syncBuffer{}, &syncBuffer{}
	p := newPrinter(out, errb, &cmdOptions{})
	p.pending(pend)
	// The note says how to decide it with the CLI (issue 26, item 14).
	if out.String() != "" || errb.String() != "action a2 is waiting for approval (input_sha256 abc123, expires 2026-01-01T00:15:00Z); review and decide it with:\n"+
		"  hermes-bridge approve a2\n  hermes-bridge deny a2 --reason \"...\"\n" {
		t.Fatalf("text mode: stdout %q stderr %q", out.String(), errb.String())
	}
	out = &syncBuffer{}
	p = newPrinter(out, errb, &cmdOptions{eventsOut: true})
	p.pending(pend)
	if !strings.Contains(out.String(), `"status":"pending_approval"`) || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("events mode: %q", out.String())
	}
}

// A replayed duplicate says on stderr that it is one, and of which action (issue 26,
// item 10): nothing else shows that Hermes was not called.
func TestPrinterReplay(t *testing.T) {
	orig := "a-first"
	res := &events.Result{ActionID: "a-dup", Status: events.StatusCompleted, Output: json.RawMessage(`{"ok":true}`), ReplayOf: &orig}
	for _, o := range []*cmdOptions{{}, {jsonOut: true}, {eventsOut: true}} {
		out, errb := &syncBuffer{}, &syncBuffer{}
		noErr(t, newPrinter(out, errb, o).result(res))
		if !strings.Contains(errb.String(), "action a-dup is a replay of action a-first (same idempotency key): the bridge did not call Hermes again") ||
			!strings.Contains(out.String(), `"replay_of"`) {
			t.Errorf("%+v: stdout %q stderr %q", o, out.String(), errb.String())
		}
	}
	out, errb := &syncBuffer{}, &syncBuffer{}
	noErr(t, newPrinter(out, errb, &cmdOptions{}).result(&events.Result{ActionID: "a-1", Status: events.StatusCompleted, Output: json.RawMessage(`{}`)}))
	if errb.String() != "" {
		t.Errorf("a result that is no replay: stderr %q", errb.String())
	}
}

// call's action deadline is --deadline; the earlier --timeout still sets it, with a note
// that elsewhere --timeout is the wait for an answer (issue 26, item 14).
func TestCallDeadline(t *testing.T) {
	e := newHintEnv(t, time.Hour)
	for _, tt := range []struct {
		flag, id string
		note     bool
	}{{"--deadline", "dl-1", false}, {"--timeout", "dl-2", true}} {
		code, _, errOut := runMain(context.Background(), e.env, "", "call", "--op", "chat", "--prompt", "x", "--no-follow", "--action-id", tt.id, tt.flag, "90s")
		if code != exitOK || strings.Contains(errOut, "now spelled --deadline") != tt.note {
			t.Errorf("%s: exit %d\n%s", tt.flag, code, errOut)
		}
		st, err := e.js.Stream(context.Background(), "HERMES_ACTIONS")
		noErr(t, err)
		m, err := st.GetLastMsgForSubject(context.Background(), "hermes.actions.primary.chat")
		noErr(t, err)
		if !strings.Contains(string(m.Data), `"timeout_ms":90000`) || m.Header.Get("ce-id") != tt.id {
			t.Errorf("%s: the action stored is %s %s", tt.flag, m.Header, m.Data)
		}
	}
}
