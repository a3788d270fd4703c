package sim

// The simulator's tests. Each seed draws a world (parameters, scenario, faults) and runs
// the production core in it to quiescence, then checks the invariants:
//
//	go test ./bridge/core/sim -run TestSim                        // the default seeds
//	go test ./bridge/core/sim -run TestSim -sim.seeds=5000        // more
//	go test ./bridge/core/sim -run TestSim -sim.seed=N -sim.trace // replay one, with its trace

import (
	"cmp"
	"flag"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	simSeeds  = flag.Int("sim.seeds", 300, "how many seeds TestSim runs")
	simFrom   = flag.Uint64("sim.from", 1, "the first seed TestSim runs (then -sim.seeds of them)")
	simSeed   = flag.Uint64("sim.seed", 0, "run only this seed of TestSim")
	simTrace  = flag.Bool("sim.trace", false, "print the trace of every seed TestSim runs")
	simClaims = flag.String("sim.claims", "", "TestSim: atomic claims in every world (on), in none (off), or drawn per seed (empty)")
	simLapse  = flag.String("sim.lapse", "", "TestSim: a key that lapses under a dispatched action in every world (on), in none (off), or drawn per seed (empty)")
	simZombie = flag.String("sim.zombies", "", "TestSim: owners paused before their results in most deliveries, in every world (on), in none (off), or drawn per seed (empty)")
)

func TestSim(t *testing.T) {
	var seeds []uint64
	if *simSeed != 0 {
		seeds = []uint64{*simSeed}
	} else {
		for i := range *simSeeds {
			seeds = append(seeds, *simFrom+uint64(i))
		}
	}
	start := time.Now()
	var (
		mu       sync.Mutex
		total    Stats
		failures []*Report
		slowest  time.Duration
	)
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for seed := range work {
				t0 := time.Now()
				r := Run(seed, Options{Trace: *simTrace, Claims: *simClaims, Lapse: *simLapse, Zombies: *simZombie})
				took := time.Since(t0)
				mu.Lock()
				total.Add(&r.Stats)
				slowest = max(slowest, took)
				if len(r.Failures) > 0 {
					failures = append(failures, r)
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
	slices.SortFunc(failures, func(a, b *Report) int { return int(a.Seed) - int(b.Seed) })
	for _, r := range failures {
		t.Errorf("seed %d fails: %s", r.Seed, strings.Join(r.Failures, "; "))
	}
	if len(failures) > 0 {
		r := failures[0]
		if !*simTrace {
			r = Run(r.Seed, Options{Trace: true, Claims: *simClaims, Lapse: *simLapse, Zombies: *simZombie}) // the same run, traced
		}
		t.Errorf("seed %d fails; replay it with\n\tgo test ./bridge/core/sim -run TestSim -sim.seed=%d -sim.claims=%q -sim.lapse=%q -sim.zombies=%q -sim.trace\n%s",
			r.Seed, r.Seed, *simClaims, *simLapse, *simZombie, r)
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

// TestSimFoundSeeds replays seeds that once failed, each with the bug it found.
func TestSimFoundSeeds(t *testing.T) {
	for _, c := range []struct {
		seed          uint64
		claims, lapse string // Options.Claims, Options.Lapse ("" is "off" here)
		bug           string
	}{
		{68112, "", "", "a panic at the claimed hook dropped the rest of its batch, an EffUnadmit among it: the endpoint slot was never given back (the bridge's driver gave none back)"},
		{50171, "off", "", "an action that replayed its key holder's result left its record claimed; once the key and the result had expired, a re-publish took the record over and called Hermes for an action that had already ended"},
		{225455, "off", "", "an action published again after its records expired followed its old run from the first event and asked an approval answered in its first life; the run waited for its next one, which nobody asked, and a decision named the old request"},
		{119626, "off", "", "a later life of an action asked the approvals of a run that had long completed, from its history, over and over; a decision naming an earlier request then answered one of them"},
		{917, "off", "on", "a delivery adopted its action's key from a read, waited a lease for the record, and sent after the key had lapsed: a same-key action published after that executed again"},
		{1636, "off", "on", "the same, another world"},
	} {
		if r := Run(c.seed, Options{Claims: c.claims, Lapse: cmp.Or(c.lapse, "off"), Zombies: "off"}); len(r.Failures) > 0 {
			t.Errorf("seed %d fails again (%s): %s", c.seed, c.bug, strings.Join(r.Failures, "; "))
		}
	}
}
