package sim

import (
	"fmt"
	"strings"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
)

// The trace's one-line forms of events, effects, records and results.

// form is how the trace shows effects and records.
var form = core.Form{Origin: origin, Short: short}

// short shortens a hash or hashed key for the trace.
func short(s string) string {
	if i := strings.IndexByte(s, '.'); i >= 0 && len(s)-i > 9 {
		return s[:i+9]
	}
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// words is a line of the trace being written: words joined by spaces.
type words []string

// add appends s when on.
func (f *words) add(on bool, s string) {
	if on {
		*f = append(*f, s)
	}
}

func (f words) String() string { return strings.Join(f, " ") }

func fmtEvent(ev core.Event) string {
	f := words{ev.Kind.String()}
	f.add(ev.Op != 0, fmt.Sprintf("#%d", ev.Op))
	switch ev.Kind {
	case core.EvDeliver:
		st := ev.Start
		f = append(f, st.Kind.String(), st.Owner)
		if st.Action != nil {
			f = append(f, st.Action.ID)
		}
		if st.Kind == core.KindAction || st.Kind == core.KindDecision {
			f = append(f, fmt.Sprintf("delivery=%d", st.Delivery))
			f.add(st.Final, "final")
		}
		f.add(st.PausedFor > 0, "paused_for="+st.PausedFor.String())
		if d := st.Decision; d != nil {
			f = append(f, fmt.Sprintf("decision=%s choice=%s sha=%s msg=%s", d.Decision, d.Choice, short(d.InputSHA256), d.MsgID))
		}
	case core.EvStore:
		f = append(f, ev.Status.String())
		f.add(ev.Rev != 0, fmt.Sprintf("rev=%d", ev.Rev))
		if k := ev.Entry.Key; k != "" {
			f = append(f, fmt.Sprintf("%s@%d %s", short(k), ev.Entry.Revision, form.Record(ev.Entry.Record)))
		}
	case core.EvLog, core.EvWait:
		f = append(f, ev.Status.String())
		if le := ev.Log; le.Seq != 0 || le.Result != nil {
			f = append(f, fmt.Sprintf("seq=%d by=%s %s", le.Seq, le.By, core.FormatResult(le.Result)))
		}
	case core.EvAdmit:
		f = append(f, ev.Status.String())
		f.add(ev.Wait != 0, fmt.Sprintf("wait=%s code=%s", ev.Wait, ev.Code))
	case core.EvValidated, core.EvResumed:
		if ev.Invalid != nil {
			f = append(f, "invalid="+ev.Invalid.Code)
		}
	case core.EvCall:
		if ev.Call != nil {
			f = append(f, fmtCall(ev.Call))
		}
	case core.EvRun, core.EvRunApproval:
		f = append(f, ev.Status.String())
		if ev.Run != nil {
			f = append(f, fmtRun(ev.Run))
		}
	case core.EvTimer:
		f = append(f, ev.Timer.String(), ev.Status.String())
	case core.EvDeadLettered:
		f = append(f, ev.Status.String())
	}
	return f.String()
}

func fmtCall(c *core.CallAnswer) string {
	var f words
	f.add(c.Responded, "responded")
	f.add(c.Aborted, "aborted")
	f.add(c.NotStarted, "not_started")
	f.add(c.Gated, "gated")
	f.add(c.Retryable, "retryable")
	f.add(c.RetryAfter > 0, "retry_after="+c.RetryAfter.String())
	return append(f, core.FormatResult(c.Result)).String()
}

func fmtRun(a *core.RunAnswer) string {
	var f words
	f.add(a.RunID != "", "run_id="+a.RunID)
	if a.Call != nil {
		f = append(f, "call{"+fmtCall(a.Call)+"}")
	}
	f.add(a.Durable, "durable")
	f.add(a.Next != 0, fmt.Sprintf("next=%d", a.Next))
	f.add(a.Status != "", "status="+a.Status)
	f.add(a.ToolsRan, "tools_ran")
	f.add(a.Streamed, "streamed")
	f.add(a.PublishFailed, "publish_failed")
	if a.Approval != nil {
		f = append(f, "approval sha="+short(a.Approval.SHA256))
	}
	return f.String()
}
