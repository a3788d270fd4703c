package kvtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/kvstore/kvtest"
)

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func rec(id, owner string) kvstore.Record {
	return kvstore.Record{State: kvstore.StateClaimed, ActionID: id, Owner: owner, Attempt: 1}
}

// class names an error by the sentinel it matches, so that two implementations' errors
// compare.
func class(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, kvstore.ErrExists):
		return "exists"
	case errors.Is(err, kvstore.ErrConflict):
		return "conflict"
	case errors.Is(err, kvstore.ErrNotFound):
		return "notfound"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, context.Canceled):
		return "canceled"
	default:
		return "error: " + err.Error()
	}
}

// recordScript runs the same calls on rs and returns one line per call: revisions,
// owners and error classes. Revisions are compared as numbers: both stores start at an
// empty bucket, and the deleted key's marker revision is never passed back in (a
// caller of Store never learns it).
func recordScript(ctx context.Context, rs kvstore.Records, keys func(context.Context, string) ([]string, error)) []string {
	var out []string
	say := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	create := func(key, owner string) {
		rev, err := rs.Create(ctx, key, rec(key, owner))
		say("create %s %s: %d %s", key, owner, rev, class(err))
	}
	get := func(key string) {
		e, err := rs.Get(ctx, key)
		say("get %s: %d %s %s %s", key, e.Revision, e.Record.Owner, e.Record.State, class(err))
	}
	update := func(key, owner string, rev uint64) {
		r := rec(key, owner)
		r.State = kvstore.StateDispatched
		n, err := rs.Update(ctx, key, r, rev)
		say("update %s %s @%d: %d %s", key, owner, rev, n, class(err))
	}
	del := func(key string, rev uint64) {
		say("delete %s @%d: %s", key, rev, class(rs.Delete(ctx, key, rev)))
	}
	wait := func(key string, after uint64) {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		e, err := rs.Wait(wctx, key, after)
		say("wait %s >%d: %d %s %s", key, after, e.Revision, e.Record.Owner, class(err))
	}
	create("act.a", "r1") // 1
	create("act.a", "r2") // exists
	get("act.a")          // 1 r1
	update("act.a", "r2", 0)
	update("act.a", "r2", 1) // 2
	update("act.a", "r3", 1) // conflict
	create("idem.k", "r1")   // 3
	del("act.a", 1)          // conflict
	del("act.a", 2)          // ok, marker 4
	get("act.a")             // notfound
	update("act.a", "r3", 2) // conflict: deleted
	del("act.a", 2)          // conflict
	del("act.a", 0)          // conflict
	wait("act.a", 0)         // notfound: deleted
	create("act.a", "r4")    // 5 over the deleted key
	get("act.a")
	wait("act.a", 4)    // 5 at once
	wait("act.a", 5)    // deadline
	wait("act.none", 0) // notfound
	get("act.none")     // notfound
	update("act.none", "r1", 1)
	del("act.none", 1)
	create("park.a", "r1") // 6
	create("park.b", "r1") // 7
	del("park.b", 7)       // 8
	ks, err := keys(ctx, "park.>")
	say("keys park.>: %v %s", ks, class(err))
	ks, err = keys(ctx, "*.a")
	say("keys *.a: %v %s", ks, class(err))
	return out
}

func newStore(t *testing.T) (*kvstore.Store, jetstream.JetStream) {
	t.Helper()
	_, js := natsembed.Connect(t, natsembed.RunTest(t))
	s, err := kvstore.Open(testCtx(t), js, kvstore.Config{Provision: true, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

// TestRecordsConformance: the same calls give the same revisions, values and errors on
// kvtest.Records and on kvstore.Store over a JetStream bucket.
func TestRecordsConformance(t *testing.T) {
	ctx := testCtx(t)
	s, _ := newStore(t)
	want := recordScript(ctx, s, s.Keys)
	m := kvtest.NewRecords()
	got := recordScript(ctx, m, m.Keys)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("kvtest.Records differs from kvstore.Store:\n%s", diff(want, got))
	}
}

func diff(want, got []string) string {
	var b strings.Builder
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		mark := "  "
		if w != g {
			mark = "! "
		}
		fmt.Fprintf(&b, "%sstore:  %s\n%smemory: %s\n", mark, w, mark, g)
	}
	return b.String()
}

func TestRecordsWait(t *testing.T) {
	ctx := testCtx(t)
	s := kvtest.NewRecords()
	rev, _ := s.Create(ctx, "act.w", rec("w", "r1"))

	type res struct {
		e   kvstore.Entry
		err error
	}
	wait := func(after uint64) chan res {
		ch := make(chan res, 1)
		go func() {
			e, err := s.Wait(ctx, "act.w", after)
			ch <- res{e, err}
		}()
		return ch
	}
	ch := wait(rev)
	select {
	case r := <-ch:
		t.Fatalf("Wait returned before a write: %+v", r)
	case <-time.After(30 * time.Millisecond):
	}
	// A write to another key does not wake it.
	_, _ = s.Create(ctx, "act.other", rec("other", "r1"))
	select {
	case r := <-ch:
		t.Fatalf("Wait returned on another key's write: %+v", r)
	case <-time.After(30 * time.Millisecond):
	}
	rev2, _ := s.Update(ctx, "act.w", rec("w", "r2"), rev)
	if r := <-ch; r.err != nil || r.e.Revision != rev2 || r.e.Record.Owner != "r2" {
		t.Fatalf("Wait = %+v, want r2 at %d", r, rev2)
	}
	ch = wait(rev2)
	time.Sleep(10 * time.Millisecond)
	_ = s.Delete(ctx, "act.w", rev2)
	if r := <-ch; !errors.Is(r.err, kvstore.ErrNotFound) {
		t.Fatalf("Wait across a delete = %+v, want ErrNotFound", r)
	}
	cctx, cancel := context.WithCancel(ctx)
	rev3, _ := s.Create(ctx, "act.w", rec("w", "r3"))
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	if _, err := s.Wait(cctx, "act.w", rev3); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v", err)
	}
}

