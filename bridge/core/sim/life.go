package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// What the invariants read of an action's life: its results, executions, records and
// decisions, since the bridge last forgot it.

// terminal returns the first terminal result ever stored for id (aged out or not).
func (w *World) terminal(id string) *logMsg {
	start := origin
	if a := w.scen.byID[id]; a != nil {
		start = w.lifeStart(a)
	}
	for _, m := range w.log.subjects[id] {
		if m.terminal() && !m.at.Before(start) {
			return m
		}
	}
	return nil
}

// lifeStart is when a's life as the bridge remembers it began: the last moment at which
// nothing of it was kept (its record had expired, and none of its terminal results was
// still in the result log) and after which its record was created anew; the origin
// when it was never forgotten (schemas/README.md: idempotency lasts as long as its record or its
// result, and the record outlives the result). A message of it after that runs anew.
func (w *World) lifeStart(a *action) time.Time {
	key := kvstore.ActionKey(a.id)
	vs := w.kv.versions[key]
	start := origin
	for _, end := range w.kv.expiries(key) {
		kept := false
		for _, t := range w.log.subjects[a.id] {
			kept = kept || (t.terminal() && !t.at.After(end) && end.Before(t.at.Add(w.p.logMaxAge)))
		}
		recreated := !vs[len(vs)-1].written.Before(end)
		if !kept && recreated && end.After(start) {
			start = end
		}
	}
	return start
}

// execsBefore counts a's executions since its life began and before end (zero: all).
func (w *World) execsBefore(a *action, end time.Time) int {
	since := rel(w.lifeStart(a))
	n := 0
	for _, at := range w.herm.execAt[a.id] {
		if at >= since && (end.IsZero() || at < rel(end)) {
			n++
		}
	}
	return n
}

// explained says why action a may have no result: one of its messages was terminated
// by the core or exhausted MaxDeliver; "" when nothing explains it.
func (w *World) explained(a *action) string {
	for _, m := range w.js.msgs {
		if m.act == a && m.done && (m.end == "exhausted" || strings.HasPrefix(m.end, "term")) {
			return fmt.Sprintf("%s %s", m, m.end)
		}
	}
	return ""
}

// lifeRecords returns the versions of a's record written in its life (since
// lifeStart) and before end (zero: any), deletions included, oldest first.
func (w *World) lifeRecords(a *action, end time.Time) []kvVersion {
	start := w.lifeStart(a)
	var out []kvVersion
	for _, v := range w.kv.versions[kvstore.ActionKey(a.id)] {
		if !v.written.Before(start) && (end.IsZero() || v.written.Before(end)) {
			out = append(out, v)
		}
	}
	return out
}

// everRecord reports whether a version of a's record in vs (not a deletion) satisfies f.
func everRecord(vs []kvVersion, f func(kvstore.Record) bool) bool {
	return slices.ContainsFunc(vs, func(v kvVersion) bool { return !v.deleted && f(v.rec) })
}

// firstDecision is the decision of the first version of a's record in its life,
// written before end, that carries one.
func (w *World) firstDecision(a *action, end time.Time) string {
	for _, v := range w.lifeRecords(a, end) {
		if !v.deleted && v.rec.Decision != "" {
			return v.rec.Decision
		}
	}
	return ""
}

// decisionCodes are the error codes a first decision other than approve settles with.
var decisionCodes = map[string]string{kvstore.DecisionDeny: "approval_denied", kvstore.DecisionExpired: "approval_expired",
	kvstore.DecisionMismatch: "approval_mismatch", kvstore.DecisionCancel: "cancelled"}

func uncertain(r *events.Result) bool { return r.Error != nil && r.Error.UncertainOutcome }

// panicked reports whether r is the result of a job that panicked.
func panicked(r *events.Result) bool { return r.Error != nil && details(r)["reason"] == "panic" }

// cancelled reports whether a cancel request was sent for a.
func (w *World) cancelled(a *action) bool {
	return slices.ContainsFunc(w.scen.cancels, func(c *cancelReq) bool { return c.id == a.id })
}

// republished says, for a failure about a's executions, when they happened relative to
// its re-publish after its records expired.
func (w *World) republished(a *action) string {
	for _, m := range w.js.msgs {
		if m.act == a && m.dec == nil && m.republish {
			return fmt.Sprintf(" (executions at %v, re-published after its records expired at %s)",
				w.herm.execAt[a.id], rel(m.published))
		}
	}
	return ""
}

func errJSON(e *events.ErrorInfo) string {
	b, _ := json.Marshal(e)
	return string(b)
}
