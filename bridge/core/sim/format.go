package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// The trace's one-line forms of events, effects, records and results.

func fmtRec(r kvstore.Record) string {
	f := []string{string(r.State), r.ActionID}
	add := func(k, v string) {
		if v != "" && v != "0" {
			f = append(f, k+"="+v)
		}
	}
	add("owner", r.Owner)
	add("attempt", strconv.Itoa(r.Attempt))
	add("input", short(r.InputSHA256))
	if r.IdemKey != "" {
		f = append(f, "idem="+short(r.IdemKey))
	}
	if r.Cancel {
		f = append(f, "cancel")
	}
	add("decision", r.Decision)
	add("run", r.RunID)
	add("pending", strconv.FormatUint(r.PendingSeq, 10))
	add("asked", strconv.Itoa(r.ApprovalSeq))
	add("answered", strconv.Itoa(r.ApprovalAnswered))
	if len(r.Action) > 0 {
		f = append(f, "action")
	}
	if !r.ExpiresAt.IsZero() {
		f = append(f, "expires="+rel(r.ExpiresAt).String())
	}
	if len(r.Result) > 0 {
		f = append(f, "result")
	}
	return "{" + strings.Join(f, " ") + "}"
}

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

func fmtResult(r *events.Result) string {
	if r == nil {
		return "{nil}"
	}
	f := []string{r.Status}
	if e := r.Error; e != nil {
		f = append(f, e.Code)
		if e.Retryable {
			f = append(f, "retryable")
		}
		if e.UncertainOutcome {
			f = append(f, "uncertain")
		}
		if reason, ok := e.Details["reason"]; ok {
			f = append(f, fmt.Sprintf("reason=%v", reason))
		}
	}
	if r.ReplayOf != nil {
		f = append(f, "replay_of="+*r.ReplayOf)
	}
	return "{" + strings.Join(f, " ") + "}"
}

func fmtLog(le core.LogEntry) string {
	return fmt.Sprintf("seq=%d by=%s %s", le.Seq, le.By, fmtResult(le.Result))
}

func fmtEffect(e core.Effect) string {
	op := ""
	if e.Op != 0 {
		op = fmt.Sprintf(" #%d", e.Op)
	}
	switch e.Kind {
	case core.EffCreate:
		return fmt.Sprintf("create%s %s %s", op, short(e.Key), fmtRec(e.Rec))
	case core.EffGet:
		return fmt.Sprintf("get%s %s", op, short(e.Key))
	case core.EffUpdate:
		return fmt.Sprintf("update%s %s@%d %s", op, short(e.Key), e.Rev, fmtRec(e.Rec))
	case core.EffDelete:
		return fmt.Sprintf("delete%s %s@%d", op, short(e.Key), e.Rev)
	case core.EffReadLog:
		return fmt.Sprintf("read_log%s %s", op, e.ActionID)
	case core.EffAppend:
		return fmt.Sprintf("append%s %s after %d %s", op, e.MsgID, e.Expect, fmtResult(e.Result))
	case core.EffAwaitMove:
		return fmt.Sprintf("await_move%s %s@%d until %s", op, short(e.Key), e.Rev, rel(e.Until))
	case core.EffWaitTerminal:
		return fmt.Sprintf("wait_terminal%s %s until %s", op, e.ActionID, rel(e.Until))
	case core.EffAdmit:
		if e.Wait {
			return fmt.Sprintf("admit%s wait until %s", op, rel(e.Until))
		}
		return "admit" + op
	case core.EffCall:
		return fmt.Sprintf("call%s until %s", op, rel(e.Until))
	case core.EffRun:
		s := fmt.Sprintf("run%s %s", op, e.Run.Op)
		if e.Run.RunID != "" {
			s += " " + e.Run.RunID
		}
		if e.Run.Choice != "" {
			s += " " + e.Run.Choice
		}
		if e.Run.Op == core.RunEvents {
			s += fmt.Sprintf(" from %d until %s", e.Run.From, rel(e.Until))
		}
		return s
	case core.EffTimer:
		return fmt.Sprintf("timer%s %s at %s", op, e.Timer, rel(e.Until))
	case core.EffAbort:
		return fmt.Sprintf("abort #%d", e.Op)
	case core.EffBeat:
		return fmt.Sprintf("beat on=%v", e.On)
	case core.EffHook:
		return "hook " + string(e.Point)
	case core.EffNote:
		if e.Reason != "" {
			return fmt.Sprintf("note %s: %s", e.Note, e.Reason)
		}
		return "note " + e.Note.String()
	case core.EffDeadLetter:
		return fmt.Sprintf("dead_letter%s %q", op, e.Reason)
	case core.EffReplyCancel:
		return "reply_cancel " + e.State
	case core.EffFinish:
		switch e.Ack {
		case core.NakIt:
			return fmt.Sprintf("finish nak %s", e.Delay.Round(time.Millisecond))
		case core.TermIt:
			return fmt.Sprintf("finish term %q", e.Reason)
		}
		return "finish ack"
	}
	return e.Kind.String() + op
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
			s += fmt.Sprintf(" %s@%d %s", short(ev.Entry.Key), ev.Entry.Revision, fmtRec(ev.Entry.Record))
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
	return strings.Join(append(f, fmtResult(c.Result)), " ")
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
