// Command fake-hermes runs the in-process Hermes API fake (package
// hermes/hermestest) on a TCP port, for manual testing and e2e runs.
package main

import (
	"cmp"
	"context"
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

Examples:
  # default: 127.0.0.1:8642, Hermes 0.19.0, the built-in test key
  fake-hermes

  # imitate Hermes 0.16.0 with an explicit key
  fake-hermes --version 0.16.0 --key my-long-test-key-0123456789

  # imitate Hermes 0.21.3: durable runs idempotency, steer, approval request_id
  fake-hermes --version 0.21.3

  # slow streams: 20 deltas, 200ms apart, keepalive every 2s, gate at 2 runs
  fake-hermes --deltas 20 --delta-delay 200ms --keepalive 2s --max-concurrent-runs 2

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
	addr       string
	key        string
	keyShown   string // the key in the start lines: the public test key itself, else where it came from
	version    string
	maxRuns    int // -1: the version's default
	keepalive  time.Duration
	deltas     int
	deltaDelay time.Duration
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
	fs.StringVar(&o.version, "version", hermestest.Version019, "Hermes version to imitate: 0.19.0, 0.16.0 or 0.21.3")
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
	fs.DurationVar(&o.deltaDelay, "delta-delay", 0, "delay between stream deltas")
	if err := fs.Parse(args); err != nil {
		return o, err
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
	switch o.version {
	case hermestest.Version019, hermestest.Version016, hermestest.Version021:
	default:
		return o, fmt.Errorf("--version must be %s, %s or %s", hermestest.Version019, hermestest.Version016, hermestest.Version021)
	}
	if len(o.key) < 16 {
		return o, errors.New("--key must be at least 16 characters (Hermes refuses shorter keys)")
	}
	return o, nil
}

func (o options) serverOptions() []hermestest.Option {
	opts := []hermestest.Option{
		hermestest.WithAPIKey(o.key),
		hermestest.WithVersion(o.version),
		hermestest.WithKeepalive(o.keepalive),
	}
	if o.maxRuns >= 0 {
		opts = append(opts, hermestest.WithMaxConcurrentRuns(o.maxRuns))
	}
	if o.deltas > 0 || o.deltaDelay > 0 {
		n, d := o.deltas, o.deltaDelay
		opts = append(opts, hermestest.WithAgent(func(ctx context.Context, t hermestest.Turn) hermestest.Reply {
			r := hermestest.StubAgent(ctx, t)
			r.Deltas, r.DeltaDelay = n, d
			return r
		}))
	}
	return opts
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake-hermes:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, func(url string) { fmt.Fprint(os.Stderr, startLines(o, url)) }); err != nil {
		fmt.Fprintln(os.Stderr, "fake-hermes:", err)
		os.Exit(1)
	}
}

// startLines is what fake-hermes prints once it listens on url: the address, then the
// line that points hermes-bridge at it. The key is printed only when it is the public
// test key; a key given with --key or FAKE_HERMES_KEY is referred to, never printed.
func startLines(o options, url string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fake-hermes %s listening on %s (model: hermes-agent)\n", o.version, url)
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
