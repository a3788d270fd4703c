package core

// Scripted interaction tests of the core, in the style of etcd raft's: each file of
// testdata/ drives jobs through their events and prints every effect they emit.
//
//	go test ./bridge/core -run TestScripts            // check
//	go test ./bridge/core -run TestScripts -rewrite   // update the expected output
//
// Commands (job= defaults to the last job named; every answer goes to the oldest
// outstanding effect of its kind):
//
//	config lease=60s heartbeat=20s approval-ttl=15m max-attempts=5 settle-for=30s ...
//	deliver job=j1 kind=action id=a1 op=chat [safe] [approval] [run] [stream] [key=k1] [input=h1]
//	        [timeout=60s] [delivery=1] [final] [paused=5s] [invalid] [pre=approve|deny|stale|mismatch]
//	deliver job=d1 kind=decision id=a1 decision=approve|deny [sha=h1] [msg=m1] [choice=once]
//	deliver job=x1 kind=expire|cancel id=a1 [tombstone]
//	answer job=j1 <effect> [status=ok] [rev=N] [seq=N] <record or result fields>
//	run-approval job=j1 sha=s1 [command=c]
//	tick 10s | beat | cancel | shutdown | panic | timer job=j1 retry|approval/1|poll
//	state job=j1
//
// An answer's <effect> is the effect's name (create, get, read_log, ...; run-<op> for
// a run operation: run-start, run-events, run-status, ...). A Get's record fields:
// state= owner= action= attempt= input= decision= run= pending= approval-seq=
// answered= answered-by= approval-sha= idem= cap= expires= (relative to now) cancel
// parked-action tombstone=<message>. A log entry: result=<status>[/<code>] [retryable]
// [uncertain] [replay-of=] by= seq= (no result: an unreadable message). A run's answer:
// runid= next= run-state= output= last-event= [durable] [tools-ran] [streamed]
// [publish-failed]. An operation the job aborts is answered Aborted at once, as the
// driver does; what the job does then is printed indented under the abort.
//
// A file named bug_*.txt holds cases whose expected output was written by hand: the
// behaviour the core should have (each case says why it does not). -rewrite leaves
// those files alone.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

func (h *harness) rel(at time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return "+" + at.Sub(t0).String()
}

// effect prints an effect on one line.
func (h *harness) effect(e Effect) string {
	op := ""
	if e.Op != 0 {
		op = fmt.Sprintf(" #%d", e.Op)
	}
	switch e.Kind {
	case EffCreate:
		return fmt.Sprintf("create%s %s %s", op, e.Key, rec(e.Rec))
	case EffGet:
		return fmt.Sprintf("get%s %s", op, e.Key)
	case EffUpdate:
		return fmt.Sprintf("update%s %s@%d %s", op, e.Key, e.Rev, rec(e.Rec))
	case EffDelete:
		return fmt.Sprintf("delete%s %s@%d", op, e.Key, e.Rev)
	case EffReadLog:
		return fmt.Sprintf("read_log%s %s", op, e.ActionID)
	case EffAppend:
		return fmt.Sprintf("append%s %s after %d %s", op, e.MsgID, e.Expect, result(e.Result))
	case EffAwaitMove:
		return fmt.Sprintf("await_move%s %s@%d until %s", op, e.Key, e.Rev, h.rel(e.Until))
	case EffWaitTerminal:
		return fmt.Sprintf("wait_terminal%s %s until %s", op, e.ActionID, h.rel(e.Until))
	case EffAdmit:
		if e.Wait {
			return fmt.Sprintf("admit%s wait until %s", op, h.rel(e.Until))
		}
		return "admit" + op
	case EffCall:
		return fmt.Sprintf("call%s until %s", op, h.rel(e.Until))
	case EffRun:
		s := fmt.Sprintf("run%s %s", op, e.Run.Op)
		if e.Run.RunID != "" {
			s += " " + e.Run.RunID
		}
		if e.Run.Choice != "" {
			s += " " + e.Run.Choice
		}
		if e.Run.Op == RunEvents {
			s += fmt.Sprintf(" from %d", e.Run.From)
		}
		return s
	case EffTimer:
		return fmt.Sprintf("timer%s %s at %s", op, e.Timer, h.rel(e.Until))
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

func rec(r kvstore.Record) string {
	f := []string{string(r.State), r.ActionID}
	add := func(k, v string) {
		if v != "" && v != "0" {
			f = append(f, k+"="+v)
		}
	}
	add("owner", r.Owner)
	add("attempt", strconv.Itoa(r.Attempt))
	add("input", r.InputSHA256)
	add("idem", r.IdemKey)
	if r.Cancel {
		f = append(f, "cancel")
	}
	add("decision", r.Decision)
	add("run", r.RunID)
	add("pending", strconv.FormatUint(r.PendingSeq, 10))
	add("approval-seq", strconv.Itoa(r.ApprovalSeq))
	add("approval-sha", r.ApprovalSHA256)
	add("answered", strconv.Itoa(r.ApprovalAnswered))
	add("answered-by", r.ApprovalDecision)
	if len(r.Action) > 0 {
		f = append(f, "action")
	}
	if !r.ExpiresAt.IsZero() {
		f = append(f, "expires="+r.ExpiresAt.Sub(t0).String())
	}
	if len(r.Result) > 0 {
		f = append(f, "result")
	}
	return "{" + strings.Join(f, " ") + "}"
}

func result(r *events.Result) string {
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

func (h *harness) outstanding(sj *scriptJob) string {
	var s []string
	for _, e := range sj.out {
		s = append(s, fmt.Sprintf("%s#%d", e.Kind, e.Op))
	}
	return strings.Join(s, ", ")
}

// state prints what the job holds.
func (h *harness) state(sj *scriptJob) string {
	j := sj.j
	var f []string
	if j.claimed {
		f = append(f, fmt.Sprintf("claimed %s@%d", rec(j.rec), j.rev))
	}
	if j.keyRev != 0 {
		f = append(f, fmt.Sprintf("key %s@%d", j.act.IdemKey, j.keyRev))
	}
	flags := map[string]bool{"lost": j.lost, "took_over": j.tookOver, "fenced": j.fenced, "uncertain": j.uncertain,
		"cancel": j.cancelReq, "settling": j.settling, "parking": j.parking, "slot": j.slot, "done": j.done}
	var on []string
	for k, v := range flags {
		if v {
			on = append(on, k)
		}
	}
	sort.Strings(on)
	if len(on) > 0 {
		f = append(f, strings.Join(on, " "))
	}
	f = append(f, "awaits "+j.Awaiting(), "outstanding: "+h.outstanding(sj))
	return strings.Join(f, "\n") + "\n"
}
