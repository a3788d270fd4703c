package sim

import (
	"cmp"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	simMutants     = flag.Bool("sim.mutants", false, "TestMutants: plant each mutant in the core and want the simulator to catch it (make mutants)")
	simMutantSeeds = flag.Int("sim.mutant-seeds", 3000, "TestMutants: the seeds each mutant runs")
	simMutant      = flag.String("sim.mutant", "", "TestMutants: plant only the mutant of this name")
	simMutantSeed  = flag.Uint64("sim.mutant-seed", 0, "TestMutants: run only this seed, traced, on each mutant planted")
)

// A mutant is one bug planted in the core (bridge/core): the text old of file, which
// must occur exactly once, replaced by new. Each class of promise has one at least;
// each bug the simulator found has one too, so that a change to the simulator that no
// longer reaches it shows.
type mutant struct {
	class, name string
	file        string // in bridge/core
	old, new    string
	why         string
	// seeds is how many seeds it takes to catch (0: -sim.mutant-seeds): a bug the
	// simulator found once in tens of thousands of seeds needs as many.
	seeds int
	// claims is the worlds' atomic claims (Options.Claims): "off" unless the mutant is
	// in the claim, so that the mutants older than it run on the worlds that caught them.
	claims string
	// lapse is the worlds' lapsed key (Options.Lapse): "off" unless the mutant is in the
	// path it plays, for the same reason.
	lapse string
	// zombies is the worlds' zombies (Options.Zombies): "off" unless set.
	zombies string
}

var mutants = []mutant{
	{
		class: "once", name: "refused_claim_sends", file: "start.go",
		old:    "\tcase Exists, Conflict, TooLarge:\n\t\tj.startKey()",
		new:    "\tcase Exists:\n\t\tj.take(ev.Rev, j.intentRecord(kvstore.StateDispatched), VerdictFresh)\n\t\tj.sendMarked()\n\tcase Conflict, TooLarge:\n\t\tj.startKey()",
		why:    "an atomic claim refused because the key or the record is held is taken as won: the action is sent again",
		claims: "on",
	},
	{
		class: "fence", name: "takeover_of_settling_not_fenced", file: "begin.go",
		old: "j.fenced = e.Record.State == kvstore.StateSettling",
		new: "j.fenced = false",
		why: "a delivery that takes over a record left settling (its owner reached a result without a call) may send",
	},
	{
		class: "fence", name: "not_run_unfenced_after_dispatch", file: "settle.go",
		old:     "(j.rec.State != kvstore.StateDispatched || FreesKey(r))",
		new:     "j.rec.State != kvstore.StateDispatched",
		why:     "a dispatched claim stores 'nothing ran' without proving its claim (zombie_certain_failure)",
		seeds:   30000, // with zombies, seeds 12330 and one more catch it
		zombies: "on",
	},
	{
		class: "fence", name: "unknown_pending_followed", file: "settle.go",
		old:   "case ev.Status == OK && j.claimed:",
		new:   "case false:",
		why:   "a paused delivery follows a taker's pending message with its own result (scripts finding_01_pending_terminal, settle)",
		seeds: 100000,
	},
	{
		class: "key", name: "running_holder_key_stolen", file: "key.go",
		old: "\t\tj.emit(Effect{Kind: EffYield})\n\t\tj.async(kKeyHolderWait, Effect{Kind: EffWaitTerminal, ActionID: j.seen.Record.ActionID, Until: j.act.Deadline})",
		new: "\t\tj.store(kKeyFree, Effect{Kind: EffDelete, Key: j.act.IdemKey, Rev: j.seen.Revision})",
		why: "a key whose holder has no terminal result yet is freed and claimed instead of waited for",
	},
	{
		class: "terminal", name: "pending_is_terminal", file: "core.go",
		old: "return e.Result == nil || e.Result.Status != events.StatusPendingApproval",
		new: "return true",
		why: "a pending_approval message counts as the action's terminal result (finding 1)",
	},
	{
		class: "last resort", name: "settle_without_claim", file: "action.go",
		old: "if !j.claimed || j.lost || j.settling || j.act.CapabilityID == \"\" {",
		new: "if j.lost || j.settling || j.act.CapabilityID == \"\" {",
		why: "a final delivery that holds no claim settles the action failed (finding 2)",
	},
	{
		class: "retry budget", name: "gate_refusal_spends_attempt", file: "action.go",
		old: "if c.Gated && c.NotStarted && !j.final && delay < j.remaining() {",
		new: "if false {",
		why: "a gate 429 (nothing ran) spends the action's attempt budget: the 14-vs-10 failures of issue 24",
	},
	{
		class: "stale read", name: "behind_read_believed", file: "begin.go",
		old:   "if ev.Entry.Key == j.seen.Key && ev.Entry.Revision < j.seen.Revision {",
		new:   "if false {",
		why:   "a record read behind one the job already made is believed (stale_examine)",
		seeds: 100000,
	},
	{
		class: "retention", name: "tombstone_not_kept", file: "begin.go",
		old:   "j.store(kTombKept, Effect{Kind: EffUpdate, Key: ev.Entry.Key, Rec: recordOf(ev.Entry.Record), Rev: ev.Entry.Revision})",
		new:   "j.settleStored(ev.Entry.Record)",
		why:   "a tombstone's result is appended without rewriting it: the result outlives the record (tombstone_kept)",
		seeds: 50000,
	},
	{
		class: "key", name: "dispatched_replays_new_holder", file: "key.go",
		old:   "if j.claimed && j.rec.State == kvstore.StateDispatched {",
		new:   "if false {",
		why:   "a dispatched action whose key expired replays the key's new holder (dispatched_key_lost)",
		seeds: 3000,
		lapse: "on",
	},
	{
		class: "lease", name: "takeover_without_lease", file: "begin.go",
		old: "until := j.now.Add(j.cfg.Lease)",
		new: "until := j.now",
		why: "a delivery takes over an owned record without waiting for its revision to stand still a lease",
	},
	{
		class: "run", name: "interrupted_run_certain", file: "run.go",
		old: `info = &events.ErrorInfo{Code: "run_interrupted", Category: "permanent", UncertainOutcome: true,`,
		new: `info = &events.ErrorInfo{Code: "run_interrupted", Category: "permanent", UncertainOutcome: false,`,
		why: "a run the gateway's restart interrupted settles as certain, although its tools may have run",
	},
	{
		class: "approval", name: "run_answer_without_request_id", file: "decision.go",
		old:   "Choice: j.runChoice, RequestID: j.seen.Record.ApprovalRequestID}})",
		new:   "Choice: j.runChoice}})",
		why:   "a decision forwarded to the run names no request_id: Hermes resolves the oldest request, not the one decided",
		seeds: 300,
	},
	{
		class: "approval", name: "stale_decision_applied", file: "decision.go",
		old:   "case d.RequestID != \"\" && r.ApprovalSeq > 0 && (!waiting || d.RequestID != r.ApprovalRequestID):",
		new:   "case false:",
		why:   "a decision naming a request the run no longer waits for answers the one it waits for",
		seeds: 300,
	},
}

