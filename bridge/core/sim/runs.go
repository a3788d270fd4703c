package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
)

// hrun is a governed run at the simulated Hermes: a planned sequence of events, some of
// them tool approvals that block the run until answered, ending with the run's status.
// A stopped run ends cancelled within runStopEnds (well within core.RunStopGrace).
type hrun struct {
	id       string
	n        int // the order in which Hermes started it (1, 2, ...)
	act      *action
	events   []runEv // emitted so far
	plan     []runEv // still to come
	final    string  // the status it ends with unless stopped
	status   string  // "" while it runs
	output   string
	pending  string // steer text the agent never read (pending_steer), on some completed runs
	errText  string
	toolsRan bool
	waiting  int // the tool approval it waits for (0: none)
	stopping bool
	readers  []*runReader
	// lastEvent is the kind of the last event emitted.
	lastEvent string
}

// runEv is one event of a run.
type runEv struct {
	kind     string // message.delta, approval.request, tool.started, run.<status>
	approval int
}

// runReader is a job's RunEvents: it republishes the run's events from its position as
// they come and answers at the run's end, at a dropped stream, at Until or at an abort.
type runReader struct {
	j        *job
	op       uint64
	next     int64
	toolsRan bool
	done     bool
}

// startRun starts a run of a (an execution).
func (h *hermes) startRun(a *action) *hrun {
	w := h.w
	h.executed(a)
	r := &hrun{id: fmt.Sprintf("run-%s-%d", a.id, len(h.runs)+1), n: len(h.runs) + 1, act: a, final: "completed"}
	if w.faults() && w.chance(w.p.pRunFail) {
		w.stats.RunFails++
		r.final = pick(&w.sched, "failed", "failed", "interrupted")
	}
	n := 2 + w.intN(6)
	for i := range n {
		r.plan = append(r.plan, runEv{kind: "message.delta"})
		if i < a.tools {
			r.plan = append(r.plan, runEv{kind: "approval.request", approval: i + 1})
		}
	}
	h.runs[r.id] = r
	if a.scoped != "" {
		h.runByKey[a.scoped] = r
	}
	w.stats.RunsStarted++
	w.after(w.between(200*time.Millisecond, 3*time.Second), func() { h.advance(r) })
	return r
}

// advance emits the run's next event, or ends it.
func (h *hermes) advance(r *hrun) {
	w := h.w
	if r.status != "" || r.waiting > 0 {
		return
	}
	if len(r.plan) == 0 {
		h.end(r, r.final)
		return
	}
	ev := r.plan[0]
	r.plan = r.plan[1:]
	h.emit(r, ev)
	if ev.kind == "approval.request" {
		r.waiting = ev.approval
		return
	}
	w.after(w.between(200*time.Millisecond, 3*time.Second), func() { h.advance(r) })
}

// requestID is Hermes's request_id of the run's tool approval k (as Hermes 0.21 sends).
func requestID(r *hrun, k int) string { return fmt.Sprintf("rq-%s-%d", r.id, k) }

// approve answers the approval the run waits for (a choice for none is ignored); it
// reports false (409 approval_not_pending) when the answer names another request. The
// core answers only the request its record holds, and nothing else answers the run's
// requests, so an answer naming another request while the run waits, or none, is a bug.
func (h *hermes) approve(r *hrun, choice, reqID string) bool {
	w := h.w
	if r.waiting == 0 || r.status != "" {
		return true
	}
	if want := requestID(r, r.waiting); reqID != want {
		w.failf("run %s waits for request %s; an answer names %q", r.id, want, reqID)
		return false
	}
	w.tr.printf("hermes", "run %s: approval %d (request %s) answered %s", r.id, r.waiting, reqID, choice)
	r.waiting = 0
	if choice != "deny" {
		r.toolsRan = true
		h.emit(r, runEv{kind: "tool.started"})
	}
	w.after(w.between(200*time.Millisecond, 3*time.Second), func() { h.advance(r) })
	return true
}

// stop asks the run to stop: it ends cancelled shortly.
func (h *hermes) stop(r *hrun) {
	w := h.w
	if r.status != "" || r.stopping {
		return
	}
	r.stopping = true
	w.after(w.between(500*time.Millisecond, runStopEnds), func() {
		if r.status == "" {
			h.end(r, "cancelled")
		}
	})
}

