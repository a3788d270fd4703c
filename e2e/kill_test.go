package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// TestKillAfterDispatchNeverResends: the real binary SIGKILLs itself right after it
// recorded an unsafe chat as dispatched; a fresh process settles the redelivered action
// failed/outcome_unknown without calling Hermes again.
func TestKillAfterDispatchNeverResends(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutBridge())
	p := h.startProc(crashAt("dispatched", 1))
	id := h.publish("chat", events.Action{Input: mustJSON(t, `{"prompt":"send the report"}`)})
	if killed, _ := p.waitExit(30 * time.Second); !killed {
		t.Fatalf("the bridge was not killed at the dispatched point")
	}
	h.startProc()
	res, _ := h.follow(id)
	e := requireFailed(t, res, "outcome_unknown")
	if !e.UncertainOutcome {
		t.Errorf("uncertain_outcome false")
	}
	if c := h.fake.Calls("chat"); c > 1 {
		t.Errorf("chat calls %d, want at most 1", c)
	}
	h.requireResults(1, 20*time.Second, id)
}

// killAckWait is the consumer ack wait of the kill tests' processes: the claim lease is
// twice that, so a fresh process takes a dead one's claim over after about 2s.
const killAckWait = "1s"

// fastRecovery is the process setting of the kill tests (see killAckWait).
func fastRecovery() procOption { return withEnv("HERMES_BRIDGE_ACK_WAIT", killAckWait) }

// killAgent scripts the fake for the kill and shutdown tests by the user text's prefix:
// "hold:" answers after a minute (the bridge goes away first), "drip:" streams its
// words 150ms apart, "wait<ms>:" waits that long before answering and streams its
// words 20ms apart; anything else is scriptedAgent's.
func killAgent(ctx context.Context, turn hermestest.Turn) hermestest.Reply {
	r := hermestest.StubAgent(ctx, turn)
	text := turn.UserText
	switch {
	case strings.HasPrefix(text, "hold:"):
		r.Delay = time.Minute
	case strings.HasPrefix(text, "drip:"):
		r.DeltaDelay = 150 * time.Millisecond
	case strings.HasPrefix(text, "wait"):
		ms, _, ok := strings.Cut(strings.TrimPrefix(text, "wait"), ":")
		n, err := strconv.Atoi(ms)
		if !ok || err != nil {
			return scriptedAgent(ctx, turn)
		}
		r.Delay = time.Duration(n) * time.Millisecond
		r.DeltaDelay = 20 * time.Millisecond
	default:
		return scriptedAgent(ctx, turn)
	}
	return r
}

// outputMsgs returns every message stored on one subject of the output stream, in order.
func (h *harness) outputMsgs(subject string) []*jetstream.RawStreamMsg {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, h.cfg.WithDefaults().OutputStream)
	requireOK(h.t, err, "output stream: %v")
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	requireOK(h.t, err, "stream info: %v")
	want := int(info.State.Subjects[subject])
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); len(out) < want; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			h.t.Fatalf("message %d of %d on %s: %v", len(out)+1, want, subject, err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
	return out
}

// storedEvents decodes every event message stored for an action.
func (h *harness) storedEvents(id string) []*events.EventData {
	h.t.Helper()
	var out []*events.EventData
	for _, m := range h.outputMsgs("hermes.events." + id) {
		e, err := events.DecodeEvent(m.Header, m.Data)
		if err != nil {
			h.t.Fatalf("event message %d of %s: %v", m.Sequence, id, err)
		}
		out = append(out, e)
	}
	return out
}

// checkEventsContiguous fails unless the stored events of an action are numbered 0, 1,
// ... without a gap or a repeat, and at least min of them are there.
func checkEventsContiguous(t *testing.T, id string, evs []*events.EventData, min int) {
	t.Helper()
	for i, e := range evs {
		if e.Sequence != int64(i) || e.ActionID != id {
			t.Fatalf("event %d of %s: sequence %d action %q; want contiguous from 0 without repeats", i, id, e.Sequence, e.ActionID)
		}
	}
	if len(evs) < min {
		t.Fatalf("%s: %d events stored, want at least the %d seen before the crash", id, len(evs), min)
	}
}

// actionRecord reads an action's record from the KV bucket (ok false when absent).
func (h *harness) actionRecord(id string) (kvstore.Record, bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := h.js.KeyValue(ctx, h.cfg.WithDefaults().Bucket)
	requireOK(h.t, err, "bucket: %v")
	e, err := kv.Get(ctx, kvstore.ActionKey(id))
	if err != nil {
		return kvstore.Record{}, false
	}
	var r kvstore.Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		h.t.Fatalf("record of %s: %v", id, err)
	}
	return r, true
}

