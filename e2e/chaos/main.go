// Command chaos runs hermes-bridge as real processes on a real three-node NATS cluster
// and breaks things while a mixed load runs (issue 12, `make chaos`; not part of
// `make test`).
//
// It builds nats-server (from the module in go.mod) and cmd/hermes-bridge, starts three
// nats-server processes clustered on loopback ports, the fake Hermes (hermestest, served
// in this process so that each call can be attributed to the bridge process that made
// it), and three `hermes-bridge run` processes with R3 streams and bucket. Then, for each
// of -rounds seeded rounds: a steady load for -duration (chat, chat_stream and governed runs with keys,
// models; ~10% duplicate keys, ~3% re-published action ids) while it SIGKILLs and
// SIGSTOPs (then SIGCONTs) NATS nodes, mostly current stream leaders, and bridge
// replicas, one fault at a time, plus one full cluster restart in one round. After each
// round it waits for every action to settle and checks the output stream and the calls.
//
// Targets, per round: 0 missing results, 0 duplicated results, 0 duplicate Hermes calls
// per action id and per key, 0 events out of order, no failure other than
// outcome_unknown, and outcome_unknown only for an action whose call was in flight on a
// bridge process that was SIGKILLed or SIGSTOPped past the lease. It exits 1 when a
// target is missed, 2 when it could not run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

type options struct {
	rounds   int
	seed     uint64
	duration time.Duration
	rate     float64
	ackWait  time.Duration
	workers  int
	deltas   int
	settle   time.Duration
	race     bool
	keep     bool
	markdown string
}

// world is everything the program started.
type world struct {
	opt       options
	dir       string
	natsBin   string
	bridgeBin string
	start     time.Time

	nodes   []*natsNode
	bridges []*bridgeSlot

	fake        *hermestest.Server
	httpSrv     *http.Server
	fakePorts   sync.Map // port of the fake -> the bridge process given it (b1#2)
	fakeServing sync.WaitGroup
	calls       *callLog

	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client

	mu     sync.Mutex
	faults []fault
}

// fault is one injected fault, from its start to the end of its recovery.
type fault struct {
	round   int
	kind    string // see the fault* constants
	target  string // n1, or a bridge process b2#1
	leads   []string
	at, end time.Time
	note    string
}

const (
	faultNATSKill     = "SIGKILL nats"
	faultNATSStop     = "SIGSTOP nats"
	faultBridgeKill   = "SIGKILL bridge"
	faultBridgeStop   = "SIGSTOP bridge"
	faultBridgeLong   = "SIGSTOP bridge past lease"
	faultFullRestart  = "full cluster restart"
	settleExitMissing = 1
)

func main() {
	var o options
	var seed int64
	flag.IntVar(&o.rounds, "rounds", 5, "rounds of load and faults")
	flag.Int64Var(&seed, "seed", 1, "seed of the action mix and of the faults (each round derives its own)")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "load and faults per round")
	flag.Float64Var(&o.rate, "rate", 25, "actions published per second")
	flag.DurationVar(&o.ackWait, "ack-wait", 3*time.Second, "HERMES_BRIDGE_ACK_WAIT of the replicas (the lease is twice that)")
	flag.IntVar(&o.workers, "workers", 8, "workers (and Hermes concurrency) per replica")
	flag.IntVar(&o.deltas, "deltas", 8, "text deltas of each streamed reply (40ms apart)")
	flag.DurationVar(&o.settle, "settle", 3*time.Minute, "how long a round may take to settle after its load")
	flag.BoolVar(&o.race, "race", false, "build hermes-bridge with -race")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (logs, stores) even when every target is met")
	flag.StringVar(&o.markdown, "markdown", "", "also write the final table to this file")
	flag.Parse()
	o.seed = uint64(seed)
	os.Exit(run(o))
}

func run(o options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "hermes-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	w := &world{opt: o, dir: dir, start: time.Now(), calls: &callLog{}}
	code := 2
	defer func() {
		w.close()
		if code == 0 && !o.keep {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Printf("work directory (logs, stores): %s\n", dir)
		}
	}()
	if err := w.setup(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: setup:", err)
		return 2
	}
	fullRestart := 1 + int(rand.New(rand.NewPCG(o.seed, 0)).IntN(o.rounds))
	var rounds []*roundResult
	for r := 1; r <= o.rounds; r++ {
		rr, err := w.round(ctx, r, r == fullRestart)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: round %d: %v\n", r, err)
			if rr != nil {
				rounds = append(rounds, rr)
			}
			printTable(os.Stdout, o, rounds)
			return 2
		}
		rounds = append(rounds, rr)
		w.logf("round %d: %s", r, rr.line())
	}
	printTable(os.Stdout, o, rounds)
	if o.markdown != "" {
		f, err := os.Create(o.markdown)
		if err == nil {
			printTable(f, o, rounds)
			_ = f.Close()
		}
	}
	code = 0
	for _, rr := range rounds {
		if !rr.ok() {
			code = settleExitMissing
		}
	}
	return code
}

