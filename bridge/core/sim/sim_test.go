package sim

// The simulator's tests. Each seed draws a world (parameters, scenario, faults) and runs
// the production core in it to quiescence, then checks the invariants:
//
//	go test ./bridge/core/sim -run TestSim                        // the default seeds
//	go test ./bridge/core/sim -run TestSim -sim.seeds=5000        // more
//	go test ./bridge/core/sim -run TestSim -sim.seed=N -sim.trace // replay one, with its trace

import (
	"flag"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	simSeeds = flag.Int("sim.seeds", 300, "how many seeds TestSim runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run only this seed of TestSim")
	simTrace = flag.Bool("sim.trace", false, "print the trace of every seed TestSim runs")
)

func TestSim(t *testing.T) {
	var seeds []uint64
	if *simSeed != 0 {
		seeds = []uint64{*simSeed}
	} else {
		for i := range *simSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	start := time.Now()
	var (
		mu       sync.Mutex
		total    Stats
		failures []*Report
		known    = map[string][]uint64{}
		fixed    []uint64
		slowest  time.Duration
	)
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for seed := range work {
				t0 := time.Now()
				r := Run(seed, Options{Trace: *simTrace})
				took := time.Since(t0)
				left, matched := withoutKnown(r)
				mu.Lock()
				total.Add(&r.Stats)
				slowest = max(slowest, took)
				if len(left) > 0 {
					failures = append(failures, r)
				}
				for _, b := range matched {
					known[b] = append(known[b], seed)
				}
				if _, listed := knownCoreBugs[seed]; listed && len(matched) == 0 {
					fixed = append(fixed, seed)
				}
				mu.Unlock()
				if *simTrace {
					t.Logf("%s", r)
				}
			}
		})
	}
	for _, s := range seeds {
		work <- s
	}
	close(work)
	wg.Wait()
	t.Logf("%d seeds in %s (slowest %s): %s", len(seeds), time.Since(start).Round(time.Millisecond),
		slowest.Round(time.Millisecond), total.String())
	for _, b := range slices.Sorted(mapKeys(known)) {
		slices.Sort(known[b])
		t.Logf("TEMPORARY: %d seeds show the known core bug %s (skipped): %v", len(known[b]), coreBugs[b].what, known[b])
	}
	if len(fixed) > 0 {
		slices.Sort(fixed)
		t.Logf("seeds listed in knownCoreBugs that no longer fail that way (remove them): %v", fixed)
	}
	slices.SortFunc(failures, func(a, b *Report) int { return int(a.Seed) - int(b.Seed) })
	for _, r := range failures {
		left, _ := withoutKnown(r)
		t.Errorf("seed %d fails: %s", r.Seed, strings.Join(left, "; "))
	}
	if len(failures) > 0 {
		r := failures[0]
		if !*simTrace {
			r = Run(r.Seed, Options{Trace: true}) // the same run, traced
		}
		t.Errorf("seed %d fails; replay it with\n\tgo test ./bridge/core/sim -run TestSim -sim.seed=%d -sim.trace\n%s",
			r.Seed, r.Seed, r)
	}
}

// withoutKnown returns r's failures but those of the known core bugs its seed is listed
// for, and the bugs that matched.
func withoutKnown(r *Report) (left, matched []string) {
	bugs := knownCoreBugs[r.Seed]
	seen := map[string]bool{}
	for _, f := range r.Failures {
		hit := ""
		for _, b := range bugs {
			if coreBugs[b].failure.MatchString(f) {
				hit = b
				break
			}
		}
		if hit == "" {
			left = append(left, f)
		} else if !seen[hit] {
			seen[hit] = true
			matched = append(matched, hit)
		}
	}
	return left, matched
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !yield(k) {
				return
			}
		}
	}
}

// TestKnownCoreBugs keeps the list of known bugs consistent: every seed names bugs that
// exist.
func TestKnownCoreBugs(t *testing.T) {
	for seed, bugs := range knownCoreBugs {
		for _, b := range bugs {
			if _, ok := coreBugs[b]; !ok {
				t.Errorf("seed %d: unknown bug %q", seed, b)
			}
		}
	}
}

// TestSimDeterminism runs seeds twice each and wants identical traces and statistics.
func TestSimDeterminism(t *testing.T) {
	for _, seed := range []uint64{1, 7, 42, 1234} {
		a, b := Run(seed, Options{Trace: true}), Run(seed, Options{Trace: true})
		if !slices.Equal(a.Trace, b.Trace) {
			for i := range min(len(a.Trace), len(b.Trace)) {
				if a.Trace[i] != b.Trace[i] {
					t.Fatalf("seed %d: traces differ at line %d:\n  %s\n  %s", seed, i, a.Trace[i], b.Trace[i])
				}
			}
			t.Fatalf("seed %d: traces differ in length: %d and %d lines", seed, len(a.Trace), len(b.Trace))
		}
		if a.Stats != b.Stats || !slices.Equal(a.Failures, b.Failures) {
			t.Fatalf("seed %d: statistics or failures differ:\n  %s\n  %s", seed, a.Stats.String(), b.Stats.String())
		}
		if len(a.Trace) < 100 {
			t.Fatalf("seed %d: a trace of %d lines is too short to prove anything", seed, len(a.Trace))
		}
		// Tracing does not change the run.
		if c := Run(seed, Options{}); c.Stats != a.Stats {
			t.Fatalf("seed %d: the run without a trace differs: %s", seed, c.Stats.String())
		}
	}
}

