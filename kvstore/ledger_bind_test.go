package kvstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/kvstore/kvtest"
)

// Scripted tests of Bind, the transition that stores a durable run's id in a dispatched
// action record, so that a delivery that takes the record over follows the run instead
// of settling outcome_unknown.

// TestLedgerBindThenTakeover: the owner dispatches, binds the run id and dies; the
// delivery that takes the record over gets Uncertain with the run id in its claim's
// record, and settles with the run's real result; the log holds one terminal result.
func TestLedgerBindThenTakeover(t *testing.T) {
	f := newFixture(t, testLease)
	z := f.run(intent("a", "d1"))
	if err := z.Dispatch(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := z.Bind(f.ctx, "run_0123"); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	if got := z.Record().RunID; got != "run_0123" {
		t.Fatalf("the claim's record has run id %q after Bind", got)
	}
	if e := f.record("a"); e.Record.RunID != "run_0123" || e.Record.State != kvstore.StateDispatched {
		t.Fatalf("stored record after Bind: %+v", e.Record)
	}
	out := f.begin(intent("a", "d2")) // d1 is gone: its revision stops moving
	if out.Verdict != kvstore.Uncertain || !out.Claim.Dispatched() {
		t.Fatalf("takeover of a bound record: %s, dispatched %v", out.Verdict, out.Claim.Dispatched())
	}
	if got := out.Claim.Record().RunID; got != "run_0123" {
		t.Fatalf("the taker's record has run id %q, want run_0123", got)
	}
	if _, err := out.Claim.Settle(f.ctx, completed("a"), false); err != nil {
		t.Fatalf("the taker's Settle: %v", err)
	}
	wantErr(t, "the zombie's Renew after the takeover", z.Renew(f.ctx), kvstore.ErrLostClaim)
	f.oneTerminal("a")
}

// TestLedgerCrashBeforeBind: dispatched without a run id (the owner died between the
// request and storing its answer): the taker's record has no run id; that is the one
// uncertain window.
func TestLedgerCrashBeforeBind(t *testing.T) {
	f := newFixture(t, testLease)
	z := f.run(intent("a", "d1"))
	if err := z.Dispatch(f.ctx); err != nil {
		t.Fatal(err)
	}
	out := f.begin(intent("a", "d2"))
	if out.Verdict != kvstore.Uncertain || out.Claim.Record().RunID != "" {
		t.Fatalf("takeover before Bind: %s, run id %q", out.Verdict, out.Claim.Record().RunID)
	}
	wantErr(t, "the zombie's Bind", z.Bind(f.ctx, "run_0123"), kvstore.ErrLostClaim)
	if e := f.record("a"); e.Record.RunID != "" {
		t.Fatalf("a lost claim's Bind wrote the record: %+v", e.Record)
	}
}

// TestLedgerBindRefusals: Bind needs a dispatched claim and a run id, and cannot
// change a bound id.
func TestLedgerBindRefusals(t *testing.T) {
	f := newFixture(t, testLease)
	c := f.run(intent("a", "d1"))
	wantErr(t, "Bind before Dispatch", c.Bind(f.ctx, "run_1"), kvstore.ErrNotDispatched)
	if err := c.Dispatch(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Bind(f.ctx, ""); err == nil {
		t.Fatal("Bind with an empty run id succeeded")
	}
	if err := c.Bind(f.ctx, "run_1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Bind(f.ctx, "run_1"); err != nil {
		t.Fatalf("Bind of the bound id again: %v", err)
	}
	if err := c.Bind(f.ctx, "run_2"); err == nil {
		t.Fatal("Bind replaced a bound run id")
	}
	if e := f.record("a"); e.Record.RunID != "run_1" {
		t.Fatalf("record run id %q, want run_1", e.Record.RunID)
	}
}

// TestLedgerCancelFlagRacesBind: a cancel flag lands just before Bind's write. The run
// has started, so its id must be stored all the same: Bind adopts the flagged record,
// binds, and the claim's record shows both the run id and the cancel flag (the owner
// then stops the run).
func TestLedgerCancelFlagRacesBind(t *testing.T) {
	for _, flagFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("flag first ", flagFirst), func(t *testing.T) {
			f := newFixture(t, testLease)
			c := f.run(intent("a", "d1"))
			if err := c.Dispatch(f.ctx); err != nil {
				t.Fatal(err)
			}
			var fired atomic.Bool
			f.rec.OnCall(func(op kvtest.Op, key string) {
				if flagFirst && op == kvtest.OpUpdate && key == "act.a" && fired.CompareAndSwap(false, true) {
					if st, _, err := f.l.CancelStored(f.ctx, "a", "canceller", nil, always(false)); err != nil || st != kvstore.CancelCancelled {
						t.Errorf("CancelStored: %s, %v", st, err)
					}
				}
			})
			if err := c.Bind(f.ctx, "run_9"); err != nil {
				t.Fatalf("Bind: %v", err)
			}
			f.rec.OnCall(nil)
			e := f.record("a")
			if e.Record.RunID != "run_9" || e.Record.Cancel != flagFirst || c.Record().Cancel != flagFirst || c.Lost() {
				t.Fatalf("record %+v, claim's cancel %v, lost %v", e.Record, c.Record().Cancel, c.Lost())
			}
		})
	}
}

