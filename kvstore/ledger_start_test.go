package kvstore_test

// Scripted tests of Ledger.Start, the one-write claim and mark of an unsafe action that
// runs at once: what it writes, when it gives the action back to the ordinary path
// (ErrNotFresh), and what a crash, a lost reply, a zombie or a race between its two
// Creates leaves.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/kvstore/kvtest"
)

// start runs Start and wants a claim.
func (f *fixture) start(in kvstore.Intent) *kvstore.Claim {
	f.t.Helper()
	c, err := f.l.Start(f.ctx, in)
	if err != nil {
		f.t.Fatalf("Start(%s, %s): %v", in.ActionID, in.Owner, err)
	}
	return c
}

// TestLedgerStartWrites: Start writes the key record (keyed) and the action record,
// created dispatched; with the result that makes three durable writes for a keyed
// action and two for an unkeyed one, and no Update. The claim holds the key (Renew
// rewrites it) and settles without a fence.
func TestLedgerStartWrites(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprint("keyed ", keyed), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testLease)
			in := intent("a", "d1")
			if keyed {
				in = keyedIntent("a", "d1", "k", inputA)
			}
			c := f.start(in)
			if !c.Dispatched() || f.record("a").Record.State != kvstore.StateDispatched || f.record("a").Record.Owner != "d1" {
				t.Fatalf("after Start: claim dispatched %v, record %+v", c.Dispatched(), f.record("a").Record)
			}
			want := 1
			if keyed {
				want = 2
				e, ok := f.rec.Peek(in.IdemKey)
				if !ok || e.Record.ActionID != "a" || e.Record.InputSHA256 != inputA {
					t.Fatalf("key record: %+v (live %v)", e.Record, ok)
				}
				if err := c.Renew(f.ctx); err != nil {
					t.Fatal(err)
				}
				if e2, _ := f.rec.Peek(in.IdemKey); e2.Revision == e.Revision {
					t.Fatal("Renew did not rewrite the key record Start claimed")
				}
				want += 2 // the two renewals
			}
			if _, err := c.Settle(f.ctx, completed("a"), false); err != nil {
				t.Fatal(err)
			}
			if n := f.rec.Writes(kvtest.OpCreate, ""); n != (map[bool]int{false: 1, true: 2})[keyed] {
				t.Fatalf("%d Creates: %v", n, f.rec.WriteLog())
			}
			if n := len(f.rec.WriteLog()); n != want {
				t.Fatalf("%d record writes, want %d: %v", n, want, f.rec.WriteLog())
			}
			if n := len(f.log.Entries("a")); n != 1 {
				t.Fatalf("%d log entries", n)
			}
			f.oneTerminal("a")
			if out := f.begin(in); out.Verdict != kvstore.Done {
				t.Fatalf("redelivery after the settle: %s, want done", out.Verdict)
			}
		})
	}
}

