package kvstore_test

// A randomized model of the bridge's replicas on the ledger. Each seed generates a
// scenario (actions of every kind: unsafe and safe, with and without idempotency keys
// that collide on purpose with the same or another input, approval actions with and
// without a pre-approval, governed runs (post, Bind, follow; half the seeds with durable
// run idempotency); duplicate publishes; cancel requests, some before their action) and
// runs it on kvtest's stores with simulated JetStream delivery: a message
// stays unacknowledged until a delivery acknowledges it, and is delivered again once
// its ack wait passes without progress, so a delivery that crashed, stopped without
// acknowledging, or stalled is followed by another one, and a stalled one may wake as
// a zombie. Deliveries run on three replicas and follow the ledger's verdicts through
// the simulated bridge of ledger_sim_test.go. Faults are injected at random:
// deliveries crash or stall at driver steps and before store calls, whole replicas
// stall (heartbeats included), writes lose their replies or fail, reads are stale,
// Hermes refuses requests (429), the bridge fails for certain before a dispatch. An
// approver answers pending messages (sometimes twice and differently, sometimes
// never), a sweeper expires parked actions and carries on decided ones nobody carries.
//
// After quiescence (every message acknowledged, every action settled, every goroutine
// ended, a last sweep) modelRun.check asserts: for every action, checkAction (one
// terminal result, last, after at most one pending message; an unsafe action executed
// at most once; a truthful result: completed means executed, a certain failure or a
// replay means not executed; an approval action executed only when its first decision
// approved it, and otherwise settled by that decision or a later cancel; no record
// left parked); at most one execution per scoped key of an unsafe operation; replays
// copy the result of a same-key same-input action, conflicts have a different input
// under the key; a governed run never settles outcome_unknown once a delivery bound its
// run id, nor ever where runs are durably idempotent; a cancel that came before its action, or flagged it before its
// dispatch, kept it from Hermes; no park index entry, no key record of an unsettled
// action, no record of an action never published, no message unacknowledged; and the
// driver's own checks (a decision is never dropped, Decide never gives a claim without
// a decision). A seed fixes the scenario and the sequence of random draws, not the
// goroutines' interleaving: a failure prints its trace.
//
//	go test -race -run TestLedgerModel ./kvstore -ledger.seeds=3000
//	go test -race -run TestLedgerModel ./kvstore -ledger.seed=1234 -ledger.trace

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/kvstore/kvtest"
)

var (
	modelSeeds = flag.Int("ledger.seeds", 200, "how many seeds TestLedgerModel runs")
	modelSeed  = flag.Uint64("ledger.seed", 0, "run only this seed of TestLedgerModel")
	modelPar   = flag.Int("ledger.par", 16, "how many seeds TestLedgerModel runs at once")
	modelTrace = flag.Bool("ledger.trace", false, "print the trace of every seed TestLedgerModel runs")
)

// Timing of the model. The ledger's safety does not depend on it (only the number of
// takeovers does): leases are short so that many of them pass in a run.
const (
	mLease       = 40 * time.Millisecond
	mHeartbeat   = 8 * time.Millisecond
	mAckWait     = 60 * time.Millisecond
	mApprovalTTL = 300 * time.Millisecond
	mSweepEvery  = 25 * time.Millisecond
	mQuiesce     = 12 * time.Second // a seed that has not settled by then fails
)

// Fault rates.
const (
	pStepCrash  = 0.03 // a delivery stops dead at a driver step
	pStepPause  = 0.02 // a delivery stalls past the lease at a driver step
	pCallCrash  = 0.01 // ... at a store call
	pCallPause  = 0.004
	pJitter     = 0.04 // any store call sleeps up to 2 ms
	pStepJitter = 0.3  // a driver step sleeps up to half a lease (the heartbeat goes on)
	pLostAck    = 0.01 // a write lands and its reply is lost
	pFailWrite  = 0.01 // a write fails without effect
	pStaleRead  = 0.03 // a Get or Last returns an older value (or none)
	pRefuse     = 0.1  // Hermes answers 429
	pPreFail    = 0.05 // the bridge fails for certain before the dispatch
	pDuplicate  = 0.3  // an action is published twice
	pCancel     = 0.15 // a cancel request is sent for an action
	pTwoDecides = 0.2  // the approver answers twice
	pNoAnswer   = 0.15 // the approver never answers (the sweeper expires the action)

	mReplicas = 3 // a stall of a replica stalls all its deliveries, heartbeats included
)

// replica is a bridge process: its deliveries stall together.
type replica struct {
	mu     sync.Mutex
	paused chan struct{}
}

