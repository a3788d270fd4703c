package kvstore_test

// Scripted tests of the ledger on the in-memory stores of kvtest: each one sets up an
// exact interleaving (with call hooks where timing alone would not) and asserts what
// every delivery gets and what the stores hold afterwards.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/kvstore/kvtest"
)

const testLease = 50 * time.Millisecond

const (
	capUnsafe   = "cap:hermes_agent:ep1:session_create"
	capSafe     = "cap:hermes_agent:ep1:session_get"
	capApproval = "cap:hermes_agent:ep1:session_delete"
	capRun      = "cap:hermes_agent:ep1:run"
)

var (
	inputA = strings.Repeat("a", 64)
	inputB = strings.Repeat("b", 64)
)

type fixture struct {
	t   *testing.T
	ctx context.Context
	rec *kvtest.Records
	log *kvtest.Log
	l   *kvstore.Ledger
}

func newFixture(t *testing.T, lease time.Duration) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	rec, log := kvtest.NewRecords(), kvtest.NewLog()
	return &fixture{t: t, ctx: ctx, rec: rec, log: log, l: kvstore.NewLedger(rec, log, lease)}
}

func intent(id, owner string) kvstore.Intent {
	return kvstore.Intent{ActionID: id, CapabilityID: capUnsafe, InputSHA256: inputA, Owner: owner}
}

func keyedIntent(id, owner, key, input string) kvstore.Intent {
	return kvstore.Intent{ActionID: id, CapabilityID: capUnsafe, InputSHA256: input,
		IdemKey: kvstore.IdempotencyKey(capUnsafe, key), Owner: owner}
}

// msgOf returns the terminal result message of id with r.
func msgOf(id string, r simResult) *nats.Msg {
	r.ActionID = id
	b, _ := json.Marshal(r)
	return kvtest.ResultMsg(id, b)
}

func completed(id string) *nats.Msg {
	return msgOf(id, simResult{Status: "completed", Output: "exec:" + id})
}

func pendingMsg(id string) *nats.Msg {
	return kvtest.PendingMsg(id, []byte(`{"status":"pending_approval"}`))
}

func (f *fixture) begin(in kvstore.Intent) kvstore.Outcome {
	f.t.Helper()
	out, err := f.l.Begin(f.ctx, in, nil)
	if err != nil {
		f.t.Fatalf("Begin(%s, %s): %v", in.ActionID, in.Owner, err)
	}
	return out
}

// run begins in and wants a Run verdict.
func (f *fixture) run(in kvstore.Intent) *kvstore.Claim {
	f.t.Helper()
	out := f.begin(in)
	if out.Verdict != kvstore.Run {
		f.t.Fatalf("Begin(%s, %s) = %s, want run", in.ActionID, in.Owner, out.Verdict)
	}
	return out.Claim
}

type beginResult struct {
	out kvstore.Outcome
	err error
	at  time.Time
}

// beginAsync begins in in a goroutine; onWait counts its waits.
func (f *fixture) beginAsync(ctx context.Context, in kvstore.Intent, waits *atomic.Int32) <-chan beginResult {
	ch := make(chan beginResult, 1)
	go func() {
		out, err := f.l.Begin(ctx, in, func() {
			if waits != nil {
				waits.Add(1)
			}
		})
		ch <- beginResult{out, err, time.Now()}
	}()
	return ch
}

func (f *fixture) terminals(id string) []kvstore.LogEntry { return f.log.Terminals(id) }

// oneTerminal wants exactly one terminal result of id and returns it.
func (f *fixture) oneTerminal(id string) simResult {
	f.t.Helper()
	ts := f.terminals(id)
	if len(ts) != 1 {
		f.t.Fatalf("%s has %d terminal results, want 1: %v", id, len(ts), f.log.Entries(id))
	}
	r, err := decodeResult(ts[0].Data)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) record(id string) kvstore.Entry {
	f.t.Helper()
	e, ok := f.rec.Peek(kvstore.ActionKey(id))
	if !ok {
		f.t.Fatalf("no record of %s", id)
	}
	return e
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// TestLedgerBeginRace: two deliveries of one action id reach Create together; the
// Create decides: exactly one runs, the other waits for it and gets its result.
func TestLedgerBeginRace(t *testing.T) {
	f := newFixture(t, testLease)
	var arrived sync.WaitGroup
	arrived.Add(2)
	f.rec.OnCall(func(op kvtest.Op, key string) {
		if op == kvtest.OpCreate && key == "act.a" {
			arrived.Done()
			arrived.Wait() // both Creates go ahead at once
		}
	})
	var waits [2]atomic.Int32
	ch := [2]<-chan beginResult{
		f.beginAsync(f.ctx, intent("a", "d1"), &waits[0]),
		f.beginAsync(f.ctx, intent("a", "d2"), &waits[1]),
	}
	var winner *kvstore.Claim
	var loser <-chan beginResult
	var loserWaits *atomic.Int32
	select {
	case r := <-ch[0]:
		winner, loser, loserWaits = r.out.Claim, ch[1], &waits[1]
		if r.err != nil || r.out.Verdict != kvstore.Run {
			t.Fatalf("first to return: %s, %v; want run", r.out.Verdict, r.err)
		}
	case r := <-ch[1]:
		winner, loser, loserWaits = r.out.Claim, ch[0], &waits[0]
		if r.err != nil || r.out.Verdict != kvstore.Run {
			t.Fatalf("first to return: %s, %v; want run", r.out.Verdict, r.err)
		}
	}
	f.rec.OnCall(nil)
	// The loser waits while the winner runs (well within a lease).
	select {
	case r := <-loser:
		t.Fatalf("the second delivery returned while the first runs: %s, %v", r.out.Verdict, r.err)
	case <-time.After(testLease / 2):
	}
	if _, err := winner.Settle(f.ctx, completed("a"), false); err != nil {
		t.Fatal(err)
	}
	r := <-loser
	if r.err != nil || r.out.Verdict != kvstore.Done {
		t.Fatalf("second delivery: %s, %v; want done", r.out.Verdict, r.err)
	}
	if got, _ := decodeResult(r.out.Log.Data); got.Status != "completed" {
		t.Fatalf("second delivery's result: %s", got)
	}
	if n := loserWaits.Load(); n != 1 {
		t.Fatalf("onWait called %d times, want 1", n)
	}
	if n := f.rec.Calls(kvtest.OpCreate); n != 2 {
		t.Fatalf("%d Creates, want 2", n)
	}
	if n := f.rec.Writes(kvtest.OpCreate, "act."); n != 1 {
		t.Fatalf("%d action records created, want 1", n)
	}
	f.oneTerminal("a")
}

// TestLedgerTakeoverOnlyAfterLease: a second delivery does not take the claim over
// while the owner renews, however long; it takes it over a whole lease after the
// owner's last renewal, and the owner's next Renew learns that it lost.
func TestLedgerTakeoverOnlyAfterLease(t *testing.T) {
	f := newFixture(t, testLease)
	c1 := f.run(intent("a", "d1"))
	var waits atomic.Int32
	ch := f.beginAsync(f.ctx, intent("a", "d2"), &waits)

	var lastRenew time.Time
	for end := time.Now().Add(4 * testLease); time.Now().Before(end); {
		time.Sleep(testLease / 5)
		if err := c1.Renew(f.ctx); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		lastRenew = time.Now()
		select {
		case r := <-ch:
			t.Fatalf("taken over while the owner renews: %s, %v", r.out.Verdict, r.err)
		default:
		}
	}
	r := <-ch
	if r.err != nil || r.out.Verdict != kvstore.Run {
		t.Fatalf("takeover: %s, %v", r.out.Verdict, r.err)
	}
	if d := r.at.Sub(lastRenew); d < testLease {
		t.Fatalf("taken over %s after the last renewal, under the lease %s", d, testLease)
	}
	got := r.out.Claim.Record()
	if got.Owner != "d2" || got.Attempt != 2 || got.State != kvstore.StateClaimed {
		t.Fatalf("taker's record: %+v", got)
	}
	if waits.Load() != 1 {
		t.Fatalf("onWait called %d times", waits.Load())
	}
	wantErr(t, "the old owner's Renew", c1.Renew(f.ctx), kvstore.ErrLostClaim)
	if !c1.Lost() {
		t.Fatal("the old claim does not know it is lost")
	}
}

// zombie sets up d1's claim of a, taken over by d2 after d1 stopped renewing.
func (f *fixture) zombie(id string) (zombie, taker *kvstore.Claim) {
	f.t.Helper()
	zombie = f.run(intent(id, "d1"))
	start := time.Now()
	taker = f.run(intent(id, "d2"))
	if time.Since(start) < testLease {
		f.t.Fatalf("taken over within %s", time.Since(start))
	}
	return zombie, taker
}

// TestLedgerZombie: a delivery paused past the lease and taken over wakes up: every
// step it tries fails with ErrLostClaim, and it writes nothing: no dispatch mark, no
// park index, no pending or terminal message, no change to the taker's record.
func TestLedgerZombie(t *testing.T) {
	steps := map[string]func(f *fixture, c *kvstore.Claim) error{
		"dispatch": func(f *fixture, c *kvstore.Claim) error { return c.Dispatch(f.ctx) },
		"renew":    func(f *fixture, c *kvstore.Claim) error { return c.Renew(f.ctx) },
		"release":  func(f *fixture, c *kvstore.Claim) error { return c.Release(f.ctx, true) },
		"park": func(f *fixture, c *kvstore.Claim) error {
			return c.Park(f.ctx, json.RawMessage(`{}`), time.Now().Add(time.Minute), pendingMsg("a"))
		},
		"settle": func(f *fixture, c *kvstore.Claim) error {
			_, err := c.Settle(f.ctx, completed("a"), true)
			return err
		},
	}
	for name, step := range steps {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testLease)
			z, taker := f.zombie("a")
			before := f.record("a")
			writes := f.rec.Revision()
			wantErr(t, name, step(f, z), kvstore.ErrLostClaim)
			if f.rec.Revision() != writes {
				t.Fatalf("the zombie wrote: %v", f.rec.WriteLog()[writes:])
			}
			if n := len(f.log.Entries("a")); n != 0 {
				t.Fatalf("the zombie appended %d messages", n)
			}
			if got := f.record("a"); got.Revision != before.Revision || got.Record.Owner != "d2" {
				t.Fatalf("record after the zombie: %+v", got)
			}
			// The zombie stays lost; the taker goes on.
			wantErr(t, "dispatch after "+name, z.Dispatch(f.ctx), kvstore.ErrLostClaim)
			if err := taker.Dispatch(f.ctx); err != nil {
				t.Fatalf("taker's Dispatch: %v", err)
			}
			if _, err := taker.Settle(f.ctx, completed("a"), false); err != nil {
				t.Fatalf("taker's Settle: %v", err)
			}
			f.oneTerminal("a")
		})
	}
}

