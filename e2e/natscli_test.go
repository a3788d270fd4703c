package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
)

// The nats CLI (natscli) the documents' examples are run with: the version e2e/natscli/go.mod
// pins as a tool, built once per test binary run (TestMain removes it).
var (
	natsOnce                sync.Once
	natsDir, natsPath       string
	natsErr                 error
	natsBuilt, natsBuilding time.Duration
)

// natsCLI returns the path of the nats CLI, building it on first use.
func natsCLI(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the nats CLI; skipped in -short mode")
	}
	natsOnce.Do(func() {
		natsDir, natsErr = os.MkdirTemp("", "hermes-bridge-e2e-natscli-")
		if natsErr != nil {
			return
		}
		natsPath = filepath.Join(natsDir, "nats")
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", natsPath, "github.com/nats-io/natscli/nats")
		cmd.Dir = filepath.Join("natscli") // the module of e2e/natscli/go.mod
		if out, err := cmd.CombinedOutput(); err != nil {
			natsErr = fmt.Errorf("go build github.com/nats-io/natscli/nats in e2e/natscli: %v\n%s", err, out)
		}
		natsBuilding = time.Since(start)
	})
	if natsErr != nil {
		t.Fatalf("building the nats CLI: %v", natsErr)
	}
	if natsBuilt == 0 {
		natsBuilt = natsBuilding
		t.Logf("built the nats CLI (natscli, e2e/natscli/go.mod) in %s", natsBuilding.Round(100*time.Millisecond))
	}
	return natsPath
}

// docCommand is one nats command of a document's sh blocks: continuation lines joined,
// the trailing comment dropped, with the shell variables the block set before it.
type docCommand struct {
	doc  string
	line int
	vars []string // NAME="..." lines of the block before the command
	text string
}

var assignRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`)

// stripComment drops a shell comment (# after white space, outside quotes) from line.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimRight(line[:i], " \t")
		}
	}
	return line
}

// docNatsCommands returns every nats command in the sh blocks of the documents.
func docNatsCommands(t *testing.T, root string) []docCommand {
	t.Helper()
	var cmds []docCommand
	for _, name := range docFiles {
		lines := strings.Split(readDoc(t, root, name), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```sh" {
				continue
			}
			var vars []string
			for i++; i < len(lines) && !fenceRE.MatchString(lines[i]); i++ {
				start := i
				l := strings.TrimSpace(lines[i])
				for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
					i++
					l = strings.TrimSpace(strings.TrimSuffix(l, `\`)) + " " + strings.TrimSpace(lines[i])
				}
				l = stripComment(l)
				switch {
				case assignRE.MatchString(l):
					vars = append(vars, l)
				case strings.HasPrefix(l, "nats "):
					cmds = append(cmds, docCommand{doc: name, line: start + 1, vars: slices.Clone(vars), text: l})
				}
			}
		}
	}
	return cmds
}

// natsCase says how a test runs one documented nats command.
type natsCase struct {
	// env is the server it runs against: "plain" (the embedded server without users, as
	// hermes-bridge run starts it), "deploy" (deploy/nats-server.conf, the bridge as its
	// user) or "teams" (deploy/nats-server-teams.conf, team A's bridge).
	env string
	// bg: the command keeps running (a subscription, as in a terminal of its own). It is
	// started before the env's other commands and stopped with SIGINT (Ctrl-C) once its
	// output matched want, unless it ended by itself (--count).
	bg bool
	// want is a regular expression its output (stdout and stderr) must match.
	want string
	// refused: the server refuses it (the example shows a permission the role lacks): it
	// must fail, naming a permissions violation.
	refused bool
	// settles is the action the command publishes: it must complete before the next
	// command runs (as the reader waits for it in the documents).
	settles string
	// skip, when set, is why the command cannot run against an embedded server.
	skip string
	// undo is a shell command run after it, so that the commands after it run as they
	// would in a shell that never ran it (a selected context would send them elsewhere).
	undo string
}

// natsCases holds every nats command of the documents, as docNatsCommands returns it. A
// command the documents gain or change has no case until it is added here.
var natsCases = map[string]natsCase{
	// README.md: publish, then follow.
	`nats sub --count 1 'hermes.results.incident-42'`: {env: "plain", bg: true, want: `"status":"completed"`},
	`nats pub --jetstream hermes.actions.primary.chat_stream -H ce-specversion:1.0 -H ce-id:incident-42 -H ce-source:urn:agent:triage -H ce-type:hermes.bridge.action.v1 -H content-type:application/json -H Nats-Msg-Id:incident-42 '{"input":{"prompt":"Summarize the incident notes."},"idempotency_key":"incident-42-summary","timeout_ms":120000}'`: {env: "plain", want: `Stored in Stream: HERMES_ACTIONS`, settles: "incident-42"},
	// nats req on an action subject: the stream's acknowledgement, not the result.
	`nats req hermes.actions.primary.models -H content-type:application/cloudevents+json '{"specversion":"1.0","id":"models-1","source":"urn:agent:ops","type":"hermes.bridge.action.v1","data":{"input":{}}}'`: {env: "plain", want: `\{"stream":"HERMES_ACTIONS","seq":\d+\}`, settles: "models-1"},
	`nats sub --stream HERMES_OUTPUT --all 'hermes.*.incident-42'`: {env: "plain", bg: true, want: `(?s)subject: hermes\.events\.incident-42.*subject: hermes\.results\.incident-42`},
	`nats req hermes.cancel.incident-42 ''`:                        {env: "plain", want: `"state":"already_settled"`},
	// README.md: a natscli context (written to the shell's own HOME; it reaches nothing:
	// natsctx_test.go in cmd/hermes-bridge runs the client commands against one).
	`nats context add staging --server nats://nats.staging:4222 --creds ~/agent-chat.creds --inbox-prefix _INBOX_agent_chat`: {env: "plain", want: `(?s)staging.*nats://nats\.staging:4222`},
	`nats context select staging`: {env: "plain", want: `staging`, undo: `rm "$XDG_CONFIG_HOME/nats/context.txt"`},
	// schemas/README.md: a decision for the parked del-7.
	`nats pub --jetstream hermes.approvals.del-7 -H ce-specversion:1.0 -H ce-id:del-7-decision-1 -H ce-source:urn:approver:alice -H ce-type:hermes.bridge.approval.v1 -H content-type:application/json '{"decision":"approve","approver":"alice","reason":"ticket OPS-42","input_sha256":"<input_sha256>"}'`: {env: "plain", want: `Stored in Stream: HERMES_ACTIONS`},
	// deploy/README.md: service discovery, on the embedded server as run starts it.
	`nats micro ls`:                  {env: "plain", want: `hermes-bridge`},
	`nats micro info hermes-bridge`:  {env: "plain", want: `Endpoints`},
	`nats micro stats hermes-bridge`: {env: "plain", want: `hermes-bridge`},
	// deploy/README.md: the roles of nats-server.conf.
	`nats $A pub hermes.actions.primary.chat -H ce-specversion:1.0 -H ce-id:q-1 -H ce-source:urn:agent:chat -H ce-type:hermes.bridge.action.v1 -H content-type:application/json -H Nats-Msg-Id:q-1 --jetstream '{"input":{"prompt":"Hello"}}'`: {env: "deploy", want: `Stored in Stream: HERMES_ACTIONS`, settles: "q-1"},
	`nats $A sub 'hermes.results.q-1'`:                                          {env: "deploy", bg: true, want: `"action_id":"q-1"`},
	`nats $A sub --stream HERMES_OUTPUT --all 'hermes.*.q-1'`:                   {env: "deploy", bg: true, want: `subject: hermes\.results\.q-1`},
	`nats $A pub hermes.actions.primary.session_delete --jetstream '{}'`:        {env: "deploy", refused: true},
	`nats $D sub 'hermes.results.>'`:                                            {env: "deploy", bg: true, want: `Received on "hermes\.results\.q-1"`},
	`nats $D sub --stream HERMES_OUTPUT --all 'hermes.*.q-1'`:                   {env: "deploy", bg: true, want: `subject: hermes\.results\.q-1`},
	`nats $D sub --stream HERMES_DLQ --all 'hermes.dlq'`:                        {env: "deploy", bg: true, want: `subject: hermes\.dlq`},
	`nats $P sub --stream HERMES_OUTPUT --all --count 1 'hermes.results.del-7'`: {env: "deploy", bg: true, want: `"status":"pending_approval"`},
	`nats $P pub hermes.approvals.del-7 --jetstream -H ce-specversion:1.0 -H ce-id:del-7:approval:1 -H ce-source:urn:approver:alice -H ce-type:hermes.bridge.approval.v1 -H content-type:application/json '{"decision":"approve","approver":"alice","reason":"ticket 42","input_sha256":"<input_sha256>"}'`: {env: "deploy", want: `Stored in Stream: HERMES_ACTIONS`},
	`nats $P req hermes.cancel.q-2 ''`:                                       {env: "deploy", want: `"action_id":"q-2","state":"unknown"`},
	`nats $P req hermes.steer.run-3 '{"text":"focus on the failing tests"}'`: {env: "deploy", want: `"action_id":"run-3","state":"refused","code":"unknown"`},
	`nats --user ops --password $OPS_PASSWORD micro ls`:                      {env: "deploy", want: `hermes-bridge`},
	`nats --user ops --password $OPS_PASSWORD micro stats hermes-bridge`:     {env: "deploy", want: `hermes-bridge`},
	// deploy/README.md: the teams of nats-server-teams.conf.
	`nats --user agent-a --password $TEAM_A_AGENT_PASSWORD --inbox-prefix _INBOX_agent_chat sub 'hermes.results.>'`: {env: "teams", bg: true, want: `Received on "hermes\.results\.team-a-1"`},
	`nats --user observer --password $OBSERVER_PASSWORD sub 'team_b.hermes.results.>'`:                              {env: "teams", bg: true, want: `Received on "team_b\.hermes\.results\.team-b-1"`},
}

// TestDocsNatsCommands runs every nats command of README.md, schemas/README.md and
// deploy/README.md with the nats CLI (natscli v0.5.0, pinned in e2e/natscli/go.mod) against
// an embedded NATS server and a bridge on it, as pasted into a shell (bash), with the
// block's shell variables. The only changes to a command, both mechanical: the server
// nats://nats.internal:4222 a role's variable names becomes the test server (commands
// without --server reach it through NATS_URL, which natscli reads), and the placeholder
// <input_sha256> becomes the parked action's hash. The server is the embedded one without
// users, as hermes-bridge run starts it, or deploy/nats-server.conf (or the teams file)
// for the role examples, with fresh passwords in the variables they name.
func TestDocsNatsCommands(t *testing.T) {
	nats := natsCLI(t)
	root, err := filepath.Abs("..")
	requireOK(t, err)
	byEnv := map[string][]docCommand{}
	for _, c := range docNatsCommands(t, root) {
		nc, ok := natsCases[c.text]
		switch {
		case !ok:
			t.Errorf("%s:%d: a nats command without a case in natsCases (add how to run it, or why it cannot run): %s", c.doc, c.line, c.text)
		case nc.skip != "":
			t.Logf("%s:%d: not run: %s: %s", c.doc, c.line, nc.skip, c.text)
		default:
			byEnv[nc.env] = append(byEnv[nc.env], c)
		}
	}
	for text := range natsCases {
		found := false
		for _, cs := range byEnv {
			for _, c := range cs {
				found = found || c.text == text
			}
		}
		if !found && natsCases[text].skip == "" {
			t.Errorf("natsCases has a command no document shows (remove it): %s", text)
		}
	}
	if t.Failed() {
		return
	}
	t.Run("plain", func(t *testing.T) { runDocNats(t, nats, "plain", byEnv["plain"]) })
	t.Run("deploy", func(t *testing.T) { runDocNats(t, nats, "deploy", byEnv["deploy"]) })
	t.Run("teams", func(t *testing.T) { runDocNats(t, nats, "teams", byEnv["teams"]) })
}

// runDocNats starts the environment env, sets up what its commands refer to, and runs
// them: the background ones first, then the others in the documents' order.
func runDocNats(t *testing.T, nats, env string, cmds []docCommand) {
	if len(cmds) == 0 {
		t.Skipf("no command runs against %s", env)
	}
	var h *harness
	var srvLog *syncBuffer
	switch env {
	case "plain":
		h = newHarness(t)
	case "deploy":
		h, srvLog = deployHarness(t, false, []string{"bridge", "dashboard", "approver", "ops"})
	case "teams":
		h, srvLog = deployHarness(t, true, []string{"bridge-a", "agent-a", "observer"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// What the commands refer to: a parked deletion del-7 (its hash replaces
	// <input_sha256>), and for the dead-letter example one message that is no action.
	hash := ""
	if env != "teams" {
		_, out := parkedDelete(t, h, "support-case-2030", "del-7", client.WithActionID("del-7"))
		hash = out.InputSHA256
	}
	if env == "deploy" {
		h.publishRaw("hermes.actions.primary.chat", nil, []byte("not a CloudEvent"))
	}

	// The shell each command runs in: the nats CLI first on PATH, a HOME of its own (no
	// natscli contexts), NATS_URL naming the test server, the passwords of the users.
	home := t.TempDir()
	shellEnv := []string{"PATH=" + filepath.Dir(nats) + ":" + os.Getenv("PATH"), "HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "NATS_URL=" + h.ns.ClientURL()}
	for k, v := range testPasswords {
		shellEnv = append(shellEnv, k+"="+v)
	}
	script := func(c docCommand) string {
		text := strings.ReplaceAll(c.text, "<input_sha256>", hash)
		vars := strings.ReplaceAll(strings.Join(c.vars, "\n"), "nats://nats.internal:4222", h.ns.ClientURL())
		return "set -eu\n" + vars + "\n" + text
	}
	start := func(c docCommand) *quickStartBlock {
		b := &quickStartBlock{lines: []string{c.text}, out: &syncBuffer{}, done: make(chan struct{})}
		b.cmd = exec.Command("bash", "-c", script(c))
		b.cmd.Dir, b.cmd.Env, b.cmd.Stdout, b.cmd.Stderr = home, shellEnv, b.out, b.out
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		requireOK(t, b.cmd.Start())
		go func() { b.err = b.cmd.Wait(); close(b.done) }()
		t.Cleanup(func() {
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		})
		return b
	}

	// The subscriptions first, each in its own "terminal"; ready once the server has as
	// many nats CLI connections with a subscription.
	var bgs []*quickStartBlock
	var bgCmds []docCommand
	for _, c := range cmds {
		if natsCases[c.text].bg {
			bgs = append(bgs, start(c))
			bgCmds = append(bgCmds, c)
		}
	}
	h.until(30*time.Second, "the nats CLI subscriptions are in place", func() bool {
		n := cliSubscribers(t, h.ns.NATS())
		for _, b := range bgs {
			select {
			case <-b.done: // --count: done already
				n++
			default:
			}
		}
		return n >= len(bgs)
	})

	for _, c := range cmds {
		nc := natsCases[c.text]
		if nc.bg {
			continue
		}
		b := start(c)
		select {
		case <-b.done:
		case <-ctx.Done():
			t.Fatalf("%s:%d did not finish: %s\n%s", c.doc, c.line, c.text, b.out)
		}
		out := b.out.String()
		switch {
		case nc.refused:
			if b.err == nil || !strings.Contains(out, "Permissions Violation") {
				t.Errorf("%s:%d: want a refusal (a permissions violation, exit status not 0), got %v:\n%s", c.doc, c.line, b.err, out)
			}
		case b.err != nil:
			t.Errorf("%s:%d: %v: %s\n%s", c.doc, c.line, b.err, c.text, out)
		case !regexp.MustCompile(nc.want).MatchString(out):
			t.Errorf("%s:%d: output does not match %s: %s\n%s", c.doc, c.line, nc.want, c.text, out)
		}
		if nc.undo != "" {
			u := exec.Command("bash", "-c", "set -eu\n"+nc.undo)
			u.Dir, u.Env = home, shellEnv
			if out, err := u.CombinedOutput(); err != nil {
				t.Fatalf("%s:%d: undoing %s: %v\n%s", c.doc, c.line, c.text, err, out)
			}
		}
		if nc.settles != "" {
			h.followOK(nc.settles)
		}
		if strings.Contains(c.text, "hermes.approvals.del-7") {
			// The decision applies: del-7 runs (the session is deleted).
			h.followOK("del-7")
		}
	}

	// Outputs for the teams' subscriptions: one result in each team's account.
	if env == "teams" {
		requireOK(t, h.nc.Publish("hermes.results.team-a-1", []byte(`{}`))) // as team A's ops user
		requireOK(t, h.nc.Flush())
		publishAsOpsB(t, h, "hermes.results.team-b-1")
	}
	for i, b := range bgs {
		c, nc := bgCmds[i], natsCases[bgCmds[i].text]
		re := regexp.MustCompile(nc.want)
		h.until(30*time.Second, c.text+" prints "+nc.want, func() bool { return re.MatchString(b.out.String()) })
		select {
		case <-b.done: // --count: it ended by itself
			if b.err != nil {
				t.Errorf("%s:%d: %v: %s\n%s", c.doc, c.line, b.err, c.text, b.out)
			}
		default:
			b.interrupt(t, 10*time.Second)
		}
	}
	if srvLog != nil {
		for _, v := range serverViolations(srvLog, "") {
			if !strings.Contains(v, "hermes.actions.primary.session_delete") {
				t.Errorf("permission violation: %s", v)
			}
		}
	}
}

// cliSubscribers counts the nats CLI's connections that hold a subscription.
func cliSubscribers(t *testing.T, s *server.Server) int {
	t.Helper()
	cz, err := s.Connz(&server.ConnzOptions{Subscriptions: true, Limit: 1024})
	requireOK(t, err)
	n := 0
	for _, c := range cz.Conns {
		if strings.HasPrefix(c.Name, "NATS CLI") && c.NumSubs > 0 {
			n++
		}
	}
	return n
}

// publishAsOpsB publishes an empty message on subject in team B's account, as its ops
// user (the stream's republishing of a result of team B's bridge lands there the same).
func publishAsOpsB(t *testing.T, h *harness, subject string) {
	t.Helper()
	nc, err := nats.Connect(h.ns.ClientURL(), nats.UserInfo("ops-b", envPassword(t, "TEAM_B_OPS_PASSWORD")))
	requireOK(t, err)
	defer nc.Close()
	requireOK(t, nc.Publish(subject, []byte(`{}`)))
	requireOK(t, nc.Flush())
}