func TestRecordsConcurrentCreate(t *testing.T) {
	ctx := testCtx(t)
	s := kvtest.NewRecords()
	var wins, exists atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			_, err := s.Create(ctx, "act.x", rec("x", fmt.Sprint("r", i)))
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, kvstore.ErrExists):
				exists.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || exists.Load() != 19 {
		t.Fatalf("wins %d, exists %d", wins.Load(), exists.Load())
	}
	if n := s.Writes(kvtest.OpCreate, "act."); n != 1 {
		t.Fatalf("Writes(create, act.) = %d", n)
	}
}

func TestRecordsFaults(t *testing.T) {
	ctx := testCtx(t)
	s := kvtest.NewRecords()

	s.FailNext(kvtest.OpCreate, "act.f", kvtest.ErrInjected)
	if _, err := s.Create(ctx, "act.f", rec("f", "r1")); !errors.Is(err, kvtest.ErrInjected) {
		t.Fatalf("FailNext Create = %v", err)
	}
	if _, ok := s.Peek("act.f"); ok || s.Revision() != 0 {
		t.Fatal("a failed Create wrote")
	}

	s.LoseAck(kvtest.OpCreate, "")
	_, err := s.Create(ctx, "act.f", rec("f", "r1"))
	if !errors.Is(err, kvtest.ErrLostAck) || errors.Is(err, kvstore.ErrExists) {
		t.Fatalf("LoseAck Create = %v", err)
	}
	e, ok := s.Peek("act.f")
	if !ok || e.Record.Owner != "r1" || e.Revision != 1 {
		t.Fatalf("lost-ack Create not applied: %+v", e)
	}

	s.LoseAck(kvtest.OpUpdate, "act.f")
	if _, err := s.Update(ctx, "act.f", rec("f", "r2"), 1); !errors.Is(err, kvtest.ErrLostAck) {
		t.Fatalf("LoseAck Update = %v", err)
	}
	if e, _ := s.Peek("act.f"); e.Revision != 2 || e.Record.Owner != "r2" {
		t.Fatalf("lost-ack Update not applied: %+v", e)
	}

	// Stale reads: an older value, then none; the next Get is fresh again.
	old := s.History("act.f")[0].Entry
	s.StaleGet("act.f", old)
	s.StaleGet("act.f", kvstore.Entry{})
	if e, err := s.Get(ctx, "act.f"); err != nil || e.Revision != 1 || e.Record.Owner != "r1" {
		t.Fatalf("StaleGet old = %+v, %v", e, err)
	}
	if _, err := s.Get(ctx, "act.f"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("StaleGet none = %v", err)
	}
	if e, err := s.Get(ctx, "act.f"); err != nil || e.Revision != 2 {
		t.Fatalf("Get after stale reads = %+v, %v", e, err)
	}

	// Faults are per op and key and taken in order.
	s.FailNext(kvtest.OpDelete, "act.other", kvtest.ErrInjected)
	if err := s.Delete(ctx, "act.f", 2); err != nil {
		t.Fatalf("Delete of another key took the fault: %v", err)
	}
	if s.PendingFaults() != 1 {
		t.Fatalf("PendingFaults = %d", s.PendingFaults())
	}

	// The hook runs before the fault is taken: it can script one for its own call.
	var seen []string
	s.OnCall(func(op kvtest.Op, key string) {
		seen = append(seen, string(op)+" "+key)
		if op == kvtest.OpGet && key == "act.hooked" {
			s.StaleGet(key, kvstore.Entry{})
		}
	})
	_, _ = s.Create(ctx, "act.hooked", rec("hooked", "r1"))
	if _, err := s.Get(ctx, "act.hooked"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("fault scripted by the hook not taken: %v", err)
	}
	s.OnCall(nil)
	if strings.Join(seen, ",") != "create act.hooked,get act.hooked" {
		t.Fatalf("hook saw %v", seen)
	}
	if s.Writes("", "") != 4 || s.Writes(kvtest.OpDelete, "act.") != 1 || s.Writes(kvtest.OpUpdate, "idem.") != 0 {
		t.Fatalf("writes: %v", s.WriteLog())
	}
}