// TestSimCatches breaks the world on purpose and wants the invariants to notice: they
// are not vacuous.
func TestSimCatches(t *testing.T) {
	for _, c := range []struct{ sabotage, want string }{
		{"double_exec", "executed 2 times"},
		{"no_cas", "terminal results stored"},
		{"lie", "completed but never executed"},
	} {
		caught := 0
		for seed := uint64(1); seed <= 100 && caught == 0; seed++ {
			for _, f := range Run(seed, Options{sabotage: c.sabotage}).Failures {
				if strings.Contains(f, c.want) {
					caught++
				}
			}
		}
		if caught == 0 {
			t.Errorf("sabotage %s: no seed of 100 failed with %q", c.sabotage, c.want)
		}
	}
}

// coreBug is a bug of bridge/core the simulator found: what it is, and the failures it
// causes (a seed listed for it may fail with those, and only those).
type coreBug struct {
	what    string
	failure *regexp.Regexp
}

func bug(what, failure string) coreBug {
	return coreBug{what: what, failure: regexp.MustCompile(failure)}
}

// coreBugs are the bugs of bridge/core found by the simulator and not fixed yet, each
// with its diagnosis and the fix proposed (the fixes of B1-B3, B5, B7 and B8 were tried
// on a copy of the core: with them, 6000 seeds show only B4 and B6).
var coreBugs = map[string]coreBug{
	// run.go:150-153 resumeRun hands a bound run taken over back to claimedGo, whose
	// generic exits treat it as not started: action.go:425 settles the cancel flag
	// cancelledResult(j, false) without stopping or following the run (which ran, maybe
	// completed, maybe still runs). Fix: the bound branch follows the run at once
	// (cancelReq |= rec.Cancel; startRun()); follow stops it for a cancel or the deadline
	// and settles how it ended.
	"B1": bug("B1 (run.go resumeRun, action.go claimedGo): a bound run taken over with the cancel flag settles certain cancelled without following the run",
		`certain \{cancelled cancelled\}, but executed`),
	// Same entry: action.go:501 execute settles deadlineExceeded(false) once the deadline
	// passed, and action.go onAdmit settles Expired or Paused certain; the run goes on
	// at Hermes. Fix: as B1.
	"B2": bug("B2 (run.go resumeRun, action.go execute, onAdmit): a bound run taken over after its deadline settles certain deadline_exceeded without following the run",
		`certain \{failed deadline_exceeded\}, but executed`),
	// run.go runResult settles a run stopped before its tools ran cancelled (or
	// deadline_exceeded) and certain; core.go:173 FreesKey reads any certain cancelled
	// result as "Hermes never started the work", so settle.go:40 (the holder) and
	// action.go decideKey (the next action of the key) free the key, and a later action
	// with the key posts a new run (with durable run idempotency it adopts the old one).
	// Fix: FreesKey is false for a result that names a run (details.run_id).
	"B3": bug("B3 (core.go FreesKey, run.go runResult): a run cancelled before its tools ran frees its key although Hermes started it",
		`scoped key \S+ executed 2 times`),
	// action.go:143-150 onStartLog and action.go:221-226 onFreshLog take NotFound from a
	// ReadLog that "may be behind" (io.go) as "no result" right after creating the record
	// afresh, i.e. after the records expired: the action is sent again. Fix: these two
	// reads must not be behind (an io.go flag on EffReadLog that makes the driver read
	// from the stream leader), or NotFound is confirmed by such a read before the call.
	"B4": bug("B4 (action.go onStartLog, onFreshLog): a result-log read that is behind, after the records expired, lets a settled action run again",
		`re-published after its records expired|scoped key \S+ executed 2 times`),
	// core.go:88-91 says Action.Invalid is the envelope's error and Validate finds the
	// rest; action.go:39,44 only skip the start for it, and claimedGo (action.go:428)
	// settles j.invalid, which only onValidateStart sets. Fix: deliver sets j.invalid =
	// s.Action.Invalid.
	"B5": bug("B5 (action.go claimedGo): Action.Invalid (an invalid envelope) is never settled; the action runs",
		`an invalid action \(envelope\)`),
	// decision.go:372 settlePanic settles without the claim (expect: the seen pending
	// sequence), racing the delivery that owns the action: a certain internal result
	// wins while the owner's call runs, or a parked record is left with a result. The
	// old bridge did the same (serve.go panicked, SettleUnclaimed). Fix: settle a panic
	// only under the claim (claim it first, as begin does; a holder found means wait).
	"B6": bug("B6 (decision.go settlePanic): a panic in a job without the claim settles the action, racing the owner",
		`reason=panic`),
	// run.go:382-390 onRunPollWait (and run.go:347 afterRunWait): a job paused through a
	// stopped run's grace settles runResult with no status (run_stop_timeout:
	// outcome_unknown or deadline_exceeded) without asking once more; the run had ended.
	// Fix: past the grace, poll RunStatus once more, and settle what it says.
	"B7": bug("B7 (run.go onRunPollWait): a stopped run followed by a job paused past the stop grace settles run_stop_timeout without polling again",
		`run_stop_timeout`),
	// run.go runResult decides uncertainty from f.toolsRan, but a run taken over reads
	// its events from RunStoredEvents' count on (io.go RunEvents From), so the tools
	// that ran before are not seen. Fix: uncertain when f.reattached (or RunStatus
	// reports the tools).
	"B8": bug("B8 (run.go runResult): a run taken over reads its events from the stored count on, so it misses the tools that ran before; stopped, it settles certain",
		`was cancelled after its tools ran, but settled certain`),
}

