package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hermes-bridge/hermes-bridge/cmd/internal/buildinfo"
)

// version is set at build time: `make build` and `make install` pass
// -ldflags "-X main.version=$(git describe --tags --always --dirty)".
var version = "dev"

const usageTop = `hermes-bridge bridges NATS JetStream to Hermes Agent API servers.

Usage:
  hermes-bridge <command> [flags]

Commands:
  run        run the bridge service (starts an embedded NATS server unless NATS_URL or NATS_CONTEXT is set)
  call       publish one action and follow it until it settles
  watch      replay and follow an action's events and result
  pending    list the actions waiting for an approval
  approve    show a parked action's request and approve it, then follow it
  deny       show a parked action's request and deny it
  cancel     cancel an action (queued or running)
  steer      add text to a running governed run: hermes-bridge steer <action_id> <text>
  status     what the bridges' records know about an action (state, owner, attempts, result)
  version    print the version
  help       show help for a command: hermes-bridge help <command>

Examples:
  # Start the bridge with its own NATS server, against Hermes on 127.0.0.1:8642:
  HERMES_API_KEY_FILE=./hermes.key hermes-bridge run

  # In another terminal, stream a chat reply:
  hermes-bridge call --prompt "Summarize the incident notes."

  # Follow an action published elsewhere:
  hermes-bridge watch 3xTnq8v2...

  # Review and decide the actions waiting for approval (response_delete, session_delete):
  hermes-bridge pending
  hermes-bridge approve 3xTnq8v2...
  hermes-bridge deny 3xTnq8v2... --reason "wrong session"

  # Cancel an action, or ask where it is:
  hermes-bridge cancel 3xTnq8v2...
  hermes-bridge status 3xTnq8v2...

Configuration comes from the environment: 'hermes-bridge run --help' lists every variable.
`

const usageRun = `Usage:
  hermes-bridge run

Runs the bridge: consumes actions from JetStream, calls Hermes, and publishes
events and results. Stops gracefully on SIGINT or SIGTERM (in-flight actions get
HERMES_BRIDGE_SHUTDOWN_GRACE to finish). SIGHUP re-reads every API key file.

Without NATS_URL or NATS_CONTEXT, an embedded NATS server with JetStream is
started on HERMES_BRIDGE_NATS_HOST:HERMES_BRIDGE_NATS_PORT (default
127.0.0.1:4222) with its store in HERMES_BRIDGE_DATA_DIR (default ./data/nats);
its URL is printed on stderr. Only one server may use a data directory: a second
run on it exits 1. A second replica on the same machine sets NATS_URL to the URL
the first one printed. With NATS_URL, or NATS_CONTEXT naming a natscli context
(its server and credentials, where no NATS_* variable sets them), the bridge
connects to that server or cluster instead, retrying the first connection for
HERMES_BRIDGE_NATS_CONNECT_WAIT (default 30s) while it is not up. The context
selected with 'nats context select' is not used by run (the client commands use
it).

Logs go to stderr: in the console format on a terminal, else JSON lines
(HERMES_BRIDGE_LOG_FORMAT=json or console forces either).

Hermes endpoints come from HERMES_ENDPOINTS_FILE, or from HERMES_URL (one
endpoint), or default to endpoint "primary" at http://127.0.0.1:8642.

Examples:
  # Local: embedded NATS, Hermes on this machine, key from a file.
  HERMES_API_KEY_FILE=./hermes.key hermes-bridge run

  # Production: an existing cluster and several endpoints.
  NATS_URL=tls://nats-1:4222,tls://nats-2:4222 NATS_CREDS=/run/secrets/bridge.creds \
  HERMES_ENDPOINTS_FILE=/etc/hermes-bridge/endpoints.yaml HERMES_BRIDGE_REPLICAS=3 \
  hermes-bridge run

Endpoints file (JSON or YAML; a bare array is accepted too):
  {"endpoints": [{"id": "primary", "base_url": "http://127.0.0.1:8642",
                  "api_key_file": "/run/secrets/hermes_key", "tenant_id": "acme",
                  "max_concurrency": 10}]}
  Each endpoint takes its key from exactly one of api_key_file or api_key_env (the
  name of a variable holding the key), or from neither for a server without a key.

Environment:
`

const usageCall = `Usage:
  hermes-bridge call [flags]

Publishes one action and follows it: streamed text is printed as it arrives,
then the result as JSON. The exit status is 0 when the action completed, 1 when
it failed, 3 when it was cancelled, 2 for usage or connection errors, and 130
when interrupted (the action itself goes on; follow it with 'watch').

When nothing has come for 5s, it says on stderr where the action is stored and
whether a bridge consumes it (the bridges' shared consumer), and keeps waiting.

Connects to the server of --server, NATS_URL or a natscli context, else to the
embedded server of 'hermes-bridge run' (see "Connecting to NATS" below); the
"published" line names the server. A message or subscription the server
refuses ends the command at once (exit 2), naming the subject.

Flags:
`

