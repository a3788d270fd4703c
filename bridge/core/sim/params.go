package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
)

// Timing of the simulated bridge, as in production (deploy/README.md: ack wait 30 s, lease twice
// that, heartbeat 10 s) except for a shorter approval window, so that parked actions
// expire within a run.
const (
	lease       = 60 * time.Second
	heartbeat   = 10 * time.Second
	ackWait     = 30 * time.Second
	approvalTTL = 5 * time.Minute
	// sweepEvery is the sweeper's period: a tenth of the approval window, at most 10 s.
	sweepEvery = 10 * time.Second
	dupWindow  = 2 * time.Minute
	// runStopEnds bounds how long a run takes to end once asked to stop (always within
	// core.RunStopGrace, so that a stopped run never settles run_stop_timeout).
	runStopEnds = 5 * time.Second
	// horizon bounds a run in simulated time after its last scheduled event.
	horizon = 6 * time.Hour
	// maxEvents bounds a run in scheduled closures.
	maxEvents = 3_000_000
)

// coreConfig is the configuration of every job.
func coreConfig(p params) core.Config {
	return core.Config{Lease: lease, Heartbeat: heartbeat, ApprovalTTL: approvalTTL, MaxAttempts: p.maxAttempts,
		RetryBase: time.Second, RetryMax: 30 * time.Second, SettleFor: 30 * time.Second,
		DecisionTries: 30, ParkingWait: 5 * time.Second, AtomicClaim: p.atomicClaim}
}

// recordMargin is how much longer than their results the records are kept (the
// bridge's RecordMargin, scaled down with the simulated TTLs): more than any delay
// between a record's last write and its result's append here.
const recordMargin = 10 * time.Minute

// params are the per-seed settings of a world: its topology, its retention and the
// probability of each fault. Every one is drawn from the seed.
type params struct {
	replicas, workers, endpointMax int
	maxDeliver                     int // 0: unlimited
	maxAttempts                    int
	// ttl is the keys' TTL, logMaxAge the result log's (at least ttl, as the bridge
	// requires), recordsTTL the action records' (logMaxAge + recordMargin).
	ttl, logMaxAge, recordsTTL time.Duration
	durableRuns                bool
	// atomicClaim: the store writes a key and a record in one batch (core.EffClaim),
	// which it refuses as a whole with pBatchRefused (nothing written).
	atomicClaim   bool
	pBatchRefused float64
	// lapse: the scenario plays a key that lapses under a dispatched action (planLapse).
	lapse bool
	// zombies: owners pause before their results far more often, runs are durably
	// idempotent, and Hermes refuses more (drawZombies).
	zombies bool

	// Store and log faults, per operation.
	pSlow, pStale, pLostReply, pFailWrite float64
	// staleLag bounds how far behind a stale read is (0: any older version, or none).
	staleLag time.Duration
	// Job faults, per hook and per store operation.
	pHookCrash, pHookPause, pOpCrash, pOpPause, pPanic float64
	// pStoredPause is a pause at PointStored, right before a terminal result's append:
	// the window where a paused owner's result races the delivery that took it over.
	pStoredPause float64
	// Replica faults: one every replicaEvery on average (0: none), a crash with
	// pReplicaCrash, a graceful shutdown with pShutdown, else a pause.
	replicaEvery             time.Duration
	pReplicaCrash, pShutdown float64
	// Hermes faults, per request.
	pRefuse, pConnRefused, pUncertain, pStreamDrop, pPublishFail, pRunFail float64
	// Scenario.
	pDuplicate, pRepublish, pCancel, pTwoDecides, pNoAnswer, pStray, pInvalid float64
}

// drawParams draws a world's parameters.
func drawParams(s *sched) params {
	p := params{replicas: 3, workers: 2 + s.intN(5), endpointMax: 1 + s.intN(3), maxAttempts: 2 + s.intN(4)}
	if s.chance(0.5) {
		p.maxDeliver = 2 + s.intN(7)
	}
	p.ttl = time.Duration(10+s.intN(21)) * time.Minute
	p.logMaxAge = p.ttl + time.Duration(s.intN(int(p.ttl/time.Minute)+1))*time.Minute
	p.recordsTTL = p.logMaxAge + recordMargin
	p.durableRuns = s.chance(0.5)
	scale := func(on float64, lo, hi float64) float64 {
		if !s.chance(on) {
			return 0
		}
		return lo + s.rnd.Float64()*(hi-lo)
	}
	p.pSlow = scale(0.7, 0.01, 0.06)
	p.pStale = scale(0.7, 0.01, 0.06)
	if s.chance(0.5) {
		p.staleLag = s.between(time.Second, 30*time.Second)
	}
	p.pLostReply = scale(0.7, 0.005, 0.03)
	p.pFailWrite = scale(0.7, 0.005, 0.03)
	p.pHookCrash = scale(0.7, 0.005, 0.04)
	p.pHookPause = scale(0.6, 0.005, 0.03)
	p.pOpCrash = scale(0.5, 0.002, 0.01)
	p.pOpPause = scale(0.5, 0.001, 0.006)
	p.pPanic = scale(0.15, 0.001, 0.004)
	if s.chance(0.7) {
		p.replicaEvery = s.between(2*time.Minute, 10*time.Minute)
		p.pReplicaCrash = 0.4
		p.pShutdown = scale(0.3, 0.1, 0.3)
	}
	p.pRefuse = scale(0.7, 0.03, 0.15)
	p.pConnRefused = scale(0.5, 0.01, 0.05)
	p.pUncertain = scale(0.6, 0.01, 0.06)
	p.pStreamDrop = scale(0.5, 0.02, 0.1)
	p.pPublishFail = scale(0.3, 0.002, 0.01)
	p.pRunFail = scale(0.5, 0.05, 0.2)
	p.pDuplicate = 0.3
	p.pRepublish = scale(0.5, 0.1, 0.3)
	p.pCancel = 0.15
	p.pTwoDecides = 0.2
	p.pNoAnswer = 0.15
	p.pStray = scale(0.3, 0.05, 0.15)
	p.pInvalid = 0.04
	p.pStoredPause = scale(0.6, 0.1, 0.5)
	return p
}