func (r *replica) wait() {
	r.mu.Lock()
	ch := r.paused
	r.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (r *replica) stall(d time.Duration) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.paused = ch
	r.mu.Unlock()
	time.Sleep(d)
	r.mu.Lock()
	r.paused = nil
	r.mu.Unlock()
	close(ch)
}

func TestLedgerModel(t *testing.T) {
	seeds := make([]uint64, 0, *modelSeeds)
	if *modelSeed != 0 {
		seeds = append(seeds, *modelSeed)
	} else {
		for i := range *modelSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	start := time.Now()
	var (
		mu       sync.Mutex
		failures []*modelRun
		total    modelStats
		longest  time.Duration
	)
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range max(1, *modelPar) {
		wg.Go(func() {
			for seed := range work {
				m := runModel(seed)
				mu.Lock()
				total.add(&m.stats)
				longest = max(longest, m.took)
				if len(m.failures) > 0 {
					failures = append(failures, m)
				}
				mu.Unlock()
				if *modelTrace {
					t.Logf("seed %d (%s):\n%s", seed, m.took.Round(time.Millisecond), m.report())
				}
			}
		})
	}
	for _, s := range seeds {
		mu.Lock()
		stop := len(failures) >= 3
		mu.Unlock()
		if stop {
			break
		}
		work <- s
	}
	close(work)
	wg.Wait()
	t.Logf("%d seeds in %s (longest %s): %s", len(seeds), time.Since(start).Round(time.Millisecond),
		longest.Round(time.Millisecond), total.String())
	sort.Slice(failures, func(i, j int) bool { return failures[i].seed < failures[j].seed })
	for i, m := range failures {
		if i == 0 {
			t.Errorf("seed %d fails (rerun: -run TestLedgerModel -ledger.seed=%d -ledger.trace):\n%s", m.seed, m.seed, m.report())
		} else {
			t.Errorf("seed %d fails too: %s", m.seed, strings.Join(m.failures, "; "))
		}
	}
}

// modelStats counts what happened in runs.
type modelStats struct {
	actions, deliveries, takeovers, uncertain, crashes, pauses, lostAcks, failedWrites,
	staleReads, refusals, executions, replays, conflicts, cancels, decisions, expiries,
	replicaStalls, runs, runsReal, runsUnknown, starts, notFresh atomic.Int64
}

func (s *modelStats) add(o *modelStats) {
	for _, p := range [][2]*atomic.Int64{{&s.actions, &o.actions}, {&s.deliveries, &o.deliveries},
		{&s.takeovers, &o.takeovers}, {&s.uncertain, &o.uncertain}, {&s.crashes, &o.crashes},
		{&s.pauses, &o.pauses}, {&s.lostAcks, &o.lostAcks}, {&s.failedWrites, &o.failedWrites},
		{&s.staleReads, &o.staleReads}, {&s.refusals, &o.refusals}, {&s.executions, &o.executions},
		{&s.replays, &o.replays}, {&s.conflicts, &o.conflicts},
		{&s.cancels, &o.cancels}, {&s.decisions, &o.decisions}, {&s.expiries, &o.expiries},
		{&s.replicaStalls, &o.replicaStalls}, {&s.runs, &o.runs}, {&s.runsReal, &o.runsReal},
		{&s.runsUnknown, &o.runsUnknown}, {&s.starts, &o.starts}, {&s.notFresh, &o.notFresh}} {
		p[0].Add(p[1].Load())
	}
}

func (s *modelStats) String() string {
	return fmt.Sprintf("%d actions, %d deliveries, %d runs at a later attempt (%d uncertain), %d crashes, %d stalls, %d replica stalls, "+
		"%d lost replies, %d failed writes, %d stale reads, %d refusals, %d executions, %d replays, "+
		"%d key conflicts, %d cancels, %d decisions, %d expiries; %d one-write starts (%d not fresh); %d runs: %d with the run's result, %d outcome_unknown",
		s.actions.Load(), s.deliveries.Load(), s.takeovers.Load(), s.uncertain.Load(), s.crashes.Load(),
		s.pauses.Load(), s.replicaStalls.Load(), s.lostAcks.Load(), s.failedWrites.Load(), s.staleReads.Load(), s.refusals.Load(),
		s.executions.Load(), s.replays.Load(), s.conflicts.Load(), s.cancels.Load(), s.decisions.Load(),
		s.expiries.Load(), s.starts.Load(), s.notFresh.Load(), s.runs.Load(), s.runsReal.Load(), s.runsUnknown.Load())
}

// simMsg is a JetStream message: an action or a decision.
type simMsg struct {
	n        int
	kind     string // action, decision
	a        simAction
	decision string
	at       time.Time // published at

	// guarded by modelRun.mu
	acked      bool
	cur        *delivery
	deadline   time.Time // of the ack wait of cur
	deliveries int
}

// cancelRec is one cancel request and its answer.
type cancelRec struct {
	id    string
	at    time.Time
	state string
	claim bool
	err   error
	done  bool
}

type modelRun struct {
	seed   uint64
	start  time.Time
	took   time.Duration
	ctx    context.Context
	cancel context.CancelFunc

	rndMu sync.Mutex
	rnd   *rand.Rand

	rec      *kvtest.Records
	log      *kvtest.Log
	l        *kvstore.Ledger
	hermes   *simHermes
	b        *bridge
	replicas [mReplicas]replica
	faults   atomic.Bool
	wg       sync.WaitGroup
	stats    modelStats

	mu        sync.Mutex
	actions   []simAction
	byID      map[string]simAction
	msgs      []*simMsg
	cancels   []*cancelRec
	answered  map[string]bool // the approver answered the action's pending message
	sweeping  map[string]bool // a sweeper delivery runs for the action
	scenario  []string
	trace     []string
	failures  []string
	lastEvent time.Time
}

func (m *modelRun) chance(p float64) bool {
	m.rndMu.Lock()
	defer m.rndMu.Unlock()
	return m.rnd.Float64() < p
}

func (m *modelRun) intN(n int) int {
	m.rndMu.Lock()
	defer m.rndMu.Unlock()
	return m.rnd.IntN(n)
}

func (m *modelRun) ms(lo, hi int) time.Duration {
	return time.Duration(lo+m.intN(hi-lo+1)) * time.Millisecond
}

const maxTrace = 50000

func (m *modelRun) tracef(format string, args ...any) {
	line := fmt.Sprintf("%7.1fms ", float64(time.Since(m.start).Microseconds())/1000) + fmt.Sprintf(format, args...)
	m.mu.Lock()
	if len(m.trace) < maxTrace {
		m.trace = append(m.trace, line)
	}
	m.mu.Unlock()
}

func (m *modelRun) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	m.tracef("FAIL: %s", msg)
	m.mu.Lock()
	m.failures = append(m.failures, msg)
	m.mu.Unlock()
}