func (h *hermes) end(r *hrun, status string) {
	r.status = status
	switch status {
	case "completed":
		r.output = "output of " + r.id
		// Some runs end with steer text their agent never read (decided by the id, so
		// that the seed's random stream is unchanged).
		if sha256.Sum256([]byte(r.id))[0]%3 == 0 {
			r.pending = "steer for " + r.id
		}
	case "failed", "interrupted":
		r.errText = "the run " + status
	}
	h.w.tr.printf("hermes", "run %s ends %s", r.id, status)
	h.emit(r, runEv{kind: "run." + status})
}

// emit adds ev to the run's events and shows it to its readers.
func (h *hermes) emit(r *hrun, ev runEv) {
	r.events = append(r.events, ev)
	r.lastEvent = ev.kind
	for _, rd := range append([]*runReader(nil), r.readers...) {
		h.show(r, rd)
	}
}

// readRun carries out j's RunEvents.
func (h *hermes) readRun(j *job, e core.Effect, p *pendingOp) {
	w := h.w
	rd := &runReader{j: j, op: e.Op, next: e.Run.From}
	p.stop = func() { rd.done = true }
	p.next = func() int64 { return rd.next }
	w.after(h.netLatency(), func() {
		if rd.done {
			return
		}
		r := h.runs[e.Run.RunID]
		if r == nil {
			rd.done = true
			w.answer(j, e.Op, core.Event{Kind: core.EvRun, Status: core.NotFound, Run: &core.RunAnswer{Next: rd.next}})
			return
		}
		r.readers = append(r.readers, rd)
		if !e.Until.IsZero() {
			w.at(e.Until, func() { h.finishRead(r, rd, false) })
		}
		h.show(r, rd)
	})
}

// show republishes the events the reader has not read yet, asks the job for each tool
// approval among them, and answers at the run's terminal event or a dropped stream.
func (h *hermes) show(r *hrun, rd *runReader) {
	w := h.w
	for !rd.done && rd.next < int64(len(r.events)) {
		n := rd.next
		ev := r.events[n]
		if w.faults() && w.chance(w.p.pPublishFail) {
			w.stats.PublishFails++
			rd.done = true
			w.answer(rd.j, rd.op, core.Event{Kind: core.EvRun, Status: core.OK,
				Run: &core.RunAnswer{Next: rd.next, ToolsRan: rd.toolsRan, PublishFailed: true}})
			break
		}
		w.evs.put(r.act.id, n)
		rd.next++
		switch ev.kind {
		case "tool.started":
			rd.toolsRan = true
		case "approval.request":
			h.ask(r, rd, ev.approval)
		}
		if strings.HasPrefix(ev.kind, "run.") {
			h.finishRead(r, rd, true)
			break
		}
		if w.faults() && w.chance(w.p.pStreamDrop) {
			w.stats.StreamDrops++
			h.finishRead(r, rd, false)
			break
		}
	}
	r.readers = slices.DeleteFunc(r.readers, func(rd *runReader) bool { return rd.done })
}

// ask shows the reader's job tool approval k (EvRunApproval: not an answer).
func (h *hermes) ask(r *hrun, rd *runReader, k int) {
	ask := approvalAsk(r, k)
	j := rd.j
	if j.alive() && j.findOp(rd.op) != nil {
		h.w.post(j, core.Event{Kind: core.EvRunApproval, Run: &core.RunAnswer{Approval: ask}})
	}
}

// approvalAsk is the run's approval.request of tool approval k, as its events show it
// and (Hermes 0.21) its status while it waits for it.
func approvalAsk(r *hrun, k int) *core.RunApprovalAsk {
	data, _ := json.Marshal(map[string]any{"run_id": r.id, "approval": k, "command": "rm -rf /tmp/x", "request_id": requestID(r, k)})
	sum := sha256.Sum256(data)
	return &core.RunApprovalAsk{Data: data, SHA256: hex.EncodeToString(sum[:]), Command: "rm -rf /tmp/x",
		Description: "a tool", Choices: []string{"once", "session", "always", "deny"}, RequestID: requestID(r, k)}
}

// finishRead answers the reader with what it saw (the run's end when streamed).
func (h *hermes) finishRead(r *hrun, rd *runReader, streamed bool) {
	if rd.done {
		return
	}
	rd.done = true
	a := &core.RunAnswer{Next: rd.next, ToolsRan: rd.toolsRan, LastEvent: r.lastEvent, Streamed: streamed}
	if streamed {
		a.Status, a.Output, a.ErrText, a.PendingSteer = r.status, r.output, r.errText, r.pending
	}
	h.w.answer(rd.j, rd.op, core.Event{Kind: core.EvRun, Status: core.OK, Run: a})
}