const examplesCall = `
Examples:
  hermes-bridge call --prompt "Summarize the incident notes."
  hermes-bridge call --op chat --input '{"messages":[{"role":"user","content":"hi"}]}' --json
  hermes-bridge call --op session_create --input @session.json --key incident-42
  hermes-bridge call --op health --endpoint secondary
  echo '{"prompt":"hello"}' | hermes-bridge call --input - --events
  hermes-bridge call --prompt "long job" --no-follow   # prints the action id
`

const usageWatch = `Usage:
  hermes-bridge watch [flags] <action_id>

Replays an action's events and result from the first one and follows it until
it settles; it works for actions started (or finished) before watch. Printing
and exit status are those of 'hermes-bridge call'. When nothing is stored for
the id after 5s, it says so on stderr (the id may be unknown, or the action not
published yet) and keeps waiting.

Flags:
`

const examplesWatch = `
Examples:
  hermes-bridge watch 3xTnq8v2Lk0aQ
  hermes-bridge watch --events 3xTnq8v2Lk0aQ | jq .kind
`

const usageVersion = `Usage:
  hermes-bridge version

Prints the version, the VCS revision when known, and the Go version.
`

// cmdHelp implements `hermes-bridge help [command]`.
func cmdHelp(args []string, io stdio) int {
	if len(args) == 0 {
		fmt.Fprint(io.out, usageTop)
		return exitOK
	}
	if c, ok := clientCommands[args[0]]; ok {
		c.help(io.out, args[0])
		return exitOK
	}
	switch args[0] {
	case "run":
		printRunHelp(io.out)
	case "version":
		fmt.Fprint(io.out, usageVersion)
	case "help":
		fmt.Fprint(io.out, usageTop)
	default:
		fmt.Fprintf(io.err, "hermes-bridge help: unknown command %q\nRun 'hermes-bridge --help' for the list of commands.\n", args[0])
		return exitUsage
	}
	return exitOK
}

func printRunHelp(w io.Writer) {
	fmt.Fprint(w, usageRun)
	writeEnvTable(w)
}

// writeEnvTable lists the variables from the Config struct tags.
func writeEnvTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range configFields() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Key, cmp.Or(f.Default, "-"), f.Desc)
	}
	tw.Flush()
}

func printFlagsHelp(w io.Writer, head string, fs *flag.FlagSet, examples string) {
	fmt.Fprint(w, head)
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprint(w, examples)
}

func cmdVersion(args []string, io stdio) int {
	if len(args) > 0 {
		if isHelp(args[0]) {
			fmt.Fprint(io.out, usageVersion)
			return exitOK
		}
		fmt.Fprintf(io.err, "hermes-bridge version: unexpected argument %q\n", args[0])
		return exitUsage
	}
	fmt.Fprintf(io.out, "hermes-bridge %s\n", versionString())
	return exitOK
}

func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return versionFrom(version, bi)
}

// versionFrom is the version line of build info bi (buildinfo.Line).
func versionFrom(stamped string, bi *debug.BuildInfo) string { return buildinfo.Line(stamped, bi) }

func isHelp(a string) bool {
	return a == "-h" || a == "-help" || a == "--help" || a == "help"
}

// parseArgs parses flags that may be interspersed with positional arguments
// (`watch ID --json` and `watch --json ID` both work); "--" ends the flags. It returns
// flag.ErrHelp when help was asked for.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at the first non-flag argument, or after "--".
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseCommand parses a subcommand's arguments and returns the positional ones. When ok
// is false the command ends with code: help was asked for (help printed it) or the flags
// are wrong (the usage error is printed).
func parseCommand(cmd string, fs *flag.FlagSet, args []string, sio stdio, help func()) (pos []string, code int, ok bool) {
	pos, err := parseArgs(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		help()
		return nil, exitOK, false
	case err != nil:
		return nil, usageError(sio.err, cmd, flagValueError(fs, err.Error())), false
	}
	return pos, exitOK, true
}

// flagValueRE matches the flag package's message for a value it could not parse.
var flagValueRE = regexp.MustCompile(`^invalid (boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): parse error$`)

// flagValueError replaces the "parse error" of a flag value of the wrong kind with what
// the flag expects ("must be a duration with a unit, such as 30s, ...").
func flagValueError(fs *flag.FlagSet, msg string) string {
	m := flagValueRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	f := fs.Lookup(m[3])
	if f == nil {
		return msg
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return msg
	}
	var want string
	switch g.Get().(type) {
	case time.Duration:
		want = "must be a duration with a unit, such as 30s, 5m or 1h30m"
	case bool:
		want = "must be true or false"
	case int, int64, uint, uint64:
		want = "must be an integer"
	default:
		return msg
	}
	return fmt.Sprintf("invalid %svalue %s for flag -%s: %s", m[1], m[2], m[3], want) // usageError writes --
}

// usageError prints msg and a hint, and returns exitUsage.
func usageError(w io.Writer, cmd, msg string) int {
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = "unknown flag --" + name
	}
	// flag's own messages name flags with one dash; the docs use two.
	msg = strings.Replace(msg, " for flag -", " for flag --", 1)
	msg = strings.Replace(msg, "needs an argument: -", "needs an argument: --", 1)
	fmt.Fprintf(w, "hermes-bridge %s: %s\nRun 'hermes-bridge %s --help' for usage.\n", cmd, msg, cmd)
	return exitUsage
}