// killCase is one crash of a bridge process while it handles one action.
type killCase struct {
	name  string
	op    string
	input string
	// point is the bridge.Point at which the process kills itself; "" kills it from
	// outside once ready returns.
	point string
	nth   int
	fault *hermestest.Fault
	ready func(h *harness, id string)

	wantCode  string // "" for completed, else the failed result's code
	wantCalls int    // Hermes calls on the op's route, crashed process and fresh one together
	// published: the result message was stored before the crash; the fresh process
	// must leave exactly that result.
	published bool
}

// TestKillAtEachPoint kills the real binary at each point of an action's flow, for a
// safe operation (models), an unsafe JSON one (chat) and an unsafe stream (chat_stream),
// starts a fresh process and checks through NATS that the action ends once, as promised.
func TestKillAtEachPoint(t *testing.T) {
	t.Parallel()
	const (
		chatIn  = `{"prompt":"kill test"}`
		holdIn  = `{"prompt":"hold: kill test"}`
		dripIn  = `{"prompt":"drip: one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"}`
		modelIn = `{}`
	)
	waitInFlight := func(h *harness, _ string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		requireOK(h.t, h.fake.WaitInFlight(ctx, 1), "the request never reached the fake: %v")
	}
	var cases []killCase
	for _, point := range []string{"delivered", "claimed"} {
		// Nothing was sent: everything runs once after the restart.
		cases = append(cases,
			killCase{name: point + "/models", op: "models", input: modelIn, point: point, wantCalls: 1},
			killCase{name: point + "/chat", op: "chat", input: chatIn, point: point, wantCalls: 1},
			killCase{name: point + "/chat_stream", op: "chat_stream", input: chatIn, point: point, wantCalls: 1})
	}
	cases = append(cases,
		// Recorded as dispatched, killed before the request left: never sent, never resent.
		killCase{name: "dispatched/chat", op: "chat", input: chatIn, point: "dispatched", wantCode: "outcome_unknown"},
		killCase{name: "dispatched/chat_stream", op: "chat_stream", input: chatIn, point: "dispatched", wantCode: "outcome_unknown"},
		// Killed while Hermes works on the request.
		killCase{name: "sent/models", op: "models", input: modelIn, wantCalls: 2,
			fault: &hermestest.Fault{Route: "models", Delay: time.Minute},
			ready: func(h *harness, _ string) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				requireOK(h.t, h.fake.WaitCalls(ctx, "models", 1), "models never reached the fake: %v")
			}},
		killCase{name: "sent/chat", op: "chat", input: holdIn, ready: waitInFlight, wantCode: "outcome_unknown", wantCalls: 1},
		killCase{name: "sent/chat_stream", op: "chat_stream", input: holdIn, ready: waitInFlight, wantCode: "outcome_unknown", wantCalls: 1},
		// Killed mid-stream, after some events are on the events subject.
		killCase{name: "midstream/chat_stream", op: "chat_stream", input: dripIn, wantCode: "outcome_unknown", wantCalls: 1,
			ready: func(h *harness, id string) {
				h.eventually(20*time.Second, func() error {
					if n := len(h.storedEvents(id)); n < 3 {
						return fmt.Errorf("%d events published", n)
					}
					return nil
				})
			}},
		// Killed right after the third event was handed to the publisher.
		killCase{name: "event/chat_stream", op: "chat_stream", input: dripIn, point: "event", nth: 3,
			wantCode: "outcome_unknown", wantCalls: 1},
	)
	cases = append(cases,
		// Hermes answered; killed before the result was stored: the safe call runs again,
		// an unsafe one is never resent.
		killCase{name: "stored/models", op: "models", input: modelIn, point: "stored", wantCalls: 2},
		killCase{name: "stored/chat", op: "chat", input: chatIn, point: "stored", wantCalls: 1, wantCode: "outcome_unknown"},
		killCase{name: "stored/chat_stream", op: "chat_stream", input: chatIn, point: "stored", wantCalls: 1, wantCode: "outcome_unknown"})
	for _, op := range []string{"models", "chat", "chat_stream"} {
		// The result is stored (it is the result message): never replaced, never
		// recomputed, never published again.
		in := chatIn
		if op == "models" {
			in = modelIn
		}
		cases = append(cases, killCase{name: "published/" + op, op: op, input: in, point: "published",
			wantCalls: 1, published: true})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runKillCase(t, c)
		})
	}
}

