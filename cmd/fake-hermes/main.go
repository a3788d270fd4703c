// Command fake-hermes runs the in-process Hermes API fake (package
// hermes/hermestest) on a TCP port, for manual testing and e2e runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
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
Examples:
  # default: 127.0.0.1:8642, Hermes 0.19.0, key from FAKE_HERMES_KEY or the built-in test key
  fake-hermes

  # imitate Hermes 0.16.0 with an explicit key
  fake-hermes --version 0.16.0 --key my-long-test-key-0123456789

  # slow streams: 20 deltas, 200ms apart, keepalive every 2s, gate at 2 runs
  fake-hermes --deltas 20 --delta-delay 200ms --keepalive 2s --max-concurrent-runs 2

  curl -sS http://127.0.0.1:8642/health
  curl -sS -H "Authorization: Bearer $FAKE_HERMES_KEY" -d '{"messages":[{"role":"user","content":"hi"}],"stream":true}' \
       http://127.0.0.1:8642/v1/chat/completions
`

type options struct {
	addr       string
	key        string
	version    string
	maxRuns    int
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
	defKey := os.Getenv("FAKE_HERMES_KEY")
	if defKey == "" {
		defKey = hermestest.DefaultAPIKey
	}
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8642", "listen address")
	fs.StringVar(&o.key, "key", defKey, "bearer API key (default: $FAKE_HERMES_KEY, else the hermestest default key)")
	fs.StringVar(&o.version, "version", hermestest.Version019, "Hermes version to imitate: 0.19.0 or 0.16.0")
	fs.IntVar(&o.maxRuns, "max-concurrent-runs", -1, "concurrency gate on chat/responses (default 10 for 0.19.0, off for 0.16.0; 0 disables)")
	fs.DurationVar(&o.keepalive, "keepalive", 30*time.Second, "SSE keepalive idle interval")
	fs.IntVar(&o.deltas, "deltas", 0, "number of stream deltas per reply (0: one per word)")
	fs.DurationVar(&o.deltaDelay, "delta-delay", 0, "delay between stream deltas")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.version != hermestest.Version019 && o.version != hermestest.Version016 {
		return o, fmt.Errorf("--version must be %s or %s", hermestest.Version019, hermestest.Version016)
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
	if err := run(ctx, o, func(url string) {
		log.Printf("fake-hermes %s listening on %s (model: hermes-agent)", o.version, url)
	}); err != nil {
		fmt.Fprintln(os.Stderr, "fake-hermes:", err)
		os.Exit(1)
	}
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
