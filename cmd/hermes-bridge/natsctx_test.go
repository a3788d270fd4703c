package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// ctxEnv is a NATS server with user/password authentication and the actions stream, on
// a random port, and a natscli configuration directory (XDG_CONFIG_HOME) to write
// contexts into.
type ctxEnv struct {
	t      *testing.T
	url    string // the server's URL, without credentials
	js     jetstream.JetStream
	xdg    string // XDG_CONFIG_HOME
	closed string // a loopback port nothing listens on: the default server in environ
}

const (
	ctxUser     = "ctx-user"
	ctxPassword = "ctx-SECRET-pw-0123"
)

func newCtxEnv(t *testing.T) *ctxEnv {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	noErr(t, os.WriteFile(conf, []byte(`accounts { A { jetstream: enabled, users: [ { user: `+ctxUser+`, password: `+ctxPassword+` } ] } }`+"\n"), 0o600))
	s := natsembed.RunTest(t, func(o *natsembed.Options) { o.ConfigFile = conf })
	_, js := natsembed.Connect(t, s, nats.UserInfo(ctxUser, ctxPassword))
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "HERMES_ACTIONS", Subjects: []string{"hermes.actions.>", "hermes.approvals.>"}})
	noErr(t, err)
	// A port that was free a moment ago: the default server (HERMES_BRIDGE_NATS_PORT)
	// of the commands below, which must not be reached.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	noErr(t, err)
	closed := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return &ctxEnv{t: t, url: s.ClientURL(), js: js, xdg: t.TempDir(), closed: closed}
}

// context writes the natscli context name with the given settings.
func (e *ctxEnv) context(name string, settings map[string]any) string {
	e.t.Helper()
	dir := filepath.Join(e.xdg, "nats", "context")
	noErr(e.t, os.MkdirAll(dir, 0o700))
	b, err := json.Marshal(settings)
	noErr(e.t, err)
	path := filepath.Join(dir, name+".json")
	noErr(e.t, os.WriteFile(path, b, 0o600))
	return path
}

// selectContext selects name as `nats context select` does.
func (e *ctxEnv) selectContext(name string) {
	e.t.Helper()
	noErr(e.t, os.WriteFile(filepath.Join(e.xdg, "nats", "context.txt"), []byte(name), 0o600))
}