func (m *modelRun) goroutine(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

func (m *modelRun) report() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "failures:\n  %s\nscenario:\n  %s\ntrace (%d lines):\n  %s\n",
		strings.Join(m.failures, "\n  "), strings.Join(m.scenario, "\n  "), len(m.trace), strings.Join(m.trace, "\n  "))
	return b.String()
}

func runModel(seed uint64) *modelRun {
	m := &modelRun{seed: seed, start: time.Now(), rnd: rand.New(rand.NewPCG(seed, 0x1ed9e7)),
		byID: map[string]simAction{}, answered: map[string]bool{}, sweeping: map[string]bool{}}
	m.ctx, m.cancel = context.WithTimeout(context.Background(), mQuiesce+10*time.Second)
	defer m.cancel()
	m.rec, m.log = kvtest.NewRecords(), kvtest.NewLog()
	m.l = kvstore.NewLedger(m.rec, m.log, mLease)
	m.hermes = newSimHermes()
	m.hermes.durable = m.chance(0.5) // the endpoint advertises durable run idempotency
	m.hermes.trace = m.tracef
	m.hermes.refuse = func(simAction) bool {
		r := m.faults.Load() && m.chance(pRefuse)
		if r {
			m.stats.refusals.Add(1)
		} else {
			m.stats.executions.Add(1)
		}
		return r
	}
	m.b = &bridge{l: m.l, hermes: m.hermes, heartbeat: mHeartbeat, approvalTTL: mApprovalTTL, maxAttempts: 3,
		trace: m.tracef, goroutine: m.goroutine, oracle: m.rec.Peek,
		violation: func(format string, args ...any) { m.fail(format, args...) },
		point:     m.point,
		preFail:   func(*delivery, simAction) bool { return m.faults.Load() && m.chance(pPreFail) },
	}
	m.rec.OnCallContext(m.recordHook)
	m.log.OnCallContext(m.logHook)
	m.makeScenario()
	m.faults.Store(true)

	stop := make(chan struct{})
	var loops sync.WaitGroup
	for _, loop := range []func(<-chan struct{}){m.dispatcher, m.sweeper, m.approver, m.staller} {
		loops.Go(func() { loop(stop) })
	}
	m.startCancels(stop)

	deadline := m.start.Add(mQuiesce)
	for !m.quiescent() {
		if time.Now().After(deadline) {
			m.fail("not quiescent after %s: %s", mQuiesce, m.pending())
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.faults.Store(false)
	close(stop)
	loops.Wait()
	ended := make(chan struct{})
	go func() { m.wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		m.fail("deliveries did not end:\n%s", buf[:runtime.Stack(buf, true)])
		m.cancel()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			m.fail("deliveries did not end after their ctx did (a goroutine is stuck)")
			m.took = time.Since(m.start)
			return m
		}
	}
	m.finalSweep()
	m.check()
	m.took = time.Since(m.start)
	return m
}

// makeScenario draws the actions, their publishes and the cancel requests.
func (m *modelRun) makeScenario() {
	n := 3 + m.intN(6)
	for i := range n {
		a := simAction{ID: fmt.Sprintf("a%d", i), Input: []string{inputA, inputB}[m.intN(2)]}
		key := []string{"k1", "k2"}[m.intN(2)]
		switch m.intN(8) {
		case 0, 1:
			a.Cap, a.Unsafe, a.Key = capUnsafe, true, key
		case 2:
			a.Cap, a.Unsafe = capUnsafe, true
		case 3:
			a.Cap = capSafe
			if m.chance(0.5) {
				a.Key = key
			}
		case 4, 5:
			a.Cap, a.Unsafe, a.Key, a.Approval = capApproval, true, key, true
		case 6:
			a.Cap, a.Unsafe, a.Key, a.Approval, a.PreApproved = capApproval, true, key, true, true
		case 7:
			a.Cap, a.Unsafe, a.Key, a.Run = capRun, true, key, true
		}
		m.actions = append(m.actions, a)
		m.byID[a.ID] = a
		m.stats.actions.Add(1)
		at := m.ms(0, 150)
		m.publish(&simMsg{kind: "action", a: a}, at)
		m.scenario = append(m.scenario, fmt.Sprintf("%s %+v published at %s", a.ID, a, at))
		if m.chance(pDuplicate) {
			d := at + m.ms(0, 150)
			if m.chance(0.5) {
				d = at + m.ms(0, 5) // the two deliveries overlap
			}
			m.publish(&simMsg{kind: "action", a: a}, d)
			m.scenario = append(m.scenario, fmt.Sprintf("%s published again at %s", a.ID, d))
		}
		if m.chance(pCancel) {
			c := max(0, at+m.ms(0, 250)-50*time.Millisecond)
			m.cancels = append(m.cancels, &cancelRec{id: a.ID, at: m.start.Add(c)})
			m.scenario = append(m.scenario, fmt.Sprintf("%s cancelled at %s", a.ID, c))
		}
	}
}

// publish adds msg, delivered from after (since the start).
func (m *modelRun) publish(msg *simMsg, after time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.publishLocked(msg, after)
}

func (m *modelRun) publishLocked(msg *simMsg, after time.Duration) {
	msg.n = len(m.msgs)
	msg.at = m.start.Add(after)
	m.msgs = append(m.msgs, msg)
	if msg.at.After(m.lastEvent) {
		m.lastEvent = msg.at
	}
}

// point is the bridge's step hook: a crash or a stall.
func (m *modelRun) point(d *delivery, step string) {
	if !m.faults.Load() {
		return
	}
	switch {
	case m.chance(pStepCrash):
		m.crash(d, "at "+step)
	case m.chance(pStepPause):
		m.pause(d, "at "+step)
	case m.chance(pStepJitter):
		time.Sleep(m.ms(0, int(mLease.Milliseconds()/2)))
	}
}

func (m *modelRun) crash(d *delivery, where string) {
	m.stats.crashes.Add(1)
	m.tracef("%s: CRASH %s", d.owner, where)
	runtime.Goexit()
}

func (m *modelRun) pause(d *delivery, where string) {
	m.stats.pauses.Add(1)
	dur := m.ms(int(mLease.Milliseconds()*3/2), int(mLease.Milliseconds()*3))
	m.tracef("%s: STALL %s for %s", d.owner, where, dur)
	d.pause(dur)
	m.tracef("%s: wakes (%s)", d.owner, where)
}

// callFaults is common to both stores' hooks: jitter, and a crash or a stall of the
// calling delivery (not of its heartbeat).
func (m *modelRun) callFaults(ctx context.Context, op kvtest.Op, key string) {
	if m.chance(pJitter) {
		time.Sleep(time.Duration(m.intN(2000)) * time.Microsecond)
	}
	r, ok := roleOf(ctx)
	if !ok {
		return
	}
	if r.d.stall != nil {
		r.d.stall()
	}
	if r.heartbeat {
		return
	}
	switch {
	case m.chance(pCallCrash):
		m.crash(r.d, fmt.Sprintf("before %s %s", op, key))
	case m.chance(pCallPause):
		m.pause(r.d, fmt.Sprintf("before %s %s", op, key))
	}
}

func (m *modelRun) who(ctx context.Context) string {
	if r, ok := roleOf(ctx); ok {
		if r.heartbeat {
			return r.d.owner + "/hb"
		}
		return r.d.owner
	}
	return "-"
}

func (m *modelRun) recordHook(ctx context.Context, op kvtest.Op, key string) {
	if !m.faults.Load() {
		return
	}
	m.callFaults(ctx, op, key)
	switch op {
	case kvtest.OpCreate, kvtest.OpUpdate, kvtest.OpDelete:
		switch {
		case m.chance(pLostAck):
			m.stats.lostAcks.Add(1)
			m.tracef("%s: %s %s: reply will be lost", m.who(ctx), op, key)
			m.rec.LoseAck(op, key)
		case m.chance(pFailWrite):
			m.stats.failedWrites.Add(1)
			m.tracef("%s: %s %s: will fail", m.who(ctx), op, key)
			m.rec.FailNext(op, key, kvtest.ErrInjected)
		}
	case kvtest.OpGet:
		if m.chance(pStaleRead) {
			m.stats.staleReads.Add(1)
			var old []kvstore.Entry
			cur, live := m.rec.Peek(key)
			for _, v := range m.rec.History(key) {
				if !v.Deleted && (!live || v.Entry.Revision < cur.Revision) {
					old = append(old, v.Entry)
				}
			}
			var e kvstore.Entry
			if len(old) > 0 && m.chance(0.6) {
				e = old[m.intN(len(old))]
			}
			m.tracef("%s: get %s: stale read of revision %d (latest %d)", m.who(ctx), key, e.Revision, cur.Revision)
			m.rec.StaleGet(key, e)
		}
	}
}

func (m *modelRun) logHook(ctx context.Context, op kvtest.Op, id string) {
	if !m.faults.Load() {
		return
	}
	m.callFaults(ctx, op, id)
	switch op {
	case kvtest.OpAppend:
		switch {
		case m.chance(pLostAck):
			m.stats.lostAcks.Add(1)
			m.tracef("%s: append %s: reply will be lost", m.who(ctx), id)
			m.log.LoseAck(id)
		case m.chance(pFailWrite):
			m.stats.failedWrites.Add(1)
			m.tracef("%s: append %s: will fail", m.who(ctx), id)
			m.log.FailNext(op, id, kvtest.ErrInjected)
		}
	case kvtest.OpLast:
		if m.chance(pStaleRead) {
			m.stats.staleReads.Add(1)
			es := m.log.Entries(id)
			var e kvstore.LogEntry
			if len(es) > 1 && m.chance(0.6) {
				e = es[m.intN(len(es)-1)]
			}
			m.tracef("%s: last %s: stale read of sequence %d (%d messages)", m.who(ctx), id, e.Seq, len(es))
			m.log.StaleLast(id, e)
		}
	}
}

// newDelivery makes the next delivery of msg (under m.mu).
func (m *modelRun) newDelivery(msg *simMsg) *delivery {
	msg.deliveries++
	m.stats.deliveries.Add(1)
	rep := m.intN(mReplicas)
	owner := fmt.Sprintf("r%d/%s%d.%d", rep, msg.kind[:3], msg.n, msg.deliveries)
	var d *delivery
	d = m.b.newDelivery(m.ctx, owner, msg.kind, func() {
		m.mu.Lock()
		msg.acked = true
		m.mu.Unlock()
	}, func() {
		m.mu.Lock()
		if msg.cur == d && !msg.acked {
			msg.deadline = time.Now().Add(mAckWait)
		}
		m.mu.Unlock()
	})
	m.onReplica(d, rep)
	msg.cur, msg.deadline = d, time.Now().Add(mAckWait)
	return d
}

// dispatcher delivers every unacknowledged message whose ack wait passed.
func (m *modelRun) dispatcher(stop <-chan struct{}) {
	type start struct {
		msg *simMsg
		d   *delivery
	}
	for {
		select {
		case <-stop:
			return
		case <-time.After(2 * time.Millisecond):
		}
		now := time.Now()
		var starts []start
		var runaway []*simMsg
		m.mu.Lock()
		for _, msg := range m.msgs {
			if msg.acked || now.Before(msg.at) || (msg.cur != nil && now.Before(msg.deadline)) {
				continue
			}
			if msg.deliveries >= 300 {
				msg.acked = true
				runaway = append(runaway, msg)
				continue
			}
			starts = append(starts, start{msg, m.newDelivery(msg)})
		}
		m.mu.Unlock()
		for _, msg := range runaway {
			m.fail("%s message %d of %s delivered %d times", msg.kind, msg.n, msg.a.ID, msg.deliveries)
		}
		for _, st := range starts {
			msg, d := st.msg, st.d
			m.tracef("deliver %s message %d (%s %s) as %s", msg.kind, msg.n, msg.a.ID, msg.decision, d.owner)
			if msg.kind == "action" {
				m.goroutine(func() { m.b.deliverAction(d, msg.a) })
			} else {
				m.goroutine(func() { m.b.deliverDecision(d, msg.a, msg.decision) })
			}
		}
	}
}

// approver answers each pending message once (sometimes twice, differently), after a
// while.
func (m *modelRun) approver(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		for _, a := range m.actions {
			if !a.needsPark() {
				continue
			}
			// Under m.mu, so that quiescence never comes between the approver seeing
			// the pending message and publishing its answer.
			m.mu.Lock()
			es := m.log.Entries(a.ID)
			if m.answered[a.ID] || len(es) == 0 || es[len(es)-1].Terminal {
				m.mu.Unlock()
				continue
			}
			m.answered[a.ID] = true
			n := 1
			switch {
			case m.chance(pNoAnswer):
				n = 0
				m.trace = append(m.trace, fmt.Sprintf("%7.1fms approver: %s gets no answer",
					float64(time.Since(m.start).Microseconds())/1000, a.ID))
			case m.chance(pTwoDecides):
				n = 2
			}
			for range n {
				decision := []string{kvstore.DecisionApprove, kvstore.DecisionApprove, kvstore.DecisionApprove,
					kvstore.DecisionDeny, kvstore.DecisionDeny, kvstore.DecisionMismatch}[m.intN(6)]
				after := time.Since(m.start) + m.ms(0, 80)
				m.stats.decisions.Add(1)
				m.publishLocked(&simMsg{kind: "decision", a: a, decision: decision}, after)
				m.mu.Unlock()
				m.tracef("approver: %s decides %s, published at %.1fms", a.ID, decision, float64(after.Microseconds())/1000)
				m.mu.Lock()
			}
			m.mu.Unlock()
		}
	}
}

