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
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if f := flag.Lookup("rewrite"); f != nil && f.Value.String() == "true" &&
			strings.HasPrefix(filepath.Base(path), "bug_") {
			t.Skip("expected output written by hand: not rewritten")
		}
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return h.do(t, td)
		})
	})
}

// t0 is the scripts' time origin; times print relative to it.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type harness struct {
	cfg  Config
	now  time.Time
	jobs map[string]*scriptJob
	last string
}

type scriptJob struct {
	name string
	j    *Job
	out  []Effect // outstanding effects that expect an answer, oldest first
}

// DefaultTestConfig is the configuration of the scripts unless they change it.
func defaultTestConfig() Config {
	return Config{Lease: 60 * time.Second, Heartbeat: 10 * time.Second, ApprovalTTL: 15 * time.Minute,
		MaxAttempts: 5, RetryBase: time.Second, RetryMax: 30 * time.Second, SettleFor: 30 * time.Second,
		DecisionTries: 30, ParkingWait: 5 * time.Second}
}

func newHarness() *harness {
	return &harness{cfg: defaultTestConfig(), now: t0, jobs: map[string]*scriptJob{}}
}

func (h *harness) job(t *testing.T, td *datadriven.TestData) *scriptJob {
	name := h.last
	td.MaybeScanArgs(t, "job", &name)
	sj, ok := h.jobs[name]
	if !ok {
		td.Fatalf(t, "no job %q", name)
	}
	h.last = name
	return sj
}

func (h *harness) do(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "config":
		for _, a := range td.CmdArgs {
			h.setConfig(t, td, a)
		}
		return ""
	case "deliver":
		return h.deliver(t, td)
	case "answer":
		sj := h.job(t, td)
		return h.answer(t, td, sj)
	case "tick":
		d, err := time.ParseDuration(td.CmdArgs[0].Key)
		if err != nil {
			td.Fatalf(t, "tick: %v", err)
		}
		h.now = h.now.Add(d)
		return fmt.Sprintf("now %s", h.rel(h.now))
	case "beat":
		return h.step(h.job(t, td), Event{Kind: EvBeat})
	case "cancel":
		return h.step(h.job(t, td), Event{Kind: EvCancel})
	case "shutdown":
		return h.step(h.job(t, td), Event{Kind: EvShutdown})
	case "panic":
		sj := h.job(t, td)
		sj.out = nil
		return h.step(sj, Event{Kind: EvPanic})
	case "timer":
		sj := h.job(t, td)
		name := td.CmdArgs[len(td.CmdArgs)-1].Key
		for i, e := range sj.out {
			if e.Kind == EffTimer && e.Timer.String() == name {
				sj.out = append(sj.out[:i:i], sj.out[i+1:]...)
				return h.step(sj, Event{Kind: EvTimer, Op: e.Op, Timer: e.Timer, Status: OK})
			}
		}
		td.Fatalf(t, "no timer %s outstanding", name)
	case "run-approval":
		sj := h.job(t, td)
		ask := &RunApprovalAsk{Data: json.RawMessage(`{"command":"x"}`)}
		td.MaybeScanArgs(t, "sha", &ask.SHA256)
		td.MaybeScanArgs(t, "command", &ask.Command)
		return h.step(sj, Event{Kind: EvRunApproval, Run: &RunAnswer{Approval: ask}})
	case "state":
		return h.state(h.job(t, td))
	}
	td.Fatalf(t, "unknown command %s", td.Cmd)
	return ""
}