// environ is the commands' environment: the configuration directory, the closed port as
// the default server, and more.
func (e *ctxEnv) environ(kv ...string) map[string]string {
	env := map[string]string{"XDG_CONFIG_HOME": e.xdg, "HERMES_BRIDGE_NATS_PORT": e.closed}
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

// stored returns how many actions the server stores.
func (e *ctxEnv) stored() uint64 {
	e.t.Helper()
	st, err := e.js.Stream(context.Background(), "HERMES_ACTIONS")
	noErr(e.t, err)
	info, err := st.Info(context.Background())
	noErr(e.t, err)
	return info.State.Msgs
}

// callNoFollow publishes one chat action with environ and args and returns the exit
// status and the output.
func callNoFollow(environ map[string]string, id string, args ...string) (int, string, string) {
	return runMain(context.Background(), environ, "", append([]string{"call", "--op", "chat", "--prompt", "x", "--no-follow", "--action-id", id}, args...)...)
}

// TestNATSContextIsHonoured is the regression test of issue 26, item 3: with
// NATS_CONTEXT=x, `hermes-bridge call` went to 127.0.0.1:4222 (here: the closed default
// port) instead of the context's server.
func TestNATSContextIsHonoured(t *testing.T) {
	e := newCtxEnv(t)
	e.context("x", map[string]any{"url": e.url, "user": ctxUser, "password": ctxPassword})
	code, out, errOut := callNoFollow(e.environ("NATS_CONTEXT", "x"), "ctx-1")
	if code != exitOK || strings.TrimSpace(out) != "ctx-1" {
		t.Fatalf("NATS_CONTEXT=x call: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if n := e.stored(); n != 1 {
		t.Fatalf("the context's server stores %d actions, want 1", n)
	}
	if strings.Contains(out+errOut, ctxPassword) {
		t.Errorf("the context's password was printed:\n%s\n%s", out, errOut)
	}
}

// The selected context (`nats context select`) is used when no context is named; a
// named one (--context, NATS_CONTEXT) wins over it, --context over NATS_CONTEXT, and an
// unknown name is an error listing the known contexts.
func TestNATSContextChoice(t *testing.T) {
	e := newCtxEnv(t)
	good := map[string]any{"url": e.url, "user": ctxUser, "password": ctxPassword}
	e.context("good", good)
	e.context("dead", map[string]any{"url": "nats://127.0.0.1:" + e.closed})
	e.selectContext("good")
	if code, out, errOut := callNoFollow(e.environ(), "sel-1"); code != exitOK {
		t.Fatalf("selected context: exit %d\n%s\n%s", code, out, errOut)
	}
	// Named contexts win over the selected one: "dead" is tried, and named in the error.
	for _, tt := range []struct {
		env  []string
		args []string
	}{
		{[]string{"NATS_CONTEXT", "dead"}, nil},
		{[]string{"NATS_CONTEXT", "good"}, []string{"--context", "dead"}},
	} {
		code, _, errOut := callNoFollow(e.environ(tt.env...), "sel-2", tt.args...)
		if code != exitUsage || !strings.Contains(errOut, "cannot connect to NATS at nats://127.0.0.1:"+e.closed+` (NATS context "dead", `) {
			t.Errorf("%v %v: exit %d\n%s", tt.env, tt.args, code, errOut)
		}
	}
	e.selectContext("dead")
	if code, out, errOut := callNoFollow(e.environ(), "sel-3", "--context", "good"); code != exitOK {
		t.Fatalf("--context good: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut := callNoFollow(e.environ("NATS_CONTEXT", "staging"), "sel-4")
	if code != exitUsage || !strings.Contains(errOut, `NATS context "staging" (NATS_CONTEXT) not found`) || !strings.Contains(errOut, "known contexts: dead, good") {
		t.Errorf("unknown context: exit %d\n%s", code, errOut)
	}
	if n := e.stored(); n != 2 {
		t.Errorf("the server stores %d actions, want 2", n)
	}
}

// Explicit settings win over the context's, field by field: NATS_URL (or --server) over
// its url, with a note when the context was named; the environment's or the flags'
// credentials over its credentials, as a whole. Passwords never appear in the output.
func TestNATSContextPrecedence(t *testing.T) {
	e := newCtxEnv(t)
	e.context("dead", map[string]any{"url": "nats://127.0.0.1:" + e.closed, "user": ctxUser, "password": ctxPassword})
	e.context("wrongpw", map[string]any{"url": e.url, "user": ctxUser, "password": "wrong-SECRET-pw"})

	// NATS_URL over the context's url; the context's credentials still apply.
	code, _, errOut := callNoFollow(e.environ("NATS_CONTEXT", "dead", "NATS_URL", e.url), "prec-1")
	if code != exitOK || !strings.Contains(errOut, `note: NATS_URL overrides the server of NATS context "dead" (nats://127.0.0.1:`+e.closed+")") {
		t.Fatalf("NATS_URL over the context: exit %d\n%s", code, errOut)
	}
	code, _, errOut = callNoFollow(e.environ("NATS_CONTEXT", "dead"), "prec-2", "--server", e.url)
	if code != exitOK || !strings.Contains(errOut, `note: --server overrides the server of NATS context "dead"`) {
		t.Fatalf("--server over the context: exit %d\n%s", code, errOut)
	}
	// A selected context overridden by NATS_URL: no note (nothing named it).
	e.selectContext("dead")
	code, _, errOut = callNoFollow(e.environ("NATS_URL", e.url), "prec-3")
	if code != exitOK || strings.Contains(errOut, "note:") {
		t.Fatalf("NATS_URL over the selected context: exit %d\n%s", code, errOut)
	}
	e.selectContext("")

	// The context's wrong password fails, without printing it; --user/--password (or
	// NATS_USER/NATS_PASSWORD) replace the context's credentials.
	code, out, errOut := callNoFollow(e.environ("NATS_CONTEXT", "wrongpw"), "prec-4")
	if code != exitUsage || !strings.Contains(errOut, "uthorization") || strings.Contains(out+errOut, "wrong-SECRET-pw") {
		t.Fatalf("wrong password: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = callNoFollow(e.environ("NATS_CONTEXT", "wrongpw"), "prec-5", "--user", ctxUser, "--password", ctxPassword)
	if code != exitOK || strings.Contains(out+errOut, ctxPassword) {
		t.Fatalf("--user/--password over the context: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = callNoFollow(e.environ("NATS_CONTEXT", "wrongpw", "NATS_USER", ctxUser, "NATS_PASSWORD", ctxPassword), "prec-6")
	if code != exitOK {
		t.Fatalf("NATS_USER/NATS_PASSWORD over the context: exit %d\n%s", code, errOut)
	}
	// Flags over the environment: a wrong NATS_PASSWORD is replaced by --password.
	code, _, errOut = callNoFollow(e.environ("NATS_URL", e.url, "NATS_USER", ctxUser, "NATS_PASSWORD", "wrong-SECRET-pw"), "prec-7",
		"--user", ctxUser, "--password", ctxPassword)
	if code != exitOK || strings.Contains(errOut, "wrong-SECRET-pw") {
		t.Fatalf("--password over NATS_PASSWORD: exit %d\n%s", code, errOut)
	}
	if n := e.stored(); n != 6 {
		t.Errorf("the server stores %d actions, want 6", n)
	}
}

// Flags that do not go together are usage errors; a context's file problems name the
// context and the setting.
func TestNATSContextAndFlagErrors(t *testing.T) {
	e := newCtxEnv(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "u"}, "--user needs --password"},
		{[]string{"--password", "p-SECRET"}, "--password needs --user"},
		{[]string{"--creds", "x.creds", "--user", "u", "--password", "p"}, "--creds and --user/--password exclude each other"},
		{[]string{"--tlscert", "c.pem"}, "--tlscert and --tlskey go together"},
		{[]string{"--context", "../x"}, `NATS context "../x" (--context): not a context name`},
	} {
		code, _, errOut := callNoFollow(e.environ(), "err-1", tt.args...)
		if code != exitUsage || !strings.Contains(errOut, tt.want) || strings.Contains(errOut, "SECRET") {
			t.Errorf("%v: exit %d\n%s", tt.args, code, errOut)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing.creds")
	e.context("bad", map[string]any{"url": e.url, "creds": missing, "jetstream_domain": "hub"})
	code, _, errOut := callNoFollow(e.environ("NATS_CONTEXT", "bad"), "err-2")
	for _, want := range []string{`NATS context "bad" creds=` + missing + ": file does not exist",
		`NATS context "bad" (` + filepath.Join(e.xdg, "nats", "context", "bad.json") + ") sets jetstream_domain, which hermes-bridge does not support"} {
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("bad context: exit %d, want %q in\n%s", code, want, errOut)
		}
	}
	code, _, errOut = callNoFollow(e.environ("NATS_CONTEXT", "bad"), "err-3", "--creds", missing)
	if code != exitUsage || !strings.Contains(errOut, "--creds="+missing+": file does not exist") {
		t.Errorf("--creds missing: exit %d\n%s", code, errOut)
	}
}

// Every client command reports the HERMES_* and NATS_* variables that no setting reads
// (issue 26, item 3); NATS_CONTEXT is one it reads.
func TestClientCommandsReportUnknownVariables(t *testing.T) {
	e := newCtxEnv(t)
	e.context("x", map[string]any{"url": e.url, "user": ctxUser, "password": ctxPassword})
	env := e.environ("NATS_CONTEXT", "x", "NATS_CERT", "c.pem", "NATS_TIMEOUT", "5s", "HERMES_BRIDGE_WORKER", "3")
	for _, args := range [][]string{{"call", "--op", "chat", "--prompt", "x", "--no-follow"}, {"pending"}, {"status", "--timeout", "100ms", "x1"}} {
		_, _, errOut := runMain(context.Background(), env, "", args...)
		for _, want := range []string{
			"hermes-bridge " + args[0] + ": warning: NATS_CERT is set but is not a hermes-bridge setting, so it is ignored; did you mean NATS_TLS_CERT?",
			"warning: NATS_TIMEOUT is set but is not a hermes-bridge setting",
			"warning: HERMES_BRIDGE_WORKER is set but is not a hermes-bridge setting, so it is ignored; did you mean HERMES_BRIDGE_WORKERS?",
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, want, errOut)
			}
		}
		if strings.Contains(errOut, "NATS_CONTEXT is set") {
			t.Errorf("%v: NATS_CONTEXT reported as unknown:\n%s", args, errOut)
		}
	}
}

// run connects to the server of the context NATS_CONTEXT names instead of starting the
// embedded server, and says which context it used; a context merely selected with `nats
// context select` is not used by run, which says so.
func TestRunNATSContext(t *testing.T) {
	e := newCtxEnv(t)
	e.context("x", map[string]any{"url": e.url, "user": ctxUser, "password": ctxPassword})
	r := startRunAsync(t, map[string]string{"XDG_CONFIG_HOME": e.xdg, "NATS_CONTEXT": "x", "HERMES_BRIDGE_NATS_PORT": e.closed})
	waitFor(t, 30*time.Second, "the bridge started", func() bool {
		select {
		case <-r.stopped:
			t.Fatalf("run stopped: %v\n%s", r.err, r.logs.String())
		default:
		}
		return strings.Contains(r.logs.String(), `"bridge started"`)
	})
	logs := r.logs.String()
	if !strings.Contains(logs, `"nats_context":"x"`) || strings.Contains(logs, "embedded NATS server") || strings.Contains(logs, ctxPassword) {
		t.Errorf("run with NATS_CONTEXT=x:\n%s", logs)
	}
	// The bridge provisioned its streams on the context's server.
	if _, err := e.js.Stream(context.Background(), "HERMES_OUTPUT"); err != nil {
		t.Errorf("no output stream on the context's server: %v", err)
	}

	e.selectContext("x")
	r = startRunAsync(t, map[string]string{"XDG_CONFIG_HOME": e.xdg, "HERMES_BRIDGE_NATS_PORT": "-1"})
	waitFor(t, 30*time.Second, "the bridge started", func() bool { return strings.Contains(r.logs.String(), `"bridge started"`) })
	logs = r.logs.String()
	if !strings.Contains(logs, "embedded NATS server started") ||
		!strings.Contains(logs, `NATS context \"x\" is selected ('nats context select'), but run does not use the selected context`) {
		t.Errorf("run with a selected context:\n%s", logs)
	}
}
