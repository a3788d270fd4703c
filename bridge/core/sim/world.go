package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
)

// Options choose what a run records.
type Options struct {
	// Trace records every event, effect and answer with its simulated time and job.
	Trace bool
	// Claims says whether the world's store takes atomic claims (core.EffClaim): "" (each
	// seed draws it), "off" (the worlds as they were before the simulator had them, which
	// the mutants that predate them run on), or "on".
	Claims string
	// Lapse says whether the scenario plays a key that lapses under a dispatched action
	// whose only delivery died after its call (planLapse): "" (each seed draws it), "off"
	// (the worlds as they were before the simulator had it), or "on".
	Lapse string
	// Zombies says whether owners pause before their results far more often, with
	// Hermes refusing more and runs durably idempotent (drawZombies): "" (each seed
	// draws it), "off" (the worlds as they were before), or "on".
	Zombies string
	// sabotage breaks the world on purpose (tests prove that the invariants catch it):
	// "double_exec" (Hermes executes an unsafe request twice), "no_cas" (the log ignores
	// the expected sequence), "lie" (a refused request answers completed).
	sabotage string
}

// Report is the outcome of one seed.
type Report struct {
	Seed     uint64
	Failures []string
	Stats    Stats
	Params   string
	Scenario []string
	Trace    []string
}

// String is the report of a failing seed: failures, parameters, scenario and trace.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\nfailures:\n  %s\nparameters:\n  %s\nscenario:\n  %s\nstats: %s\n",
		r.Seed, strings.Join(r.Failures, "\n  "), strings.ReplaceAll(r.Params, "\n", "\n  "),
		strings.Join(r.Scenario, "\n  "), r.Stats.String())
	if len(r.Trace) > 0 {
		fmt.Fprintf(&b, "trace (%d lines):\n  %s\n", len(r.Trace), strings.Join(r.Trace, "\n  "))
	}
	return b.String()
}

// World is one simulated deployment: replicas running the production core's jobs over a
// simulated KV bucket, result log, JetStream consumer and Hermes, all driven by one
// scheduler. It is single-threaded and deterministic.
type World struct {
	sched
	seed     uint64
	sabotage string
	p        params
	lapseRnd sched // planLapse's draws
	cfg      core.Config
	tr       tracer

	kv      *bucket
	log     *resultLog
	evs     *eventLog
	herm    *hermes
	js      *jetStream
	reps    []*replica
	jobs    []*job
	watches []*watch
	scen    *scenario
	streamq uint64

	// faultsUntil is when faults stop being injected (so that every run converges).
	faultsUntil time.Time
	// lastPlanned is the time of the scenario's last scheduled publish or cancel.
	lastPlanned time.Time
	// driving is the job whose events are being handled (cross-job effects wait).
	driving *job
	// final: the final sweep runs; no faults, no new scenario events.
	final bool

	stats    Stats
	failures []string
}

// Run simulates seed and checks its invariants.
func Run(seed uint64, opt Options) *Report {
	w := newWorld(seed, opt)
	w.run()
	return &Report{Seed: seed, Failures: w.failures, Stats: w.stats, Params: w.p.String(), Scenario: w.scen.lines,
		Trace: w.tr.lines}
}

func newWorld(seed uint64, opt Options) *World {
	w := &World{sched: newSched(seed), seed: seed, sabotage: opt.sabotage}
	w.tr = tracer{on: opt.Trace, now: &w.now}
	w.p = drawParams(&w.sched)
	drawClaim(seed, opt.Claims, &w.p)
	w.lapseRnd = drawLapse(seed, opt.Lapse, &w.p)
	drawZombies(seed, opt.Zombies, &w.p)
	w.cfg = coreConfig(w.p)
	w.kv = &bucket{keysTTL: w.p.ttl, recordsTTL: w.p.recordsTTL, versions: map[string][]kvVersion{}}
	w.log = &resultLog{maxAge: w.p.logMaxAge, seq: &w.streamq, subjects: map[string][]*logMsg{},
		live: w.onStored, noCAS: w.sabotage == "no_cas"}
	w.evs = &eventLog{seq: &w.streamq, order: map[string][]int64{}}
	w.herm = &hermes{w: w, execAt: map[string][]time.Duration{}, keyExecAt: map[string][]time.Time{},
		runs: map[string]*hrun{}, runByKey: map[string]*hrun{}}
	w.js = &jetStream{w: w}
	for i := range w.p.replicas {
		w.reps = append(w.reps, newReplica(w, i))
	}
	w.scen = &scenario{w: w, byID: map[string]*action{}, answered: map[string]bool{}}
	return w
}

