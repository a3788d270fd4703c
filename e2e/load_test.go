package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// This file holds the load scenario shared by TestLoadThreeReplicas, TestNATSRestartMidLoad
// and the soak test (soak_test.go, `make soak`): real `hermes-bridge run` processes share
// the consumer, a mix of actions is published while replicas are killed and restarted
// (or the NATS server restarts), and one checker verifies the outcome through NATS and
// the fake's request log.

// TestLoadThreeReplicas: three bridge processes share the consumer; 5,000 mixed actions
// (unsafe chats and streams with unique keys, safe reads, key duplicates, action ids
// published twice, invalid and unreadable messages) while one replica is SIGKILLed and
// restarted. Every action settles exactly once, no unsafe call is duplicated, no event
// is lost. It runs alone (not parallel): it loads both CPUs of a CI box on its own.
func TestLoadThreeReplicas(t *testing.T) {
	spec := loadSpec{
		Name:       "load",
		Tag:        "ld",
		Actions:    5000,
		Publishers: 16,
		Replicas:   3,
		Workers:    16,
		Deltas:     8,
		Delay:      10 * time.Millisecond,
		KillAt:     []float64{0.3},
		Settle:     150 * time.Second,
	}
	if testing.Short() {
		t.Skip("load test: skipped in -short mode")
	}
	fig := runLoad(t, spec)
	wantEq(t, fig.Kills, 1, "%d replica kills, want 1")
}

// loadSpec configures one run of the load scenario.
type loadSpec struct {
	Name string
	Tag  string // action id prefix, a subject token
	// Actions is the number of logical actions to publish; when 0, the run publishes for
	// Duration at Rate.
	Actions  int
	Duration time.Duration
	// Rate is the publishing rate in actions per second (0: as fast as the publishers go).
	Rate       float64
	Publishers int
	Replicas   int
	Workers    int // per replica (HERMES_MAX_CONCURRENCY and HERMES_BRIDGE_WORKERS)
	Deltas     int // text deltas of each streamed reply
	Delay      time.Duration
	// KillAt: when this fraction of Actions has settled, one replica (in turn) is
	// SIGKILLed and started again. KillEvery does the same on a timer.
	KillAt    []float64
	KillEvery time.Duration
	// NATSRestartAt: when this fraction of Actions has settled, the NATS server restarts.
	NATSRestartAt []float64
	// Status prints a progress line this often (0: never).
	Status time.Duration
	// Settle bounds the wait for the last results after publishing ends.
	Settle time.Duration
}

type loadKind int

const (
	ldChat       loadKind = iota // unsafe chat with its own idempotency key
	ldStream                     // unsafe chat_stream with its own idempotency key
	ldSafe                       // models, health or sessions_list
	ldDupKey                     // same key and input as an earlier chat: replayed, never called
	ldSameID                     // chat without key, published twice under one id plus a raw copy
	ldInvalid                    // identifiable with bad input: invalid_action
	ldUnreadable                 // not a CloudEvent at all: dead-lettered
	ldKinds
)

var ldKindNames = [ldKinds]string{"chat", "chat_stream", "safe_read", "dup_key", "same_id", "invalid", "unreadable"}

// ldMix is the kind of action i: ldMix[i%20]. 40% chat, 20% streams, 20% safe reads,
// 10% key duplicates, 5% same id, 5% invalid (alternating identifiable and unreadable).
var ldMix = [20]loadKind{
	ldChat, ldStream, ldSafe, ldChat, ldDupKey, ldChat, ldStream, ldSafe, ldChat, ldSameID,
	ldChat, ldStream, ldSafe, ldChat, ldDupKey, ldChat, ldStream, ldSafe, ldChat, ldInvalid,
}

var ldSafeOps = [...]string{"models", "health", "sessions_list"}

// ldAction is one planned action; everything about it follows from its index.
type ldAction struct {
	i      int
	kind   loadKind
	id     string // "" for unreadable messages
	op     string
	key    string
	marker string // unique text carried in the input (or the raw payload)
	orig   int    // ldDupKey: the index of the chat it duplicates
	input  json.RawMessage
}

func ldMarker(i int) string { return fmt.Sprintf("mk%07dx", i) }

var ldMarkerRE = regexp.MustCompile(`mk[0-9]{7}x`)