func (h *harness) setConfig(t *testing.T, td *datadriven.TestData, a datadriven.CmdArg) {
	dur := func() time.Duration {
		d, err := time.ParseDuration(a.Vals[0])
		if err != nil {
			td.Fatalf(t, "%s: %v", a.Key, err)
		}
		return d
	}
	num := func() int {
		n, err := strconv.Atoi(a.Vals[0])
		if err != nil {
			td.Fatalf(t, "%s: %v", a.Key, err)
		}
		return n
	}
	switch a.Key {
	case "lease":
		h.cfg.Lease = dur()
	case "heartbeat":
		h.cfg.Heartbeat = dur()
	case "approval-ttl":
		h.cfg.ApprovalTTL = dur()
	case "max-attempts":
		h.cfg.MaxAttempts = num()
	case "settle-for":
		h.cfg.SettleFor = dur()
	case "decision-tries":
		h.cfg.DecisionTries = num()
	case "parking-wait":
		h.cfg.ParkingWait = dur()
	case "no-pre-approvals":
		h.cfg.NoPreApprovals = true
	default:
		td.Fatalf(t, "unknown config %s", a.Key)
	}
}

func (h *harness) deliver(t *testing.T, td *datadriven.TestData) string {
	var name, kind, id string
	td.ScanArgs(t, "job", &name)
	td.ScanArgs(t, "kind", &kind)
	td.ScanArgs(t, "id", &id)
	s := &Start{Owner: name, Seed: 1, Delivery: 1, Action: &Action{ID: id}}
	switch kind {
	case "action":
		s.Kind = KindAction
		h.scanAction(t, td, s.Action)
		td.MaybeScanArgs(t, "delivery", &s.Delivery)
		s.Final = td.HasArg("final")
		var paused string
		if td.MaybeScanArgs(t, "paused", &paused) {
			s.PausedFor, _ = time.ParseDuration(paused)
		}
	case "decision":
		s.Kind = KindDecision
		d := &Decision{MsgID: "m-" + name, Decision: events.DecisionApprove, Approver: "ann"}
		td.MaybeScanArgs(t, "decision", &d.Decision)
		td.MaybeScanArgs(t, "sha", &d.InputSHA256)
		td.MaybeScanArgs(t, "msg", &d.MsgID)
		d.Choice = events.ChoiceOnce
		if d.Decision == events.DecisionDeny {
			d.Choice = events.ChoiceDeny
		}
		td.MaybeScanArgs(t, "choice", &d.Choice)
		td.MaybeScanArgs(t, "delivery", &s.Delivery)
		s.Decision = d
	case "expire":
		s.Kind = KindExpire
	case "cancel":
		s.Kind = KindCancel
		s.AllowTombstone = td.HasArg("tombstone")
	default:
		td.Fatalf(t, "unknown kind %s", kind)
	}
	sj := &scriptJob{name: name, j: NewJob(h.cfg)}
	h.jobs[name], h.last = sj, name
	return h.step(sj, Event{Kind: EvDeliver, Start: s})
}

// scanAction fills a from the deliver command's arguments.
func (h *harness) scanAction(t *testing.T, td *datadriven.TestData, a *Action) {
	op := "chat"
	td.MaybeScanArgs(t, "op", &op)
	a.Op = Op{Name: op, Safe: td.HasArg("safe"), Stream: td.HasArg("stream"), Approval: td.HasArg("approval"),
		Run: td.HasArg("run"), KeyRequired: td.HasArg("key-required")}
	a.CapabilityID = "cap:hermes_agent:ep:" + op
	a.InputSHA256 = "h1"
	td.MaybeScanArgs(t, "input", &a.InputSHA256)
	var key string
	if td.MaybeScanArgs(t, "key", &key) {
		a.IdemKey = "idem." + key
	}
	timeout := "60s"
	td.MaybeScanArgs(t, "timeout", &timeout)
	d, _ := time.ParseDuration(timeout)
	a.Deadline = h.now.Add(d)
	if td.HasArg("invalid") {
		a.Invalid = &events.ErrorInfo{Code: "invalid_action", Category: "permanent", Message: "invalid action"}
	}
	var pre string
	if td.MaybeScanArgs(t, "pre", &pre) {
		at := h.now.Add(-time.Minute)
		ap := &events.Approval{Decision: events.DecisionApprove, InputSHA256: a.InputSHA256, DecidedAt: &at}
		switch pre {
		case "deny":
			ap.Decision = events.DecisionDeny
		case "stale":
			old := h.now.Add(-time.Hour)
			ap.DecidedAt = &old
		case "mismatch":
			ap.InputSHA256 = "other"
		}
		a.PreApproval = ap
	}
	a.Input = json.RawMessage(`{"id":"x"}`)
	a.Raw = json.RawMessage(`{"input":{"id":"x"}}`)
}