func runKillCase(t *testing.T, c killCase) {
	h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
	if c.fault != nil {
		h.fake.InjectFault(*c.fault)
	}
	opts := []procOption{fastRecovery()}
	if c.point != "" {
		opts = append(opts, crashAt(c.point, max(c.nth, 1)))
	}
	p := h.startProc(opts...)
	id := h.publish(c.op, events.Action{Input: mustJSON(t, c.input)})
	if c.point != "" {
		if killed, code := p.waitExit(30 * time.Second); !killed {
			t.Fatalf("the bridge was not killed at %s (exit code %d)", c.point, code)
		}
	} else {
		c.ready(h, id)
		p.kill()
	}

	// What the crash left behind.
	before := h.storedEvents(id)
	checkEventsContiguous(t, id, before, 0)
	var storedRes events.Result
	rec, haveRec := h.actionRecord(id)
	switch {
	case c.published:
		m := h.lastOutput("hermes.results." + id)
		if m == nil || json.Unmarshal(m.Data, &storedRes) != nil {
			t.Fatalf("before the restart no readable result message")
		}
	case c.point == "delivered":
		if haveRec {
			t.Fatalf("killed before the claim, yet the action has a record: %+v", rec)
		}
	case haveRec && rec.Owner == "":
		t.Errorf("the crashed claim carries no owner: %+v", rec)
	}
	wantBefore := 0
	if c.published {
		wantBefore = 1
	}
	if n := h.results(id); n != wantBefore {
		t.Fatalf("before the restart %d result messages, want %d", n, wantBefore)
	}
	var firstSeq uint64
	if c.published {
		firstSeq = h.outputMsgs("hermes.results." + id)[0].Sequence
	}

	p2 := h.startProc(fastRecovery())
	res, _ := h.follow(id)
	h.waitIdle(30 * time.Second)

	if c.wantCode == "" {
		requireCompleted(t, res)
	} else if e := requireFailed(t, res, c.wantCode); c.wantCode == "outcome_unknown" && !e.UncertainOutcome {
		t.Errorf("outcome_unknown without uncertain_outcome: %s", errString(e))
	}
	if got := h.fake.Calls(c.op); got != c.wantCalls {
		t.Errorf("%s calls %d, want %d", c.op, got, c.wantCalls)
	}
	msgs := h.outputMsgs("hermes.results." + id)
	requireEq(t, len(msgs), 1, "%d result messages, want exactly 1")
	if c.published && msgs[0].Sequence != firstSeq {
		t.Errorf("the result message is #%d, want the one published before the crash (#%d)", msgs[0].Sequence, firstSeq)
	}
	if c.published {
		if res.Status != storedRes.Status || !sameJSON(t, res.Output, storedRes.Output) || errString(res.Error) != errString(storedRes.Error) {
			t.Errorf("published result %s %s differs from the one stored before the crash: %s %s",
				res.Status, truncate(string(res.Output), 200), storedRes.Status, truncate(string(storedRes.Output), 200))
		}
	}
	if c.op == "chat" && c.wantCode == "" {
		wantEq(t, jstr(output(t, res), "choices", 0, "message", "content"), "stub reply: kill test", "chat output text %q")
	}
	evs := h.storedEvents(id)
	checkEventsContiguous(t, id, evs, len(before))
	if c.op == "chat_stream" {
		if c.wantCode == "" {
			checkStream(t, res, evs, "chat_stream", "stub reply: kill test")
		} else if c.point == "event" && len(evs) > 3 {
			t.Errorf("%d events stored, want at most the 3 handed over before the crash", len(evs))
		}
	} else if len(evs) != 0 {
		t.Errorf("%s has %d events", c.op, len(evs))
	}
	// The fresh process handled the redelivery (found the result for a settled action).
	// (The line is written just after the ack: wait for it.)
	var lines []logLine
	h.eventually(10*time.Second, func() error {
		lines = p2.actionLines(id)
		if len(lines) == 0 || lines[len(lines)-1].str("decision") != "ack" {
			return fmt.Errorf("the fresh process logged no acked action line for %s: %v", id, lines)
		}
		return nil
	})
	if c.published {
		if st := lines[len(lines)-1].str("status"); !strings.HasPrefix(st, "duplicate:") {
			t.Errorf("fresh process status %q, want duplicate:<status> (found settled)", st)
		}
	}
}