// drawKind draws whether a world is of a kind the main draws know nothing of (atomic
// claims, a lapsed key, zombies): with probability chance, unless mode ("off", "on"; the
// kind's option) says, from a generator of its own (stream), which it returns for the
// kind's further draws. So the worlds without the kind run exactly as they did before the
// simulator had it.
func drawKind(seed, stream uint64, mode string, chance float64) (sched, bool) {
	s := sched{rnd: rand.New(rand.NewPCG(seed, stream))}
	on := s.chance(chance)
	switch mode {
	case "off":
		on = false
	case "on":
		on = true
	}
	return s, on
}

// drawClaim draws whether the world's store takes atomic claims (Options.Claims), and how
// often it refuses one.
func drawClaim(seed uint64, mode string, p *params) {
	var s sched
	s, p.atomicClaim = drawKind(seed, 0xc1a1c1a1, mode, 0.5)
	if s.chance(0.5) {
		p.pBatchRefused = 0.01 + s.rnd.Float64()*0.19
	}
}

// drawLapse draws whether the world plays a lapsed key (Options.Lapse); planLapse draws
// from the generator it returns.
func drawLapse(seed uint64, mode string, p *params) sched {
	var s sched
	s, p.lapse = drawKind(seed, 0x1a95e1a9, mode, 0.3)
	return s
}

// drawZombies draws whether the world breeds zombies (Options.Zombies), and then how:
// owners that pause right before appending their result (a taker goes on meanwhile) in
// most deliveries, Hermes refusing a post now and then (a certain failure to store), a
// run's events failing to be stored now and then (its owner settles while the run goes
// on, and a taker asks its next approval), and runs durably idempotent (a taker posts a
// run again).
func drawZombies(seed uint64, mode string, p *params) {
	var s sched
	if s, p.zombies = drawKind(seed, 0x20b1e5, mode, 0.3); !p.zombies {
		return
	}
	p.pStoredPause = 0.5 + s.rnd.Float64()*0.4
	p.pRefuse = max(p.pRefuse, 0.05+s.rnd.Float64()*0.15)
	p.pPublishFail = max(p.pPublishFail, 0.01+s.rnd.Float64()*0.04)
	p.durableRuns = true
}

func (p params) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replicas=%d workers=%d endpoint_max=%d max_deliver=%d max_attempts=%d ttl=%s log_max_age=%s durable_runs=%v\n",
		p.replicas, p.workers, p.endpointMax, p.maxDeliver, p.maxAttempts, p.ttl, p.logMaxAge, p.durableRuns)
	fmt.Fprintf(&b, "records_ttl=%s atomic_claim=%v (refused %.3f) lapse=%v zombies=%v\n", p.recordsTTL, p.atomicClaim, p.pBatchRefused, p.lapse, p.zombies)
	fmt.Fprintf(&b, "store: slow=%.3f stale=%.3f (lag %s) lost_reply=%.3f fail_write=%.3f\n",
		p.pSlow, p.pStale, p.staleLag, p.pLostReply, p.pFailWrite)
	fmt.Fprintf(&b, "jobs: hook_crash=%.3f hook_pause=%.3f op_crash=%.3f op_pause=%.3f panic=%.3f stored_pause=%.3f\n",
		p.pHookCrash, p.pHookPause, p.pOpCrash, p.pOpPause, p.pPanic, p.pStoredPause)
	fmt.Fprintf(&b, "replicas: every=%s crash=%.2f shutdown=%.2f\n", p.replicaEvery, p.pReplicaCrash, p.pShutdown)
	fmt.Fprintf(&b, "hermes: refuse=%.3f conn_refused=%.3f uncertain=%.3f stream_drop=%.3f publish_fail=%.3f run_fail=%.3f\n",
		p.pRefuse, p.pConnRefused, p.pUncertain, p.pStreamDrop, p.pPublishFail, p.pRunFail)
	fmt.Fprintf(&b, "scenario: duplicate=%.2f republish=%.2f cancel=%.2f two_decides=%.2f no_answer=%.2f stray=%.2f invalid=%.2f",
		p.pDuplicate, p.pRepublish, p.pCancel, p.pTwoDecides, p.pNoAnswer, p.pStray, p.pInvalid)
	return b.String()
}