// staller stalls a random replica, all its deliveries at once, now and then.
func (m *modelRun) staller(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(m.ms(40, 250)):
		}
		if !m.faults.Load() {
			continue
		}
		n := m.intN(mReplicas)
		d := m.ms(int(mLease.Milliseconds()*3/2), int(mLease.Milliseconds()*3))
		m.stats.replicaStalls.Add(1)
		m.tracef("replica r%d: STALL for %s", n, d)
		m.replicas[n].stall(d)
		m.tracef("replica r%d: wakes", n)
	}
}

// onReplica names d after replica n and stalls it with it.
func (m *modelRun) onReplica(d *delivery, n int) {
	r := &m.replicas[n]
	d.stall = r.wait
}

// sweeper runs sweepOnce every mSweepEvery.
func (m *modelRun) sweeper(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(mSweepEvery):
		}
		m.sweepOnce()
	}
}

// sweepOnce is the parking sweeper: for every park index entry it removes the entries
// of settled actions, expires parked actions past their expiry, and carries on
// decided actions that nobody may carry (a canceller or a sweeper that stopped). It
// returns how many entries it found.
func (m *modelRun) sweepOnce() int {
	ctx := m.ctx
	keys, err := m.rec.Keys(ctx, "park.>")
	if err != nil {
		return 0
	}
	for _, k := range keys {
		id := strings.TrimPrefix(k, "park.")
		if le, err := m.log.Last(ctx, id); err == nil && le.Terminal {
			m.l.Unpark(ctx, id)
			continue
		}
		e, err := m.rec.Get(ctx, kvstore.ActionKey(id))
		if err != nil {
			continue
		}
		var decision string
		switch {
		case e.Record.State == kvstore.StateParked && time.Now().After(e.Record.ExpiresAt):
			decision = kvstore.DecisionExpired
			m.stats.expiries.Add(1)
		case e.Record.State != kvstore.StateParked && e.Record.Decision != "":
			decision = e.Record.Decision
		default:
			continue
		}
		m.mu.Lock()
		busy := m.sweeping[id] || !m.faults.Load()
		if !busy {
			m.sweeping[id] = true
		}
		a := m.byID[id]
		m.mu.Unlock()
		if busy {
			continue
		}
		rep := m.intN(mReplicas)
		d := m.b.newDelivery(ctx, fmt.Sprintf("r%d/sweep-%s.%d", rep, id, m.intN(1000)), "sweep", nil, nil)
		m.onReplica(d, rep)
		m.tracef("%s: sweeps %s (%s)", d.owner, id, decision)
		m.goroutine(func() {
			defer func() {
				m.mu.Lock()
				m.sweeping[id] = false
				m.mu.Unlock()
			}()
			m.b.deliverDecision(d, a, decision)
		})
	}
	return len(keys)
}