// TestLedgerStartNotFresh: Start writes no action record where one exists (another
// delivery's claim, a cancel that came first) or where another action holds the key,
// and says so with ErrNotFresh; the ordinary path then does what it always did.
func TestLedgerStartNotFresh(t *testing.T) {
	t.Run("claimed by another delivery", func(t *testing.T) {
		f := newFixture(t, testLease)
		c1 := f.run(keyedIntent("a", "d1", "k", inputA))
		_, err := f.l.Start(f.ctx, keyedIntent("a", "d2", "k", inputA))
		wantErr(t, "Start over a claimed record", err, kvstore.ErrNotFresh)
		if r := f.record("a").Record; r.Owner != "d1" || r.State != kvstore.StateClaimed || c1.Lost() {
			t.Fatalf("record after Start: %+v", r)
		}
		// The key Start claimed names the action: the owner's ClaimKey holds it.
		if ko := f.claimKey(c1, nil); ko.Verdict != kvstore.KeyHeld {
			t.Fatalf("the owner's ClaimKey: %v", ko.Verdict)
		}
	})
	t.Run("released by a delivery", func(t *testing.T) {
		f := newFixture(t, testLease)
		c1 := f.run(intent("a", "d1"))
		if err := c1.Release(f.ctx, true); err != nil {
			t.Fatal(err)
		}
		_, err := f.l.Start(f.ctx, intent("a", "d2"))
		wantErr(t, "Start over a released record", err, kvstore.ErrNotFresh)
		c2 := f.run(intent("a", "d2"))
		if c2.Record().Attempt != 2 {
			t.Fatalf("the ordinary path's claim: %+v", c2.Record())
		}
	})
	t.Run("cancelled before it came", func(t *testing.T) {
		f := newFixture(t, testLease)
		state, _, err := f.l.CancelStored(f.ctx, "a", "c1", []byte(`{"status":"cancelled"}`), always(true))
		if err != nil || state != kvstore.CancelUnknown {
			t.Fatalf("CancelStored: %s, %v", state, err)
		}
		_, err = f.l.Start(f.ctx, keyedIntent("a", "d1", "k", inputA))
		wantErr(t, "Start after a cancel", err, kvstore.ErrNotFresh)
		if out := f.begin(keyedIntent("a", "d1", "k", inputA)); out.Verdict != kvstore.Stored {
			t.Fatalf("Begin after Start: %s, want stored", out.Verdict)
		}
	})
	t.Run("key held by another action", func(t *testing.T) {
		for _, input := range []string{inputA, inputB} {
			f := newFixture(t, testLease)
			holder := f.start(keyedIntent("b", "e1", "k", inputA))
			ikey := kvstore.IdempotencyKey(capUnsafe, "k")
			before, _ := f.rec.Peek(ikey)
			_, err := f.l.Start(f.ctx, keyedIntent("a", "d1", "k", input))
			wantErr(t, "Start with the key held", err, kvstore.ErrNotFresh)
			if _, ok := f.rec.Peek(kvstore.ActionKey("a")); ok {
				t.Fatal("Start wrote an action record although another action holds its key")
			}
			if after, _ := f.rec.Peek(ikey); after.Revision != before.Revision {
				t.Fatal("Start changed the holder's key record")
			}
			var nf *kvstore.NotFreshError
			if !errors.As(err, &nf) || nf.Holder.Record.ActionID != "b" || nf.Holder.Revision != before.Revision {
				t.Fatalf("ErrNotFresh names %+v, want the holder's key record", nf)
			}
			// The ordinary path: a replay of the holder's result, or a conflict, decided on
			// the record Start read, with no second write or read of the key.
			c := f.run(keyedIntent("a", "d1", "k", input))
			if _, err := holder.Settle(f.ctx, completed("b"), false); err != nil {
				t.Fatal(err)
			}
			creates, gets := f.rec.Writes(kvtest.OpCreate, "idem."), f.rec.Calls(kvtest.OpGet)
			want := map[string]kvstore.KeyVerdict{inputA: kvstore.KeyReplay, inputB: kvstore.KeyConflict}[input]
			ko, err := c.ClaimKeyAfter(f.ctx, &nf.Holder, nil)
			if err != nil || ko.Verdict != want || ko.Original != "b" {
				t.Fatalf("ClaimKeyAfter: %v of %s (%v), want %v of b", ko.Verdict, ko.Original, err, want)
			}
			if f.rec.Writes(kvtest.OpCreate, "idem.") != creates || f.rec.Calls(kvtest.OpGet) != gets {
				t.Fatal("ClaimKeyAfter wrote or read the key again")
			}
		}
	})
	t.Run("key freed after Start read it", func(t *testing.T) {
		// The holder's result frees the key (retryable and certain) after Start read it:
		// ClaimKeyAfter finds that result, its Delete on the old revision finds the key
		// gone, and it claims the key afresh.
		f := newFixture(t, testLease)
		holder := f.start(keyedIntent("b", "e1", "k", inputA))
		_, err := f.l.Start(f.ctx, keyedIntent("a", "d1", "k", inputA))
		var nf *kvstore.NotFreshError
		if !errors.As(err, &nf) {
			t.Fatalf("Start with the key held: %v", err)
		}
		if _, err := holder.Settle(f.ctx, msgOf("b", failed("remote_unavailable", true, false)), true); err != nil {
			t.Fatal(err)
		}
		c := f.run(keyedIntent("a", "d1", "k", inputA))
		ko, err := c.ClaimKeyAfter(f.ctx, &nf.Holder, nil)
		if err != nil || ko.Verdict != kvstore.KeyHeld {
			t.Fatalf("ClaimKeyAfter over a freed key: %v, %v; want held", ko.Verdict, err)
		}
		if e, ok := f.rec.Peek(kvstore.IdempotencyKey(capUnsafe, "k")); !ok || e.Record.ActionID != "a" {
			t.Fatalf("key record %+v (live %v), want a's", e.Record, ok)
		}
	})
}