// plan returns action i of a run tagged tag.
func ldPlan(tag string, i int) ldAction {
	a := ldAction{i: i, kind: ldMix[i%20], id: fmt.Sprintf("%s-%07d", tag, i), op: "chat", marker: ldMarker(i), orig: -1}
	if a.kind == ldInvalid && (i/20)%2 == 1 {
		a.kind = ldUnreadable
	}
	switch a.kind {
	case ldChat, ldStream:
		a.key = fmt.Sprintf("%s-key-%07d", tag, i)
		a.input = json.RawMessage(`{"prompt":"load ` + a.marker + `"}`)
		if a.kind == ldStream {
			a.op = "chat_stream"
		}
	case ldSafe:
		a.op = ldSafeOps[(i/5)%len(ldSafeOps)]
		a.input = json.RawMessage(`{}`)
		if a.op == "sessions_list" {
			a.input = json.RawMessage(`{"limit":5}`)
		}
	case ldDupKey:
		// Slot 4 duplicates the chat just before it (both in flight together); slot 14
		// one from five blocks earlier (long settled), or the one before it early on.
		o := i - 1
		if i%20 == 14 && i-114 >= 0 {
			o = i - 114
		}
		oa := ldPlan(tag, o)
		a.orig, a.key, a.input, a.marker = o, oa.key, oa.input, oa.marker
	case ldSameID:
		a.input = json.RawMessage(`{"prompt":"once ` + a.marker + `"}`)
	case ldInvalid:
		a.input = json.RawMessage(`{"prompt":"bad ` + a.marker + `","messages":[{"role":"user","content":"y"}]}`)
	case ldUnreadable:
		a.id, a.op = "", ""
		a.input = json.RawMessage("unreadable " + a.marker + ": not a CloudEvent")
	}
	return a
}

// ldRun is one run of the scenario.
type ldRun struct {
	t    *testing.T
	h    *harness
	spec loadSpec

	procs    []*proc // the live process of each replica slot
	allProcs []*proc // every process started, killed ones too (for their logs)
	kills    int
	restarts int
	killedAt []int // settled count at each kill

	mu        sync.Mutex
	actions   []ldAction  // by index, as published
	submitted []time.Time // by index: when its first publish attempt started
	pubDone   atomic.Bool
	published atomic.Int64 // logical actions published
	messages  atomic.Int64 // messages published (copies included)
	retries   atomic.Int64 // publish attempts that failed and were retried

	settled *liveSettled

	start, pubEnd, end time.Time
	timedOut           bool
}

// runLoad runs spec on a fresh harness, checks every invariant (failing t on any
// violation) and reports the figures.
func runLoad(t *testing.T, spec loadSpec) ldFigures {
	agent := func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		return hermestest.Reply{Text: "stub reply: " + turn.UserText + " with a few more words to stream", Deltas: spec.Deltas, Delay: spec.Delay}
	}
	h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(agent), hermestest.WithMaxConcurrentRuns(0)))
	r := &ldRun{t: t, h: h, spec: spec}
	if spec.Publishers < 1 {
		r.spec.Publishers = 1
	}
	for i := 0; i < spec.Replicas; i++ {
		p := r.startReplica(i)
		r.procs = append(r.procs, p)
	}
	r.settled = watchSettled(t, h.nc)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.start = time.Now()
	var pubs sync.WaitGroup
	pubErr := make(chan error, r.spec.Publishers)
	var next atomic.Int64
	for w := 0; w < r.spec.Publishers; w++ {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			if err := r.publisher(ctx, &next); err != nil {
				pubErr <- err
			}
		}()
	}
	go func() {
		pubs.Wait()
		r.mu.Lock()
		r.pubEnd = time.Now()
		r.mu.Unlock()
		r.pubDone.Store(true)
	}()
	r.monitor(pubErr)
	cancel()
	pubs.Wait()
	select {
	case err := <-pubErr:
		t.Fatalf("publishing: %v", err)
	default:
	}
	fig := r.check()
	fig.report(t, spec)
	return fig
}

// startReplica starts the process of replica slot i (r1, r2, ...).
func (r *ldRun) startReplica(i int) *proc {
	w := strconv.Itoa(r.spec.Workers)
	p := r.h.startProc(
		withEnv("HERMES_BRIDGE_REPLICA_ID", fmt.Sprintf("r%d", i+1)),
		withEnv("HERMES_MAX_CONCURRENCY", w),
		withEnv("HERMES_BRIDGE_WORKERS", w),
		withEnv("HERMES_BRIDGE_MAX_ACK_PENDING", strconv.Itoa(r.spec.Workers*r.spec.Replicas)),
		withEnv("HERMES_BRIDGE_LOG_LEVEL", "info"),
	)
	r.allProcs = append(r.allProcs, p)
	return p
}

