package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// The driver's side of the store and the log: each operation reaches the server after
// a latency (sometimes slow), is applied there whatever becomes of the job that sent it,
// and its answer comes back after another latency. Faults: a write that fails (not
// applied, Failed), a write whose reply is lost (applied, Failed), a read that is
// behind (an older version, or nothing).

// storeLatency is one way of a store round trip: a millisecond or two, or, for a slow
// operation, up to several seconds.
func (w *World) storeLatency() time.Duration {
	if w.faults() && w.chance(w.p.pSlow) {
		w.stats.SlowOps++
		if w.chance(0.1) {
			return w.between(5*time.Second, 20*time.Second)
		}
		return w.between(100*time.Millisecond, 3*time.Second)
	}
	return w.between(time.Millisecond, 3*time.Millisecond)
}

// storeOp carries out j's operation e on the store, the log or the DLQ: it reaches the
// server after a latency, is applied there whatever becomes of j, and its answer comes
// back after another latency.
func (w *World) storeOp(j *job, e core.Effect, apply func(*job, core.Effect) core.Event) {
	j.addOp(e)
	w.after(w.storeLatency(), func() {
		ev := apply(j, e)
		w.after(w.storeLatency(), func() { w.answer(j, e.Op, ev) })
	})
}

// write applies a write of j (what names it in the trace) with its fault: one that
// fails is not applied, one whose reply is lost is; both answer Failed.
func (w *World) write(j *job, who, what string, kind core.EventKind, apply func() core.Event) core.Event {
	switch {
	case !w.faults():
	case w.chance(w.p.pFailWrite):
		w.stats.FailedWrites++
		w.tr.printf(who, "%s for %s fails", what, j.owner)
		return core.Event{Kind: kind, Status: core.Failed}
	case w.chance(w.p.pLostReply):
		w.stats.LostReplies++
		apply()
		w.tr.printf(who, "%s for %s: reply lost", what, j.owner)
		return core.Event{Kind: kind, Status: core.Failed}
	}
	return apply()
}

// staleAt draws whether a read is behind, and to when: the time the read sees, or
// the zero time for a read that is not behind. Without a lag bound the read may see
// any older version.
func (w *World) staleAt() (time.Time, bool) {
	if !w.faults() || !w.chance(w.p.pStale) {
		return time.Time{}, false
	}
	w.stats.StaleReads++
	if w.p.staleLag > 0 {
		return w.now.Add(-w.between(time.Millisecond, w.p.staleLag)), true
	}
	return time.Time{}, true
}

// behindPick picks the version a read that is behind returns, among the older ones: in
// half the reads one whose state differs from the current version's (a replica behind
// by a transition or more, the read that misleads), else any.
func (w *World) behindPick(key string, old []kvVersion) kvVersion {
	if cur, ok := w.kv.live(key, w.now); ok && w.chance(0.5) {
		var other []kvVersion
		for _, v := range old {
			if v.rec.State != cur.rec.State {
				other = append(other, v)
			}
		}
		if len(other) > 0 {
			return other[w.intN(len(other))]
		}
	}
	return old[w.intN(len(old))]
}

// applyKV carries out a Create, Get, Update, Delete or Claim of j at the server.
func (w *World) applyKV(j *job, e core.Effect) core.Event {
	switch e.Kind {
	case core.EffGet:
		return w.getKV(j, e)
	case core.EffClaim:
		return w.claimKV(j, e)
	}
	return w.write(j, "kv", fmt.Sprintf("%s %s", e.Kind, short(e.Key)), core.EvStore, func() core.Event {
		ev := core.Event{Kind: core.EvStore}
		switch e.Kind {
		case core.EffCreate:
			ev.Status, ev.Rev = w.kv.create(e.Key, *e.Rec, w.now)
		case core.EffUpdate:
			ev.Status, ev.Rev = w.kv.update(e.Key, *e.Rec, e.Rev, w.now)
		case core.EffDelete:
			ev.Status = w.kv.del(e.Key, e.Rev, w.now)
		}
		w.tr.printf("kv", "%s %s for %s: %s rev %d", e.Kind, short(e.Key), j.owner, ev.Status, ev.Rev)
		if ev.Status == core.OK {
			w.onKVWrite(e.Key)
			if e.Kind == core.EffCreate && e.Rec.State == "dispatched" {
				w.stats.Starts++
			}
		}
		return ev
	})
}

// claimKV carries out an atomic claim of j: the key and the action record, both or
// neither. A batch is refused as a whole when either key has a value or a deletion
// marker still in the stream (its expected sequence is not 0), or by the server
// (pBatchRefused: nothing written, answered Conflict).
func (w *World) claimKV(j *job, e core.Effect) core.Event {
	act := kvstore.ActionKey(e.ActionID)
	return w.write(j, "kv", fmt.Sprintf("claim %s + %s", short(e.Key), short(act)), core.EvStore, func() core.Event {
		ev := core.Event{Kind: core.EvStore}
		switch {
		case w.faults() && w.chance(w.p.pBatchRefused):
			ev.Status = core.Conflict
			w.stats.ClaimsRefused++
		case w.kv.written(e.Key, w.now) || w.kv.written(act, w.now):
			ev.Status = core.Exists
			w.stats.ClaimsExist++
		default:
			ev.Status = core.OK
			ev.KeyRev = w.kv.write(e.Key, *e.Rec, false, w.now)
			ev.Rev = w.kv.write(act, *e.Rec2, false, w.now)
			w.onKVWrite(e.Key)
			w.onKVWrite(act)
			w.stats.Starts++
			w.stats.Claims++
		}
		w.tr.printf("kv", "claim %s + %s for %s: %s revs %d %d", short(e.Key), short(act), j.owner, ev.Status, ev.KeyRev, ev.Rev)
		return ev
	})
}