// answer answers the oldest outstanding effect of the named kind.
func (h *harness) answer(t *testing.T, td *datadriven.TestData, sj *scriptJob) string {
	kind := ""
	for _, a := range td.CmdArgs {
		if len(a.Vals) == 0 && a.Key != "job" {
			kind = a.Key
			break
		}
	}
	idx := -1
	for i, e := range sj.out {
		if e.Kind.String() == kind || (e.Kind == EffRun && "run-"+e.Run.Op.String() == kind) {
			idx = i
			break
		}
	}
	if idx < 0 {
		td.Fatalf(t, "job %s has no outstanding %s (outstanding: %s)", sj.name, kind, h.outstanding(sj))
	}
	e := sj.out[idx]
	sj.out = append(sj.out[:idx:idx], sj.out[idx+1:]...)
	ev := Event{Op: e.Op, Status: OK}
	var status string
	if td.MaybeScanArgs(t, "status", &status) {
		ev.Status = parseStatus(t, td, status)
	}
	td.MaybeScanArgs(t, "rev", &ev.Rev)
	switch e.Kind {
	case EffCreate, EffGet, EffUpdate, EffDelete:
		ev.Kind = EvStore
		if e.Kind == EffGet && ev.Status == OK {
			ev.Entry = h.entry(t, td, e.Key)
		}
	case EffReadLog, EffAppend:
		ev.Kind = EvLog
		ev.Log = h.logEntry(t, td)
	case EffAwaitMove, EffWaitTerminal:
		ev.Kind = EvWait
		if ev.Status == Terminal {
			ev.Log = h.logEntry(t, td)
		}
	case EffAdmit:
		ev.Kind = EvAdmit
		var w string
		if td.MaybeScanArgs(t, "wait", &w) {
			ev.Wait, _ = time.ParseDuration(w)
		}
		td.MaybeScanArgs(t, "code", &ev.Code)
	case EffValidate, EffResume:
		ev.Kind = EvValidated
		if e.Kind == EffResume {
			ev.Kind = EvResumed
			a := sj.j.act
			h.scanAction(t, td, &a)
			ev.Action = &a
		}
		var code string
		if td.MaybeScanArgs(t, "invalid", &code) {
			ev.Invalid = &events.ErrorInfo{Code: code, Category: "permanent", Message: "invalid"}
		}
	case EffCall:
		ev.Kind = EvCall
		ev.Call = h.callAnswer(t, td, sj)
	case EffRun:
		ev.Kind = EvRun
		ev.Run = h.runAnswer(t, td, sj)
		if e.Run.Op == RunStart && ev.Status != OK {
			ev.Run.Call = h.callAnswer(t, td, sj)
		}
	case EffDeadLetter:
		ev.Kind = EvDeadLettered
	case EffTimer:
		ev.Kind = EvTimer
		ev.Timer = e.Timer
	default:
		td.Fatalf(t, "effect %s takes no answer", e.Kind)
	}
	return h.step(sj, ev)
}

func parseStatus(t *testing.T, td *datadriven.TestData, s string) Status {
	for i, n := range statusNames {
		if n == s {
			return Status(i)
		}
	}
	td.Fatalf(t, "unknown status %s", s)
	return 0
}