// publisher publishes actions in index order shared with the other publishers, paced at
// spec.Rate, until Actions are published or Duration has passed.
func (r *ldRun) publisher(ctx context.Context, next *atomic.Int64) error {
	for {
		i := int(next.Add(1) - 1)
		if r.spec.Actions > 0 && i >= r.spec.Actions {
			return nil
		}
		if r.spec.Rate > 0 {
			at := r.start.Add(time.Duration(float64(i) / r.spec.Rate * float64(time.Second)))
			if r.spec.Actions == 0 && at.Sub(r.start) >= r.spec.Duration {
				return nil
			}
			if d := time.Until(at); d > 0 {
				tm := time.NewTimer(d)
				select {
				case <-tm.C:
				case <-ctx.Done():
					tm.Stop()
					return nil
				}
			}
		} else if r.spec.Actions == 0 && time.Since(r.start) >= r.spec.Duration {
			return nil
		}
		a := ldPlan(r.spec.Tag, i)
		r.mu.Lock()
		for len(r.actions) <= i {
			r.actions = append(r.actions, ldAction{i: -1})
			r.submitted = append(r.submitted, time.Time{})
		}
		r.actions[i], r.submitted[i] = a, time.Now()
		r.mu.Unlock()
		if err := r.publishAction(ctx, a); err != nil {
			return fmt.Errorf("action %d (%s): %w", i, ldKindNames[a.kind], err)
		}
		r.published.Add(1)
	}
}

// publishAction publishes a (and its copies), retrying failed publishes with the same
// Nats-Msg-Id so that a publish whose ack was lost is not stored twice.
func (r *ldRun) publishAction(ctx context.Context, a ldAction) error {
	c := r.h.client
	act := events.Action{Input: a.input, IdempotencyKey: a.key}
	timeout := int64(10 * time.Minute / time.Millisecond) // a backlog must not expire actions
	act.TimeoutMS = &timeout
	switch a.kind {
	case ldUnreadable:
		hdr := nats.Header{}
		hdr.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-unreadable-%07d", r.spec.Tag, a.i))
		return r.retry(ctx, func(ctx context.Context) error {
			_, err := r.h.js.PublishMsg(ctx, &nats.Msg{Subject: chatSubject, Header: hdr, Data: a.input})
			return err
		})
	case ldSameID:
		for k := 0; k < 2; k++ { // the second is a JetStream duplicate (same Nats-Msg-Id)
			if err := r.retry(ctx, func(ctx context.Context) error {
				_, err := c.Publish(ctx, "primary", a.op, act, client.WithActionID(a.id))
				return err
			}); err != nil {
				return err
			}
		}
		// A copy JetStream does not deduplicate (no Nats-Msg-Id): the bridge must.
		data, err := json.Marshal(act)
		if err != nil {
			return err
		}
		return r.retry(ctx, func(ctx context.Context) error {
			_, err := r.h.js.PublishMsg(ctx, &nats.Msg{Subject: chatSubject, Header: binaryHeader(a.id, events.TypeAction, ""), Data: data})
			return err
		})
	}
	return r.retry(ctx, func(ctx context.Context) error {
		_, err := c.Publish(ctx, "primary", a.op, act, client.WithActionID(a.id))
		return err
	})
}

func (r *ldRun) retry(ctx context.Context, f func(context.Context) error) error {
	err := retryPublish(ctx, f, func() { r.retries.Add(1) })
	if err == nil {
		r.messages.Add(1)
	}
	return err
}

// retryPublish calls publish (each call bounded by 5 s) until it succeeds, ctx ends or
// 60 s have passed, backing off from 20 ms to 1 s; retried is called before each retry.
func retryPublish(ctx context.Context, publish func(context.Context) error, retried func()) error {
	delay := 20 * time.Millisecond
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := publish(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return err
		}
		retried()
		tm := time.NewTimer(delay)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		}
		delay = min(2*delay, time.Second)
	}
}

// liveSettled records the action ids whose terminal result a core subscriber saw
// (for progress only: the checks read the output stream).
type liveSettled struct {
	mu  sync.Mutex
	ids map[string]bool
}

// watchSettled subscribes nc to every result until the test ends.
func watchSettled(t *testing.T, nc *nats.Conn) *liveSettled {
	t.Helper()
	s := &liveSettled{ids: map[string]bool{}}
	sub, err := nc.Subscribe("hermes.results.>", func(m *nats.Msg) {
		if res, err := events.DecodeResult(m.Header, m.Data); err == nil && events.Terminal(res.Status) {
			s.mu.Lock()
			s.ids[res.ActionID] = true
			s.mu.Unlock()
		}
	})
	requireOK(t, err, "subscribe results: %v")
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return s
}

// count returns the number of distinct actions seen settled.
func (s *liveSettled) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// identifiable counts the published actions that must get a result.
func (r *ldRun) identifiable() (n, unreadable int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.actions {
		switch {
		case a.i < 0:
		case a.kind == ldUnreadable:
			unreadable++
		default:
			n++
		}
	}
	return n, unreadable
}