// getKV answers a Get, maybe from a replica that is behind.
func (w *World) getKV(j *job, e core.Effect) core.Event {
	at, stale := w.staleAt()
	var v kvVersion
	var ok bool
	switch {
	case !stale:
		v, ok = w.kv.live(e.Key, w.now)
	case !at.IsZero():
		v, ok = w.kv.asOf(e.Key, at)
	default:
		if old := w.kv.older(e.Key, w.now); len(old) > 0 && w.chance(0.6) {
			v, ok = w.behindPick(e.Key, old), true
		}
	}
	if ok && !w.now.Before(v.written.Add(w.kv.ttlOf(e.Key))) {
		// Each replica ages messages out by its own clock: one that is behind
		// lacks newer writes, but keeps nothing past its TTL.
		ok = false
	}
	if stale {
		w.tr.printf("kv", "get %s for %s is behind: %v rev %d", short(e.Key), j.owner, ok, v.rev)
	}
	if !ok {
		return core.Event{Kind: core.EvStore, Status: core.NotFound}
	}
	return core.Event{Kind: core.EvStore, Status: core.OK, Entry: entry(e.Key, v)}
}

// applyLog carries out a ReadLog or Append of j at the server.
func (w *World) applyLog(j *job, e core.Effect) core.Event {
	if e.Kind == core.EffReadLog {
		// A log read is answered by the stream's leader (the output stream has no direct
		// gets): it is never behind what the stream acknowledged.
		if m := w.log.last(e.ActionID, w.now); m != nil {
			return core.Event{Kind: core.EvLog, Status: core.OK, Log: entryOf(m)}
		}
		return core.Event{Kind: core.EvLog, Status: core.NotFound}
	}
	return w.write(j, "log", "append "+e.MsgID, core.EvLog, func() core.Event {
		ev := core.Event{Kind: core.EvLog}
		ev.Status, ev.Log.Seq = w.log.append(e.ActionID, e.Result, e.MsgID, e.Expect, j.owner, w.now)
		w.tr.printf("log", "append %s after %d for %s: %s seq %d", e.MsgID, e.Expect, j.owner, ev.Status, ev.Log.Seq)
		return ev
	})
}

// watch is a job's AwaitMove or WaitTerminal.
type watch struct {
	j      *job
	op     uint64
	key    string // "" for WaitTerminal
	rev    uint64
	action string
	done   bool
}

// await opens j's AwaitMove or WaitTerminal: after a round trip it looks at the key and
// the log as they are (a watch is never behind), then waits for a write of the key, a
// terminal result of the action, or Until.
func (w *World) await(j *job, e core.Effect) {
	p := j.addOp(e)
	wa := &watch{j: j, op: e.Op, rev: e.Rev, action: e.ActionID}
	if e.Kind == core.EffAwaitMove {
		wa.key = e.Key
	}
	p.stop = func() { wa.done = true }
	w.after(w.storeLatency(), func() {
		if wa.done {
			return
		}
		if w.faults() && w.chance(w.p.pFailWrite/2) {
			w.fire(wa, core.Event{Kind: core.EvWait, Status: core.Failed})
			return
		}
		if m := w.log.last(wa.action, w.now); m != nil && m.terminal() {
			w.fire(wa, core.Event{Kind: core.EvWait, Status: core.Terminal, Log: entryOf(m)})
			return
		}
		if wa.key != "" {
			if v, ok := w.kv.live(wa.key, w.now); !ok || v.rev > wa.rev {
				w.fire(wa, core.Event{Kind: core.EvWait, Status: core.Moved})
				return
			}
		}
		if !w.now.Before(e.Until) {
			w.fire(wa, core.Event{Kind: core.EvWait, Status: core.Expired})
			return
		}
		w.watches = append(w.watches, wa)
		w.at(e.Until, func() { w.fire(wa, core.Event{Kind: core.EvWait, Status: core.Expired}) })
	})
}

// fire ends wa with ev (once), delivered after a notification latency.
func (w *World) fire(wa *watch, ev core.Event) {
	if wa.done {
		return
	}
	wa.done = true
	w.after(w.between(0, 2*time.Millisecond), func() { w.answer(wa.j, wa.op, ev) })
	w.watches = slices.DeleteFunc(w.watches, func(wa *watch) bool { return wa.done })
}

// onKVWrite wakes the watches of key.
func (w *World) onKVWrite(key string) {
	for _, wa := range append([]*watch(nil), w.watches...) {
		if !wa.done && wa.key == key {
			w.fire(wa, core.Event{Kind: core.EvWait, Status: core.Moved})
		}
	}
}

// onStored is the live subscription of the output stream: it records what a live
// subscriber sees, wakes the watches of a terminal result, and shows the approver a
// pending one.
func (w *World) onStored(m *logMsg) {
	w.scen.seen = append(w.scen.seen, m)
	if m.terminal() {
		for _, wa := range append([]*watch(nil), w.watches...) {
			if !wa.done && wa.action == m.action {
				w.fire(wa, core.Event{Kind: core.EvWait, Status: core.Terminal, Log: entryOf(m)})
			}
		}
		return
	}
	w.scen.onPending(m)
}
