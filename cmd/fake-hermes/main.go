// Command fake-hermes runs the in-process Hermes API fake (package
// hermes/hermestest) on a TCP port, for manual testing and e2e runs. Its flags expose
// what tests script in Go: the Hermes version to imitate (--hermes-version), slow
// streams (--deltas, --delta-delay, --delay), tool calls and tool approvals on
// /v1/runs (--tool, --approval) and faults (--fault: an HTTP status, a reset, slow
// headers, a stream dropped, stalled or broken after some events). --version prints
// fake-hermes's own version.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

const usage = `fake-hermes: a fake Hermes Agent API server (gateway/platforms/api_server.py).

Usage:
  fake-hermes [flags]

Flags:
`

const examples = `
Environment:
  FAKE_HERMES_ADDR  the listen address when --addr is not given
  FAKE_HERMES_KEY   the bearer key when --key is not given (keeps it out of ps)

On start it prints the line that points hermes-bridge at it, to paste into the
bridge's terminal, for example:
  export HERMES_API_KEY=` + hermestest.DefaultAPIKey + `
and one line for each tool call, approval and fault it was told to play.

Examples:
  # default: 127.0.0.1:8642, Hermes 0.19.0, the built-in test key
  fake-hermes

  # imitate Hermes 0.16.0 with an explicit key
  fake-hermes --hermes-version 0.16.0 --key my-long-test-key-0123456789

  # imitate Hermes 0.21.3: durable runs idempotency, steer, approval request_id
  fake-hermes --hermes-version 0.21.3

  # slow streams: 20 deltas, 200ms apart, keepalive every 2s, gate at 2 runs
  fake-hermes --deltas 20 --delta-delay 200ms --keepalive 2s --max-concurrent-runs 2

  # tool approvals: every run (hermes-bridge's run operation) asks to approve
  # "rm -rf build/" before it answers; decide with hermes-bridge pending / approve
  fake-hermes --approval 'rm -rf build/'

  # faults: the next chat_stream answers 500, the one after it is cut after 3 events,
  # and every request's headers come 2s late
  fake-hermes --fault route=chat_stream,status=500 --fault route=chat_stream,after=3,drop \
    --fault delay=2s,times=every

  # with the defaults running:
  curl -sS http://127.0.0.1:8642/health
  curl -sS -H "Authorization: Bearer ` + hermestest.DefaultAPIKey + `" \
       -d '{"messages":[{"role":"user","content":"hi"}],"stream":true}' \
       http://127.0.0.1:8642/v1/chat/completions
`

// defaultAddr is where fake-hermes listens by default: Hermes's own default, which is
// also the bridge's default HERMES_URL.
const defaultAddr = "127.0.0.1:8642"

// bridgeDefaultURL is hermes-bridge's HERMES_URL when it is not set.
const bridgeDefaultURL = "http://" + defaultAddr