// monitor runs on the test goroutine: it injects the faults, prints progress and returns
// once publishing is over and every action is settled (or Settle has passed).
func (r *ldRun) monitor(pubErr chan error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	kills, restarts := slices.Clone(r.spec.KillAt), slices.Clone(r.spec.NATSRestartAt)
	lastKill, lastStatus, lastIdleCheck := time.Now(), time.Now(), time.Time{}
	lastSettled, lastStatusAt := 0, time.Now()
	var settleBy time.Time
	for range tick.C {
		select {
		case err := <-pubErr:
			pubErr <- err
			return
		default:
		}
		settled := r.settled.count()
		total := float64(r.spec.Actions)
		if len(kills) > 0 && total > 0 && float64(settled) >= kills[0]*total {
			kills = kills[1:]
			r.bounce(settled)
		}
		if r.spec.KillEvery > 0 && time.Since(lastKill) >= r.spec.KillEvery && !r.pubDone.Load() {
			lastKill = time.Now()
			r.bounce(settled)
		}
		if len(restarts) > 0 && total > 0 && float64(settled) >= restarts[0]*total {
			restarts = restarts[1:]
			r.restartNATS()
		}
		if r.spec.Status > 0 && time.Since(lastStatus) >= r.spec.Status {
			now := time.Now()
			pub := int(r.published.Load())
			rate := float64(settled-lastSettled) / now.Sub(lastStatusAt).Seconds()
			fmt.Printf("%s %6.1fs: published %d, settled %d, in flight %d, %.0f settled/s, kills %d, NATS restarts %d\n",
				r.spec.Name, now.Sub(r.start).Seconds(), pub, settled, max(pub-settled, 0), rate, r.kills, r.restarts)
			lastStatus, lastStatusAt, lastSettled = now, now, settled
		}
		if !r.pubDone.Load() {
			continue
		}
		if settleBy.IsZero() {
			settleBy = time.Now().Add(r.spec.Settle)
		}
		if time.Now().After(settleBy) {
			r.timedOut = true
			r.end = time.Now()
			return
		}
		if len(kills) > 0 || len(restarts) > 0 {
			continue // a fault still due: wait for it (the run checks how many happened)
		}
		want, _ := r.identifiable()
		if settled < want && time.Since(lastIdleCheck) < 2*time.Second {
			continue // the live count may miss a result published during a NATS restart
		}
		if time.Since(lastIdleCheck) < 250*time.Millisecond {
			continue
		}
		lastIdleCheck = time.Now()
		if r.idle(want) {
			r.end = time.Now()
			return
		}
	}
}

// idle reports whether the consumer has nothing pending and the output stream holds a
// result subject for every identifiable action.
func (r *ldRun) idle(want int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := r.h.js.Consumer(ctx, "HERMES_ACTIONS", "hermes-bridge")
	if err != nil {
		return false
	}
	ci, err := c.Info(ctx)
	if err != nil || ci.NumPending != 0 || ci.NumAckPending != 0 {
		return false
	}
	s, err := r.h.js.Stream(ctx, "HERMES_OUTPUT")
	if err != nil {
		return false
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter("hermes.results.>"))
	if err != nil {
		return false
	}
	return len(si.State.Subjects) >= want
}

// bounce SIGKILLs one replica (in turn) and starts it again.
func (r *ldRun) bounce(settled int) {
	slot := (r.kills + 1) % len(r.procs)
	r.procs[slot].kill()
	r.kills++
	r.killedAt = append(r.killedAt, settled)
	r.procs[slot] = r.startReplica(slot)
}

func (r *ldRun) restartNATS() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.h.ns.Restart(ctx); err != nil {
		r.t.Fatalf("NATS restart: %v", err)
	}
	r.restarts++
}

// trail returns the bridge log lines that mention id, for the diagnosis of a violation
// of kind that will be shown.
func (r *ldRun) trail(v *ldViolations, kind, id string) string {
	if v.byKind[kind] >= 10 {
		return ""
	}
	var b strings.Builder
	for _, p := range r.allProcs {
		for _, ln := range p.log() {
			if strings.Contains(ln, id) {
				b.WriteString("\n\t\t")
				b.WriteString(truncate(ln, 600))
			}
		}
	}
	return b.String()
}

// consumerState describes the shared consumer, for a diagnosis.
func (r *ldRun) consumerState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := r.h.js.Consumer(ctx, "HERMES_ACTIONS", "hermes-bridge")
	if err != nil {
		return err.Error()
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d pending, %d awaiting ack, %d redelivered, %d waiting pulls", ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting)
}

// ldResult is one result message read back from the output stream.
type ldResult struct {
	res    *events.Result
	seq    uint64    // stream sequence
	stored time.Time // when it was stored
}

// ldOutputs is the whole output stream read back: the results and events of each action.
type ldOutputs struct {
	results           map[string][]ldResult
	events            map[string][]*events.EventData
	eventAt           map[string][]time.Time // when each event was stored
	nResults, nEvents int
}

