package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// Names of the bridge process of scenario 5: its own prefix, streams, consumer and
// buckets on the bench's server, beside the in-process bridge's.
const (
	procPrefix     = "benchproc"
	modulePath     = "github.com/hermes-bridge/hermes-bridge"
	rssTarget      = 25 // MiB, at rssTargetAt workers
	rssTargetAt    = 64
	clockTicksPerS = 100 // USER_HZ of /proc/<pid>/stat: 100 on every Linux platform Go supports
)

// bridgeProc is a `hermes-bridge run` process.
type bridgeProc struct {
	cmd  *exec.Cmd
	log  *startedWriter // its log lines (stdout and stderr): readiness and warn/error lines
	read chan struct{}  // closed when its output is read to the end
}

// buildBridge builds cmd/hermes-bridge of the module the bench is run in into dir and
// returns the binary's path.
func buildBridge(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m (run the bench inside the repository, or give -bridge-bin): %w", err)
	}
	path, root, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if path != modulePath {
		return "", fmt.Errorf("the bench runs in module %s, not %s: run it inside the repository, or give -bridge-bin", path, modulePath)
	}
	bin := filepath.Join(dir, "hermes-bridge")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hermes-bridge")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/hermes-bridge: %w\n%s", err, out)
	}
	return bin, nil
}

// startBridgeProc runs `bin run` against the bench's server and fake with workers
// workers (and the endpoint's max concurrency), configured by environment only, and
// waits until it logs that it started.
func (e *env) startBridgeProc(ctx context.Context, bin string, workers int) (*bridgeProc, error) {
	cmd := exec.Command(bin, "run")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"NATS_URL=" + e.ns.ClientURL(),
		"HERMES_URL=" + e.fake.URL, "HERMES_API_KEY=" + e.key, "HERMES_ENDPOINT_ID=" + endpointID,
		"HERMES_MAX_CONCURRENCY=" + strconv.Itoa(workers), "HERMES_BRIDGE_WORKERS=" + strconv.Itoa(workers),
		"HERMES_BRIDGE_PREFIX=" + procPrefix,
		"HERMES_BRIDGE_ACTIONS_STREAM=BENCH_PROC_ACTIONS", "HERMES_BRIDGE_OUTPUT_STREAM=BENCH_PROC_OUTPUT",
		"HERMES_BRIDGE_DLQ_STREAM=BENCH_PROC_DLQ", "HERMES_BRIDGE_CONSUMER=bench-proc",
		"HERMES_BRIDGE_BUCKET=BENCH_PROC_IDEMPOTENCY", "HERMES_BRIDGE_KEYS_BUCKET=BENCH_PROC_KEYS",
		"HERMES_BRIDGE_OBJECT_BUCKET=BENCH_PROC_OBJECTS",
		"HERMES_BRIDGE_STORAGE=" + e.o.Store,
		"HERMES_BRIDGE_HTTP_ADDR=127.0.0.1:0", // metrics served, as run serves them by default; a port of its own
		"HERMES_BRIDGE_UI=false",
		"HERMES_BRIDGE_SHUTDOWN_GRACE=5s",
		"HERMES_BRIDGE_LOG_LEVEL=info",
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &bridgeProc{cmd: cmd, log: &startedWriter{started: make(chan struct{})}, read: make(chan struct{})}
	err = cmd.Start()
	_ = pw.Close() // the child holds its own copy
	if err != nil {
		_ = pr.Close()
		return nil, fmt.Errorf("start %s run: %w", bin, err)
	}
	go func() { // reads the log line by line until the process' end closes the pipe
		defer close(p.read)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			_, _ = p.log.Write(sc.Bytes())
		}
	}()
	select {
	case <-p.log.started:
		return p, nil
	case <-p.read:
		p.stop()
		return nil, fmt.Errorf("hermes-bridge run exited before it started: %s", p.lastLine())
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, errors.New("hermes-bridge run did not start within 60 s")
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
}

func (p *bridgeProc) lastLine() string {
	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	return p.log.last
}

// stop ends the process: SIGTERM, then SIGKILL after 15 s, and waits for it.
func (p *bridgeProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.AfterFunc(15*time.Second, func() { _ = p.cmd.Process.Kill() })
	defer t.Stop()
	_ = p.cmd.Wait()
	<-p.read
}

// status reads a field of the process' /proc status (VmRSS, VmHWM) in bytes.
func (p *bridgeProc) status(field string) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return statusField(string(b), field)
}

// statusField reads a "Name:   123 kB" line of a /proc status file, in bytes.
func statusField(status, field string) (uint64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			n, err := strconv.ParseUint(f[0], 10, 64)
			return n * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in the process status", field)
}

// sampleSplit reads the process' file-backed and anonymous RSS (RssFile, RssAnon) every
// 50 ms until the returned function is called, which stops it and returns the most of
// each it saw (their peaks need not coincide; VmHWM is the peak of their sum).
func (p *bridgeProc) sampleSplit(ctx context.Context) func() (file, anon uint64) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var maxFile, maxAnon uint64
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if f, err := p.status("RssFile"); err == nil {
				maxFile = max(maxFile, f)
			}
			if a, err := p.status("RssAnon"); err == nil {
				maxAnon = max(maxAnon, a)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) {
		cancel()
		<-done
		return maxFile, maxAnon
	}
}

// cpu is the process' user+system CPU time so far (/proc/<pid>/stat).
func (p *bridgeProc) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces:
	// state is the first, utime and stime the 12th and 13th.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, errors.New("unreadable /proc stat")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / clockTicksPerS, nil
}