// TestLedgerTakeoverOfDispatched: a record taken over after its mark gives Uncertain,
// never Run. The zombie that dispatched holds the real outcome: its Settle is not
// fenced (nobody can have sent again), so of the two settlers the first wins and the
// other gets ErrSettled with the winner's entry; the log holds one terminal result.
func TestLedgerTakeoverOfDispatched(t *testing.T) {
	for _, zombieFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("zombie first ", zombieFirst), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testLease)
			z := f.run(intent("a", "d1"))
			if err := z.Dispatch(f.ctx); err != nil {
				t.Fatal(err)
			}
			out := f.begin(intent("a", "d2"))
			if out.Verdict != kvstore.Uncertain || !out.Claim.Dispatched() {
				t.Fatalf("takeover of a dispatched record: %s", out.Verdict)
			}
			first, second := out.Claim, z
			firstMsg, secondMsg := msgOf("a", failed("outcome_unknown", false, true)), completed("a")
			if zombieFirst {
				first, second, firstMsg, secondMsg = z, out.Claim, secondMsg, firstMsg
			}
			won, err := first.Settle(f.ctx, firstMsg, false)
			if err != nil {
				t.Fatal(err)
			}
			le, err := second.Settle(f.ctx, secondMsg, false)
			wantErr(t, "second settler", err, kvstore.ErrSettled)
			if le.Seq != won.Seq || string(le.Data) != string(firstMsg.Data) {
				t.Fatalf("the loser got %d %s, want the winner's %d %s", le.Seq, le.Data, won.Seq, firstMsg.Data)
			}
			f.oneTerminal("a")
		})
	}
}

// TestLedgerStaleGet: a read that does not show the latest record never leads to a
// second Run: a Get that finds nothing leads to a Create (which fails), a Get that
// finds an old released record to an Update on its revision (which fails).
func TestLedgerStaleGet(t *testing.T) {
	t.Run("not found", func(t *testing.T) {
		f := newFixture(t, testLease)
		c1 := f.run(intent("a", "d1"))
		for range 3 {
			f.rec.StaleGet("act.a", kvstore.Entry{})
		}
		ctx, cancel := context.WithTimeout(f.ctx, testLease/2)
		defer cancel()
		_, err := f.l.Begin(ctx, intent("a", "d2"), nil)
		wantErr(t, "Begin over stale reads", err, context.DeadlineExceeded)
		if f.rec.PendingFaults() != 0 {
			t.Fatalf("%d stale reads not taken", f.rec.PendingFaults())
		}
		if n := f.rec.Writes("", "act."); n != 1 {
			t.Fatalf("%d writes, want only the first Create: %v", n, f.rec.WriteLog())
		}
		if f.record("a").Record.Owner != "d1" || c1.Lost() {
			t.Fatal("the claim moved")
		}
	})
	t.Run("owner's read-back after a lost reply", func(t *testing.T) {
		// The owner's heartbeat lands but its reply is lost; the next write conflicts
		// with that revision and the read-back that resolves it reads as absent. That is
		// unknown, not lost: the claim stays, and the next renewal finds its own record.
		f := newFixture(t, testLease)
		c := f.run(intent("a", "d1"))
		f.rec.LoseAck(kvtest.OpUpdate, "act.a")
		if err := c.Renew(f.ctx); !errors.Is(err, kvtest.ErrLostAck) {
			t.Fatalf("Renew with a lost reply: %v", err)
		}
		f.rec.StaleGet("act.a", kvstore.Entry{})
		err := c.Renew(f.ctx)
		if err == nil || errors.Is(err, kvstore.ErrLostClaim) || errors.Is(err, kvstore.ErrNotFound) || c.Lost() {
			t.Fatalf("Renew over a stale read-back: %v (lost %v), want a retryable error", err, c.Lost())
		}
		if err := c.Renew(f.ctx); err != nil {
			t.Fatalf("the next Renew: %v", err)
		}
		if err := c.Dispatch(f.ctx); err != nil {
			t.Fatalf("Dispatch after the renewals: %v", err)
		}
	})
	t.Run("old released record", func(t *testing.T) {
		f := newFixture(t, testLease)
		c1 := f.run(intent("a", "d1"))
		if err := c1.Release(f.ctx, true); err != nil {
			t.Fatal(err)
		}
		released := f.record("a")
		c2 := f.run(intent("a", "d2")) // takes the released record at once
		f.rec.StaleGet("act.a", released)
		ctx, cancel := context.WithTimeout(f.ctx, testLease/2)
		defer cancel()
		_, err := f.l.Begin(ctx, intent("a", "d3"), nil)
		wantErr(t, "Begin over a stale released record", err, context.DeadlineExceeded)
		if got := f.record("a"); got.Record.Owner != "d2" || got.Revision != c2.Revision() {
			t.Fatalf("record: %+v", got)
		}
	})
}