func TestRecordsCopies(t *testing.T) {
	ctx := testCtx(t)
	s := kvtest.NewRecords()
	r := rec("c", "r1")
	r.Result = json.RawMessage(`{"a":1}`)
	_, _ = s.Create(ctx, "act.c", r)
	r.Result[2] = 'X'
	e, _ := s.Get(ctx, "act.c")
	if string(e.Record.Result) != `{"a":1}` {
		t.Fatalf("the store shares the caller's slice: %s", e.Record.Result)
	}
	e.Record.Result[2] = 'Y'
	if e2, _ := s.Get(ctx, "act.c"); string(e2.Record.Result) != `{"a":1}` {
		t.Fatalf("the store shares the returned slice: %s", e2.Record.Result)
	}
}

// logScript runs the same calls on l and returns one line per call.
func logScript(ctx context.Context, l kvstore.ResultLog, id, subject string) []string {
	var out []string
	say := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	last := func() {
		e, err := l.Last(ctx, id)
		say("last: %d %v %s %s", e.Seq, e.Terminal, e.Data, class(err))
	}
	appendMsg := func(pending bool, data string, expect uint64) uint64 {
		m := kvtest.ResultMsg(id, []byte(data))
		if pending {
			m = kvtest.PendingMsg(id, []byte(data))
		}
		m.Subject = subject
		seq, err := l.Append(ctx, id, m, expect)
		say("append %s @%d: %d %s", data, expect, seq, class(err))
		return seq
	}
	last()
	p := appendMsg(true, "pending", 0)
	appendMsg(true, "pending-again", 0)
	last()
	appendMsg(false, "early", 0)
	r := appendMsg(false, "result", p)
	appendMsg(false, "second", p)
	last()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := l.WaitTerminal(wctx, id)
	say("wait terminal: %v %s %s", e.Seq == r, e.Data, class(err))
	return out
}

// TestLogConformance: the same calls give the same answers on kvtest.Log and on
// kvstore.JetStreamLog over a stream (sequences relative to the first message).
func TestLogConformance(t *testing.T) {
	ctx := testCtx(t)
	_, js := newStore(t)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"t.results.>"},
		Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	subj := func(id string) string { return "t.results." + id }
	jl := kvstore.NewJetStreamLog(js, st, subj)
	want := logScript(ctx, jl, "a1", subj("a1"))
	got := logScript(ctx, kvtest.NewLog(), "a1", subj("a1"))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("kvtest.Log differs from kvstore.JetStreamLog:\n%s", diff(want, got))
	}
}

func TestLogWaitTerminalAndFaults(t *testing.T) {
	ctx := testCtx(t)
	l := kvtest.NewLog()
	done := make(chan kvstore.LogEntry, 1)
	go func() {
		e, err := l.WaitTerminal(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	p, _ := l.Append(ctx, "a", kvtest.PendingMsg("a", []byte("p")), 0)
	select {
	case e := <-done:
		t.Fatalf("WaitTerminal returned a pending message: %+v", e)
	case <-time.After(30 * time.Millisecond):
	}
	// Another action's terminal message does not wake it.
	_, _ = l.Append(ctx, "b", kvtest.ResultMsg("b", []byte("b")), 0)
	l.LoseAck("a")
	if _, err := l.Append(ctx, "a", kvtest.ResultMsg("a", []byte("r")), p); !errors.Is(err, kvtest.ErrLostAck) {
		t.Fatalf("LoseAck Append = %v", err)
	}
	if e := <-done; !e.Terminal || string(e.Data) != "r" || e.Seq != 3 {
		t.Fatalf("WaitTerminal = %+v", e)
	}
	l.StaleLast("a", kvstore.LogEntry{})
	if _, err := l.Last(ctx, "a"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("StaleLast none = %v", err)
	}
	l.FailNext(kvtest.OpLast, "a", kvtest.ErrInjected)
	if _, err := l.Last(ctx, "a"); !errors.Is(err, kvtest.ErrInjected) {
		t.Fatalf("FailNext Last = %v", err)
	}
	if e, err := l.Last(ctx, "a"); err != nil || e.Seq != 3 {
		t.Fatalf("Last = %+v, %v", e, err)
	}
	if n := len(l.Terminals("a")); n != 1 {
		t.Fatalf("terminals of a: %d", n)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.WaitTerminal(cctx, "none"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitTerminal past the deadline = %v", err)
	}
}
