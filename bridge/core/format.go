package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Form writes effects, records and results on one line each: the form the core's
// scripts expect and the simulator's traces print. Times are written relative to
// Origin (a deadline as Sign followed by the duration, "-" for none); Short, when set,
// shortens keys and hashes.
type Form struct {
	Origin time.Time
	Sign   string
	Short  func(string) string
}

func (f Form) short(s string) string {
	if f.Short == nil {
		return s
	}
	return f.Short(s)
}

func (f Form) at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return f.Sign + t.Sub(f.Origin).String()
}

// Effect writes e.
func (f Form) Effect(e Effect) string {
	op := ""
	if e.Op != 0 {
		op = fmt.Sprintf(" #%d", e.Op)
	}
	switch e.Kind {
	case EffCreate:
		return fmt.Sprintf("create%s %s %s", op, f.short(e.Key), f.Record(*e.Rec))
	case EffGet:
		return fmt.Sprintf("get%s %s", op, f.short(e.Key))
	case EffUpdate:
		return fmt.Sprintf("update%s %s@%d %s", op, f.short(e.Key), e.Rev, f.Record(*e.Rec))
	case EffDelete:
		return fmt.Sprintf("delete%s %s@%d", op, f.short(e.Key), e.Rev)
	case EffClaim:
		return fmt.Sprintf("claim%s %s %s + act.%s %s", op, f.short(e.Key), f.Record(*e.Rec), e.ActionID, f.Record(*e.Rec2))
	case EffReadLog:
		return fmt.Sprintf("read_log%s %s", op, e.ActionID)
	case EffAppend:
		return fmt.Sprintf("append%s %s after %d %s", op, e.MsgID, e.Expect, FormatResult(e.Result))
	case EffAwaitMove:
		return fmt.Sprintf("await_move%s %s@%d until %s", op, f.short(e.Key), e.Rev, f.at(e.Until))
	case EffWaitTerminal:
		return fmt.Sprintf("wait_terminal%s %s until %s", op, e.ActionID, f.at(e.Until))
	case EffAdmit:
		if e.Wait {
			return fmt.Sprintf("admit%s wait until %s", op, f.at(e.Until))
		}
		return "admit" + op
	case EffCall:
		return fmt.Sprintf("call%s until %s", op, f.at(e.Until))
	case EffRun:
		s := fmt.Sprintf("run%s %s", op, e.Run.Op)
		if e.Run.RunID != "" {
			s += " " + e.Run.RunID
		}
		if e.Run.Choice != "" {
			s += " " + e.Run.Choice
		}
		if e.Run.RequestID != "" {
			s += " request=" + e.Run.RequestID
		}
		if e.Run.Op == RunEvents {
			s += fmt.Sprintf(" from %d", e.Run.From)
		}
		return s
	case EffTimer:
		return fmt.Sprintf("timer%s %s at %s", op, e.Timer, f.at(e.Until))
	case EffAbort:
		return fmt.Sprintf("abort #%d", e.Op)
	case EffBeat:
		if e.On {
			return "beat on"
		}
		return "beat off"
	case EffHook:
		return "hook " + string(e.Point)
	case EffNote:
		if e.Reason != "" {
			return fmt.Sprintf("note %s: %s", e.Note, e.Reason)
		}
		return "note " + e.Note.String()
	case EffDeadLetter:
		return fmt.Sprintf("dead_letter%s %q", op, e.Reason)
	case EffReplyCancel:
		return "reply_cancel " + e.State
	case EffFinish:
		switch e.Ack {
		case NakIt:
			return fmt.Sprintf("finish nak %s", e.Delay.Round(time.Millisecond))
		case TermIt:
			return fmt.Sprintf("finish term %q", e.Reason)
		}
		return "finish ack"
	}
	return e.Kind.String() + op
}

// Record writes r: its state, action and the fields that are set.
func (f Form) Record(r kvstore.Record) string {
	s := []string{string(r.State), r.ActionID}
	add := func(k, v string) {
		if v != "" && v != "0" {
			s = append(s, k+"="+v)
		}
	}
	add("owner", r.Owner)
	add("attempt", strconv.Itoa(r.Attempt))
	add("input", f.short(r.InputSHA256))
	add("idem", f.short(r.IdemKey))
	if r.Cancel {
		s = append(s, "cancel")
	}
	add("decision", r.Decision)
	add("run", r.RunID)
	add("pending", strconv.FormatUint(r.PendingSeq, 10))
	add("approval-seq", strconv.Itoa(r.ApprovalSeq))
	add("approval-sha", f.short(r.ApprovalSHA256))
	add("answered", strconv.Itoa(r.ApprovalAnswered))
	add("answered-by", r.ApprovalDecision)
	add("approval-request", r.ApprovalRequestID)
	if len(r.Action) > 0 {
		s = append(s, "action")
	}
	if !r.ExpiresAt.IsZero() {
		s = append(s, "expires="+r.ExpiresAt.Sub(f.Origin).String())
	}
	if len(r.Result) > 0 {
		s = append(s, "result")
	}
	return "{" + strings.Join(s, " ") + "}"
}

// FormatResult writes r: its status, and its error's code, flags and reason.
func FormatResult(r *events.Result) string {
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