// TestLedgerLostCreateAck: Begin's Create lands but its reply is lost (and Store's own
// read-back of its bytes failed too, which kvtest does not emulate). Begin reports the
// error; the record names the delivery, and a later Begin, by the same delivery or the
// next one, finds a claimed record that does not move: it takes it over after one
// lease. The cost of a lost reply is one lease, never a second Run.
func TestLedgerLostCreateAck(t *testing.T) {
	for _, owner := range []string{"d1", "d2"} {
		t.Run("next begin by "+owner, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testLease)
			f.rec.LoseAck(kvtest.OpCreate, "act.a")
			_, err := f.l.Begin(f.ctx, intent("a", "d1"), nil)
			wantErr(t, "Begin with a lost Create reply", err, kvtest.ErrLostAck)
			if got := f.record("a").Record; got.Owner != "d1" || got.State != kvstore.StateClaimed {
				t.Fatalf("record: %+v", got)
			}
			start := time.Now()
			c := f.run(intent("a", owner))
			if d := time.Since(start); d < testLease {
				t.Fatalf("took the unacknowledged record in %s, under a lease", d)
			}
			if c.Record().Attempt != 2 || f.rec.Writes(kvtest.OpCreate, "act.") != 1 {
				t.Fatalf("record %+v, creates %d", c.Record(), f.rec.Writes(kvtest.OpCreate, "act."))
			}
		})
	}
}