type options struct {
	addr          string
	key           string
	keyShown      string // the key in the start lines: the public test key itself, else where it came from
	hermesVersion string
	maxRuns       int // -1: the version's default
	keepalive     time.Duration
	deltas        int
	deltaDelay    time.Duration
	delay         time.Duration
	tools         []toolCall // played by every agent turn, in order
	faults        []hermestest.Fault
	showVersion   bool // --version: print fake-hermes's own version and exit
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fake-hermes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
		fmt.Fprint(stderr, examples)
	}
	fs.StringVar(&o.addr, "addr", "", "listen address (default: $FAKE_HERMES_ADDR when set, else "+defaultAddr+")")
	fs.StringVar(&o.key, "key", "", "bearer API key, at least 16 characters (default: $FAKE_HERMES_KEY when set, else "+hermestest.DefaultAPIKey+")")
	fs.StringVar(&o.hermesVersion, "hermes-version", hermestest.Version019, "Hermes version to imitate: 0.19.0, 0.16.0 or 0.21.3")
	fs.BoolVar(&o.showVersion, "version", false, "print fake-hermes's own version and exit (the Hermes version to imitate is --hermes-version)")
	o.maxRuns = -1
	fs.Func("max-concurrent-runs", "concurrency gate on chat/responses: `n` runs at once, 0 disables (default: 10 for 0.19.0 and 0.21.3, off for 0.16.0)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return errors.New("must be a non-negative integer")
		}
		o.maxRuns = n
		return nil
	})
	fs.DurationVar(&o.keepalive, "keepalive", 30*time.Second, "SSE keepalive idle interval")
	fs.IntVar(&o.deltas, "deltas", 0, "number of stream deltas per reply (0: one per word)")
	fs.DurationVar(&o.deltaDelay, "delta-delay", 0, "delay between stream deltas (a slow stream)")
	fs.DurationVar(&o.delay, "delay", 0, "think time of every agent turn: before its first event after the stream preamble, and before a JSON reply")
	fs.Func("tool", "every agent turn first runs the terminal tool with this `command` (repeatable, in order with --approval): tool events in streams", func(s string) error {
		o.tools = append(o.tools, toolCall{command: s})
		return nil
	})
	fs.Func("approval", "every agent turn first runs the terminal tool with this `command`, which on /v1/runs (hermes-bridge's run operation) waits for an approval decision (repeatable)", func(s string) error {
		o.tools = append(o.tools, toolCall{command: s, approval: true})
		return nil
	})
	fs.Func("fault", faultHelp, func(s string) error {
		f, err := parseFault(s)
		o.faults = append(o.faults, f)
		return err
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.showVersion {
		if fs.NArg() > 0 && isHermesVersion(fs.Arg(0)) {
			return o, fmt.Errorf("--version prints fake-hermes's own version; to imitate Hermes %s use --hermes-version %s", fs.Arg(0), fs.Arg(0))
		}
		return o, nil
	}
	o.addr = cmp.Or(o.addr, os.Getenv("FAKE_HERMES_ADDR"), defaultAddr)
	switch {
	case o.key != "":
		o.keyShown = "<the --key value>"
	case os.Getenv("FAKE_HERMES_KEY") != "":
		o.key, o.keyShown = os.Getenv("FAKE_HERMES_KEY"), `"$FAKE_HERMES_KEY"`
	default:
		o.key, o.keyShown = hermestest.DefaultAPIKey, hermestest.DefaultAPIKey
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if !isHermesVersion(o.hermesVersion) {
		return o, fmt.Errorf("--hermes-version must be %s, %s or %s", hermestest.Version019, hermestest.Version016, hermestest.Version021)
	}
	if len(o.key) < 16 {
		return o, errors.New("--key must be at least 16 characters (Hermes refuses shorter keys)")
	}
	return o, nil
}

// isHermesVersion reports whether v is a Hermes version the fake imitates.
func isHermesVersion(v string) bool {
	switch v {
	case hermestest.Version019, hermestest.Version016, hermestest.Version021:
		return true
	}
	return false
}

// toolCall is a call of Hermes's terminal tool (--tool, --approval).
type toolCall struct {
	command  string
	approval bool // on /v1/runs it waits for an approval decision
}

// tool is the fake's script of c.
func (c toolCall) tool() hermestest.Tool {
	args, _ := json.Marshal(map[string]string{"command": c.command})
	t := hermestest.Tool{Name: "terminal", Args: string(args), Output: "done: " + c.command}
	if c.approval {
		t.Approval = &hermestest.Approval{Command: c.command}
	}
	return t
}

func (o options) serverOptions() []hermestest.Option {
	opts := []hermestest.Option{
		hermestest.WithAPIKey(o.key),
		hermestest.WithVersion(o.hermesVersion),
		hermestest.WithKeepalive(o.keepalive),
	}
	if o.maxRuns >= 0 {
		opts = append(opts, hermestest.WithMaxConcurrentRuns(o.maxRuns))
	}
	if o.deltas > 0 || o.deltaDelay > 0 || o.delay > 0 || len(o.tools) > 0 {
		n, d, delay := o.deltas, o.deltaDelay, o.delay
		var tools []hermestest.Tool
		for _, c := range o.tools {
			tools = append(tools, c.tool())
		}
		opts = append(opts, hermestest.WithAgent(func(ctx context.Context, t hermestest.Turn) hermestest.Reply {
			r := hermestest.StubAgent(ctx, t)
			r.Deltas, r.DeltaDelay, r.Delay, r.Tools = n, d, delay, tools
			return r
		}))
	}
	return opts
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli runs fake-hermes with args until ctx is done and returns the exit code: 0, 1 when
// serving failed, 2 for a usage error.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "fake-hermes:", err)
		return 2
	}
	if o.showVersion {
		fmt.Fprintf(stdout, "fake-hermes %s\n", versionString())
		return 0
	}
	if err := run(ctx, o, func(url string) { fmt.Fprint(stderr, startLines(o, url)) }); err != nil {
		fmt.Fprintln(stderr, "fake-hermes:", err)
		return 1
	}
	return 0
}

// startLines is what fake-hermes prints once it listens on url: the address, then the
// line that points hermes-bridge at it. The key is printed only when it is the public
// test key; a key given with --key or FAKE_HERMES_KEY is referred to, never printed.
func startLines(o options, url string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fake-hermes %s listening on %s (model: hermes-agent)\n", o.hermesVersion, url)
	for _, c := range o.tools {
		if c.approval {
			fmt.Fprintf(&b, "every agent turn runs the terminal tool: %s; a run (/v1/runs) waits for its approval\n", c.command)
		} else {
			fmt.Fprintf(&b, "every agent turn runs the terminal tool: %s\n", c.command)
		}
	}
	for _, f := range o.faults {
		fmt.Fprintf(&b, "fault: %s\n", describeFault(f))
	}
	vars := "HERMES_API_KEY=" + o.keyShown
	if url != bridgeDefaultURL {
		vars = "HERMES_URL=" + url + " " + vars
	}
	fmt.Fprintf(&b, "point hermes-bridge at it (in the terminal of 'make run' or 'hermes-bridge run'):\n  export %s\n", vars)
	return b.String()
}

// run serves until ctx is done; ready is called with the base URL once listening.
func run(ctx context.Context, o options, ready func(url string)) error {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	fake := hermestest.NewUnstartedServer(o.serverOptions()...)
	for _, f := range o.faults {
		fake.InjectFault(f)
	}
	srv := &http.Server{Handler: fake.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	ready("http://" + ln.Addr().String())
	select {
	case err := <-errc:
		fake.Close()
		return err
	case <-ctx.Done():
	}
	fake.Close() // releases stalled streams and agent goroutines first
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