// scenarioRSS runs the bridge as its own process, so that its memory is its own: RSS at
// rest once started, then scenario 1's load at -concurrency (as many workers) for
// -rss-duration, and its peak RSS (VmHWM, the whole life of the process).
func (e *env) scenarioRSS(ctx context.Context) ScenarioReport {
	c := e.o.Concurrency
	rep := ScenarioReport{ID: "5", Name: "bridge process", Params: map[string]any{"workers": c, "load_s": e.o.RSSDuration.Seconds()}}
	bin := e.o.BridgeBin
	if bin == "" {
		e.status.printf("5 rss: go build ./cmd/hermes-bridge")
		dir := filepath.Join(e.dir, "bin")
		var err error
		if err = os.MkdirAll(dir, 0o755); err == nil {
			bin, err = buildBridge(ctx, dir)
		}
		if err != nil {
			rep.errorf("build: %v", err)
			return rep
		}
	}
	e.status.printf("5 rss: starting %s run with %d workers", bin, c)
	p, err := e.startBridgeProc(ctx, bin, c)
	if err != nil {
		rep.errorf("%v", err)
		return rep
	}
	defer p.stop()
	pipe := pipeline{client: client.New(e.js, client.WithSource("hermes-bench"), client.WithSubjects(events.Subjects{Prefix: procPrefix}))}
	if pipe.hub, err = newHub(e.ncClient, procPrefix+".results.", decodeBridgeResult); err != nil {
		rep.errorf("subscribe to its results: %v", err)
		return rep
	}
	defer func() { _ = pipe.hub.sub.Unsubscribe() }()
	time.Sleep(time.Second) // it settles after its start: consumer, buckets, first metrics
	rest, err := p.status("VmRSS")
	if err != nil {
		rep.errorf("read its RSS: %v", err)
		return rep
	}
	restFile, _ := p.status("RssFile")
	restAnon, _ := p.status("RssAnon")
	e.status.printf("5 rss: at rest: RSS %.1f MiB; scenario 1's load at concurrency %d for %s", mib(rest), c, e.o.RSSDuration)
	var cpu0, cpu1 time.Duration
	split := p.sampleSplit(ctx)
	st := closedLoop(ctx, c, 0, e.o.RSSDuration, func() { cpu0, _ = p.cpu() }, func() { cpu1, _ = p.cpu() }, e.chatOp(pipe, "x"))
	peakFile, peakAnon := split()
	peak, err := p.status("VmHWM")
	if err != nil {
		rep.errorf("read its peak RSS: %v", err)
		return rep
	}
	after, _ := p.status("VmRSS")
	e.resetFake()
	e.status.printf("5 rss: %.0f actions/s, %d errors; peak RSS %.1f MiB, RSS after the load %.1f MiB", st.rate(), st.errs, mib(peak), mib(after))
	if st.errs > 0 {
		rep.errorf("%d failed actions (first: %s)", st.errs, st.errMsg)
	}
	if len(st.lat) == 0 {
		rep.errorf("no action completed")
	}
	r := Row{Metric: fmt.Sprintf("peak RSS, %d workers", c), Unit: "MiB", Bridge: mib(peak)}
	if c == rssTargetAt {
		r.Target, r.Pass = fmt.Sprintf("<= %d MiB", rssTarget), boolp(mib(peak) <= rssTarget)
	}
	rep.row(r)
	rep.row(Row{Metric: "RSS at rest", Unit: "MiB", Bridge: mib(rest)})
	// File-backed RSS is the binary's code and read-only data the process touched (shared,
	// reclaimable); anonymous RSS is its heap, stacks and the runtime's own memory.
	rep.row(Row{Metric: "RSS at rest, file-backed (the binary)", Unit: "MiB", Bridge: mib(restFile)})
	rep.row(Row{Metric: "RSS at rest, anonymous (heap, stacks)", Unit: "MiB", Bridge: mib(restAnon)})
	rep.row(Row{Metric: "most file-backed RSS under load", Unit: "MiB", Bridge: mib(peakFile)})
	rep.row(Row{Metric: "most anonymous RSS under load", Unit: "MiB", Bridge: mib(peakAnon)})
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("`hermes-bridge run` in its own process (%s), configured by environment only: the bench's NATS server and fake, "+
			"HERMES_BRIDGE_WORKERS = HERMES_MAX_CONCURRENCY = %d, storage %s, its operations listener on a port of its own (metrics on), "+
			"no dashboard, tracing off, log at info level read and discarded; no other variable (PATH and HOME: no GOGC, no GOMEMLIMIT)", binNote(e.o.BridgeBin), c, e.o.Store),
		fmt.Sprintf("RSS at rest: VmRSS 1 s after it logged that it started; peak RSS: VmHWM (the most it held in its life) after %s of scenario 1's "+
			"load from %d closed-loop clients: %.0f actions/s, its CPU %.1f µs/action, RSS after the load %.1f MiB; the target is set at %d workers",
			e.o.RSSDuration, c, st.rate(), per(float64(cpu1-cpu0)/float64(time.Microsecond), float64(len(st.lat))), mib(after), rssTargetAt))
	if n := p.log.errs.Load(); n > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the bridge process logged %d warn/error lines; last: %s", n, p.lastLine()))
	}
	return rep
}

func binNote(bin string) string {
	if bin == "" {
		return "built from this repository with go build ./cmd/hermes-bridge"
	}
	return bin
}
