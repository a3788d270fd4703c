// Command bench measures what hermes-bridge costs on top of NATS and Hermes. In one process
// it starts an embedded nats-server (random port, temporary store), the fake Hermes from
// hermes/hermestest with an instant agent, and one bridge (bridge.New + Run, public API
// only), then measures four scenarios for the bridge and for their floors, side by side in
// the same run:
//
//  1. chat: throughput and publish-to-result latency of non-streaming chat actions with
//     unique idempotency keys at a fixed concurrency, and at one action in flight.
//     Floors: the same requests straight to the fake over HTTP; a minimal hand-written
//     JetStream loop (fetch, HTTP call, publish result, ack; no KV, no dedup); and the
//     promise floor, that loop plus the two durable writes the bridge's promise needs.
//  2. stream fan-out: one chat_stream action of -events SSE events, republished and
//     delivered to a subscriber. Floors: reading the same stream over HTTP, and raw
//     JetStream async publishes of as many messages of the same size.
//  3. many streams: -streams concurrent chat_stream actions of -stream-events events:
//     completion time and memory (heap, RSS, goroutines) per in-flight action. Floor: the
//     same streams read straight from the fake at once.
//  4. duplicate storm: -dup-actions actions sharing -dup-keys idempotency keys: actions
//     settled per second and the number of Hermes calls (must equal the number of keys).
//  5. bridge process: `hermes-bridge run` built from the repository and run as its own
//     process against the same server and fake: its RSS at rest and its peak RSS under
//     scenario 1's load.
//
// It prints a table (figure, floor, ratio bridge/floor, target, pass) and writes the same as
// JSON with the machine's core count and Go version. Run it with `make bench` or
// `go run ./e2e/bench -help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const usageText = `bench measures what hermes-bridge costs on top of NATS and Hermes.

Everything but scenario 5 runs in this process: an embedded nats-server, the fake Hermes
(instant agent) and the bridge; each of scenarios 1 to 4 is measured for the bridge and for
its floors in the same run. Every scenario after the first starts from purged streams.