func (w *world) logf(format string, args ...any) {
	fmt.Printf("%7.1fs  %s\n", time.Since(w.start).Seconds(), fmt.Sprintf(format, args...))
}

// setup builds the binaries and starts the cluster, the fake and the replicas.
func (w *world) setup(ctx context.Context) error {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return fmt.Errorf("go list -m: %w", err)
	}
	w.natsBin = filepath.Join(w.dir, "nats-server")
	w.bridgeBin = filepath.Join(w.dir, "hermes-bridge")
	builds := [][]string{{"build", "-o", w.natsBin, "github.com/nats-io/nats-server/v2"}, {"build", "-o", w.bridgeBin, "./cmd/hermes-bridge"}}
	if w.opt.race {
		builds[1] = slices.Insert(builds[1], 1, "-race")
	}
	for _, args := range builds {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = strings.TrimSpace(string(root))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	w.logf("built nats-server and hermes-bridge in %s", w.dir)
	w.startFake()
	if w.nodes, err = setupNodes(w.dir, 3); err != nil {
		return err
	}
	if err := w.startNodes(ctx); err != nil {
		return err
	}
	var urls []string
	for _, nd := range w.nodes {
		urls = append(urls, nd.url())
	}
	w.nc, err = nats.Connect(strings.Join(urls, ","), nats.Name("chaos"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.PingInterval(time.Second), nats.MaxPingsOutstanding(3),
		nats.Timeout(2*time.Second))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if w.js, err = jetstream.New(w.nc); err != nil {
		return err
	}
	w.client = client.New(w.js)
	if err := w.poll(ctx, 60*time.Second, "JetStream meta leader", func(ctx context.Context) error {
		_, err := w.js.AccountInfo(ctx)
		return err
	}); err != nil {
		return err
	}
	for i := range 3 {
		b := &bridgeSlot{id: fmt.Sprintf("b%d", i+1), slot: i}
		w.bridges = append(w.bridges, b)
		if err := w.startBridge(ctx, b); err != nil {
			return err
		}
	}
	if err := w.poll(ctx, 120*time.Second, "cluster healthy", w.healthy); err != nil {
		return err
	}
	w.logf("3 nats-server nodes, 3 bridge replicas, fake Hermes on a loopback port per bridge process")
	return nil
}

func (w *world) startNodes(ctx context.Context) error {
	errs := make([]error, len(w.nodes))
	var wg sync.WaitGroup
	for i, nd := range w.nodes {
		wg.Go(func() { errs[i] = w.startNode(ctx, nd) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// close stops every process and the fake.
func (w *world) close() {
	if w.nc != nil {
		w.nc.Close()
	}
	for _, b := range w.bridges {
		if b.proc != nil {
			b.proc.kill()
		}
	}
	for _, nd := range w.nodes {
		if nd.proc != nil {
			nd.proc.terminate(10 * time.Second)
		}
	}
	w.stopFake()
}

// poll calls f every 100ms until it returns nil; it returns f's last error after timeout.
func (w *world) poll(ctx context.Context, timeout time.Duration, what string, f func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// assetInfo returns the cluster info of a stream, or of the bridge's consumer.
func (w *world) assetInfo(ctx context.Context, name string) (*jetstream.ClusterInfo, error) {
	if name == "consumer" {
		cons, err := w.js.Consumer(ctx, "HERMES_ACTIONS", "hermes-bridge")
		if err != nil {
			return nil, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		return info.Cluster, nil
	}
	s, err := w.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	return info.Cluster, nil
}

// healthy: every stream of the account and the consumer have a leader, and both other
// peers are online and current.
func (w *world) healthy(ctx context.Context) error {
	names := []string{"consumer"}
	lister := w.js.StreamNames(ctx)
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		return err
	}
	if len(names) < 6 {
		return fmt.Errorf("only %v listed", names)
	}
	for _, n := range names {
		ci, err := w.assetInfo(ctx, n)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if ci == nil || ci.Leader == "" {
			return fmt.Errorf("%s has no leader", n)
		}
		if len(ci.Replicas) != len(w.nodes)-1 {
			return fmt.Errorf("%s (leader %s) lists %d other peers", n, ci.Leader, len(ci.Replicas))
		}
		for _, p := range ci.Replicas {
			if !p.Current || p.Offline {
				return fmt.Errorf("%s (leader %s): peer %s current=%v offline=%v", n, ci.Leader, p.Name, p.Current, p.Offline)
			}
		}
	}
	return nil
}

var leaderAssets = []string{"HERMES_ACTIONS", "HERMES_OUTPUT", "KV_HERMES_IDEMPOTENCY"}

// leaders returns the leader of each stream asset and of the consumer (missing ones omitted).
func (w *world) leaders(ctx context.Context) map[string]string {
	out := map[string]string{}
	for _, a := range slices.Concat(leaderAssets, []string{"consumer"}) {
		if ci, err := w.assetInfo(ctx, a); err == nil && ci != nil && ci.Leader != "" {
			out[a] = ci.Leader
		}
	}
	return out
}

func (w *world) node(name string) *natsNode {
	for _, nd := range w.nodes {
		if nd.name == name {
			return nd
		}
	}
	return nil
}

func (w *world) addFault(f fault) {
	w.mu.Lock()
	w.faults = append(w.faults, f)
	w.mu.Unlock()
	leads := ""
	if len(f.leads) > 0 {
		leads = " (leader of " + strings.Join(f.leads, "+") + ")"
	}
	w.logf("r%d fault: %s %s%s, recovered after %s%s", f.round, f.kind, f.target, leads, f.end.Sub(f.at).Round(time.Millisecond), f.note)
}

// roundFaults returns round r's faults.
func (w *world) roundFaults(r int) []fault {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(w.faults), func(f fault) bool { return f.round != r })
}

// pickNode chooses a NATS node: the leader of a random asset, or a random node.
func (w *world) pickNode(ctx context.Context, rng *rand.Rand) (*natsNode, []string) {
	ls := w.leaders(ctx)
	var nd *natsNode
	if rng.IntN(5) > 0 { // mostly a leader
		if l, ok := ls[leaderAssets[rng.IntN(len(leaderAssets))]]; ok {
			nd = w.node(l)
		}
	}
	if nd == nil {
		nd = w.nodes[rng.IntN(len(w.nodes))]
	}
	var leads []string
	for a, l := range ls {
		if l == nd.name {
			leads = append(leads, a)
		}
	}
	slices.Sort(leads)
	return nd, leads
}

func jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// sleep waits d (fault timing, not a correctness wait) or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// inject runs one fault of kind through its recovery: it takes the target down (kill,
// stop or terminate), waits, brings it back (start or continue), then, for a NATS fault,
// waits until the cluster is healthy again.
func (w *world) inject(ctx context.Context, r int, kind string, rng *rand.Rand) (fault, error) {
	f := fault{round: r, kind: kind}
	lease := 2 * w.opt.ackWait
	var down, up func() error
	var d time.Duration // between down and up
	switch kind {
	case faultNATSKill, faultNATSStop:
		nd, leads := w.pickNode(ctx, rng)
		f.target, f.leads = nd.name, leads
		if kind == faultNATSKill {
			down, up = func() error { nd.proc.kill(); return nil }, func() error { return w.startNode(ctx, nd) }
			d = jitter(rng, time.Second, 3*time.Second)
		} else {
			// Shorter than ack wait + lease, so that no bridge loses a claim only because its
			// connection is stuck on the paused node.
			down, up = nd.proc.pause, nd.proc.resume
			d = jitter(rng, 1500*time.Millisecond, 4*time.Second)
		}
	case faultFullRestart:
		f.target = "n0+n1+n2"
		down = func() error {
			var wg sync.WaitGroup
			for _, nd := range w.nodes {
				wg.Go(func() { nd.proc.terminate(30 * time.Second) })
			}
			wg.Wait()
			return nil
		}
		up, d = func() error { return w.startNodes(ctx) }, jitter(rng, time.Second, 3*time.Second)
	case faultBridgeKill, faultBridgeStop, faultBridgeLong:
		b := w.bridges[rng.IntN(len(w.bridges))]
		f.target = fmt.Sprintf("%s#%d", b.id, b.instance)
		all, on := w.calls.inFlight(f.target)
		f.note = fmt.Sprintf(", Hermes calls in flight on it %s (%d on every replica)", mapString(on), all)
		if kind == faultBridgeKill {
			down, up = func() error { b.proc.kill(); return nil }, func() error { return w.startBridge(ctx, b) }
			d = jitter(rng, 500*time.Millisecond, 2*time.Second)
			break
		}
		d = jitter(rng, 500*time.Millisecond, w.opt.ackWait/2)
		if kind == faultBridgeLong {
			d = jitter(rng, w.opt.ackWait+lease+2*time.Second, w.opt.ackWait+lease+4*time.Second)
		}
		down, up = b.proc.pause, b.proc.resume
		f.note += fmt.Sprintf(", paused %s", d.Round(time.Millisecond))
	}
	f.at = time.Now()
	err := down()
	if err == nil {
		err = sleep(ctx, d)
	}
	if err == nil {
		err = up()
	}
	if err == nil && (kind == faultNATSKill || kind == faultNATSStop || kind == faultFullRestart) {
		err = w.poll(ctx, 120*time.Second, "cluster healthy after "+kind+" "+f.target, w.healthy)
	}
	f.end = time.Now()
	return f, err
}

// round runs one round: load and faults for the duration, then settlement and checks.
func (w *world) round(ctx context.Context, r int, fullRestart bool) (*roundResult, error) {
	rng := rand.New(rand.NewPCG(w.opt.seed, uint64(r)))
	rr := &roundResult{round: r, causes: map[string]int{}, otherFailed: map[string]int{}}
	l := &load{w: w, round: r, start: time.Now(), published: map[string]time.Time{}}
	w.logf("round %d: %s of load at %.0f actions/s%s", r, w.opt.duration, w.opt.rate, map[bool]string{true: ", with a full cluster restart", false: ""}[fullRestart])
	stop := make(chan struct{})
	pubErr := make(chan error, 4)
	var pubs sync.WaitGroup
	for range 4 {
		pubs.Go(func() {
			if err := l.publisher(stop); err != nil {
				pubErr <- err
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); pubs.Wait() })
	defer stopLoad()
	end := l.start.Add(w.opt.duration)
	lastFault := l.start
	restartDue := fullRestart
	kinds := []string{faultNATSKill, faultNATSKill, faultNATSStop, faultBridgeKill, faultBridgeKill, faultBridgeStop, faultBridgeLong}
	for {
		if err := sleep(ctx, jitter(rng, 300*time.Millisecond, 1500*time.Millisecond)); err != nil {
			return rr, err
		}
		if time.Now().After(end.Add(-2 * time.Second)) {
			break
		}
		kind := kinds[rng.IntN(len(kinds))]
		if restartDue && time.Since(l.start) > w.opt.duration/3 {
			kind, restartDue = faultFullRestart, false
		}
		f, err := w.inject(ctx, r, kind, rng)
		w.addFault(f)
		lastFault = f.end
		if err != nil {
			rr.problems = append(rr.problems, err.Error())
			w.logf("r%d: %v", r, err)
			if ctx.Err() != nil {
				return rr, err
			}
		}
		select {
		case err := <-pubErr:
			return rr, fmt.Errorf("publishing: %w", err)
		default:
		}
	}
	if err := sleep(ctx, time.Until(end)); err != nil {
		return rr, err
	}
	stopLoad()
	select {
	case err := <-pubErr:
		return rr, fmt.Errorf("publishing: %w", err)
	default:
	}
	actions := l.all()
	w.logf("round %d: load stopped: %d actions, %d messages, %d publish retries; waiting for settlement", r, len(actions), l.messages, l.retries)
	err := w.poll(ctx, w.opt.settle, fmt.Sprintf("round %d settled", r), func(ctx context.Context) error {
		return w.settled(ctx, r, len(actions))
	})
	rr.settled = time.Now()
	rr.settleAfterFault = rr.settled.Sub(lastFault)
	if err != nil {
		if ctx.Err() != nil {
			return rr, err
		}
		rr.settleTimedOut = true
		rr.problems = append(rr.problems, err.Error())
		w.logf("r%d: %v", r, err)
	}
	rr.faults = w.roundFaults(r)
	rr.messages = l.messages
	if err := w.check(ctx, l, rr); err != nil {
		return rr, fmt.Errorf("check: %w", err)
	}
	return rr, nil
}

// settled: the consumer has nothing pending or unacknowledged and each of the round's
// want actions has a result subject.
func (w *world) settled(ctx context.Context, r, want int) error {
	cons, err := w.js.Consumer(ctx, "HERMES_ACTIONS", "hermes-bridge")
	if err != nil {
		return err
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	if ci.NumPending != 0 || ci.NumAckPending != 0 {
		return fmt.Errorf("consumer: %d pending, %d awaiting ack", ci.NumPending, ci.NumAckPending)
	}
	s, err := w.js.Stream(ctx, "HERMES_OUTPUT")
	if err != nil {
		return err
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter("hermes.results.>"))
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("hermes.results.r%d-", r)
	got := 0
	for subj := range si.State.Subjects {
		if strings.HasPrefix(subj, prefix) {
			got++
		}
	}
	if got < want {
		return fmt.Errorf("%d of %d actions have a result", got, want)
	}
	return nil
}
