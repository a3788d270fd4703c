package sim

import (
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// The invariants, checked after quiescence (the records as they are then; the park
// index after the final sweep). Each failure names the action and what broke.

// check asserts every invariant but those of checkLive, and counts the outcomes.
func (w *World) check() {
	for _, a := range w.scen.actions {
		w.checkAction(a)
	}
	w.checkKeys()
	w.checkStored()
	w.checkLeases()
	w.checkRecordsOutlive()
	for _, j := range w.jobs {
		if j.alive() {
			w.failf("job %s never finished (awaits %s)", j.owner, j.c.Awaiting())
		}
	}
	for _, k := range w.kv.list("park.", w.now) {
		if a := w.scen.byID[strings.TrimPrefix(k, "park.")]; a == nil || w.explained(a) == "" {
			w.failf("park index entry %s left after the final sweep", k)
		}
	}
	w.checkAskIndex()
	// A decision naming a request the run no longer waits for answers nothing.
	for k, vs := range w.kv.versions {
		for _, v := range vs {
			if strings.HasPrefix(k, "act.") && strings.HasSuffix(v.rec.ApprovalDecision, ":stale") {
				w.failf("%s: a stale decision %s answered approval %d", k, v.rec.ApprovalDecision, v.rec.ApprovalAnswered)
			}
		}
	}
	for _, c := range w.scen.cancels {
		t := w.terminal(c.id)
		for _, rep := range c.replies {
			if rep.state == "cancelled" && t != nil && t.result.Status != events.StatusCancelled {
				w.stats.CancelsIgnored++
				w.tr.printf("check", "a cancel of %s was answered cancelled by %s, but it settled %s", c.id, rep.by, core.FormatResult(t.result))
				break
			}
		}
	}
}

// checkAction: one terminal result, last, after pending results only for an action
// that parks or a run; at most one execution of an unsafe action; a truthful result;
// an approval action executed only when its first decision approved it (or its own
// pre-approval, when it never parked), and otherwise settled by that decision; a cancel
// that came first or flagged the unsent action kept it from Hermes; a run never
// outcome_unknown once bound, nor where runs are durably idempotent.
func (w *World) checkAction(a *action) {
	// Only its life since the bridge last forgot it counts (lifeStart).
	start := w.lifeStart(a)
	msgs := slices.DeleteFunc(slices.Clone(w.log.subjects[a.id]), func(m *logMsg) bool { return m.at.Before(start) })
	if start.After(origin) {
		w.stats.Forgotten++
	}
	var terms []*logMsg
	pendings := map[string]time.Time{}
	for _, m := range msgs {
		if m.terminal() {
			terms = append(terms, m)
			continue
		}
		if at, ok := pendings[m.id]; ok && m.at.Before(at.Add(w.p.logMaxAge)) {
			// (A second one after the first aged out is a parking anew of an action the
			// records still hold: its decision is judged on what the log keeps.)
			w.failf("%s: pending result %s stored twice", a.id, m.id)
		}
		pendings[m.id] = m.at
		switch {
		case a.op.Run && strings.HasPrefix(m.id, a.id+":pending:"):
		case a.op.Approval && m.id == a.id+":pending":
		default:
			w.failf("%s: unexpected pending result %s", a.id, m.id)
		}
	}
	if len(terms) == 0 {
		if why := w.explained(a); why == "" {
			w.failf("%s: no terminal result, and nothing explains it", a.id)
		}
		return
	}
	if len(terms) > 1 && terms[1].at.Before(terms[0].at.Add(w.p.logMaxAge)) {
		// A second one after the first aged out (its record still kept: a delivery then
		// says what the record knows) is not two at once.
		w.failf("%s: %d terminal results stored: %s by %s and %s by %s", a.id, len(terms),
			core.FormatResult(terms[0].result), terms[0].by, core.FormatResult(terms[1].result), terms[1].by)
	}
	// A pending result stored while a terminal one was kept fails (one after that aged
	// out belongs to a run of an action the records say never ran: a replay's).
	late := false
	for _, m := range msgs {
		for _, t := range terms {
			late = late || (!m.terminal() && !m.at.Before(t.at) && m.at.Before(t.at.Add(w.p.logMaxAge)))
		}
	}
	if late {
		w.failf("%s: a pending result after the terminal one", a.id)
	}
	r := terms[0].result
	if len(pendings) > 0 {
		w.stats.Parked++
	}
	unsafe := !a.op.Safe
	if n := w.execsBefore(a, time.Time{}); unsafe && n > 1 {
		w.failf("%s: an unsafe action executed %d times%s", a.id, n, w.republished(a))
	}
	// What r says is judged by the executions until it aged out (a delivery after that
	// knows only the record, and may run an action that never ran).
	execs := w.execsBefore(a, terms[0].at.Add(w.p.logMaxAge))
	if uncertain(r) {
		w.stats.Uncertain++
	}
	if r.Status == events.StatusCancelled {
		w.stats.Cancelled++
	}
	w.checkGateBudget(a, r, terms[0].at)
	switch {
	case r.ReplayOf != nil:
		if unsafe && execs != 0 {
			w.failf("%s: a replay of %s, but executed %d times%s", a.id, *r.ReplayOf, execs, w.republished(a))
		}
	case r.Status == events.StatusCompleted:
		// A run may complete as the run its key started before (durable run
		// idempotency): the run it reports must have completed.
		if !w.checkRunTruth(a, r) && execs < 1 {
			w.failf("%s: completed but never executed", a.id)
		}
	case !uncertain(r):
		if unsafe && execs != 0 && !w.checkRunTruth(a, r) {
			w.failf("%s: certain %s, but executed %d times%s", a.id, core.FormatResult(r), execs, w.republished(a))
		}
	}
	if a.invalid != 0 && (execs != 0 || r.Error == nil ||
		(r.Error.Code != "invalid_action" && r.Status != events.StatusCancelled && details(r)["reason"] != "panic")) {
		w.failf("%s: an invalid action (%s) executed %d times and settled %s", a.id,
			[...]string{"", "envelope", "validation"}[a.invalid], execs, core.FormatResult(r))
	}
	w.checkApproval(a, r, execs, terms[0].at.Add(w.p.logMaxAge))
	w.checkCancels(a, r, execs)
	if a.op.Run {
		if d := details(r); d["run_status"] == "interrupted" || (r.Error != nil && r.Error.Code == "run_interrupted") {
			w.stats.RunsInterrupted++
			w.checkRunTruth(a, r)
		}
		if d := details(r); d["reattached"] == true {
			w.stats.RunsReattached++
		}
		if r.Error != nil && r.Error.Code == "outcome_unknown" {
			w.stats.RunsUnknown++
			if w.p.durableRuns {
				w.failf("%s: a run settled outcome_unknown (%v) although runs are durably idempotent", a.id, details(r)["reason"])
			}
			// Bound before the result was stored, by this action (a replay reports the
			// run of the action it replays; a later life may bind a run of its own).
			bound := func(rec kvstore.Record) bool { return rec.RunID != "" }
			if r.ReplayOf == nil && everRecord(w.lifeRecords(a, terms[0].at), bound) {
				w.failf("%s: a run settled outcome_unknown (%v) although a delivery had bound its run id", a.id, details(r)["reason"])
			}
		}
		if details(r)["run_id"] != nil {
			w.stats.RunsFollowed++
		}
	}
}

func details(r *events.Result) map[string]any {
	if r.Error != nil && r.Error.Details != nil {
		return r.Error.Details
	}
	var out map[string]any
	_ = json.Unmarshal(r.Output, &out)
	return out
}

// checkRunTruth checks the run a run's result reports: it must be a run of the
// action's key whose real status is the one reported. It reports whether r is such a
// report (a run's own end, which may be certain although the run executed).
func (w *World) checkRunTruth(a *action, r *events.Result) bool {
	if !a.op.Run {
		return false
	}
	d := details(r)
	id, _ := d["run_id"].(string)
	if id == "" {
		return false
	}
	status, _ := d["run_status"].(string)
	if status == "" {
		status, _ = d["status"].(string)
	}
	run := w.herm.runs[id]
	switch {
	case run == nil:
		w.failf("%s: reports run %s, which Hermes never started", a.id, id)
	case run.act.scoped != a.scoped:
		w.failf("%s: reports run %s of another key", a.id, id)
	case run.status != status:
		w.failf("%s: reports run %s %q, but it ended %q", a.id, id, status, run.status)
	case status == "cancelled" && run.toolsRan && !uncertain(r):
		// The core's rule: a cancelled run is uncertain when its tools ran.
		w.failf("%s: run %s was cancelled after its tools ran, but settled certain %s", a.id, id, core.FormatResult(r))
	case status == "interrupted" && (r.Error == nil || r.Error.Code != "run_interrupted" || !uncertain(r)):
		// An interrupted run (the gateway restarted under it) may have had its effects.
		w.failf("%s: run %s was interrupted, but settled %s (want run_interrupted, uncertain)", a.id, id, core.FormatResult(r))
	case status == "completed" && r.Error == nil:
		// Steer text the run's agent never read reaches the result, and only that.
		if pending, _ := d["pending_steer"].(string); pending != run.pending {
			w.failf("%s: run %s reports pending_steer %q, but Hermes reported %q", a.id, id, pending, run.pending)
		}
	}
	if run != nil && run.status == "interrupted" {
		// The bridge never starts an interrupted run again by itself.
		for _, o := range w.herm.runs {
			if o.act == a && o.n > run.n {
				w.failf("%s: run %s was interrupted and the bridge started run %s for the action again", a.id, id, o.id)
			}
		}
	}
	return true
}

// checkApproval: an approval action runs only on its first decision's approval (or its
// own pre-approval when it never parked); a first decision that is not an approval
// settles the action (or a cancel flag that came after it does).
func (w *World) checkApproval(a *action, r *events.Result, execs int, end time.Time) {
	first := w.firstDecision(a, end)
	parked := everRecord(w.lifeRecords(a, time.Time{}), func(r kvstore.Record) bool { return r.State == kvstore.StateParked })
	if a.op.Approval && execs > 0 {
		switch {
		case parked && first != kvstore.DecisionApprove:
			w.failf("%s: executed without approval (first decision %q)", a.id, first)
		case !parked && !a.pre:
			w.failf("%s: executed without parking and without a pre-approval", a.id)
		}
	}
	if first != "" && first != kvstore.DecisionApprove {
		// Settled by that decision, or by a cancel request that came after it (through
		// the record's flag or a replica's job), or by a panic.
		want := decisionCodes[first]
		if r.Error == nil || (r.Error.Code != want && !(r.Error.Code == "cancelled" && w.cancelled(a)) && !panicked(r)) {
			w.failf("%s: first decision %s, but settled %s", a.id, first, core.FormatResult(r))
		}
	}
}

// checkCancels: a cancel that came before the action (its record's first version is
// the cancelled result) or flagged it before its dispatch kept it from Hermes.
func (w *World) checkCancels(a *action, r *events.Result, execs int) {
	h := w.lifeRecords(a, time.Time{}) // a life before it is forgotten does not count
	if len(h) == 0 {
		return
	}
	if h[0].rec.State == kvstore.StateSettled {
		if execs != 0 || (r.Status != events.StatusCancelled && !panicked(r)) {
			w.failf("%s: cancelled before it came, but executed %d times and settled %s%s", a.id, execs, core.FormatResult(r), w.republished(a))
		}
		return
	}
	for _, v := range h {
		if v.deleted || !v.rec.Cancel {
			continue
		}
		// Executions after the flagged record expired (a re-publish after its records
		// were forgotten) are not the flagged action's.
		n := 0
		for _, at := range w.herm.execAt[a.id] {
			if t := origin.Add(at); t.After(v.written) && !w.kv.expiredBetween(kvstore.ActionKey(a.id), v.written, t) {
				n++
			}
		}
		if st := v.rec.State; !a.op.Safe && (st == kvstore.StateClaimed || st == kvstore.StateReleased) && n != 0 {
			w.failf("%s: flagged for cancel while %s (revision %d), but executed %d times after%s", a.id, st, v.rev, n, w.republished(a))
		}
		break
	}
}

// checkLeases: a claim passes from an owner to another delivery only after its record's
// revision stood still for a lease (the takeover's compare-and-set replaces a version at
// least a lease old). Only the records of claims count (claimed, dispatched, settling,
// with an owner): a released or parked record has no owner to outwait.
func (w *World) checkLeases() {
	for _, k := range w.kv.everKeys("act.") {
		vs := w.kv.versions[k]
		for i := 1; i < len(vs); i++ {
			prev, cur := vs[i-1], vs[i]
			switch {
			case prev.deleted, cur.deleted, prev.rec.Owner == "", cur.rec.Owner == "", cur.rec.Owner == prev.rec.Owner,
				prev.rec.State != kvstore.StateClaimed && prev.rec.State != kvstore.StateDispatched &&
					prev.rec.State != kvstore.StateSettling,
				!prev.written.Add(w.kv.ttlOf(k)).After(cur.written): // expired, then created anew
				continue
			}
			if age := cur.written.Sub(prev.written); age < lease {
				w.failf("%s taken over from %s after its revision stood still %s, less than the lease %s",
					k, prev.rec.Owner, age, lease)
			}
		}
	}
}

// checkKeys: at most one execution per scoped key of an unsafe operation; replays copy
// the result of a same-key same-input action; conflicts have a different input under
// the key.
func (w *World) checkKeys() {
	for _, k := range slices.Sorted(maps.Keys(w.herm.keyExecAt)) {
		// Idempotency lasts as long as the key record (schemas/README.md, "Delivery guarantees": the bucket TTL): an
		// execution after the record of the key expired is another key's.
		at := w.herm.keyExecAt[k]
		for i := 1; i < len(at); i++ {
			if !w.kv.expiredBetween(k, at[i-1], at[i]) {
				w.failf("scoped key %s executed %d times (at %v)", short(k), len(at), at)
				break
			}
		}
	}
	for _, a := range w.scen.actions {
		t := w.terminal(a.id)
		if t == nil {
			continue
		}
		r := t.result
		switch {
		case r.ReplayOf != nil:
			w.stats.Replays++
			o := w.scen.byID[*r.ReplayOf]
			if o != nil && o.id == a.id {
				w.checkSelfReplay(a, t)
				continue
			}
			if o == nil || o.scoped != a.scoped || o.input != a.input {
				w.failf("%s replays %s, which is not a same-key same-input action", a.id, *r.ReplayOf)
				continue
			}
			// The holder's result the replay read: stored before it, not aged out when
			// read (the append may come later, after a pause: recordMargin bounds that;
			// a holder forgotten later may have settled again since).
			var ot *logMsg
			for _, m := range w.log.subjects[o.id] {
				if m.terminal() && !m.at.After(t.at) && t.at.Before(m.at.Add(w.p.logMaxAge+recordMargin)) {
					ot = m
				}
			}
			if ot == nil {
				w.failf("%s replays %s, which has no result", a.id, o.id)
				continue
			}
			or := ot.result
			if or.Status != r.Status || string(or.Output) != string(r.Output) || errJSON(or.Error) != errJSON(r.Error) {
				w.failf("%s replays %s as %s, but %s settled %s", a.id, o.id, core.FormatResult(r), o.id, core.FormatResult(or))
			}
		case r.Error != nil && r.Error.Code == "idempotency_conflict":
			w.stats.Conflicts++
			if !slices.ContainsFunc(w.scen.actions, func(o *action) bool {
				return o.id != a.id && o.scoped == a.scoped && o.input != a.input
			}) {
				w.failf("%s settled idempotency_conflict with no other input under its key", a.id)
			}
		}
	}
}

// checkSelfReplay judges a result of a that replays a itself: a later life of a (published
// again after its records expired) replayed its key holder's replay of a's first result.
// That life must have a terminal result before t, the same.
func (w *World) checkSelfReplay(a *action, t *logMsg) {
	r := t.result
	for _, m := range w.log.subjects[a.id] {
		if m != t && m.terminal() && m.at.Before(t.at) && m.result.ReplayOf == nil {
			if or := m.result; or.Status != r.Status || string(or.Output) != string(r.Output) || errJSON(or.Error) != errJSON(r.Error) {
				w.failf("%s replays its own first result as %s, but it settled %s", a.id, core.FormatResult(r), core.FormatResult(or))
			}
			return
		}
	}
	w.failf("%s replays itself, but never settled before", a.id)
}

// checkLive looks at the records as they are: no record of a settled action left
// parked; no record in a state that is not terminal for an action with no result (an
// orphan) unless something explains it; no key record naming an action with no result;
// no record of an action never published. A settled action's record may be left
// claimed, dispatched, settling or released: its result message is its terminal state
// (settle.go appends the result and writes no record), so those are only counted.
func (w *World) checkLive() {
	for _, k := range w.kv.list("act.", w.now) {
		v, _ := w.kv.live(k, w.now)
		id := strings.TrimPrefix(k, "act.")
		a := w.scen.byID[id]
		if a == nil {
			w.failf("record %s of an action never published", k)
			continue
		}
		switch t := w.terminal(id); {
		case t != nil && v.rec.State == kvstore.StateParked:
			w.failf("%s: record left parked after its result %s", id, core.FormatResult(t.result))
		case t != nil && v.rec.State != kvstore.StateSettled:
			w.stats.RecordsLeftOpen++ // by design: the result log, not the record, is terminal
		case t == nil && v.rec.State != kvstore.StateSettled && w.explained(a) == "":
			w.failf("%s: record left %s with no result", id, v.rec.State)
		}
	}
	for _, k := range w.kv.list("idem.", w.now) {
		v, _ := w.kv.live(k, w.now)
		a := w.scen.byID[v.rec.ActionID]
		if w.terminal(v.rec.ActionID) == nil && (a == nil || w.explained(a) == "") {
			w.failf("key record %s names %s, which has no result", short(k), v.rec.ActionID)
		}
	}
}

// checkRecordsOutlive: while a terminal result of an action is kept in the result log,
// the action's record lives (records outlive results: a record created afresh proves
// that no result is stored, so the bridge may send the call without reading the log).
func (w *World) checkRecordsOutlive() {
	for _, id := range slices.Sorted(maps.Keys(w.log.subjects)) {
		for _, m := range w.log.subjects[id] {
			if !m.terminal() {
				continue
			}
			end := m.at.Add(w.p.logMaxAge)
			if w.now.Before(end) {
				end = w.now
			}
			if gap, ok := w.kv.gapIn(kvstore.ActionKey(id), m.at, end); ok {
				w.failf("%s: its record was gone at %s while its result (appended at %s by %s) was kept",
					id, rel(gap), rel(m.at), m.by)
			}
		}
	}
}

// checkStored: a live subscriber saw exactly what the stream stores, in order; every
// action's stored events are numbered 0 to n-1, each once.
func (w *World) checkStored() {
	var stored []*logMsg
	for _, a := range w.scen.actions {
		stored = append(stored, w.log.subjects[a.id]...)
	}
	sort.Slice(stored, func(i, j int) bool { return stored[i].seq < stored[j].seq })
	if len(stored) != len(w.scen.seen) {
		w.failf("a live subscriber saw %d result messages, the stream stores %d", len(w.scen.seen), len(stored))
	} else {
		for i, m := range stored {
			if w.scen.seen[i] != m {
				w.failf("a live subscriber saw message %d, the stream stores %d there", w.scen.seen[i].seq, m.seq)
				break
			}
		}
	}
	for _, a := range w.scen.actions {
		ns := w.evs.order[a.id]
		if i := slices.IndexFunc(ns, func(n int64) bool { return n < 0 || n >= int64(len(ns)) }); i >= 0 {
			w.failf("%s: events stored are not numbered 0 to %d (event %d)", a.id, len(ns)-1, ns[i])
		}
	}
}

// checkGateBudget: a gate 429 (rate_limit_exceeded: certainly not run) spends none of the
// action's attempts, so an action does not fail with one while its deadline still
// allowed the longest wait before a retry (RetryMax, or the 429's Retry-After of at most
// 3 s). A finite MaxDeliver may end it sooner; an uncertain result is another story
// (an earlier post may have started a run).
func (w *World) checkGateBudget(a *action, r *events.Result, at time.Time) {
	e := r.Error
	if e == nil || e.Code != "remote_unavailable" || e.HTTPStatus != 429 || e.UncertainOutcome || w.p.maxDeliver > 0 {
		return
	}
	var pub time.Time
	for _, m := range w.js.msgs {
		if m.act == a && m.dec == nil && !m.republish && (pub.IsZero() || m.published.Before(pub)) {
			pub = m.published
		}
	}
	if pub.IsZero() {
		return
	}
	if left := pub.Add(a.timeout).Sub(at); left > w.cfg.RetryMax+3*time.Second+time.Second {
		w.failf("%s: failed on a gate 429 %s before its deadline: a refusal that ran nothing spent the attempt budget", a.id, left)
	}
}

// checkAskIndex: an ask.<id>.<k> index entry (what `pending` lists) is written only after
// the action record holds tool approval k with the same request_id, never ahead of it;
// entries left at the end are counted: a crash between the answer and the removal (by
// design; the action's last result is terminal, so readers skip them), or an action
// whose message ran out of deliveries while its run waits (listed: it does wait).
func (w *World) checkAskIndex() {
	for _, k := range w.kv.everKeys("ask.") {
		for _, v := range w.kv.versions[k] {
			if v.deleted {
				continue
			}
			id, n := v.rec.ActionID, v.rec.ApprovalSeq
			if k != kvstore.AskKey(id, n) {
				w.failf("ask index entry %s names action %s approval %d", k, id, n)
				continue
			}
			held := slices.ContainsFunc(w.kv.versions[kvstore.ActionKey(id)], func(r kvVersion) bool {
				return !r.deleted && !r.written.After(v.written) && r.rec.ApprovalSeq == n &&
					r.rec.ApprovalRequestID == v.rec.ApprovalRequestID && r.rec.RunID == v.rec.RunID
			})
			if !held {
				w.failf("ask index entry %s (request %s) written before the record held that approval", k, v.rec.ApprovalRequestID)
			}
		}
	}
	for _, k := range w.kv.list("ask.", w.now) {
		v, _ := w.kv.live(k, w.now)
		// An action with no terminal result (its message exhausted or terminated: by
		// design) may leave its run waiting: the entry then rightly lists it.
		if a := w.scen.byID[v.rec.ActionID]; a == nil || (w.terminal(a.id) == nil && w.explained(a) == "") {
			w.failf("ask index entry %s left for an action without a terminal result", k)
		}
		w.stats.AskIndexLeft++
	}
}