// entry is the entry a Get answers, from the command's record fields.
func (h *harness) entry(t *testing.T, td *datadriven.TestData, key string) kvstore.Entry {
	r := kvstore.Record{State: kvstore.StateClaimed, Attempt: 1, InputSHA256: "h1"}
	if !strings.HasPrefix(key, "act.") {
		r.Attempt = 0 // key records and park index entries count no attempts
	}
	var state string
	if td.MaybeScanArgs(t, "state", &state) {
		r.State = kvstore.State(state)
	}
	r.ActionID = strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(key, "act."), "idem."), "park.")
	td.MaybeScanArgs(t, "action", &r.ActionID)
	td.MaybeScanArgs(t, "owner", &r.Owner)
	td.MaybeScanArgs(t, "attempt", &r.Attempt)
	td.MaybeScanArgs(t, "input", &r.InputSHA256)
	td.MaybeScanArgs(t, "decision", &r.Decision)
	td.MaybeScanArgs(t, "run", &r.RunID)
	td.MaybeScanArgs(t, "pending", &r.PendingSeq)
	td.MaybeScanArgs(t, "approval-seq", &r.ApprovalSeq)
	td.MaybeScanArgs(t, "answered", &r.ApprovalAnswered)
	td.MaybeScanArgs(t, "approval-sha", &r.ApprovalSHA256)
	td.MaybeScanArgs(t, "answered-by", &r.ApprovalDecision)
	td.MaybeScanArgs(t, "cap", &r.CapabilityID)
	var idem string
	if td.MaybeScanArgs(t, "idem", &idem) {
		r.IdemKey = "idem." + idem
	}
	r.Cancel = td.HasArg("cancel")
	if td.HasArg("parked-action") {
		r.Action = json.RawMessage(`{"input":{"id":"x"}}`)
	}
	var expires string
	if td.MaybeScanArgs(t, "expires", &expires) {
		d, _ := time.ParseDuration(expires)
		r.ExpiresAt = h.now.Add(d)
	}
	var tomb string
	if td.MaybeScanArgs(t, "tombstone", &tomb) {
		r.State = kvstore.StateSettled
		r.Result, _ = json.Marshal(&events.Result{ActionID: r.ActionID, Status: events.StatusCancelled,
			Output: json.RawMessage("null"), Error: notSentCancel(false, tomb)})
	}
	if r.Owner == "" && r.State != kvstore.StateParked && r.State != kvstore.StateReleased && r.State != kvstore.StateSettled {
		r.Owner = "other"
	}
	return kvstore.Entry{Key: key, Record: r, Revision: h.scanRev(t, td)}
}

func (h *harness) scanRev(t *testing.T, td *datadriven.TestData) uint64 {
	var rev uint64 = 1
	td.MaybeScanArgs(t, "rev", &rev)
	return rev
}

// logEntry is the log entry a log read or wait answers: result=<status>[/<code>] with
// frees, uncertain, retryable, replay-of=, by=, seq=.
func (h *harness) logEntry(t *testing.T, td *datadriven.TestData) LogEntry {
	var le LogEntry
	td.MaybeScanArgs(t, "seq", &le.Seq)
	td.MaybeScanArgs(t, "by", &le.By)
	var res string
	if !td.MaybeScanArgs(t, "result", &res) {
		return le
	}
	le.Result = h.result(t, td, res)
	return le
}

func (h *harness) result(t *testing.T, td *datadriven.TestData, res string) *events.Result {
	status, code, _ := strings.Cut(res, "/")
	if status == "pending" {
		status = events.StatusPendingApproval
	}
	r := &events.Result{Status: status, Output: json.RawMessage("null")}
	if code != "" {
		r.Error = &events.ErrorInfo{Code: code, Retryable: td.HasArg("retryable"), UncertainOutcome: td.HasArg("uncertain")}
	}
	var of string
	if td.MaybeScanArgs(t, "replay-of", &of) {
		r.ReplayOf = &of
	}
	return r
}

func (h *harness) callAnswer(t *testing.T, td *datadriven.TestData, sj *scriptJob) *CallAnswer {
	c := &CallAnswer{Responded: td.HasArg("responded"), Aborted: td.HasArg("aborted"),
		NotStarted: td.HasArg("not-started"), Retryable: td.HasArg("retryable"), Auth: td.HasArg("auth")}
	var ra string
	if td.MaybeScanArgs(t, "retry-after", &ra) {
		c.RetryAfter, _ = time.ParseDuration(ra)
	}
	res := "completed"
	td.MaybeScanArgs(t, "result", &res)
	c.Result = h.result(t, td, res)
	c.Result.ActionID, c.Result.CapabilityID = sj.j.act.ID, sj.j.act.CapabilityID
	if c.Result.Status == events.StatusCompleted {
		c.Responded = true
	}
	return c
}