// TestKillDuplicateKey: an action with an idempotency key crashes; a second action with
// the same key and input replays the first one's outcome without calling Hermes.
func TestKillDuplicateKey(t *testing.T) {
	t.Parallel()
	t.Run("after_dispatch", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
		p := h.startProc(fastRecovery(), crashAt("dispatched", 1))
		in := `{"prompt":"dup after dispatch"}`
		a := h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: "k-dispatch"})
		if killed, _ := p.waitExit(30 * time.Second); !killed {
			t.Fatalf("the bridge was not killed at dispatched")
		}
		// The duplicate arrives while the original is still unsettled.
		b := h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: "k-dispatch"})
		h.startProc(fastRecovery())
		ra, _ := h.follow(a)
		e := requireFailed(t, ra, "outcome_unknown")
		if !e.UncertainOutcome || ra.ReplayOf != nil {
			t.Errorf("original: uncertain %v replay_of %v, want true/nil", e.UncertainOutcome, ra.ReplayOf)
		}
		rb, _ := h.follow(b)
		// And one more after the original settled.
		c := h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: "k-dispatch"})
		rc, _ := h.follow(c)
		for _, r := range []*events.Result{rb, rc} {
			e := requireFailed(t, r, "outcome_unknown")
			if !e.UncertainOutcome {
				t.Errorf("%s: replayed outcome_unknown without uncertain_outcome", r.ActionID)
			}
			if r.ReplayOf == nil || *r.ReplayOf != a {
				t.Errorf("%s: replay_of %v, want %s", r.ActionID, r.ReplayOf, a)
			}
		}
		h.waitIdle(30 * time.Second)
		wantEq(t, h.fake.Calls("chat"), 0, "chat calls %d, want 0 (the original never sent it; nothing is resent)")
		for _, id := range []string{a, b, c} {
			if n := h.results(id); n != 1 {
				t.Errorf("%s: %d result messages, want 1", id, n)
			}
		}
	})
	t.Run("after_store", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
		// The result is stored once its result message is (point published).
		p := h.startProc(fastRecovery(), crashAt("published", 1))
		in := `{"prompt":"dup after store"}`
		a := h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: "k-store"})
		if killed, _ := p.waitExit(30 * time.Second); !killed {
			t.Fatalf("the bridge was not killed at published")
		}
		h.startProc(fastRecovery())
		ra := h.followOK(a)
		// The original's result is stored: a duplicate replays it (bounded by its own
		// deadline so that a hang shows up as a failure, not a test timeout).
		b := h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: "k-store", TimeoutMS: ptr(int64(10000))})
		rb := h.followOK(b)
		if rb.ReplayOf == nil || *rb.ReplayOf != a || !sameJSON(t, ra.Output, rb.Output) {
			t.Errorf("duplicate: replay_of %v output %s, want %s and %s", rb.ReplayOf, truncate(string(rb.Output), 200), a, truncate(string(ra.Output), 200))
		}
		h.waitIdle(30 * time.Second)
		wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
		for _, id := range []string{a, b} {
			if n := h.results(id); n != 1 {
				t.Errorf("%s: %d result messages, want 1", id, n)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestKillRandomUnderLoad: sixty mixed actions (chat and chat_stream with idempotency
// keys, a few of them sent twice with the same key, and models) while the bridge process
// is SIGKILLed three times at random moments and restarted. Every action ends with
// exactly one terminal result, no key reaches Hermes twice, and the stored events of
// every stream are contiguous from 0.
func TestKillRandomUnderLoad(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))

	type item struct {
		id, op, key string
		dupOf       int // index of the action this one duplicates, -1 when none
	}
	var items []item
	p := h.startProc(fastRecovery())
	publish := func(op, key, in string, dupOf int) {
		a := events.Action{Input: mustJSON(t, in), IdempotencyKey: key, TimeoutMS: ptr(int64(30000))}
		items = append(items, item{id: h.publish(op, a), op: op, key: key, dupOf: dupOf})
	}
	for i := 0; i < 50; i++ {
		in := fmt.Sprintf(`{"prompt":"wait%d: load item %d of the random kill test"}`, 100+rng.IntN(600), i)
		key := fmt.Sprintf("rk-%d", i)
		switch i % 5 {
		case 0, 1:
			publish("chat", key, in, -1)
		case 2, 3:
			publish("chat_stream", key, in, -1)
		default:
			publish("models", "", `{}`, -1)
		}
		if i%10 == 0 || i%10 == 2 { // the same key and input again
			orig := len(items) - 1
			publish(items[orig].op, key, in, orig)
		}
	}
	totalCalls := func() int { return len(h.fake.Requests()) }
	settled := func() int {
		n := 0
		for _, it := range items {
			n += h.results(it.id)
		}
		return n
	}
	for round := 0; round < 3; round++ {
		// Kill at a random moment while Hermes is being called: once the fake has seen a
		// random number of further requests (or everything is settled).
		target := totalCalls() + 1 + rng.IntN(10)
		h.until(60*time.Second, "more Hermes requests", func() bool { return totalCalls() >= target || settled() >= len(items) })
		t.Logf("round %d: SIGKILL after %d Hermes requests, %d of %d actions settled", round, totalCalls(), settled(), len(items))
		p.kill()
		p = h.startProc(fastRecovery())
	}

	results := make([]*events.Result, len(items))
	for i, it := range items {
		results[i], _ = h.follow(it.id)
	}
	h.waitIdle(30 * time.Second)

	perKey := map[string]int{}
	for _, r := range h.fake.Requests() {
		if r.Route == "chat" || r.Route == "chat_stream" {
			perKey[r.IdempotencyKey]++
		}
	}
	outcomes := map[string]int{}
	for i, it := range items {
		res := results[i]
		code := ""
		if res.Error != nil {
			code = res.Error.Code
		}
		outcomes[res.Status+"/"+code]++
		if n := h.results(it.id); n != 1 {
			t.Errorf("%s %s: %d result messages, want 1", it.op, it.id, n)
		}
		switch {
		case res.Status == events.StatusCompleted && res.Error == nil:
		case it.op != "models" && code == "outcome_unknown" && res.Error.UncertainOutcome:
		default:
			t.Errorf("%s %s: status %s error %s; want completed (or outcome_unknown for an unsafe call)", it.op, it.id, res.Status, errString(res.Error))
		}
		if it.key != "" {
			calls := perKey[it.key]
			if calls > 1 {
				t.Errorf("key %s reached Hermes %d times", it.key, calls)
			}
			if res.Status == events.StatusCompleted && calls != 1 {
				t.Errorf("key %s completed with %d Hermes calls", it.key, calls)
			}
		}
		if it.dupOf >= 0 {
			a, b := results[it.dupOf], res
			switch {
			case a.ReplayOf == nil && b.ReplayOf != nil && *b.ReplayOf == a.ActionID:
			case b.ReplayOf == nil && a.ReplayOf != nil && *a.ReplayOf == b.ActionID:
			default:
				t.Errorf("key %s: replay_of %v and %v, want exactly one replaying the other", it.key, a.ReplayOf, b.ReplayOf)
			}
			if a.Status != b.Status || errString(a.Error) != errString(b.Error) || !sameJSON(t, a.Output, b.Output) {
				t.Errorf("key %s: the replay differs: %s %s vs %s %s", it.key, a.Status, errString(a.Error), b.Status, errString(b.Error))
			}
		}
		evs := h.storedEvents(it.id)
		checkEventsContiguous(t, it.id, evs, 0)
		if it.op == "chat_stream" && res.ReplayOf == nil && res.Status == events.StatusCompleted {
			checkStream(t, res, evs, "chat_stream", "")
		}
	}
	t.Logf("outcomes %v; Hermes requests %d", outcomes, totalCalls())
}

// TestKillLiveOwnerKeepsClaim: a claim whose owner is alive is not taken over, even when
// the call outlasts the lease: a second copy of the action id, delivered while the first
// process still works on it (its lease is 2s, the call takes 4s), waits for the owner and
// republishes its result instead of settling outcome_unknown.
func TestKillLiveOwnerKeepsClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutBridge(), withFake(hermestest.WithAgent(killAgent)))
	p1 := h.startProc(fastRecovery())
	p2 := h.startProc(fastRecovery())
	in := `{"prompt":"wait4000: live owner"}`
	id := h.publish("chat", events.Action{Input: mustJSON(t, in)})
	h.waitCalls("chat", 1)
	// A copy JetStream does not deduplicate (no Nats-Msg-Id).
	h.publishRaw("hermes.actions.primary.chat", binaryHeader(id, events.TypeAction, ""), []byte(`{"input":`+in+`}`))
	h.followOK(id)
	h.waitIdle(30 * time.Second)
	wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
	wantEq(t, h.results(id), 1, "%d result messages, want 1")
	// Both copies were handled: one ran the call, the other republished its result.
	h.eventually(10*time.Second, func() error {
		statuses := map[string]int{}
		for _, l := range append(p1.actionLines(id), p2.actionLines(id)...) {
			if l.str("decision") == "ack" {
				statuses[l.str("status")]++
			}
		}
		if statuses["completed"] != 1 || statuses["duplicate:completed"] != 1 || len(statuses) != 2 {
			return fmt.Errorf("acked action lines by status %v, want one completed and one duplicate:completed", statuses)
		}
		return nil
	})
	rec, ok := h.actionRecord(id)
	if !ok || rec.State != kvstore.StateDispatched || rec.Attempt != 1 {
		t.Errorf("record %+v (present %v), want dispatched by the first claim (attempt 1)", rec, ok)
	}
}
