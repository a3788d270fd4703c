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

func fmtLog(le core.LogEntry) string {
	return fmt.Sprintf("seq=%d by=%s %s", le.Seq, le.By, core.FormatResult(le.Result))
}

func fmtEvent(ev core.Event) string {
	op := ""
	if ev.Op != 0 {
		op = fmt.Sprintf(" #%d", ev.Op)
	}
	s := ev.Kind.String() + op
	switch ev.Kind {
	case core.EvDeliver:
		st := ev.Start
		s += " " + st.Kind.String() + " " + st.Owner
		if st.Action != nil {
			s += " " + st.Action.ID
		}
		if st.Kind == core.KindAction || st.Kind == core.KindDecision {
			s += fmt.Sprintf(" delivery=%d", st.Delivery)
			if st.Final {
				s += " final"
			}
		}
		if st.PausedFor > 0 {
			s += " paused_for=" + st.PausedFor.String()
		}
		if d := st.Decision; d != nil {
			s += fmt.Sprintf(" decision=%s choice=%s sha=%s msg=%s", d.Decision, d.Choice, short(d.InputSHA256), d.MsgID)
		}
		return s
	case core.EvStore:
		s += " " + ev.Status.String()
		if ev.Rev != 0 {
			s += fmt.Sprintf(" rev=%d", ev.Rev)
		}
		if ev.Entry.Key != "" {
			s += fmt.Sprintf(" %s@%d %s", short(ev.Entry.Key), ev.Entry.Revision, form.Record(ev.Entry.Record))
		}
	case core.EvLog, core.EvWait:
		s += " " + ev.Status.String()
		if ev.Log.Seq != 0 || ev.Log.Result != nil {
			s += " " + fmtLog(ev.Log)
		}
	case core.EvAdmit:
		s += " " + ev.Status.String()
		if ev.Wait != 0 {
			s += fmt.Sprintf(" wait=%s code=%s", ev.Wait, ev.Code)
		}
	case core.EvValidated, core.EvResumed:
		if ev.Invalid != nil {
			s += " invalid=" + ev.Invalid.Code
		}
	case core.EvCall:
		if c := ev.Call; c != nil {
			s += " " + fmtCall(c)
		}
	case core.EvRun, core.EvRunApproval:
		s += " " + ev.Status.String()
		if a := ev.Run; a != nil {
			s += " " + fmtRun(a)
		}
	case core.EvTimer:
		s += " " + ev.Timer.String() + " " + ev.Status.String()
	case core.EvDeadLettered:
		s += " " + ev.Status.String()
	}
	return s
}

func fmtCall(c *core.CallAnswer) string {
	var f []string
	for _, b := range []struct {
		on   bool
		name string
	}{{c.Responded, "responded"}, {c.Aborted, "aborted"}, {c.NotStarted, "not_started"}, {c.Retryable, "retryable"}} {
		if b.on {
			f = append(f, b.name)
		}
	}
	if c.RetryAfter > 0 {
		f = append(f, "retry_after="+c.RetryAfter.String())
	}
	return strings.Join(append(f, core.FormatResult(c.Result)), " ")
}

func fmtRun(a *core.RunAnswer) string {
	var f []string
	if a.RunID != "" {
		f = append(f, "run_id="+a.RunID)
	}
	if a.Call != nil {
		f = append(f, "call{"+fmtCall(a.Call)+"}")
	}
	if a.Durable {
		f = append(f, "durable")
	}
	if a.Next != 0 {
		f = append(f, fmt.Sprintf("next=%d", a.Next))
	}
	if a.Status != "" {
		f = append(f, "status="+a.Status)
	}
	if a.ToolsRan {
		f = append(f, "tools_ran")
	}
	if a.Streamed {
		f = append(f, "streamed")
	}
	if a.PublishFailed {
		f = append(f, "publish_failed")
	}
	if a.Approval != nil {
		f = append(f, "approval sha="+short(a.Approval.SHA256))
	}
	return strings.Join(f, " ")
}