// knownCoreBugs lists the seeds of 1 to 1000 that fail because of a known bug of the
// core, with the bugs each one shows. TEMPORARY: remove a seed's entry when its bugs are
// fixed (TestSim says which seeds no longer fail that way).
var knownCoreBugs = map[uint64][]string{
	23: {"B5"}, 24: {"B5"}, 31: {"B5"}, 36: {"B5"}, 39: {"B5"}, 40: {"B2"}, 52: {"B5"}, 60: {"B5"},
	62: {"B2"}, 74: {"B5"}, 87: {"B5"}, 93: {"B5"}, 95: {"B5"}, 97: {"B5"}, 106: {"B2"}, 121: {"B2", "B5"},
	129: {"B5"}, 147: {"B5"}, 160: {"B5"}, 164: {"B5"}, 168: {"B5"}, 192: {"B5"}, 197: {"B5"}, 205: {"B5"},
	209: {"B5"}, 210: {"B5"}, 211: {"B5"}, 219: {"B4"}, 234: {"B5"}, 238: {"B5"}, 242: {"B5"}, 247: {"B5"},
	257: {"B5"}, 271: {"B5"}, 275: {"B2"}, 287: {"B5"}, 292: {"B3"}, 304: {"B5"}, 331: {"B2"}, 334: {"B5"},
	359: {"B5"}, 367: {"B5"}, 372: {"B2", "B5"}, 379: {"B5"}, 384: {"B5"}, 399: {"B5"}, 401: {"B5"},
	402: {"B1", "B3"}, 406: {"B5"}, 412: {"B5"}, 413: {"B5"}, 418: {"B5"}, 420: {"B5"}, 464: {"B5"},
	472: {"B2"}, 475: {"B5"}, 479: {"B5"}, 481: {"B5"}, 488: {"B5"}, 491: {"B5"}, 495: {"B5"},
	496: {"B2", "B5"}, 501: {"B2", "B5"}, 502: {"B5"}, 504: {"B5"}, 505: {"B5"}, 506: {"B5"}, 510: {"B5"},
	530: {"B5"}, 532: {"B5"}, 533: {"B5"}, 550: {"B5"}, 562: {"B5"}, 569: {"B5"}, 574: {"B5"}, 575: {"B1"},
	576: {"B5"}, 582: {"B2"}, 584: {"B5"}, 586: {"B5"}, 592: {"B5"}, 594: {"B5"}, 616: {"B5"}, 622: {"B5"},
	636: {"B5"}, 645: {"B5"}, 646: {"B5"}, 650: {"B5"}, 651: {"B5"}, 654: {"B5"}, 660: {"B5"}, 661: {"B5"},
	664: {"B5"}, 674: {"B2"}, 678: {"B2"}, 680: {"B2"}, 692: {"B5"}, 697: {"B5"}, 706: {"B5"}, 710: {"B5"},
	714: {"B5"}, 716: {"B5"}, 719: {"B5"}, 722: {"B5"}, 723: {"B5"}, 727: {"B5"}, 731: {"B5"}, 734: {"B5"},
	742: {"B5"}, 744: {"B5"}, 765: {"B1", "B2", "B3"}, 767: {"B5"}, 774: {"B2"}, 791: {"B2"}, 792: {"B5"},
	804: {"B5"}, 809: {"B5"}, 810: {"B5"}, 817: {"B5"}, 833: {"B5"}, 875: {"B5"}, 889: {"B5"}, 906: {"B5"},
	915: {"B5"}, 937: {"B5"}, 946: {"B5"}, 952: {"B5"}, 953: {"B5"}, 965: {"B5"}, 973: {"B5"}, 974: {"B5"},
	978: {"B2"}, 982: {"B5"}, 986: {"B5"}, 987: {"B5"}, 992: {"B5"},
}