Scenarios (-scenarios takes numbers or names; all runs 1 to 5):
  1 chat     non-streaming chat actions, each with its own idempotency key, at -concurrency:
             actions/s, latency p50/p99, CPU and heap allocated per action, NATS traffic per
             action, each round's ratios; then a pass at one action in flight (bridge, js
             loop and promise floor, -serial-window per mode and round): p50, and the bridge's
             and the promise floor's p50 above the loop's
             floors:
               http direct    the same request straight to the fake over HTTP, no NATS
               js loop        what a plain JetStream->HTTP->NATS pipeline does: pull, decode
                              the prompt, call the fake, publish its response, ack; no durable
                              write before the call, no message id on the result
               promise floor  the js loop plus exactly the durable writes the bridge's promise
                              needs for an unsafe keyed action: one claim before the call (KV
                              Create of act.<id>, a record the size of the bridge's) and the
                              result published as the bridge appends it (Nats-Msg-Id, expected
                              last subject sequence 0, stored through the output stream's
                              subject transform and republished from there)
             both loops leave out the rest of the bridge: validation, the idempotency key's
             record and dedup reads, heartbeats, the result envelope, events, limits, metrics,
             logging and tracing
  2 stream   one chat_stream of -events SSE events: events/s republished and delivered,
             CPU and heap allocated per event
             floors: HTTP read of the same stream; raw JetStream async publish (4096 pending)
  3 streams  -streams concurrent chat_streams of -stream-events events: completion time,
             heap/RSS/goroutines per in-flight action (the bridge's goroutines counted by
             owner); floors: the same streams over HTTP, and over HTTP with every event
             stored in JetStream (async publish, as replay needs); needs two open files per stream
  4 dup      -dup-actions actions over -dup-keys idempotency keys: settled/s, Hermes calls
  5 rss      the bridge as its own process (go build ./cmd/hermes-bridge into a temporary
             directory, or -bridge-bin; hermes-bridge run configured by environment against
             this run's NATS server and fake, -concurrency workers): RSS at rest, then peak RSS
             (VmHWM) after -rss-duration of scenario 1's load, each split into file-backed
             (the binary's code and data) and anonymous (heap, stacks); in-process figures cannot
             separate the bridge's memory from the server's and the fake's. Needs the Go
             toolchain and the repository (or -bridge-bin), nothing from the network

Examples:
  go run ./e2e/bench                                      # everything, defaults (~3 min on 2 cores)
  go run ./e2e/bench -json bench.json -markdown bench.md   # what make bench runs
  go run ./e2e/bench -scenarios 1 -duration 30s -concurrency 128
  go run ./e2e/bench -scenarios stream,streams -events 20000 -store memory
  go run ./e2e/bench -scenarios 1 -tracing otlp             # what tracing costs (compare with -tracing noop)
  go run ./e2e/bench -scenarios chat -cpuprofile cpu.prof && go tool pprof -top cpu-chat-r1.prof cpu-chat-r2.prof
  go run ./e2e/bench -scenarios rss                         # the bridge process's RSS alone (~15 s)

Profiles cover the bridge's measuring windows, one file per window (cpu.prof ->
cpu-chat-r1.prof, cpu-chat1-r1.prof at one in flight, cpu-stream-r1.prof, cpu-streams.prof,
cpu-dup.prof), and scenario 1's loop windows to compare with (cpu-chat-loop-r1.prof,
cpu-chat-promise-r1.prof, cpu-chat1-loop-r1.prof, cpu-chat1-promise-r1.prof); they are whole-process
profiles (NATS server, fake and bench client included): use -focus or -tagignore to narrow.
-memprofile writes heap profiles at the end of each bridge pass (and at the peak of scenario 3,
with a goroutine profile of that moment: name-streams-held-goroutines.prof).
-mutexprofile samples lock contention over the whole run (bridge and floors) into one file.

Flags:
`

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	var scen string
	fs.DurationVar(&o.Duration, "duration", 16*time.Second, "scenario 1: measuring window of each mode (bridge and floors), split across -rounds")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Second, "scenario 1: warm-up before each mode's first window (a quarter of it before later rounds)")
	fs.IntVar(&o.Rounds, "rounds", 4, "scenarios 1 and 2: interleaved rounds (bridge and floors in turn), aggregated, to spread machine noise")
	fs.DurationVar(&o.SerialWindow, "serial-window", 2*time.Second, "scenario 1: measuring window of each mode and round at one action in flight (bridge, js loop and promise floor); 0 skips that pass")
	fs.IntVar(&o.Concurrency, "concurrency", 64, "closed-loop clients in scenarios 1 and 4 (the bridge's workers and endpoint max_concurrency are at least this)")
	fs.IntVar(&o.Events, "events", 100000, "scenario 2: SSE events in the stream (5..100000)")
	fs.IntVar(&o.Streams, "streams", 1000, "scenario 3: concurrent chat_stream actions")
	fs.IntVar(&o.StreamEvents, "stream-events", 50, "scenario 3: SSE events per stream (5..100000)")
	fs.IntVar(&o.DupActions, "dup-actions", 10000, "scenario 4: actions")
	fs.IntVar(&o.DupKeys, "dup-keys", 100, "scenario 4: idempotency keys shared by the actions")
	fs.DurationVar(&o.RSSDuration, "rss-duration", 5*time.Second, "scenario 5: how long the bridge process runs scenario 1's load")
	fs.StringVar(&o.BridgeBin, "bridge-bin", "", "scenario 5: the hermes-bridge binary to run (default: go build ./cmd/hermes-bridge of the repository the bench runs in)")
	fs.StringVar(&scen, "scenarios", "all", "comma list of scenarios: 1|chat, 2|stream, 3|streams, 4|dup, 5|rss, or all")
	fs.StringVar(&o.JSONPath, "json", "", "write the report as JSON to this file (e.g. bench.json)")
	fs.StringVar(&o.MarkdownPath, "markdown", "", "write the table as Markdown to this file (what e2e/bench/README.md's current figures show)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write CPU profiles of the bridge's measuring windows (name-<scenario>.prof)")
	fs.StringVar(&o.MemProfile, "memprofile", "", "write heap profiles after the bridge's passes (name-<scenario>.prof)")
	fs.StringVar(&o.MutexProfile, "mutexprofile", "", "write a lock-contention profile of the whole run (every mode) to this file")
	fs.StringVar(&o.Store, "store", "file", "JetStream storage of every stream and bucket: file or memory")
	fs.StringVar(&o.Tracing, "tracing", tracingNoop, "the bridge's tracing: noop (the no-op provider, as run without an OTLP endpoint), off (no provider), "+
		"otlp (the SDK sampling every action, batch processor, OTLP/HTTP protobuf to an in-process sink that discards)")
	fs.BoolVar(&o.NoMetrics, "no-metrics", false, "run the bridge without its metrics registry (to measure what the metrics cost)")
	fs.BoolVar(&o.Strict, "strict", false, "exit with status 3 when a figure misses its target")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	var problems []string
	check := func(ok bool, msg string) {
		if !ok {
			problems = append(problems, msg)
		}
	}
	check(o.Duration > 0, "-duration must be positive")
	check(o.Warmup >= 0, "-warmup must not be negative")
	check(o.SerialWindow >= 0, "-serial-window must not be negative")
	check(o.RSSDuration > 0, "-rss-duration must be positive")
	check(o.Rounds >= 1, "-rounds must be at least 1")
	check(o.Concurrency >= 1, "-concurrency must be at least 1")
	check(o.Events >= 5 && o.Events <= 100000, "-events must be from 5 to 100000 (the bridge's max_events limit)")
	check(o.Streams >= 1, "-streams must be at least 1")
	check(o.StreamEvents >= 5 && o.StreamEvents <= 100000, "-stream-events must be from 5 to 100000")
	check(o.DupKeys >= 1 && o.DupActions >= o.DupKeys, "-dup-keys must be at least 1 and -dup-actions at least -dup-keys")
	check(o.Store == "file" || o.Store == "memory", "-store must be file or memory")
	check(o.Tracing == tracingNoop || o.Tracing == tracingOff || o.Tracing == tracingOTLP, "-tracing must be noop, off or otlp")
	sel, err := parseScenarios(scen)
	if err != nil {
		problems = append(problems, err.Error())
	}
	o.Scenarios = sel
	if len(problems) > 0 {
		return o, errors.New(strings.Join(problems, "; "))
	}
	return o, nil
}

var scenarioNames = map[string]string{"1": "chat", "chat": "chat", "2": "stream", "stream": "stream",
	"3": "streams", "streams": "streams", "many": "streams", "4": "dup", "dup": "dup", "5": "rss", "rss": "rss"}

var scenarioOrder = []string{"chat", "stream", "streams", "dup", "rss"}

func parseScenarios(s string) ([]string, error) {
	if s == "" || s == "all" {
		return scenarioOrder, nil
	}
	seen := map[string]bool{}
	for f := range strings.SplitSeq(s, ",") {
		name, ok := scenarioNames[strings.TrimSpace(strings.ToLower(f))]
		if !ok {
			return nil, fmt.Errorf("-scenarios: unknown scenario %q (want 1|chat, 2|stream, 3|streams, 4|dup, 5|rss)", f)
		}
		seen[name] = true
	}
	var out []string
	for _, n := range scenarioOrder {
		if seen[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// run performs the selected scenarios and writes the table to stdout (and the JSON file).
func run(ctx context.Context, o options, stdout, stderr io.Writer) (*Report, error) {
	st := &statusLog{w: stderr, start: time.Now()}
	rep := &Report{Machine: machine(), Store: o.Store, StartedAt: time.Now().UTC(), Params: map[string]any{
		"duration_s": o.Duration.Seconds(), "warmup_s": o.Warmup.Seconds(), "rounds": o.Rounds, "serial_window_s": o.SerialWindow.Seconds(),
		"rss_duration_s": o.RSSDuration.Seconds(), "bridge_bin": o.BridgeBin,
		"concurrency": o.Concurrency, "events": o.Events, "streams": o.Streams, "stream_events": o.StreamEvents,
		"dup_actions": o.DupActions, "dup_keys": o.DupKeys, "scenarios": o.Scenarios,
		"tracing": o.Tracing, "metrics": !o.NoMetrics,
	}}
	st.printf("starting embedded nats-server (JetStream %s store), fake Hermes (instant agent, no run limit) and the bridge", o.Store)
	e, err := newEnv(ctx, o, st)
	if err != nil {
		return nil, err
	}
	defer e.close()
	st.printf("ready: bridge workers and endpoint max_concurrency %d; %d cores, GOMAXPROCS %d", e.workers, rep.Machine.Cores, rep.Machine.GOMAXPROCS)
	prof := &profiler{cpu: o.CPUProfile, mem: o.MemProfile, st: st}
	writeMutex := mutexProfile(o.MutexProfile, st)
	for _, name := range o.Scenarios {
		if ctx.Err() != nil {
			break
		}
		if len(rep.Scenarios) > 0 {
			// Each scenario starts from empty streams, so that none measures the server
			// state (stored messages, block caches, dedup ids) the ones before it left.
			if err := e.purgeStreams(ctx); err != nil {
				st.printf("purging the streams before scenario %s: %v", name, err)
			}
		}
		t0 := time.Now()
		var s ScenarioReport
		switch name {
		case "chat":
			s = e.scenarioChat(ctx, prof)
		case "stream":
			s = e.scenarioStream(ctx, prof)
		case "streams":
			s = e.scenarioStreams(ctx, prof)
		case "dup":
			s = e.scenarioDup(ctx, prof)
		case "rss":
			s = e.scenarioRSS(ctx)
		}
		s.Elapsed = time.Since(t0).Seconds()
		rep.Scenarios = append(rep.Scenarios, s)
		st.printf("scenario %s %s done in %.1f s", s.ID, s.Name, s.Elapsed)
	}
	rep.Elapsed = time.Since(st.start).Seconds()
	rep.Notes = append(rep.Notes,
		"one process: NATS server, fake Hermes, bridge and bench clients share the machine's cores; "+
			"other load on the machine moves absolute figures, so compare ratios (floors run interleaved with the bridge)",
		fmt.Sprintf("JetStream storage: %s for the bridge's streams and bucket and for every floor stream "+
			"(file store: the server's default sync interval, no fsync per message)", o.Store),
		fmt.Sprintf("bridge config: defaults except Provision, Storage, Workers = endpoint MaxConcurrency = %d, Metrics %s, and tracing %s; "+
			"its log is produced at info level and discarded", e.workers, metricsNote(o), tracingNote(o)))
	if e.traces != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("traces: %d OTLP export requests, %.1f MiB of protobuf, to the in-process sink (until the last scenario ended)",
			e.traces.requests.Load(), float64(e.traces.bytes.Load())/(1<<20)))
	}
	if n := e.blog.errs.Load(); n > 0 {
		e.blog.mu.Lock()
		rep.Notes = append(rep.Notes, fmt.Sprintf("the bridge logged %d warn/error lines; last: %s", n, e.blog.last))
		e.blog.mu.Unlock()
	}
	if n := e.bridge.hub.stray.Load(); n > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d results arrived that no client waited for (late or duplicate)", n))
	}
	if name, err := writeMutex(); err != nil {
		st.printf("mutex profile: %v", err)
	} else if name != "" {
		prof.written = append(prof.written, name)
	}
	if len(prof.written) > 0 {
		rep.Notes = append(rep.Notes, "profiles: "+strings.Join(prof.written, ", "))
	}
	if ctx.Err() != nil {
		rep.Notes = append(rep.Notes, "interrupted: figures are partial")
	}
	fmt.Fprintln(stdout)
	rep.writeTable(stdout)
	if o.JSONPath != "" {
		if err := rep.writeJSON(o.JSONPath); err != nil {
			return rep, fmt.Errorf("write %s: %w", o.JSONPath, err)
		}
		st.printf("wrote %s", o.JSONPath)
	}
	if o.MarkdownPath != "" {
		if err := rep.writeMarkdown(o.MarkdownPath); err != nil {
			return rep, fmt.Errorf("write %s: %w", o.MarkdownPath, err)
		}
		st.printf("wrote %s", o.MarkdownPath)
	}
	return rep, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	failed := rep.failed()
	errs := 0
	for _, s := range rep.Scenarios {
		errs += len(s.Errors)
	}
	if errs > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d scenario errors (see above)\n", errs)
		os.Exit(1)
	}
	if o.Strict && len(failed) > 0 {
		fmt.Fprintf(os.Stderr, "bench: targets missed: %s\n", strings.Join(failed, "; "))
		os.Exit(3)
	}
}

func metricsNote(o options) string {
	if o.NoMetrics {
		return "off (-no-metrics)"
	}
	return "on (a registry nobody scrapes)"
}

func tracingNote(o options) string {
	switch o.Tracing {
	case tracingOff:
		return "off (no provider)"
	case tracingOTLP:
		return "on (SDK, every action sampled, batch processor, OTLP/HTTP to an in-process sink)"
	}
	return "disabled (the no-op provider, as run without an OTLP endpoint)"
}