// seedFails matches the simulator's report of a failing seed.
var seedFails = regexp.MustCompile(`seed (\d+) fails: ([^\n]*)`)

// TestMutants plants each mutant in a copy of its file (go test -overlay: the tree is
// not touched) and runs the simulator over it: each must be caught. It reports the
// first seed that catches each, and the command that replays it. It is not part of
// make test (each mutant compiles the simulator anew): run it with make mutants.
func TestMutants(t *testing.T) {
	if !*simMutants {
		t.Skip("plants bugs in the core and runs the simulator on each: run with -sim.mutants (make mutants)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mutants {
		if *simMutant != "" && m.name != *simMutant {
			continue
		}
		t.Run(strings.ReplaceAll(m.class, " ", "_")+"/"+m.name, func(t *testing.T) {
			t.Parallel()
			src, err := filepath.Abs(filepath.Join("..", m.file))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), m.old); n != 1 {
				t.Fatalf("the mutant's text occurs %d times in %s, want once: update the mutant to the code", n, m.file)
			}
			dir := t.TempDir()
			mutated := filepath.Join(dir, m.file)
			if err := os.WriteFile(mutated, []byte(strings.Replace(string(b), m.old, m.new, 1)), 0o600); err != nil {
				t.Fatal(err)
			}
			ov, err := json.Marshal(map[string]map[string]string{"Replace": {src: mutated}})
			if err != nil {
				t.Fatal(err)
			}
			overlay := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(overlay, ov, 0o600); err != nil {
				t.Fatal(err)
			}
			seeds := *simMutantSeeds
			if m.seeds != 0 {
				seeds = m.seeds
			}
			claims, lapse, zombies := cmp.Or(m.claims, "off"), cmp.Or(m.lapse, "off"), cmp.Or(m.zombies, "off")
			args := []string{"test", "-overlay", overlay, "-count=1", "-run", "^TestSim$", "-timeout", "0", ".", "-sim.claims", claims,
				"-sim.lapse", lapse, "-sim.zombies", zombies, "-sim.seeds", strconv.Itoa(seeds)}
			if *simMutantSeed != 0 {
				args = append(args[:len(args)-2], "-sim.seed", strconv.FormatUint(*simMutantSeed, 10), "-sim.trace")
			}
			out, err := exec.Command(goBin, args...).CombinedOutput()
			if *simMutantSeed != 0 {
				t.Logf("seed %d on the mutant (%s):\n%s", *simMutantSeed, m.why, out)
			}
			found := seedFails.FindAllStringSubmatch(string(out), -1)
			if err == nil || len(found) == 0 {
				t.Fatalf("mutant survived %d seeds (%s): %v\n%s", seeds, m.why, err, lastLines(out, 20))
			}
			first := found[0]
			t.Logf("caught: %d of %d seeds fail; the first, seed %s: %s\n\treplay: go test ./bridge/core/sim -run TestMutants -v -sim.mutants -sim.mutant=%s -sim.mutant-seed=%s",
				len(found), seeds, first[1], clip(first[2], 300), m.name, first[1])
		})
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