// TestLedgerLostAppendAck: Settle's Append lands but its reply is lost. Settle
// reports the error and does not free the key; a retry of the Settle gets ErrSettled
// with its own entry; a redelivery gets Done at once (the record is dispatched and the
// log holds the result); the key, whose holder's result frees it, is freed by the next
// action that wants it.
func TestLedgerLostAppendAck(t *testing.T) {
	f := newFixture(t, testLease)
	c := f.run(keyedIntent("a", "d1", "k", inputA))
	if ko, err := c.ClaimKey(f.ctx, nil); err != nil || ko.Verdict != kvstore.KeyHeld {
		t.Fatalf("ClaimKey: %v, %v", ko.Verdict, err)
	}
	if err := c.Dispatch(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.log.LoseAck("a")
	m := msgOf("a", failed("remote_unavailable", true, false)) // frees the key
	_, err := c.Settle(f.ctx, m, true)
	wantErr(t, "Settle with a lost reply", err, kvtest.ErrLostAck)
	if len(f.terminals("a")) != 1 {
		t.Fatal("the lost-reply Append did not land")
	}
	ikey := kvstore.IdempotencyKey(capUnsafe, "k")
	if _, ok := f.rec.Peek(ikey); !ok {
		t.Fatal("the key was freed although Settle failed")
	}
	le, err := c.Settle(f.ctx, m, true)
	wantErr(t, "Settle retried", err, kvstore.ErrSettled)
	if string(le.Data) != string(m.Data) {
		t.Fatalf("retry got %s", le.Data)
	}
	if out := f.begin(keyedIntent("a", "d2", "k", inputA)); out.Verdict != kvstore.Done {
		t.Fatalf("redelivery: %s, want done", out.Verdict)
	}
	c2 := f.run(keyedIntent("b", "e1", "k", inputA))
	if ko, err := c2.ClaimKey(f.ctx, nil); err != nil || ko.Verdict != kvstore.KeyHeld {
		t.Fatalf("the next action's ClaimKey: %v, %v; want held", ko.Verdict, err)
	}
	f.oneTerminal("a")
}

// TestLedgerSettleTwice: a claim settled twice, and an unclaimed settle after it, store
// one terminal result; the later ones get ErrSettled with the first one's entry.
func TestLedgerSettleTwice(t *testing.T) {
	f := newFixture(t, testLease)
	c := f.run(intent("a", "d1"))
	if err := c.Dispatch(f.ctx); err != nil {
		t.Fatal(err)
	}
	first, err := c.Settle(f.ctx, completed("a"), false)
	if err != nil {
		t.Fatal(err)
	}
	le, err := c.Settle(f.ctx, msgOf("a", failed("transport", false, true)), false)
	wantErr(t, "second Settle", err, kvstore.ErrSettled)
	if le.Seq != first.Seq {
		t.Fatalf("second Settle got %d, want %d", le.Seq, first.Seq)
	}
	le, err = f.l.SettleUnclaimed(f.ctx, "a", msgOf("a", failed("cancelled", false, false)), 0)
	wantErr(t, "SettleUnclaimed", err, kvstore.ErrSettled)
	if le.Seq != first.Seq {
		t.Fatalf("SettleUnclaimed got %d, want %d", le.Seq, first.Seq)
	}
	if r := f.oneTerminal("a"); r.Status != "completed" {
		t.Fatalf("terminal: %s", r)
	}
}

func (f *fixture) claimKey(c *kvstore.Claim, onWait func()) kvstore.KeyOutcome {
	f.t.Helper()
	ko, err := c.ClaimKey(f.ctx, onWait)
	if err != nil {
		f.t.Fatalf("ClaimKey: %v", err)
	}
	return ko
}

// TestLedgerClaimKey: who holds a scoped key and what a second action gets.
func TestLedgerClaimKey(t *testing.T) {
	ikey := kvstore.IdempotencyKey(capUnsafe, "k")
	settled := func(f *fixture, id string, m *nats.Msg) {
		f.t.Helper()
		c := f.run(keyedIntent(id, "d-"+id, "k", inputA))
		if ko := f.claimKey(c, nil); ko.Verdict != kvstore.KeyHeld {
			f.t.Fatalf("%s: %v", id, ko.Verdict)
		}
		if _, err := c.Settle(f.ctx, m, kvstore.FreesKey(m.Data)); err != nil {
			f.t.Fatal(err)
		}
	}
	t.Run("held and renewed", func(t *testing.T) {
		f := newFixture(t, testLease)
		c := f.run(keyedIntent("a", "d1", "k", inputA))
		if ko := f.claimKey(c, nil); ko.Verdict != kvstore.KeyHeld {
			t.Fatalf("%v", ko.Verdict)
		}
		e, ok := f.rec.Peek(ikey)
		if !ok || e.Record.ActionID != "a" || e.Record.InputSHA256 != inputA {
			t.Fatalf("key record %+v", e)
		}
		if err := c.Renew(f.ctx); err != nil {
			t.Fatal(err)
		}
		if e2, _ := f.rec.Peek(ikey); e2.Revision <= e.Revision {
			t.Fatal("Renew did not rewrite the key record")
		}
	})
	t.Run("kept across a takeover", func(t *testing.T) {
		f := newFixture(t, testLease)
		c1 := f.run(keyedIntent("a", "d1", "k", inputA))
		f.claimKey(c1, nil)
		c2 := f.run(keyedIntent("a", "d2", "k", inputA)) // after a lease
		if ko := f.claimKey(c2, nil); ko.Verdict != kvstore.KeyHeld {
			t.Fatalf("taker: %v", ko.Verdict)
		}
		if n := f.rec.Writes(kvtest.OpCreate, "idem."); n != 1 {
			t.Fatalf("%d key records created", n)
		}
	})
	t.Run("replay", func(t *testing.T) {
		f := newFixture(t, testLease)
		settled(f, "a", completed("a"))
		c := f.run(keyedIntent("b", "d-b", "k", inputA))
		var waits atomic.Int32
		ko := f.claimKey(c, func() { waits.Add(1) })
		if ko.Verdict != kvstore.KeyReplay || ko.Original != "a" || waits.Load() != 0 {
			t.Fatalf("%+v, waits %d", ko, waits.Load())
		}
		if r, _ := decodeResult(ko.Log.Data); r.ActionID != "a" || r.Status != "completed" {
			t.Fatalf("replayed %s", ko.Log.Data)
		}
	})
	t.Run("conflict", func(t *testing.T) {
		f := newFixture(t, testLease)
		settled(f, "a", completed("a"))
		c := f.run(keyedIntent("b", "d-b", "k", inputB))
		if ko := f.claimKey(c, nil); ko.Verdict != kvstore.KeyConflict || ko.Original != "a" {
			t.Fatalf("%+v", ko)
		}
	})
	t.Run("waits for a running holder", func(t *testing.T) {
		f := newFixture(t, testLease)
		ca := f.run(keyedIntent("a", "d-a", "k", inputA))
		f.claimKey(ca, nil)
		cb := f.run(keyedIntent("b", "d-b", "k", inputA))
		var waits atomic.Int32
		ch := make(chan kvstore.KeyOutcome, 1)
		go func() { ch <- f.claimKey(cb, func() { waits.Add(1) }) }()
		select {
		case ko := <-ch:
			t.Fatalf("returned while the holder runs: %+v", ko)
		case <-time.After(30 * time.Millisecond):
		}
		if _, err := ca.Settle(f.ctx, completed("a"), false); err != nil {
			t.Fatal(err)
		}
		ko := <-ch
		if ko.Verdict != kvstore.KeyReplay || ko.Original != "a" || waits.Load() != 1 {
			t.Fatalf("%+v, waits %d", ko, waits.Load())
		}
	})
	t.Run("freed by its holder", func(t *testing.T) {
		f := newFixture(t, testLease)
		settled(f, "a", msgOf("a", failed("remote_unavailable", true, false)))
		if _, ok := f.rec.Peek(ikey); ok {
			t.Fatal("a freeing result did not delete the key")
		}
		c := f.run(keyedIntent("b", "d-b", "k", inputA))
		if ko := f.claimKey(c, nil); ko.Verdict != kvstore.KeyHeld {
			t.Fatalf("%+v", ko)
		}
	})
	t.Run("freeing result found by the next action", func(t *testing.T) {
		// The holder settled a freeing result but did not delete the key (it stopped).
		f := newFixture(t, testLease)
		settled(f, "a", msgOf("a", failed("remote_unavailable", true, false)))
		_, _ = f.rec.Create(f.ctx, ikey, kvstore.Record{State: kvstore.StateClaimed, ActionID: "a", InputSHA256: inputA})
		c := f.run(keyedIntent("b", "d-b", "k", inputA))
		if ko := f.claimKey(c, nil); ko.Verdict != kvstore.KeyHeld {
			t.Fatalf("%+v", ko)
		}
		if e, _ := f.rec.Peek(ikey); e.Record.ActionID != "b" {
			t.Fatalf("key holder %s", e.Record.ActionID)
		}
	})
	t.Run("waiter replaces a holder whose result frees the key", func(t *testing.T) {
		f := newFixture(t, testLease)
		ca := f.run(keyedIntent("a", "d-a", "k", inputA))
		f.claimKey(ca, nil)
		cb := f.run(keyedIntent("b", "d-b", "k", inputA))
		var waits atomic.Int32
		ch := make(chan kvstore.KeyOutcome, 1)
		go func() { ch <- f.claimKey(cb, func() { waits.Add(1) }) }()
		time.Sleep(20 * time.Millisecond)
		m := msgOf("a", failed("remote_unavailable", true, false))
		if _, err := ca.Settle(f.ctx, m, true); err != nil {
			t.Fatal(err)
		}
		ko := <-ch
		if ko.Verdict != kvstore.KeyHeld || waits.Load() != 1 {
			t.Fatalf("%+v, waits %d", ko, waits.Load())
		}
		if e, _ := f.rec.Peek(ikey); e.Record.ActionID != "b" {
			t.Fatalf("key holder %s", e.Record.ActionID)
		}
	})
}

// park claims id and parks it.
func (f *fixture) park(id string) *kvstore.Claim {
	f.t.Helper()
	c := f.run(intent(id, "d1"))
	if err := c.Park(f.ctx, json.RawMessage(`{"id":"`+id+`"}`), time.Now().Add(time.Minute), pendingMsg(id)); err != nil {
		f.t.Fatalf("Park: %v", err)
	}
	return c
}

// TestLedgerParkDecide: Park writes the index, the pending message and the parked
// record; a redelivery finds it parked; a decision moves it to claimed with the
// decision, and its Settle appends after the pending message and removes the index.
func TestLedgerParkDecide(t *testing.T) {
	for _, decision := range []string{kvstore.DecisionApprove, kvstore.DecisionDeny, kvstore.DecisionExpired} {
		t.Run(decision, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testLease)
			f.park("a")
			e := f.record("a")
			pend := f.log.Entries("a")
			if e.Record.State != kvstore.StateParked || e.Record.Owner != "" || len(pend) != 1 || pend[0].Terminal ||
				e.Record.PendingSeq != pend[0].Seq || len(e.Record.Action) == 0 {
				t.Fatalf("parked record %+v, log %+v", e.Record, pend)
			}
			if _, ok := f.rec.Peek(kvstore.ParkKey("a")); !ok {
				t.Fatal("no park index entry")
			}
			if out := f.begin(intent("a", "d2")); out.Verdict != kvstore.Parked {
				t.Fatalf("redelivery: %s", out.Verdict)
			}
			out, err := f.l.Decide(f.ctx, "a", "dec1", decided(decision, "alice"), nil)
			if err != nil || out.Verdict != kvstore.Run {
				t.Fatalf("Decide: %s, %v", out.Verdict, err)
			}
			r := out.Claim.Record()
			if r.Decision != decision || r.Approver != "alice" || r.Owner != "dec1" || r.State != kvstore.StateClaimed {
				t.Fatalf("decided record %+v", r)
			}
			m := completed("a")
			if decision == kvstore.DecisionApprove {
				if err := out.Claim.Dispatch(f.ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				m = msgOf("a", decisionResult(decision))
			}
			le, err := out.Claim.Settle(f.ctx, m, false)
			if err != nil {
				t.Fatal(err)
			}
			all := f.log.Entries("a")
			if len(all) != 2 || all[1].Seq != le.Seq || !all[1].Terminal {
				t.Fatalf("log %+v", all)
			}
			if _, ok := f.rec.Peek(kvstore.ParkKey("a")); ok {
				t.Fatal("the park index entry outlived the settle")
			}
			// A second decision finds the result.
			if out, err := f.l.Decide(f.ctx, "a", "dec2", decided(kvstore.DecisionDeny, "bob"), nil); err != nil || out.Verdict != kvstore.Done {
				t.Fatalf("second Decide: %s, %v", out.Verdict, err)
			}
		})
	}
}

// TestLedgerParkTwice: a Park repeated by the next delivery (the first stopped after
// its pending message) appends no second pending message.
func TestLedgerParkTwice(t *testing.T) {
	f := newFixture(t, testLease)
	c1 := f.run(intent("a", "d1"))
	f.rec.FailNext(kvtest.OpUpdate, "act.a", kvtest.ErrInjected) // the record's update fails
	err := c1.Park(f.ctx, json.RawMessage(`{}`), time.Now().Add(time.Minute), pendingMsg("a"))
	wantErr(t, "first Park", err, kvtest.ErrInjected)
	c2 := f.run(intent("a", "d2")) // after a lease
	if err := c2.Park(f.ctx, json.RawMessage(`{}`), time.Now().Add(time.Minute), pendingMsg("a")); err != nil {
		t.Fatal(err)
	}
	if n := len(f.log.Entries("a")); n != 1 {
		t.Fatalf("%d pending messages", n)
	}
	if e := f.record("a"); e.Record.State != kvstore.StateParked || e.Record.PendingSeq != f.log.Entries("a")[0].Seq {
		t.Fatalf("record %+v", e.Record)
	}
}