// ldReadOutputs reads the whole output stream; a message that does not decode, or a
// result stored on another action's subject, is a violation.
func ldReadOutputs(t *testing.T, js jetstream.JetStream, v *ldViolations) ldOutputs {
	o := ldOutputs{results: map[string][]ldResult{}, events: map[string][]*events.EventData{}, eventAt: map[string][]time.Time{}}
	ldReadStream(t, js, "HERMES_OUTPUT", func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		switch {
		case strings.HasPrefix(m.Subject(), "hermes.results."):
			res, err := events.DecodeResult(m.Headers(), m.Data())
			if err != nil {
				v.add("decode", "result on %s (stream seq %d): %v", m.Subject(), md.Sequence.Stream, err)
				return
			}
			if m.Subject() != "hermes.results."+res.ActionID {
				v.add("decode", "result of %s stored on %s", res.ActionID, m.Subject())
			}
			o.results[res.ActionID] = append(o.results[res.ActionID], ldResult{res: res, seq: md.Sequence.Stream, stored: md.Timestamp})
			o.nResults++
		case strings.HasPrefix(m.Subject(), "hermes.events."):
			ev, err := events.DecodeEvent(m.Headers(), m.Data())
			if err != nil {
				v.add("decode", "event on %s (stream seq %d): %v", m.Subject(), md.Sequence.Stream, err)
				return
			}
			o.events[ev.ActionID] = append(o.events[ev.ActionID], ev)
			o.eventAt[ev.ActionID] = append(o.eventAt[ev.ActionID], md.Timestamp)
			o.nEvents++
		}
	})
	return o
}

// checkPublished reports results and events of an action id that published does not hold.
func ldCheckPublished[A any](v *ldViolations, o ldOutputs, published map[string]A) {
	for id := range o.results {
		if _, ok := published[id]; !ok {
			v.add("exactly_once", "a result for %s, which was never published", id)
		}
	}
	for id := range o.events {
		if _, ok := published[id]; !ok {
			v.add("events", "events for %s, which was never published", id)
		}
	}
}

// ldCheckKeyGroups checks the actions (ids) sharing each idempotency key: exactly one
// executed (no replay_of), with one Hermes call if it completed and at most one if it
// failed, and every other one replays it (same status, error and output).
func ldCheckKeyGroups(t *testing.T, v *ldViolations, o ldOutputs, groups map[string][]string, callsByKey map[string]int) {
	for key, g := range groups {
		var exec []string
		for _, id := range g {
			if rs := o.results[id]; len(rs) > 0 && rs[0].res.ReplayOf == nil {
				exec = append(exec, id)
			}
		}
		if len(exec) != 1 {
			v.add("replay", "key %s: %d of %d actions executed (no replay_of), want exactly 1", key, len(exec), len(g))
			continue
		}
		er := o.results[exec[0]][0].res
		calls := callsByKey[key]
		switch {
		case er.Error == nil && calls != 1:
			v.add("calls", "key %s: executor %s completed with %d calls, want 1", key, exec[0], calls)
		case er.Error != nil && calls > 1:
			v.add("calls", "key %s: %d calls", key, calls)
		}
		for _, id := range g {
			rs := o.results[id]
			if len(rs) == 0 || id == exec[0] {
				continue
			}
			res := rs[0].res
			if res.ReplayOf == nil || *res.ReplayOf != exec[0] {
				v.add("replay", "%s: replay_of %v, want %s", id, res.ReplayOf, exec[0])
			}
			if res.Status != er.Status || errString(res.Error) != errString(er.Error) || (er.Error == nil && !sameJSON(t, res.Output, er.Output)) {
				v.add("replay", "%s: replayed %s %s, original %s %s", id, res.Status, errString(res.Error), er.Status, errString(er.Error))
			}
		}
	}
}

// countList renders counts as name=n items, sorted.
func countList(counts map[string]int) []string {
	out := make([]string, 0, len(counts))
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(out)
	return out
}

// ldFigures are the numbers a run reports.
type ldFigures struct {
	Kinds                     [ldKinds]int
	Messages, PublishRetries  int64
	Identifiable, Settled     int
	Completed                 int
	Failed                    map[string]int // by error code
	Replays                   int
	OutcomeUnknown            int // settled outcome_unknown without replay_of
	Calls                     map[string]int
	DuplicateUnsafeCalls      int
	Redeliveries              int // action log lines with delivery > 1
	DuplicateDeliveries       int // action log lines with a duplicate status (same action id again)
	PerReplica                map[string]int
	Reconnects                []int // "NATS reconnected" log lines of each process started
	Events, Streams           int
	DLQ                       int
	Kills, NATSRestarts       int
	KilledAt                  []int
	Publish, Total            time.Duration
	LatP50, LatP99, LatMax    time.Duration
	Violations                int
	TimedOut                  bool
	ActionsPerSec, MsgsPerSec float64
}