// TestLedgerStartCrashBetweenCreates: a delivery stops after its key's Create and
// before the action record's. The key names the action, which has no record: a
// duplicate (another action, same key and input) waits for the holder's result; the
// action's redelivery finds the key its own and starts; the duplicate replays that
// result. One send in all.
func TestLedgerStartCrashBetweenCreates(t *testing.T) {
	f := newFixture(t, testLease)
	boom := errors.New("the delivery stopped")
	f.rec.FailNext(kvtest.OpCreate, "act.a", boom)
	_, err := f.l.Start(f.ctx, keyedIntent("a", "d1", "k", inputA))
	wantErr(t, "Start stopped between its Creates", err, boom)
	if _, ok := f.rec.Peek(kvstore.ActionKey("a")); ok {
		t.Fatal("an action record was written")
	}
	dup := f.run(keyedIntent("b", "e1", "k", inputA))
	var waits atomic.Int32
	type keyResult struct {
		ko  kvstore.KeyOutcome
		err error
	}
	ch := make(chan keyResult, 1)
	go func() {
		ko, err := dup.ClaimKey(f.ctx, func() { waits.Add(1) })
		ch <- keyResult{ko, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for waits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the duplicate never waited for the key's holder")
		}
		time.Sleep(time.Millisecond)
	}
	c := f.start(keyedIntent("a", "d2", "k", inputA))
	if _, err := c.Settle(f.ctx, completed("a"), false); err != nil {
		t.Fatal(err)
	}
	kr := <-ch
	if kr.err != nil || kr.ko.Verdict != kvstore.KeyReplay || kr.ko.Original != "a" {
		t.Fatalf("the duplicate's ClaimKey: %v of %s, %v", kr.ko.Verdict, kr.ko.Original, kr.err)
	}
	if n := f.rec.Writes(kvtest.OpCreate, "idem."); n != 1 {
		t.Fatalf("%d key Creates, want 1", n)
	}
	f.oneTerminal("a")
}

// TestLedgerStartLostCreateReply: the action record's Create lands dispatched but its
// reply is lost. Nothing was sent, but nobody can know that: the next delivery gets
// ErrNotFresh from Start and Uncertain from Begin once the record has stood still for
// a lease, never Run.
func TestLedgerStartLostCreateReply(t *testing.T) {
	f := newFixture(t, testLease)
	f.rec.LoseAck(kvtest.OpCreate, "act.a")
	_, err := f.l.Start(f.ctx, keyedIntent("a", "d1", "k", inputA))
	wantErr(t, "Start with a lost reply", err, kvtest.ErrLostAck)
	if r := f.record("a").Record; r.State != kvstore.StateDispatched || r.Owner != "d1" {
		t.Fatalf("record: %+v", r)
	}
	_, err = f.l.Start(f.ctx, keyedIntent("a", "d2", "k", inputA))
	wantErr(t, "the redelivery's Start", err, kvstore.ErrNotFresh)
	begun := time.Now()
	out := f.begin(keyedIntent("a", "d2", "k", inputA))
	if out.Verdict != kvstore.Uncertain {
		t.Fatalf("Begin after a lost Create reply: %s, want uncertain", out.Verdict)
	}
	if d := time.Since(begun); d < testLease {
		t.Fatalf("took the record over in %s, under a lease", d)
	}
}