// startCancels sends each cancel request at its time.
func (m *modelRun) startCancels(stop <-chan struct{}) {
	for _, c := range m.cancels {
		m.stats.cancels.Add(1)
		m.goroutine(func() {
			select {
			case <-stop:
				return
			case <-time.After(time.Until(c.at)):
			}
			a := m.byID[c.id]
			rep := m.intN(mReplicas)
			d := m.b.newDelivery(m.ctx, fmt.Sprintf("r%d/cancel-%s", rep, c.id), "cancel", nil, nil)
			m.onReplica(d, rep)
			defer d.finish()
			tomb, _ := json.Marshal(simResult{ActionID: c.id, Status: "cancelled",
				Error: &simError{Code: "cancelled"}, By: d.owner})
			state, claim, err := m.l.CancelStored(d.ctx, c.id, d.owner, tomb, always(true))
			m.tracef("%s: cancel: %s, claim %v, %v", d.owner, state, claim != nil, err)
			m.mu.Lock()
			c.state, c.claim, c.err, c.done = state, claim != nil, err, true
			m.mu.Unlock()
			if claim != nil {
				m.b.runCancelClaim(d, a, claim)
			}
		})
	}
}

// quiescent: every event happened, every message is acknowledged, every action that
// was published has its terminal result.
func (m *modelRun) quiescent() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Now().Before(m.lastEvent) {
		return false
	}
	for _, msg := range m.msgs {
		if !msg.acked {
			return false
		}
	}
	for _, c := range m.cancels {
		if !c.done && time.Now().Before(c.at.Add(time.Second)) {
			return false
		}
	}
	for _, a := range m.actions {
		if len(m.log.Terminals(a.ID)) == 0 {
			return false
		}
	}
	return true
}