func (h *harness) runAnswer(t *testing.T, td *datadriven.TestData, sj *scriptJob) *RunAnswer {
	a := &RunAnswer{Durable: td.HasArg("durable"), ToolsRan: td.HasArg("tools-ran"), Streamed: td.HasArg("streamed"),
		PublishFailed: td.HasArg("publish-failed")}
	td.MaybeScanArgs(t, "runid", &a.RunID)
	td.MaybeScanArgs(t, "next", &a.Next)
	td.MaybeScanArgs(t, "run-state", &a.Status)
	td.MaybeScanArgs(t, "output", &a.Output)
	td.MaybeScanArgs(t, "last-event", &a.LastEvent)
	return a
}

// step steps the job with ev (at the harness's time) and prints its effects, then
// whether the job is done or what it awaits.
func (h *harness) step(sj *scriptJob, ev Event) string {
	var b strings.Builder
	h.stepInto(sj, ev, &b, "")
	if sj.j.Done() {
		o := sj.j.Outcome()
		fmt.Fprintf(&b, "= done: %s", o.Status)
		if o.Code != "" {
			fmt.Fprintf(&b, " %s", o.Code)
		}
		b.WriteString("\n")
	} else {
		fmt.Fprintf(&b, "> awaits %s\n", sj.j.Awaiting())
	}
	return b.String()
}

// stepInto steps the job with ev and prints its effects into b, each line after
// indent. An operation the job aborts is answered Aborted at once, as the driver does,
// once the job's effects are printed (the answer is a Step, which reuses the effects'
// slice); the effects of that answer follow, indented under the abort.
func (h *harness) stepInto(sj *scriptJob, ev Event, b *strings.Builder, indent string) {
	ev.Now = h.now
	effs := sj.j.Step(ev)
	var aborted []Effect
	for _, e := range effs {
		switch e.Kind {
		case EffAbort:
			for i, o := range sj.out {
				if o.Op == e.Op {
					sj.out = append(sj.out[:i:i], sj.out[i+1:]...)
					b.WriteString(indent + h.effect(e) + " (" + o.Kind.String() + ")\n")
					aborted = append(aborted, o)
					break
				}
			}
			continue
		case EffFinish:
			sj.out = nil
		}
		if e.Op != 0 {
			sj.out = append(sj.out, e)
		}
		b.WriteString(indent + h.effect(e) + "\n")
	}
	for _, o := range aborted {
		h.aborted(sj, o, b, indent+"  ")
	}
}

// aborted answers an aborted operation the way the driver does.
func (h *harness) aborted(sj *scriptJob, o Effect, b *strings.Builder, indent string) {
	ev := Event{Op: o.Op, Status: Aborted}
	switch o.Kind {
	case EffAwaitMove, EffWaitTerminal:
		ev.Kind = EvWait
	case EffAdmit:
		ev.Kind = EvAdmit
	case EffCall:
		ev.Kind, ev.Call = EvCall, &CallAnswer{Aborted: true, Result: sj.j.failed(&events.ErrorInfo{Code: "cancelled"})}
	case EffRun:
		ev.Kind, ev.Run = EvRun, &RunAnswer{}
		if o.Run.Op == RunStart {
			ev.Status = Failed
			ev.Run.Call = &CallAnswer{Aborted: true, Result: sj.j.failed(&events.ErrorInfo{Code: "cancelled"})}
		}
	case EffTimer:
		ev.Kind, ev.Timer = EvTimer, o.Timer
	case EffValidate:
		ev.Kind = EvValidated
	case EffResume:
		ev.Kind = EvResumed
	case EffDeadLetter:
		ev.Kind = EvDeadLettered
	default:
		return
	}
	h.stepInto(sj, ev, b, indent)
}

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