// TestLedgerStartZombie: a delivery paused between its two Creates (the key is its
// action's) wakes after the action's redelivery started, sent and settled: its
// Create fails, Start returns ErrNotFresh, and Begin finds the result. A delivery
// paused after Start (dispatched) and taken over gets its result in only if it comes
// first; the taker never sends.
func TestLedgerStartZombie(t *testing.T) {
	t.Run("paused between the creates", func(t *testing.T) {
		f := newFixture(t, testLease)
		var paused sync.Once
		resume, arrived := make(chan struct{}), make(chan struct{})
		f.rec.OnCallContext(func(ctx context.Context, op kvtest.Op, key string) {
			if op == kvtest.OpCreate && key == "act.a" && ctx.Value(zombieKey{}) != nil {
				paused.Do(func() {
					close(arrived)
					<-resume
				})
			}
		})
		type startResult struct {
			c   *kvstore.Claim
			err error
		}
		ch := make(chan startResult, 1)
		go func() {
			c, err := f.l.Start(context.WithValue(f.ctx, zombieKey{}, true), keyedIntent("a", "d1", "k", inputA))
			ch <- startResult{c, err}
		}()
		<-arrived
		c := f.start(keyedIntent("a", "d2", "k", inputA))
		if _, err := c.Settle(f.ctx, completed("a"), false); err != nil {
			t.Fatal(err)
		}
		close(resume)
		z := <-ch
		wantErr(t, "the zombie's Start", z.err, kvstore.ErrNotFresh)
		if out := f.begin(keyedIntent("a", "d1", "k", inputA)); out.Verdict != kvstore.Done {
			t.Fatalf("the zombie's Begin: %s, want done", out.Verdict)
		}
		if n := f.rec.Writes(kvtest.OpCreate, "act."); n != 1 {
			t.Fatalf("%d action record Creates, want 1", n)
		}
		f.oneTerminal("a")
	})
	t.Run("paused after the start", func(t *testing.T) {
		f := newFixture(t, testLease)
		z := f.start(keyedIntent("a", "d1", "k", inputA))
		out := f.begin(keyedIntent("a", "d2", "k", inputA))
		if out.Verdict != kvstore.Uncertain {
			t.Fatalf("takeover of a started action: %s, want uncertain", out.Verdict)
		}
		unknown := msgOf("a", failed("outcome_unknown", false, true))
		if _, err := out.Claim.Settle(f.ctx, unknown, false); err != nil {
			t.Fatal(err)
		}
		le, err := z.Settle(f.ctx, completed("a"), false)
		wantErr(t, "the zombie's Settle", err, kvstore.ErrSettled)
		if string(le.Data) != string(unknown.Data) {
			t.Fatalf("the zombie got %s", le.Data)
		}
		if r := f.oneTerminal("a"); r.Error == nil || r.Error.Code != "outcome_unknown" {
			t.Fatalf("result %s", r)
		}
	})
}

type zombieKey struct{}

// TestLedgerStartRace: deliveries of one action, and actions sharing one key, Start
// together: exactly one of them gets a claim; the others get ErrNotFresh, and no
// action record but the winner's is written.
func TestLedgerStartRace(t *testing.T) {
	for _, sameAction := range []bool{true, false} {
		t.Run(fmt.Sprint("same action ", sameAction), func(t *testing.T) {
			t.Parallel()
			for round := range 50 {
				f := newFixture(t, testLease)
				const n = 8
				var wg sync.WaitGroup
				var won atomic.Int32
				errs := make(chan error, n)
				for i := range n {
					id := "a"
					if !sameAction {
						id = fmt.Sprintf("a%d", i)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, err := f.l.Start(f.ctx, keyedIntent(id, fmt.Sprintf("d%d", i), "k", inputA))
						if err == nil {
							won.Add(1)
						} else {
							errs <- err
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					wantErr(t, "a losing Start", err, kvstore.ErrNotFresh)
				}
				if won.Load() != 1 || f.rec.Writes(kvtest.OpCreate, "act.") != 1 {
					t.Fatalf("round %d: %d Starts won, %d action records created", round, won.Load(), f.rec.Writes(kvtest.OpCreate, "act."))
				}
			}
		})
	}
}
