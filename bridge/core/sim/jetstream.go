package sim

import (
	"fmt"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
)

// jetStream is the simulated consumer that the replicas share: each message (an action
// or a decision) stays unacknowledged until a delivery acks or terminates it; it is
// delivered again once its ack wait passes without an InProgress (the earlier delivery
// may still be running: a zombie), or after the delay of a nak; never more than
// MaxDeliver times when that is set. A delivery goes to a replica that is up, not
// paused, and has a free worker slot.
type jetStream struct {
	w      *World
	msgs   []*message
	queued bool // a pump is scheduled
}

// message is one message of the actions or approvals stream.
type message struct {
	n         int
	act       *action
	dec       *core.Decision // nil for an action
	published time.Time
	available time.Time // not before (a nak's delay)
	// deliveries so far; cur is the delivery whose ack wait runs (nil: none).
	deliveries int
	cur        *job
	ackBy      time.Time
	ackGen     int
	done       bool
	end        string // acked, term: <reason>, exhausted
	republish  bool   // a re-publish after the action's records expired
	// lapse: delivered once, and that delivery dies after the call (planLapse).
	lapse bool
}

func (m *message) String() string {
	if m.dec != nil {
		return fmt.Sprintf("decision message %d (%s %s %s)", m.n, m.act.id, m.dec.Decision, m.dec.MsgID)
	}
	return fmt.Sprintf("action message %d (%s)", m.n, m.act.id)
}

// publish adds m, deliverable from at.
func (js *jetStream) publish(m *message, at time.Time) {
	m.n = len(js.msgs)
	m.published, m.available = at, at
	js.msgs = append(js.msgs, m)
	js.w.stats.Messages++
	js.w.at(at, js.schedulePump)
}

// schedulePump delivers what can be delivered, right after the current closure.
func (js *jetStream) schedulePump() {
	if js.queued {
		return
	}
	js.queued = true
	js.w.after(0, js.pump)
}

// pump delivers every message that is due, in order, while a replica has a free worker.
func (js *jetStream) pump() {
	js.queued = false
	w := js.w
	for _, m := range js.msgs {
		if m.done || m.cur != nil || w.now.Before(m.available) {
			continue
		}
		if limit := w.p.maxDeliver; (limit > 0 && m.deliveries >= limit) || (m.lapse && m.deliveries >= 1) {
			m.done, m.end = true, "exhausted"
			w.stats.Exhausted++
			w.tr.printf("js", "%s exhausted after %d deliveries", m, m.deliveries)
			continue
		}
		r := w.readyReplica(true)
		if r == nil {
			return
		}
		js.deliver(m, r)
	}
}

// deliver starts a delivery of m on r.
func (js *jetStream) deliver(m *message, r *replica) {
	w := js.w
	m.deliveries++
	w.stats.Deliveries++
	inc := r.inc
	kind := core.KindAction
	if m.dec != nil {
		kind = core.KindDecision
	}
	j := w.newJob(inc, kind, m.act, m)
	j.worker = true
	inc.workers--
	m.cur = j
	m.ackBy = w.now.Add(ackWait)
	m.ackGen++
	js.watchAck(m, m.ackGen)
	st := &core.Start{Kind: kind, Owner: j.owner, Seed: w.rnd.Uint64(), Delivery: m.deliveries,
		Final: w.p.maxDeliver > 0 && m.deliveries >= w.p.maxDeliver}
	if m.dec != nil {
		st.Action, st.Decision = &core.Action{ID: m.act.id}, m.dec
	} else {
		st.Action = m.act.coreAction(m.published, w.now)
		st.PausedFor, _ = inc.ep.brk.Pause(w.now)
	}
	w.tr.printf("js", "%s delivery %d to %s", m, m.deliveries, j.owner)
	w.post(j, core.Event{Kind: core.EvDeliver, Start: st})
}

// watchAck redelivers m once its ack wait passes without progress.
func (js *jetStream) watchAck(m *message, gen int) {
	w := js.w
	w.at(m.ackBy, func() {
		if m.done || m.ackGen != gen || m.cur == nil {
			return
		}
		if w.now.Before(m.ackBy) {
			js.watchAck(m, gen)
			return
		}
		w.tr.printf("js", "%s: ack wait of %s passed", m, m.cur.owner)
		m.cur = nil
		m.available = w.now
		js.schedulePump()
	})
}

// inProgress extends the ack wait of j's message, if j's delivery is the current one.
func (js *jetStream) inProgress(j *job) {
	if m := j.msg; m != nil && m.cur == j && !m.done {
		m.ackBy = js.w.now.Add(ackWait)
	}
}

// finish applies j's EffFinish to its message. An ack or a term ends the message
// whichever delivery sends it; a nak counts only from the current delivery (a zombie's
// nak of a message redelivered since is ignored).
func (js *jetStream) finish(j *job, e core.Effect) {
	m := j.msg
	if m == nil || m.done {
		return
	}
	w := js.w
	switch e.Ack {
	case core.AckIt:
		m.done, m.end = true, "acked"
	case core.TermIt:
		m.done, m.end = true, "term: "+e.Reason
	case core.NakIt:
		if m.cur != j {
			return
		}
		m.cur = nil
		m.available = w.now.Add(e.Delay)
		w.at(m.available, js.schedulePump)
	}
	if m.done {
		m.cur = nil
		w.tr.printf("js", "%s %s by %s", m, m.end, j.owner)
	}
}
