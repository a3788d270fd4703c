package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
)

// cancelReq is one cancel request and the replies it got.
type cancelReq struct {
	id      string
	at      time.Time
	replies []cancelReply
}

// cancelReply is one reply to a cancel request.
type cancelReply struct {
	by, state string
}

// cancel routes a cancel request as the bridge does (bridge/cancel.go): every replica
// that is up hands it to its jobs of that action (EvCancel; a paused job or replica
// handles it when it wakes, and replies late), and one replica of the queue group,
// chosen among those up and not paused, answers from the records (a KindCancel job)
// unless one of its own jobs replied (where another replica runs the action, the
// record's cancel flag reaches its owner).
func (w *World) cancel(c *cancelReq) {
	w.tr.printf("cancel", "request for %s", c.id)
	q := w.readyReplica(false)
	for _, r := range w.reps {
		if !r.inc.up {
			continue
		}
		for _, j := range append([]*job(nil), r.inc.jobs...) {
			if j.act.id != c.id || j.kind == core.KindCancel || !j.alive() {
				continue
			}
			j.q = append(j.q, item{ev: core.Event{Kind: core.EvCancel}, cancel: c})
			w.kick(j)
		}
	}
	if q == nil {
		w.tr.printf("cancel", "no replica answers the request for %s", c.id)
		return
	}
	if slices.ContainsFunc(c.replies, func(rep cancelReply) bool { return rep.by == q.name() }) {
		return
	}
	a := w.scen.byID[c.id]
	j := w.newJob(q.inc, core.KindCancel, a, nil)
	j.req = c
	w.post(j, core.Event{Kind: core.EvDeliver, Start: &core.Start{Kind: core.KindCancel, Owner: j.owner,
		Seed: w.rnd.Uint64(), Action: &core.Action{ID: c.id}, AllowTombstone: !w.chance(0.05)}})
}

// replyCancel records j's reply to the cancel request it handles.
func (w *World) replyCancel(j *job, state string) {
	c := cmp.Or(j.answering, j.req)
	if c == nil {
		w.failf("%s: EffReplyCancel %s with no cancel request to answer", j.owner, state)
		return
	}
	c.replies = append(c.replies, cancelReply{by: j.inc.r.name(), state: state})
}