// pending says what keeps a run from quiescence.
func (m *modelRun) pending() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, msg := range m.msgs {
		if !msg.acked {
			out = append(out, fmt.Sprintf("%s message %d of %s unacknowledged after %d deliveries",
				msg.kind, msg.n, msg.a.ID, msg.deliveries))
		}
	}
	for _, a := range m.actions {
		if len(m.log.Terminals(a.ID)) == 0 {
			e, _ := m.rec.Peek(kvstore.ActionKey(a.ID))
			out = append(out, fmt.Sprintf("%s unsettled: record %+v", a.ID, e.Record))
		}
	}
	return strings.Join(out, "; ")
}

// finalSweep removes the park index entries of settled actions, as the sweeper's next
// runs would.
func (m *modelRun) finalSweep() {
	for range 5 {
		if m.sweepOnce() == 0 {
			return
		}
	}
}

// check asserts the model's invariants after quiescence.
func (m *modelRun) check() {
	for _, a := range m.actions {
		if msg := checkAction(m.rec, m.log, m.hermes, a); msg != "" {
			m.fail("%s", msg)
		}
	}
	// A governed run ends with its real result wherever runs are durably idempotent:
	// never outcome_unknown.
	for _, a := range m.actions {
		ts := m.log.Terminals(a.ID)
		if !a.Run || len(ts) == 0 {
			continue
		}
		m.stats.runs.Add(1)
		r, _ := decodeResult(ts[0].Data)
		switch {
		case r.Output == "run":
			m.stats.runsReal.Add(1)
		case r.Error != nil && r.Error.Code == "outcome_unknown":
			m.stats.runsUnknown.Add(1)
			if m.hermes.durable {
				m.fail("%s: a run settled outcome_unknown although runs are durably idempotent", a.ID)
			}
			if m.hermes.bound[a.ID] {
				m.fail("%s: a run settled outcome_unknown although a delivery had bound its id", a.ID)
			}
		}
	}
	// At most one execution per scoped key of an unsafe operation.
	for k, n := range m.hermes.keyExecs {
		if n > 1 {
			m.fail("scoped key %s executed %d times", k[:16], n)
		}
	}
	results := map[string]simResult{}
	for _, a := range m.actions {
		if ts := m.log.Terminals(a.ID); len(ts) > 0 {
			r, _ := decodeResult(ts[0].Data)
			results[a.ID] = r
		}
	}
	for _, a := range m.actions {
		r := results[a.ID]
		switch {
		case r.ReplayOf != "":
			m.stats.replays.Add(1)
			o, ok := m.byID[r.ReplayOf]
			orig := results[r.ReplayOf]
			switch {
			case !ok || o.ID == a.ID || o.scopedKey() != a.scopedKey() || o.Input != a.Input:
				m.fail("%s replays %s, which is not a same-key same-input action", a.ID, r.ReplayOf)
			case orig.Status != r.Status || orig.Output != r.Output || fmt.Sprint(orig.Error) != fmt.Sprint(r.Error):
				m.fail("%s replays %s as %s, but %s settled %s", a.ID, r.ReplayOf, r, r.ReplayOf, orig)
			}
		case r.Error != nil && r.Error.Code == "idempotency_conflict":
			m.stats.conflicts.Add(1)
			if !slices.ContainsFunc(m.actions, func(o simAction) bool {
				return o.ID != a.ID && o.scopedKey() == a.scopedKey() && o.Input != a.Input
			}) {
				m.fail("%s settled idempotency_conflict with no other input under its key", a.ID)
			}
		}
	}
	// A cancel that flagged an unsent unsafe action, or came before it, kept it from
	// Hermes.
	for _, a := range m.actions {
		h := m.rec.History(kvstore.ActionKey(a.ID))
		if len(h) == 0 {
			continue
		}
		_, execs := m.hermes.counts(a.ID)
		if h[0].Entry.Record.State == kvstore.StateSettled {
			if execs != 0 || results[a.ID].Status != "cancelled" {
				m.fail("%s cancelled before it came, but executed %d times and settled %s", a.ID, execs, results[a.ID])
			}
			continue
		}
		for _, v := range h {
			if v.Deleted || !v.Entry.Record.Cancel {
				continue
			}
			if st := v.Entry.Record.State; a.Unsafe && (st == kvstore.StateClaimed || st == kvstore.StateReleased) && execs != 0 {
				m.fail("%s flagged for cancel while %s (revision %d), but executed %d times", a.ID, st, v.Entry.Revision, execs)
			}
			break
		}
	}
	// A cancel that ended a parking settled the action cancelled.
	m.mu.Lock()
	cancels := slices.Clone(m.cancels)
	m.mu.Unlock()
	for _, c := range cancels {
		if c.claim && c.state == kvstore.CancelCancelled && results[c.id].Status != "cancelled" {
			m.fail("%s: the cancel ended its parking, but it settled %s", c.id, results[c.id])
		}
	}
	// Nothing left behind: no park index entry, no key record of an unsettled action.
	for k := range m.rec.Live("park.") {
		m.fail("park index entry %s left", k)
	}
	for k, e := range m.rec.Live("idem.") {
		if _, ok := results[e.Record.ActionID]; !ok {
			m.fail("key record %s names %s, which has no result", k[:16], e.Record.ActionID)
		}
	}
	for k, e := range m.rec.Live("act.") {
		if _, ok := m.byID[e.Record.ActionID]; !ok {
			m.fail("record %s of an action never published", k)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range m.msgs {
		if !msg.acked {
			m.failures = append(m.failures, fmt.Sprintf("%s message %d of %s never acknowledged", msg.kind, msg.n, msg.a.ID))
		}
	}
	// Counted from the trace: runs at a later attempt (takeovers and released records).
	for _, line := range m.trace {
		switch {
		case strings.Contains(line, ": begin ") && strings.Contains(line, "attempt ") && !strings.Contains(line, "attempt 1)"):
			m.stats.takeovers.Add(1)
		case strings.Contains(line, ": uncertain"):
			m.stats.uncertain.Add(1)
		case strings.Contains(line, ": start ") && strings.Contains(line, ": dispatched"):
			m.stats.starts.Add(1)
		case strings.Contains(line, ": start ") && strings.Contains(line, ": not fresh"):
			m.stats.notFresh.Add(1)
		}
	}
}