// failf records a broken invariant (or a broken contract of the core's effects).
func (w *World) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.failures = append(w.failures, msg)
	w.tr.printf("FAIL", "%s", msg)
}

// faults reports whether faults are injected now.
func (w *World) faults() bool { return !w.final && w.now.Before(w.faultsUntil) }

// run plays the scenario to quiescence, runs the final sweep and checks the invariants.
func (w *World) run() {
	w.scen.plan()
	w.faultsUntil = w.lastPlanned.Add(10 * time.Minute)
	for _, r := range w.reps {
		w.after(w.between(0, sweepEvery), r.sweepLoop) // its sweeper
	}
	if w.p.replicaEvery > 0 {
		w.after(w.between(w.p.replicaEvery/2, w.p.replicaEvery*3/2), w.replicaFault)
	}
	limit := w.lastPlanned.Add(horizon)
	for w.events < maxEvents && w.next(limit) {
		if w.now.After(w.lastPlanned) && w.events%64 == 0 && w.quiescent() {
			break
		}
	}
	if !w.quiescent() {
		w.failf("not quiescent at %s after %d events: %s", rel(w.now), w.events, w.pending())
	}
	w.checkLive()
	w.finalSweep()
	w.check()
	w.stats.Seeds = 1
	w.stats.Events = w.events
	w.stats.SimTime = rel(w.now)
	w.stats.Jobs = len(w.jobs)
}

// quiescent: every scheduled publish and cancel happened, and nothing is pending.
func (w *World) quiescent() bool { return !w.now.Before(w.lastPlanned) && w.pending() == "" }

// pending says what keeps a run from quiescence: a message not yet acked, terminated
// or exhausted, a job that runs, an action with no terminal result and no
// explanation, a decision the approver has yet to send.
func (w *World) pending() string {
	var out []string
	for _, m := range w.js.msgs {
		if !m.done {
			out = append(out, fmt.Sprintf("%s unfinished after %d deliveries", m, m.deliveries))
		}
	}
	for _, j := range w.jobs {
		if j.alive() {
			out = append(out, fmt.Sprintf("job %s alive (awaits %s, held=%v)", j.owner, j.c.Awaiting(), w.held(j)))
		}
	}
	for _, a := range w.scen.actions {
		if w.terminal(a.id) == nil && w.explained(a) == "" {
			v, _ := w.kv.live("act."+a.id, w.now)
			out = append(out, fmt.Sprintf("%s unsettled (record %s)", a.id, form.Record(v.rec)))
		}
	}
	if w.scen.pendingDecisions > 0 {
		out = append(out, fmt.Sprintf("%d decisions not yet published", w.scen.pendingDecisions))
	}
	return strings.Join(out, "; ")
}

// finalSweep stops the faults and lets the sweepers remove what is left in the park
// index (they only look at expired entries), for at most an approval window and a few
// leases.
func (w *World) finalSweep() {
	w.final = true
	limit := w.now.Add(approvalTTL + 4*lease)
	for w.events < maxEvents && w.next(limit) {
		if w.events%64 == 0 && len(w.kv.list("park.", w.now)) == 0 && !slices.ContainsFunc(w.jobs, (*job).alive) {
			break
		}
	}
}

// readyReplica returns a random replica that is up, not paused and not shutting down
// (with a free worker slot, when workers), nil if none is.
func (w *World) readyReplica(workers bool) *replica {
	var rs []*replica
	for _, r := range w.reps {
		if r.ready() && (!workers || r.inc.workers > 0) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return rs[w.intN(len(rs))]
}