// TestLedgerRunApproval: the owner of a bound run asks approval k (its pending message,
// then the record); a decision answers it once (a second answer, or a redelivered one,
// finds it answered and says by whom); the owner's expiry cannot answer it again; the
// terminal result follows the pending message in the log.
func TestLedgerRunApproval(t *testing.T) {
	f := newFixture(t, testLease)
	c := f.run(intent("a", "d1"))
	if err := c.Dispatch(f.ctx); err != nil {
		t.Fatal(err)
	}
	_, err := f.l.AnswerApproval(f.ctx, "a", 1, "dec-0")
	wantErr(t, "an answer before the run is bound", err, kvstore.ErrNotPending)
	if err := c.Bind(f.ctx, "run_1"); err != nil {
		t.Fatal(err)
	}
	_, err = f.l.AnswerApproval(f.ctx, "a", 1, "dec-0")
	wantErr(t, "an answer before the approval is asked", err, kvstore.ErrNotPending)
	exp := time.Now().Add(time.Minute)
	if err := c.AskApproval(f.ctx, 1, "sha-1", exp, pendingMsg("a")); err != nil {
		t.Fatalf("AskApproval: %v", err)
	}
	r := c.Record()
	if r.ApprovalSeq != 1 || r.ApprovalSHA256 != "sha-1" || r.PendingSeq == 0 || !r.ExpiresAt.Equal(exp) {
		t.Fatalf("record after AskApproval: %+v", r)
	}
	rec, err := f.l.AnswerApproval(f.ctx, "a", 1, "dec-1")
	if err != nil || rec.RunID != "run_1" || rec.ApprovalAnswered != 1 {
		t.Fatalf("AnswerApproval: %+v, %v", rec, err)
	}
	rec, err = f.l.AnswerApproval(f.ctx, "a", 1, "dec-1")
	wantErr(t, "the same decision again", err, kvstore.ErrAnswered)
	if rec.ApprovalDecision != "dec-1" {
		t.Fatalf("the answered record names decision %q", rec.ApprovalDecision)
	}
	_, err = f.l.AnswerApproval(f.ctx, "a", 1, "dec-2")
	wantErr(t, "another decision", err, kvstore.ErrAnswered)
	won, err := c.ExpireApproval(f.ctx, 1)
	if err != nil || won {
		t.Fatalf("ExpireApproval of an answered approval: won %v, %v", won, err)
	}
	// The owner's heartbeat keeps the answer (it adopts the record it finds).
	if err := c.Renew(f.ctx); err != nil {
		t.Fatal(err)
	}
	if e := f.record("a"); e.Record.ApprovalAnswered != 1 || e.Record.ApprovalDecision != "dec-1" {
		t.Fatalf("record after Renew: %+v", e.Record)
	}
	// Approval 2 expires: the owner answers it; a late decision finds it answered.
	second := nats.NewMsg("")
	second.Header.Set(jetstream.MsgIDHeader, "a:pending:2")
	second.Data = []byte(`{"status":"pending_approval","n":2}`)
	if err := c.AskApproval(f.ctx, 2, "sha-2", exp, second); err != nil {
		t.Fatal(err)
	}
	won, err = c.ExpireApproval(f.ctx, 2)
	if err != nil || !won {
		t.Fatalf("ExpireApproval: won %v, %v", won, err)
	}
	_, err = f.l.AnswerApproval(f.ctx, "a", 2, "dec-3")
	wantErr(t, "a decision after the expiry", err, kvstore.ErrAnswered)
	if _, err := c.Settle(f.ctx, completed("a"), false); err != nil {
		t.Fatalf("Settle after two pending messages: %v", err)
	}
	if es := f.log.Entries("a"); len(es) != 3 || !es[2].Terminal {
		t.Fatalf("log of a: %v", es)
	}
}