// check reads every output and the fake's request log and verifies the invariants.
func (r *ldRun) check() ldFigures {
	t, h := r.t, r.h
	fig := ldFigures{Failed: map[string]int{}, Calls: map[string]int{}, PerReplica: map[string]int{},
		Kills: r.kills, NATSRestarts: r.restarts, KilledAt: r.killedAt, TimedOut: r.timedOut,
		Messages: r.messages.Load(), PublishRetries: r.retries.Load()}
	r.mu.Lock()
	actions := slices.Clone(r.actions)
	submitted := slices.Clone(r.submitted)
	fig.Publish = r.pubEnd.Sub(r.start)
	r.mu.Unlock()
	fig.Total = r.end.Sub(r.start)
	v := &ldViolations{t: t}
	if r.timedOut {
		v.add("settle", "not every action settled within %s after publishing ended; consumer: %s", r.spec.Settle, r.consumerState())
	}

	// Outputs: one ordered consumer over the whole output stream.
	out := ldReadOutputs(t, h.js, v)
	results, evs := out.results, out.events
	fig.Events = out.nEvents
	var dlq []*nats.Msg
	ldReadStream(t, h.js, "HERMES_DLQ", func(m jetstream.Msg, _ *jetstream.MsgMetadata) {
		dlq = append(dlq, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	})
	fig.DLQ = len(dlq)

	// Hermes calls: per route, per idempotency key and per input marker.
	calls := countHermesCalls(h.fake.Requests(), ldMarkerRE)
	fig.Calls = calls.byRoute
	fig.DuplicateUnsafeCalls = duplicates(calls.byKey, func(k string, n int) {
		v.add("unsafe_duplicate", "idempotency key %s reached Hermes %d times", k, n)
	}) + duplicates(calls.byMarker, func(mk string, n int) {
		v.add("unsafe_duplicate", "input %s reached Hermes %d times", mk, n)
	})

	// Every identifiable action: exactly one terminal result, no pending one.
	known := map[string]ldAction{}
	groups := map[string][]string{} // idempotency key -> the actions sharing it
	var lat []time.Duration
	safeByOp := map[string]int{}
	for _, a := range actions {
		if a.i < 0 {
			v.add("publish", "an action index was never published")
			continue
		}
		fig.Kinds[a.kind]++
		if a.kind == ldUnreadable {
			continue
		}
		fig.Identifiable++
		known[a.id] = a
		rs := results[a.id]
		if len(rs) != 1 {
			v.add("exactly_once", "%s (%s): %d result messages, want 1%s", a.id, ldKindNames[a.kind], len(rs), r.trail(v, "exactly_once", a.id))
			if len(rs) == 0 {
				continue
			}
		}
		fig.Settled++
		res := rs[0].res
		lat = append(lat, rs[0].stored.Sub(submitted[a.i]))
		if !events.Terminal(res.Status) {
			v.add("terminal", "%s: first result has status %s", a.id, res.Status)
		}
		code := ""
		if res.Error != nil {
			code = res.Error.Code
		}
		switch {
		case res.Status == events.StatusCompleted && res.Error == nil:
			fig.Completed++
		default:
			fig.Failed[code]++
		}
		if res.ReplayOf != nil {
			fig.Replays++
		} else if code == "outcome_unknown" {
			fig.OutcomeUnknown++
		}
		if a.key != "" {
			groups[a.key] = append(groups[a.key], a.id)
		}
		ok := res.Status == events.StatusCompleted && res.Error == nil
		unknown := res.Status == events.StatusFailed && code == "outcome_unknown" && res.Error.UncertainOutcome
		switch a.kind {
		case ldChat, ldStream, ldDupKey:
			if !ok && !unknown {
				v.add("status", "%s (%s): status %s error %s, want completed (or outcome_unknown after a kill)", a.id, ldKindNames[a.kind], res.Status, errString(res.Error))
			}
		case ldSameID:
			if !ok && !unknown {
				v.add("status", "%s (same id): status %s error %s", a.id, res.Status, errString(res.Error))
			}
			if res.ReplayOf != nil {
				v.add("status", "%s (same id): replay_of %s on an action without key", a.id, *res.ReplayOf)
			}
			if n := calls.byMarker[a.marker]; (ok && n != 1) || n > 1 {
				v.add("calls", "%s (same id, %s): %d calls", a.id, res.Status, n)
			}
		case ldSafe:
			safeByOp[a.op]++
			if !ok {
				v.add("status", "%s (%s): status %s error %s, want completed", a.id, a.op, res.Status, errString(res.Error))
			}
		case ldInvalid:
			if code != "invalid_action" {
				v.add("status", "%s (invalid): status %s error %s, want invalid_action", a.id, res.Status, errString(res.Error))
			}
			if n := calls.byMarker[a.marker]; n != 0 {
				v.add("calls", "%s (invalid): %d calls", a.id, n)
			}
		}
		// Events: only streams have them; sequences unique and contiguous from 0.
		ev := evs[a.id]
		if a.kind != ldStream && len(ev) > 0 {
			v.add("events", "%s (%s): %d events", a.id, ldKindNames[a.kind], len(ev))
		}
		if a.kind == ldStream {
			r.checkEvents(v, a, res, ev, &fig)
		}
	}
	ldCheckPublished(v, out, known)
	for op, n := range safeByOp {
		if fig.Calls[op] < n {
			v.add("calls", "%s: %d calls for %d completed actions", op, fig.Calls[op], n)
		}
	}

	ldCheckKeyGroups(t, v, out, groups, calls.byKey)
	// Invalid actions never reach Hermes; nothing but the listed routes was called.
	for route := range fig.Calls {
		switch route {
		case "chat", "chat_stream", "models", "health", "sessions_list":
		default:
			v.add("calls", "unexpected route %q called %d times", route, fig.Calls[route])
		}
	}
	// outcome_unknown needs a kill or a NATS restart: at most the actions in flight then.
	if bound := (r.kills + r.restarts*r.spec.Replicas) * r.spec.Workers; fig.OutcomeUnknown > bound {
		v.add("outcome_unknown", "%d actions settled outcome_unknown, more than the %d that can be in flight at %d kills and %d NATS restarts",
			fig.OutcomeUnknown, bound, r.kills, r.restarts)
	}

	// Dead letters: each unreadable message exactly once, nothing else.
	dlqByMarker := map[string]int{}
	for _, m := range dlq {
		mk := ldMarkerRE.FindString(string(m.Data))
		dlqByMarker[mk]++
		if m.Header.Get("Hermes-Dlq-Reason") == "" {
			v.add("dlq", "dead letter %q without a reason", truncate(string(m.Data), 60))
		}
	}
	for _, a := range actions {
		if a.i >= 0 && a.kind == ldUnreadable {
			if n := dlqByMarker[a.marker]; n != 1 {
				v.add("dlq", "unreadable %s: %d dead letters, want 1", a.marker, n)
			}
			delete(dlqByMarker, a.marker)
		}
	}
	for mk, n := range dlqByMarker {
		v.add("dlq", "%d unexpected dead letters (%q)", n, mk)
	}

	// Bridge logs: redeliveries and the share of each replica.
	for _, p := range r.allProcs {
		reconnects := 0
		for _, ln := range p.log() {
			if strings.Contains(ln, `"message":"NATS reconnected"`) {
				reconnects++
			}
			if !strings.Contains(ln, `"message":"action"`) {
				continue
			}
			var l struct {
				Replica  string `json:"replica"`
				Delivery int    `json:"delivery"`
				Status   string `json:"status"`
			}
			if json.Unmarshal([]byte(ln), &l) != nil {
				continue
			}
			fig.PerReplica[l.Replica]++
			if l.Delivery > 1 {
				fig.Redeliveries++
			}
			if strings.HasPrefix(l.Status, "duplicate") {
				fig.DuplicateDeliveries++
			}
		}
		fig.Reconnects = append(fig.Reconnects, reconnects)
	}

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if n := len(lat); n > 0 {
		fig.LatP50, fig.LatP99, fig.LatMax = lat[n/2], lat[min(n-1, n*99/100)], lat[n-1]
	}
	if s := fig.Total.Seconds(); s > 0 {
		fig.ActionsPerSec = float64(fig.Settled) / s
		fig.MsgsPerSec = float64(fig.Messages) / s
	}
	fig.Violations = v.total
	v.flush()
	return fig
}

// checkEvents checks one stream's events: sequence numbers unique and contiguous from
// 0, and for a completed stream every event up to done, as many as the output counts.
func (r *ldRun) checkEvents(v *ldViolations, a ldAction, res *events.Result, ev []*events.EventData, fig *ldFigures) {
	seen := map[int64]bool{}
	for i, e := range ev {
		if seen[e.Sequence] {
			v.add("events", "%s: sequence %d twice", a.id, e.Sequence)
		}
		seen[e.Sequence] = true
		if e.Sequence != int64(i) {
			seqs := make([]int64, len(ev))
			for k, e := range ev {
				seqs[k] = e.Sequence
			}
			v.add("events", "%s: event %d in stream order has sequence %d (lost or reordered): stored order %v%s", a.id, i, e.Sequence, seqs, r.trail(v, "events", a.id))
			break
		}
	}
	if res.Status != events.StatusCompleted || res.ReplayOf != nil {
		return
	}
	fig.Streams++
	var out struct {
		EventCount int64 `json:"event_count"`
		Terminal   bool  `json:"terminal"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		v.add("events", "%s: output %q: %v", a.id, truncate(string(res.Output), 80), err)
		return
	}
	if out.EventCount != int64(len(ev)) || !out.Terminal {
		v.add("events", "%s: output counts %d events (terminal %v), %d stored", a.id, out.EventCount, out.Terminal, len(ev))
	}
	if len(ev) == 0 || ev[len(ev)-1].Kind != events.KindDone {
		v.add("events", "%s: completed stream does not end with done", a.id)
	}
}

// ldReadStream reads a whole stream, as it is now, with one ordered consumer.
func ldReadStream(t *testing.T, js jetstream.JetStream, stream string, fn func(jetstream.Msg, *jetstream.MsgMetadata)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	if info.State.Msgs == 0 {
		return
	}
	last := info.State.LastSeq
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatalf("ordered consumer on %s: %v", stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		t.Fatalf("read %s: %v", stream, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("read %s up to %d: %v", stream, last, err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatalf("read %s: metadata: %v", stream, err)
		}
		fn(m, md)
		if md.Sequence.Stream >= last {
			return
		}
	}
}

// ldViolations collects invariant violations: each is an error of the test; the
// first few of each kind are printed, then a count per kind.
type ldViolations struct {
	t      *testing.T
	total  int
	byKind map[string]int
	order  []string
}

func (v *ldViolations) add(kind, format string, args ...any) {
	v.t.Helper()
	if v.byKind == nil {
		v.byKind = map[string]int{}
	}
	if v.byKind[kind] == 0 {
		v.order = append(v.order, kind)
	}
	v.byKind[kind]++
	v.total++
	if v.byKind[kind] <= 10 {
		v.t.Errorf("[%s] "+format, append([]any{kind}, args...)...)
	}
}

func (v *ldViolations) flush() {
	v.t.Helper()
	for _, k := range v.order {
		if n := v.byKind[k]; n > 10 {
			v.t.Errorf("[%s] %d violations in all (first 10 shown)", k, n)
		}
	}
}

// report logs the figures (t.Logf) and prints a summary line and table to stdout.
func (f ldFigures) report(t *testing.T, spec loadSpec) {
	t.Helper()
	var b strings.Builder
	kinds := make([]string, 0, ldKinds)
	for k, n := range f.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s=%d", ldKindNames[k], n))
	}
	failed, routes, reps := countList(f.Failed), countList(f.Calls), countList(f.PerReplica)
	row := func(k, format string, args ...any) { fmt.Fprintf(&b, "  %-24s %s\n", k, fmt.Sprintf(format, args...)) }
	fmt.Fprintf(&b, "%s summary (%d replicas, %d workers each):\n", spec.Name, spec.Replicas, spec.Workers)
	row("actions", "%d published (%s)", ldSum(f.Kinds[:]), strings.Join(kinds, " "))
	row("messages", "%d published, %d publish retries", f.Messages, f.PublishRetries)
	row("duration", "%.1fs publishing, %.1fs until all settled", f.Publish.Seconds(), f.Total.Seconds())
	row("throughput", "%.0f actions/s settled, %.0f msgs/s published", f.ActionsPerSec, f.MsgsPerSec)
	row("settled", "%d of %d identifiable: %d completed, failed %s", f.Settled, f.Identifiable, f.Completed, strings.Join(failed, " "))
	row("replays", "%d (replay_of set)", f.Replays)
	row("outcome_unknown", "%d (not replays)", f.OutcomeUnknown)
	row("hermes calls", "%s", strings.Join(routes, " "))
	row("duplicate unsafe calls", "%d", f.DuplicateUnsafeCalls)
	row("redeliveries", "%d deliveries after the first, %d of an already settled or claimed id", f.Redeliveries, f.DuplicateDeliveries)
	row("per replica", "%s (action log lines)", strings.Join(reps, " "))
	row("events", "%d stored, %d completed streams, contiguous", f.Events, f.Streams)
	row("dead letters", "%d", f.DLQ)
	row("faults", "%d replica kills (at %v settled), %d NATS restarts (bridge reconnects %v)", f.Kills, f.KilledAt, f.NATSRestarts, f.Reconnects)
	row("settle latency", "p50 %s, p99 %s, max %s (publish to stored result)", f.LatP50.Round(time.Millisecond), f.LatP99.Round(time.Millisecond), f.LatMax.Round(time.Millisecond))
	row("violations", "%d", f.Violations)
	t.Log("\n" + b.String())
	fmt.Fprintf(os.Stdout, "%s: %d actions in %.1fs (%.0f/s), %d completed, %d replays, %d outcome_unknown, calls %s, %d duplicate unsafe calls, %d redeliveries, %d events, %d dlq, %d kills, %d NATS restarts, latency max %s, %d violations\n",
		spec.Name, f.Settled, f.Total.Seconds(), f.ActionsPerSec, f.Completed, f.Replays, f.OutcomeUnknown, strings.Join(routes, ","),
		f.DuplicateUnsafeCalls, f.Redeliveries, f.Events, f.DLQ, f.Kills, f.NATSRestarts, f.LatMax.Round(time.Millisecond), f.Violations)
	if spec.Status > 0 {
		fmt.Fprint(os.Stdout, b.String())
	}
}

func ldSum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
