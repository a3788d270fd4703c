package sim

import (
	"slices"
	"strconv"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// replica is a bridge process. Each start of it is an incarnation: a crash ends the
// incarnation with every job of it, and the restart begins a fresh one (free worker
// slots, a closed breaker, no registry).
type replica struct {
	w   *World
	n   int
	inc *incarnation
}

// incarnation is one life of a replica.
type incarnation struct {
	r        *replica
	n        int
	up       bool
	paused   bool // a pause holds every event of its jobs, heartbeats included
	draining bool // shutting down: fetches nothing, starts nothing
	workers  int  // free worker slots
	ep       *endpoint
	jobs     []*job          // its registry: the jobs running here
	sweeping map[string]bool // actions an expiry runs for
}

func newReplica(w *World, n int) *replica {
	r := &replica{w: w, n: n}
	r.inc = r.newIncarnation(0)
	return r
}

func (r *replica) newIncarnation(n int) *incarnation {
	p := r.w.p
	return &incarnation{r: r, n: n, up: true, workers: p.workers, sweeping: map[string]bool{},
		ep: &endpoint{max: p.endpointMax, brk: core.Breaker{Threshold: 3, Base: 5 * time.Second, MaxCooldown: time.Minute}}}
}

// ready reports whether the replica fetches messages and answers requests now.
func (r *replica) ready() bool { return r.inc.up && !r.inc.paused && !r.inc.draining }

func (r *replica) sweepLoop() {
	if r.ready() {
		r.sweep()
	}
	r.w.after(sweepEvery, r.sweepLoop)
}

// sweep is the sweeper (bridge/approvals.go): for each park index entry past its
// expiry whose action record exists, it starts an expiry (KindExpire) when the action
// has its terminal result (the expiry removes the entry), is still parked, or was
// decided expired or cancelled by a job that stopped half way; at most four at once.
// It reads the store as it is (its reads are not faulted).
func (r *replica) sweep() {
	w, inc := r.w, r.inc
	for _, k := range w.kv.list("park.", w.now) {
		idx, _ := w.kv.live(k, w.now)
		if w.now.Before(idx.rec.ExpiresAt) {
			continue
		}
		id := idx.rec.ActionID
		rec, ok := w.kv.live(kvstore.ActionKey(id), w.now)
		a := w.scen.byID[id]
		if !ok || a == nil || inc.sweeping[id] || len(inc.sweeping) >= 4 {
			continue
		}
		m := w.log.last(id, w.now)
		switch {
		case m != nil && m.terminal():
		case rec.rec.State == kvstore.StateParked:
		case rec.rec.Decision == kvstore.DecisionExpired || rec.rec.Decision == kvstore.DecisionCancel:
		default:
			continue
		}
		inc.sweeping[id] = true
		j := w.newJob(inc, core.KindExpire, a, nil)
		w.tr.printf(r.name(), "sweeper: expires %s", id)
		w.post(j, core.Event{Kind: core.EvDeliver, Start: &core.Start{Kind: core.KindExpire, Owner: j.owner,
			Seed: w.rnd.Uint64(), Action: &core.Action{ID: id}}})
	}
}

// freeWorker gives a worker slot back and lets the consumer deliver more.
func (inc *incarnation) freeWorker(w *World) {
	if inc != inc.r.inc {
		return
	}
	inc.workers++
	w.js.schedulePump()
}

func (inc *incarnation) unregister(j *job) {
	inc.jobs = slices.DeleteFunc(inc.jobs, func(x *job) bool { return x == j })
}

// replicaFault pauses, crashes or shuts down a random replica, and schedules the next
// fault while faults last.
func (w *World) replicaFault() {
	if !w.faults() {
		return
	}
	r := w.reps[w.intN(len(w.reps))]
	if r.inc.up && !r.inc.draining {
		switch {
		case w.chance(w.p.pShutdown):
			w.shutdown(r)
		case w.chance(w.p.pReplicaCrash):
			w.crashReplica(r, "")
		case !r.inc.paused:
			w.pauseReplica(r)
		}
	}
	w.after(w.between(w.p.replicaEvery/2, w.p.replicaEvery*3/2), w.replicaFault)
}

// pauseReplica holds every event of the replica's jobs for 1.5 to 3 leases.
func (w *World) pauseReplica(r *replica) {
	inc := r.inc
	d := w.between(lease*3/2, 3*lease)
	w.stats.ReplicaPauses++
	w.tr.printf(r.name(), "REPLICA PAUSE for %s", d)
	inc.paused = true
	w.after(d, func() {
		if !inc.up {
			return
		}
		inc.paused = false
		w.tr.printf(r.name(), "replica wakes")
		for _, j := range append([]*job(nil), inc.jobs...) {
			w.kick(j)
		}
		w.js.schedulePump()
	})
}

// crashReplica ends the replica's incarnation: every job of it vanishes (answers in
// flight are dropped; writes and requests already sent still land). It restarts
// 5 to 60 s later.
func (w *World) crashReplica(r *replica, why string) {
	inc := r.inc
	if why == "" {
		w.stats.ReplicaCrashes++
		why = "REPLICA CRASH"
	}
	w.tr.printf(r.name(), "%s", why)
	inc.up = false
	for _, j := range append([]*job(nil), inc.jobs...) {
		w.kill(j)
	}
	d := w.between(5*time.Second, time.Minute)
	w.after(d, func() {
		r.inc = r.newIncarnation(inc.n + 1)
		w.tr.printf(r.name(), "replica restarts")
		w.js.schedulePump()
	})
}

// shutdown is SIGTERM: the replica stops fetching, its jobs get a grace of up to 10 s,
// then EvShutdown; 2 s later the process exits (whatever is left vanishes) and
// restarts later.
func (w *World) shutdown(r *replica) {
	inc := r.inc
	w.stats.Shutdowns++
	w.tr.printf(r.name(), "SHUTDOWN")
	inc.draining = true
	grace := w.between(0, 10*time.Second)
	w.after(grace, func() {
		if !inc.up {
			return
		}
		for _, j := range append([]*job(nil), inc.jobs...) {
			if j.alive() {
				w.post(j, core.Event{Kind: core.EvShutdown})
			}
		}
		w.after(2*time.Second, func() {
			if inc.up {
				w.crashReplica(r, "exits after its shutdown")
			}
		})
	})
}

func (r *replica) name() string { return "r" + strconv.Itoa(r.n) }