// TestLedgerRedeliveredDecision: the decider stops after its Decide; the decision is
// redelivered (even with another decision in it): it waits out the lease, takes the
// claim over and carries out the first decision, once.
func TestLedgerRedeliveredDecision(t *testing.T) {
	f := newFixture(t, testLease)
	f.park("a")
	if out, err := f.l.Decide(f.ctx, "a", "dec1", decided(kvstore.DecisionApprove, "alice"), nil); err != nil || out.Verdict != kvstore.Run {
		t.Fatalf("Decide: %s, %v", out.Verdict, err)
	}
	// dec1 stops here.
	var waits atomic.Int32
	start := time.Now()
	out, err := f.l.Decide(f.ctx, "a", "dec2", decided(kvstore.DecisionDeny, "bob"), func() { waits.Add(1) })
	if err != nil || out.Verdict != kvstore.Run {
		t.Fatalf("redelivered Decide: %s, %v", out.Verdict, err)
	}
	if d := time.Since(start); d < testLease || waits.Load() != 1 {
		t.Fatalf("took over after %s with %d waits", d, waits.Load())
	}
	r := out.Claim.Record()
	if r.Decision != kvstore.DecisionApprove || r.Approver != "alice" || r.Owner != "dec2" || r.Attempt != 2 {
		t.Fatalf("record %+v: want the first decision", r)
	}
	if err := out.Claim.Dispatch(f.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Claim.Settle(f.ctx, completed("a"), false); err != nil {
		t.Fatal(err)
	}
	if r := f.oneTerminal("a"); r.Status != "completed" {
		t.Fatalf("terminal %s", r)
	}
}

// TestLedgerCancelStored: what a cancel request finds, and what it leaves for the
// action's deliveries.
func TestLedgerCancelStored(t *testing.T) {
	tomb := func(id string) json.RawMessage {
		b, _ := json.Marshal(simResult{ActionID: id, Status: "cancelled", Error: &simError{Code: "cancelled"}})
		return b
	}
	cancel := func(f *fixture, id string, allow bool) (string, *kvstore.Claim) {
		f.t.Helper()
		state, c, err := f.l.CancelStored(f.ctx, id, "canceller", tomb(id), always(allow))
		if err != nil {
			f.t.Fatalf("CancelStored: %v", err)
		}
		return state, c
	}
	t.Run("none", func(t *testing.T) {
		f := newFixture(t, testLease)
		if st, c := cancel(f, "a", false); st != kvstore.CancelUnknown || c != nil {
			t.Fatalf("%s %v", st, c)
		}
		if _, ok := f.rec.Peek("act.a"); ok {
			t.Fatal("a record without allowTombstone")
		}
		if st, _ := cancel(f, "a", true); st != kvstore.CancelUnknown {
			t.Fatal(st)
		}
		e := f.record("a")
		if e.Record.State != kvstore.StateSettled || string(e.Record.Result) != string(tomb("a")) {
			t.Fatalf("tombstone %+v", e.Record)
		}
		// The action arrives: Stored, then settled from the record, never run.
		out := f.begin(intent("a", "d1"))
		if out.Verdict != kvstore.Stored {
			t.Fatalf("Begin: %s", out.Verdict)
		}
		if _, err := f.l.SettleUnclaimed(f.ctx, "a", kvtest.ResultMsg("a", out.Record.Result), out.Record.PendingSeq); err != nil {
			t.Fatal(err)
		}
		if out := f.begin(intent("a", "d2")); out.Verdict != kvstore.Stored {
			t.Fatalf("second Begin: %s", out.Verdict)
		}
		_, err := f.l.SettleUnclaimed(f.ctx, "a", kvtest.ResultMsg("a", out.Record.Result), 0)
		wantErr(t, "second SettleUnclaimed", err, kvstore.ErrSettled)
		if st, _ := cancel(f, "a", true); st != kvstore.CancelAlreadySettled {
			t.Fatal(st)
		}
		if r := f.oneTerminal("a"); r.Status != "cancelled" {
			t.Fatal(r)
		}
	})
	t.Run("parked", func(t *testing.T) {
		f := newFixture(t, testLease)
		f.park("a")
		st, c := cancel(f, "a", true)
		if st != kvstore.CancelCancelled || c == nil || c.Record().Decision != kvstore.DecisionCancel {
			t.Fatalf("%s %v", st, c)
		}
		if _, err := c.Settle(f.ctx, msgOf("a", decisionResult(kvstore.DecisionCancel)), false); err != nil {
			t.Fatal(err)
		}
		if n := len(f.log.Entries("a")); n != 2 {
			t.Fatalf("%d messages", n)
		}
		if _, ok := f.rec.Peek(kvstore.ParkKey("a")); ok {
			t.Fatal("park index left")
		}
		if st, _ := cancel(f, "a", true); st != kvstore.CancelAlreadySettled {
			t.Fatal(st)
		}
	})
	t.Run("claimed", func(t *testing.T) {
		f := newFixture(t, testLease)
		c := f.run(intent("a", "d1"))
		if st, cl := cancel(f, "a", true); st != kvstore.CancelCancelled || cl != nil {
			t.Fatalf("%s %v", st, cl)
		}
		writes := f.rec.Revision()
		if st, _ := cancel(f, "a", true); st != kvstore.CancelCancelled || f.rec.Revision() != writes {
			t.Fatalf("second cancel: %s, wrote %v", st, f.rec.WriteLog()[writes:])
		}
		wantErr(t, "Dispatch", c.Dispatch(f.ctx), kvstore.ErrCancelRequested)
		wantErr(t, "Dispatch again", c.Dispatch(f.ctx), kvstore.ErrCancelRequested)
		if e := f.record("a"); e.Record.State != kvstore.StateClaimed || !e.Record.Cancel {
			t.Fatalf("record %+v", e.Record)
		}
		if _, err := c.Settle(f.ctx, msgOf("a", failed("cancelled", false, false)), false); err != nil {
			t.Fatalf("Settle after the cancel: %v", err)
		}
		if st, _ := cancel(f, "a", true); st != kvstore.CancelAlreadySettled {
			t.Fatal(st)
		}
		f.oneTerminal("a")
	})
	t.Run("claimed, the heartbeat learns it", func(t *testing.T) {
		f := newFixture(t, testLease)
		c := f.run(intent("a", "d1"))
		cancel(f, "a", true)
		wantErr(t, "Renew", c.Renew(f.ctx), kvstore.ErrCancelRequested)
		// Renew reports it once (the claim now holds the flagged record); Dispatch
		// keeps refusing.
		if err := c.Renew(f.ctx); err != nil {
			t.Fatalf("second Renew: %v", err)
		}
		wantErr(t, "Dispatch", c.Dispatch(f.ctx), kvstore.ErrCancelRequested)
		if _, err := c.Settle(f.ctx, msgOf("a", failed("cancelled", false, false)), false); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("dispatched", func(t *testing.T) {
		f := newFixture(t, testLease)
		c := f.run(intent("a", "d1"))
		if err := c.Dispatch(f.ctx); err != nil {
			t.Fatal(err)
		}
		if st, _ := cancel(f, "a", true); st != kvstore.CancelCancelled {
			t.Fatal(st)
		}
		wantErr(t, "Renew", c.Renew(f.ctx), kvstore.ErrCancelRequested)
		if _, err := c.Settle(f.ctx, msgOf("a", failed("cancelled", false, true)), false); err != nil {
			t.Fatal(err)
		}
		f.oneTerminal("a")
	})
	t.Run("released", func(t *testing.T) {
		f := newFixture(t, testLease)
		c := f.run(intent("a", "d1"))
		if err := c.Release(f.ctx, true); err != nil {
			t.Fatal(err)
		}
		cancel(f, "a", true)
		c2 := f.run(intent("a", "d2"))
		if !c2.Record().Cancel {
			t.Fatal("the next delivery does not see the cancel flag")
		}
		wantErr(t, "Dispatch", c2.Dispatch(f.ctx), kvstore.ErrCancelRequested)
	})
	t.Run("settled", func(t *testing.T) {
		f := newFixture(t, testLease)
		c := f.run(intent("a", "d1"))
		if err := c.Dispatch(f.ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Settle(f.ctx, completed("a"), false); err != nil {
			t.Fatal(err)
		}
		writes := f.rec.Revision()
		if st, _ := cancel(f, "a", true); st != kvstore.CancelAlreadySettled || f.rec.Revision() != writes {
			t.Fatalf("%s, wrote %v", st, f.rec.WriteLog()[writes:])
		}
	})
}

// TestLedgerCancelFlagRacesDispatch: the cancel flag lands between the owner's
// decision to dispatch and its Dispatch: the Dispatch's compare-and-set fails, the
// claim finds its own record flagged and reports ErrCancelRequested; nothing is marked.
func TestLedgerCancelFlagRacesDispatch(t *testing.T) {
	f := newFixture(t, testLease)
	c := f.run(intent("a", "d1"))
	var fired atomic.Bool
	f.rec.OnCall(func(op kvtest.Op, key string) {
		if op == kvtest.OpUpdate && key == "act.a" && fired.CompareAndSwap(false, true) {
			// Dispatch's Update is next; the cancel's own Update runs first.
			if st, _, err := f.l.CancelStored(f.ctx, "a", "canceller", nil, always(false)); err != nil || st != kvstore.CancelCancelled {
				t.Errorf("CancelStored: %s, %v", st, err)
			}
		}
	})
	wantErr(t, "Dispatch", c.Dispatch(f.ctx), kvstore.ErrCancelRequested)
	f.rec.OnCall(nil)
	if e := f.record("a"); e.Record.State != kvstore.StateClaimed || !e.Record.Cancel || c.Lost() {
		t.Fatalf("record %+v, lost %v", e.Record, c.Lost())
	}
}

// crashAt makes the delivery goroutines whose ctx carries a role stop (runtime.Goexit)
// at the n-th store or log call they make, counting over all of them (heartbeats
// excepted); it returns the counter.
func crashAt(rec *kvtest.Records, log *kvtest.Log, n int64, trace func(string, ...any)) *atomic.Int64 {
	var calls atomic.Int64
	hook := func(ctx context.Context, op kvtest.Op, key string) {
		r, ok := roleOf(ctx)
		if !ok || r.heartbeat {
			return
		}
		if calls.Add(1) == n {
			trace("%s: crashes at call %d (%s %s)", r.d.owner, n, op, key)
			runtime.Goexit()
		}
	}
	rec.OnCallContext(hook)
	log.OnCallContext(hook)
	return &calls
}

// crashFlow is a scripted life of one action: its deliveries and their checks.
type crashFlow struct {
	name     string
	action   simAction
	decision string // "" for none; published once the action has its pending message
	refuse   bool   // Hermes refuses the first request (a 429)
}

// TestLedgerCrashAtEveryCall: a flow runs with its delivery stopping dead at its n-th
// call to the stores, for every n; the messages are then redelivered (and the sweeper
// runs) until they are acknowledged. Every run ends with exactly one terminal result,
// at most one execution, a truthful result, and no record, key or index left behind.
func TestLedgerCrashAtEveryCall(t *testing.T) {
	flows := []crashFlow{
		{name: "unsafe", action: simAction{ID: "a", Cap: capUnsafe, Unsafe: true, Input: inputA}},
		{name: "safe", action: simAction{ID: "a", Cap: capSafe, Input: inputA}},
		{name: "keyed", action: simAction{ID: "a", Cap: capUnsafe, Unsafe: true, Key: "k", Input: inputA}},
		{name: "keyed refused once", action: simAction{ID: "a", Cap: capUnsafe, Unsafe: true, Key: "k", Input: inputA}, refuse: true},
		{name: "approve", decision: kvstore.DecisionApprove,
			action: simAction{ID: "a", Cap: capApproval, Unsafe: true, Key: "k", Input: inputA, Approval: true}},
		{name: "deny", decision: kvstore.DecisionDeny,
			action: simAction{ID: "a", Cap: capApproval, Unsafe: true, Key: "k", Input: inputA, Approval: true}},
	}
	for _, fl := range flows {
		t.Run(fl.name, func(t *testing.T) {
			t.Parallel()
			// A run without a crash counts the calls.
			total := runCrashFlow(t, fl, 0)
			if total < 2 {
				t.Fatalf("only %d calls", total)
			}
			for n := int64(1); n <= total; n++ {
				runCrashFlow(t, fl, n)
			}
		})
	}
}

// runCrashFlow runs fl with a crash at call n (none when 0) and returns the number of
// calls the first round made.
func runCrashFlow(t *testing.T, fl crashFlow, n int64) int64 {
	t.Helper()
	const lease = 20 * time.Millisecond
	f := newFixture(t, lease)
	var traceMu sync.Mutex
	var trace []string
	tracef := func(format string, args ...any) {
		traceMu.Lock()
		trace = append(trace, fmt.Sprintf(format, args...))
		traceMu.Unlock()
	}
	fail := func(format string, args ...any) {
		t.Helper()
		traceMu.Lock()
		defer traceMu.Unlock()
		t.Fatalf("crash at call %d: %s\ntrace:\n  %s", n, fmt.Sprintf(format, args...), strings.Join(trace, "\n  "))
	}
	hermes := newSimHermes()
	hermes.trace = tracef
	var refusals atomic.Int32
	if fl.refuse {
		hermes.refuse = func(simAction) bool { return refusals.Add(1) == 1 }
	}
	var violations []string
	b := &bridge{l: f.l, hermes: hermes, oracle: f.rec.Peek,
		heartbeat: lease / 5, approvalTTL: time.Minute, maxAttempts: 3, trace: tracef,
		violation: func(format string, args ...any) {
			tracef("VIOLATION: "+format, args...)
			traceMu.Lock()
			violations = append(violations, fmt.Sprintf(format, args...))
			traceMu.Unlock()
		}}
	calls := crashAt(f.rec, f.log, n, tracef)

	var actionAcked, decisionAcked atomic.Bool
	decisionPublished := false
	seq := 0
	// start starts one delivery; the round waits for all it started, which run
	// concurrently as on JetStream (a decision waits for the action's redelivery to
	// park it).
	start := func(kind string) *delivery {
		seq++
		owner := fmt.Sprintf("%s%d", kind, seq)
		ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
		t.Cleanup(cancel)
		var d *delivery
		switch kind {
		case "action":
			d = b.newDelivery(ctx, owner, kind, func() { actionAcked.Store(true) }, nil)
			go b.deliverAction(d, fl.action)
		case "decision":
			d = b.newDelivery(ctx, owner, kind, func() { decisionAcked.Store(true) }, nil)
			go b.deliverDecision(d, fl.action, fl.decision)
		}
		return d
	}
	// A small dispatcher: a message without a live delivery is delivered (again) until
	// it is acknowledged; the decision is published once the action's first delivery
	// has ended and its pending message is there (the approver answers it).
	running := func(d *delivery) bool {
		if d == nil {
			return false
		}
		select {
		case <-d.done:
			return false
		default:
			return true
		}
	}
	var actionD, decisionD *delivery
	var sweeping atomic.Bool
	var sweeps sync.WaitGroup
	first := int64(-1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if time.Now().After(deadline) {
			fail("not settled in 5s")
		}
		if !actionAcked.Load() && !running(actionD) {
			actionD = start("action")
		}
		if first < 0 {
			<-actionD.done
		}
		if fl.decision != "" && !running(actionD) && len(f.log.Entries("a")) > 0 {
			decisionPublished = true
		}
		if decisionPublished && !decisionAcked.Load() && !running(decisionD) {
			decisionD = start("decision")
		}
		if first < 0 {
			if decisionD != nil {
				<-decisionD.done
			}
			first = calls.Load()
		}
		if sweeping.CompareAndSwap(false, true) {
			sweeps.Add(1)
			go func() {
				defer sweeps.Done()
				defer sweeping.Store(false)
				sweep(f, b, fl.action)
			}()
		}
		if actionAcked.Load() && (!decisionPublished || decisionAcked.Load()) && len(f.terminals("a")) > 0 {
			break
		}
		time.Sleep(lease / 2)
	}
	for _, d := range []*delivery{actionD, decisionD} {
		if d != nil {
			<-d.done
		}
	}
	sweeps.Wait()
	f.rec.OnCallContext(nil)
	f.log.OnCallContext(nil)
	sweep(f, b, fl.action)

	if len(violations) > 0 {
		fail("violations: %v", violations)
	}
	if msg := checkAction(f.rec, f.log, hermes, fl.action); msg != "" {
		fail("%s", msg)
	}
	if left := f.rec.Live("park."); len(left) > 0 {
		fail("park index left: %v", left)
	}
	return first
}

// sweep is the parking sweeper: for every park index entry it removes the entries of
// settled actions, expires parked actions past their expiry, and carries on decided
// actions nobody carries (a canceller or a sweeper that stopped).
func sweep(f *fixture, b *bridge, a simAction) {
	keys, _ := f.rec.Keys(f.ctx, "park.>")
	for _, k := range keys {
		id := strings.TrimPrefix(k, "park.")
		if le, err := f.log.Last(f.ctx, id); err == nil && le.Terminal {
			f.l.Unpark(f.ctx, id)
			continue
		}
		e, err := f.rec.Get(f.ctx, kvstore.ActionKey(id))
		if err != nil {
			continue
		}
		var decision string
		switch {
		case e.Record.State == kvstore.StateParked && time.Now().After(e.Record.ExpiresAt):
			decision = kvstore.DecisionExpired
		case e.Record.State != kvstore.StateParked && e.Record.Decision != "":
			decision = e.Record.Decision
		default:
			continue
		}
		d := b.newDelivery(f.ctx, "sweeper", "sweep", nil, nil)
		go b.deliverDecision(d, a, decision)
		<-d.done
	}
}

// firstDecision returns the first decision written to id's record, "" for none.
func firstDecision(rec *kvtest.Records, id string) string {
	for _, v := range rec.History(kvstore.ActionKey(id)) {
		if !v.Deleted && v.Entry.Record.Decision != "" {
			return v.Entry.Record.Decision
		}
	}
	return ""
}

// everFlagged reports whether id's record ever carried the cancel flag.
func everFlagged(rec *kvtest.Records, id string) bool {
	for _, v := range rec.History(kvstore.ActionKey(id)) {
		if !v.Deleted && v.Entry.Record.Cancel {
			return true
		}
	}
	return false
}

// checkAction checks what one settled action left behind; "" when all is well: one
// terminal result, last in the log, after at most one pending message (only for an
// action that parks); at most one execution of an unsafe action; a truthful result
// (completed: executed; certain failure or replay: not executed); an approval action
// executed only when its first decision approved it, and settled by that decision; no
// record left parked.
func checkAction(rec *kvtest.Records, log *kvtest.Log, h *simHermes, a simAction) string {
	entries := log.Entries(a.ID)
	var terms []kvstore.LogEntry
	for i, e := range entries {
		if e.Terminal {
			terms = append(terms, e)
		} else if i > 0 || !a.needsPark() {
			return fmt.Sprintf("%s: unexpected pending message at %d of %d", a.ID, i, len(entries))
		}
	}
	if len(terms) != 1 || !entries[len(entries)-1].Terminal {
		return fmt.Sprintf("%s: %d terminal results, want 1 and last (%d messages)", a.ID, len(terms), len(entries))
	}
	r, err := decodeResult(terms[0].Data)
	if err != nil {
		return err.Error()
	}
	_, execs := h.counts(a.ID)
	if a.Unsafe && execs > 1 {
		return fmt.Sprintf("%s: executed %d times", a.ID, execs)
	}
	switch {
	case r.ReplayOf != "":
		if a.Unsafe && execs != 0 {
			return fmt.Sprintf("%s: replay of %s but executed %d times", a.ID, r.ReplayOf, execs)
		}
	case r.Status == "completed":
		if execs < 1 {
			return fmt.Sprintf("%s: completed but never executed", a.ID)
		}
	case !r.uncertain():
		if a.Unsafe && execs != 0 {
			return fmt.Sprintf("%s: certain %s but executed %d times", a.ID, r, execs)
		}
	}
	first := firstDecision(rec, a.ID)
	if a.needsPark() && execs > 0 && first != kvstore.DecisionApprove {
		return fmt.Sprintf("%s: executed without approval (first decision %q)", a.ID, first)
	}
	if first != "" && first != kvstore.DecisionApprove {
		// Settled by the first decision, or cancelled by a cancel flag that came after it.
		want := decisionResult(first)
		if r.Error == nil || (r.Error.Code != want.Error.Code && !(r.Error.Code == "cancelled" && everFlagged(rec, a.ID))) {
			return fmt.Sprintf("%s: first decision %s, but settled %s", a.ID, first, r)
		}
	}
	if e, ok := rec.Peek(kvstore.ActionKey(a.ID)); ok && e.Record.State == kvstore.StateParked {
		return fmt.Sprintf("%s: record left parked after its result", a.ID)
	}
	return ""
}

// TestLedgerWaiterAfterSettle: a delivery waits on a running owner that dispatches,
// settles and stops. Settling a dispatched claim does not move its record, so the
// waiter sees it stand still for a lease; it then finds the result and gets Done,
// without taking the record of a settled action over.
func TestLedgerWaiterAfterSettle(t *testing.T) {
	f := newFixture(t, testLease)
	c := f.run(intent("a", "d1"))
	if err := c.Dispatch(f.ctx); err != nil {
		t.Fatal(err)
	}
	ch := f.beginAsync(f.ctx, intent("a", "d2"), nil)
	time.Sleep(testLease / 5)
	if _, err := c.Settle(f.ctx, completed("a"), false); err != nil {
		t.Fatal(err)
	}
	writes := f.rec.Revision()
	r := <-ch
	if r.err != nil || r.out.Verdict != kvstore.Done {
		t.Fatalf("waiter: %s, %v; want done", r.out.Verdict, r.err)
	}
	if f.rec.Revision() != writes {
		t.Fatalf("the waiter wrote %v", f.rec.WriteLog()[writes:])
	}
}

// TestLedgerDecisionOvertakesPark: the approver answers the pending message before
// Park has parked the record. The decision waits for the park and then decides it;
// when the owner stopped in between, it gives up after a lease with ErrNotParked (the
// bridge tries the decision again later) and never takes the record over itself.
func TestLedgerDecisionOvertakesPark(t *testing.T) {
	type parkKey struct{}
	decide := func(f *fixture, waiting chan<- struct{}) <-chan beginResult {
		ch := make(chan beginResult, 1)
		go func() {
			out, err := f.l.Decide(f.ctx, "a", "dec1", decided(kvstore.DecisionApprove, "alice"), func() { close(waiting) })
			ch <- beginResult{out, err, time.Now()}
		}()
		return ch
	}
	park := func(f *fixture, c *kvstore.Claim) error {
		ctx := context.WithValue(f.ctx, parkKey{}, true)
		return c.Park(ctx, json.RawMessage(`{}`), time.Now().Add(time.Minute), pendingMsg("a"))
	}
	t.Run("owner alive", func(t *testing.T) {
		f := newFixture(t, testLease)
		c := f.run(intent("a", "d1"))
		waiting, release := make(chan struct{}), make(chan struct{})
		var decided <-chan beginResult
		f.rec.OnCallContext(func(ctx context.Context, op kvtest.Op, key string) {
			// Hold Park's last write (the parked record) until the decision waits.
			if ctx.Value(parkKey{}) != nil && op == kvtest.OpUpdate && len(f.log.Entries("a")) == 1 {
				decided = decide(f, waiting)
				<-waiting
				close(release)
			}
		})
		if err := park(f, c); err != nil {
			t.Fatal(err)
		}
		<-release
		r := <-decided
		if r.err != nil || r.out.Verdict != kvstore.Run || r.out.Claim.Record().Decision != kvstore.DecisionApprove {
			t.Fatalf("Decide: %s, %v", r.out.Verdict, r.err)
		}
	})
	t.Run("owner stopped", func(t *testing.T) {
		f := newFixture(t, testLease)
		c := f.run(intent("a", "d1"))
		f.rec.OnCallContext(func(ctx context.Context, op kvtest.Op, key string) {
			if ctx.Value(parkKey{}) != nil && op == kvtest.OpUpdate && len(f.log.Entries("a")) == 1 {
				f.rec.FailNext(op, key, kvtest.ErrInjected) // the owner stops here
			}
		})
		wantErr(t, "Park", park(f, c), kvtest.ErrInjected)
		f.rec.OnCallContext(nil)
		// The decision watches the record for a lease, then gives up with ErrNotParked
		// (the bridge naks the decision and tries again) without taking it over.
		waiting := make(chan struct{})
		start := time.Now()
		r := <-decide(f, waiting)
		if !errors.Is(r.err, kvstore.ErrNotParked) || time.Since(start) < testLease {
			t.Fatalf("Decide on a record that did not park: %s, %v after %s; want ErrNotParked after a lease", r.out.Verdict, r.err, time.Since(start))
		}
		if got, _ := f.rec.Peek(kvstore.ActionKey("a")); got.Record.Owner != "d1" {
			t.Fatalf("the decision took the record over: owner %q", got.Record.Owner)
		}
		// The action's redelivery takes it over (the decision did not) and parks it.
		c2 := f.run(intent("a", "d2"))
		if err := park(f, c2); err != nil {
			t.Fatal(err)
		}
		r = <-decide(f, make(chan struct{})) // the decision, tried again
		if r.err != nil || r.out.Verdict != kvstore.Run || r.out.Claim.Record().Decision != kvstore.DecisionApprove {
			t.Fatalf("Decide: %s, %v", r.out.Verdict, r.err)
		}
		if n := len(f.log.Entries("a")); n != 1 {
			t.Fatalf("%d pending messages", n)
		}
	})
}

// decided is the choice of a decision that Decide applies whatever the parked record.
func decided(decision, approver string) func(kvstore.Record) kvstore.Decision {
	return func(kvstore.Record) kvstore.Decision { return kvstore.Decision{Decision: decision, Approver: approver} }
}

// always is a tombstone allowance for CancelStored.
func always(ok bool) func() bool { return func() bool { return ok } }

// TestLedgerSettlingTakeover: an unsafe claim that settles without dispatching (an
// invalid action, a conflict, a cancel) writes the fence first. A replica that stops
// between the fence and the append leaves the record settling; the delivery that takes
// it over runs the action's decision again but can never send it (Dispatch refuses
// with ErrFenced), so it never guesses outcome_unknown for a call that was never made.
// A safe claim writes no fence, and a replay neither.
func TestLedgerSettlingTakeover(t *testing.T) {
	f := newFixture(t, testLease)
	c1 := f.run(intent("a", "d1"))
	f.log.FailNext(kvtest.OpAppend, "a", kvtest.ErrInjected) // the replica stops before its append lands
	_, err := c1.Settle(f.ctx, msgOf("a", simResult{Status: "failed", Error: &simError{Code: "invalid_action"}}), false)
	wantErr(t, "Settle", err, kvtest.ErrInjected)
	if st := f.record("a").Record.State; st != kvstore.StateSettling {
		t.Fatalf("after the fence the record is %s, want settling", st)
	}
	c2 := f.run(intent("a", "d2")) // after a lease without a move
	if !c2.Fenced() || c2.Dispatched() {
		t.Fatalf("the taker's claim: fenced %v dispatched %v, want fenced and not dispatched", c2.Fenced(), c2.Dispatched())
	}
	wantErr(t, "Dispatch of the taker", c2.Dispatch(f.ctx), kvstore.ErrFenced)
	if _, err := c2.Settle(f.ctx, msgOf("a", simResult{Status: "failed", Error: &simError{Code: "invalid_action"}}), false); err != nil {
		t.Fatalf("the taker's Settle: %v", err)
	}
	if got := f.oneTerminal("a"); got.Error == nil || got.Error.Code != "invalid_action" {
		t.Fatalf("terminal result %+v, want the invalid_action it settled", got)
	}

	// No fence for a safe claim, nor for a replay: one write less each.
	safe := intent("s", "d1")
	safe.Safe = true
	cs := f.run(safe)
	before := f.rec.Writes(kvtest.OpUpdate, "act.")
	if _, err := cs.Settle(f.ctx, completed("s"), false); err != nil {
		t.Fatal(err)
	}
	cr := f.run(intent("r", "d1"))
	cr.Replays()
	if _, err := cr.Settle(f.ctx, completed("r"), false); err != nil {
		t.Fatal(err)
	}
	if n := f.rec.Writes(kvtest.OpUpdate, "act.") - before; n != 0 {
		t.Fatalf("%d record updates for a safe settle and a replay, want 0", n)
	}
}

// TestLedgerBeginWaitLimit: a Begin whose WaitLimit passes while a live owner renews
// gives up with context.DeadlineExceeded (its ctx still live) and writes nothing; a
// Begin that finds no record is not bounded by it at all.
func TestLedgerBeginWaitLimit(t *testing.T) {
	f := newFixture(t, testLease)
	c1 := f.run(intent("a", "d1"))
	in := intent("a", "d2")
	in.WaitLimit = testLease / 2
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(testLease / 5):
				_ = c1.Renew(f.ctx)
			}
		}
	}()
	start := time.Now()
	out, err := f.l.Begin(f.ctx, in, nil)
	close(stop)
	<-renewed
	if !errors.Is(err, context.DeadlineExceeded) || f.ctx.Err() != nil {
		t.Fatalf("Begin past its WaitLimit = %s, %v; want context.DeadlineExceeded", out.Verdict, err)
	}
	if d := time.Since(start); d < in.WaitLimit || d > in.WaitLimit+testLease {
		t.Fatalf("Begin gave up after %s, want about its WaitLimit %s", d, in.WaitLimit)
	}
	if got := c1.Record(); got.Owner != "d1" {
		t.Fatalf("the owner's record changed: %+v", got)
	}
	// No record: the limit does not apply (a tiny one would otherwise fail at once).
	in2 := intent("b", "d3")
	in2.WaitLimit = time.Nanosecond
	if c := f.run(in2); c.Record().Owner != "d3" {
		t.Fatalf("fresh claim: %+v", c.Record())
	}
}
