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
//	config lease=60s heartbeat=20s approval-ttl=15m max-attempts=5 settle-for=30s atomic-claim ...
//	deliver job=j1 kind=action id=a1 op=chat [safe] [approval] [run] [stream] [key=k1] [input=h1]
//	        [timeout=60s] [delivery=1] [final] [paused=5s] [invalid] [pre=approve|deny|stale|mismatch]
//	deliver job=d1 kind=decision id=a1 decision=approve|deny [sha=h1] [msg=m1] [choice=once] [request=r1]
//	deliver job=x1 kind=expire|cancel id=a1 [tombstone]
//	answer job=j1 <effect> [status=ok] [rev=N] [key-rev=N] [seq=N] <record or result fields>
//	run-approval job=j1 sha=s1 [command=c] [request=r1]
//	tick 10s | beat | cancel | shutdown | panic | timer job=j1 retry|approval/1|poll
//	state job=j1
//
// An answer's <effect> is the effect's name (create, get, read_log, ...; run-<op> for
// a run operation: run-start, run-events, run-status, ...). A Get's record fields:
// state= owner= action= attempt= input= decision= run= pending= approval-seq=
// answered= answered-by= approval-sha= approval-request= idem= cap= expires= (relative to now) cancel
// parked-action tombstone=<message>. A log entry: result=<status>[/<code>] [retryable]
// [uncertain] [replay-of=] by= seq= (no result: an unreadable message). A run's answer:
// runid= next= run-state= output= last-event= [durable] [tools-ran] [streamed]
// [publish-failed] [waits-for=<request_id>] (a status that waits for that approval;
// a bare "waiting" only says so to the reader). An operation the job aborts is answered Aborted at once, as the driver
// does; what the job does then is printed indented under the abort.
//
// A file named bug_*.txt holds cases whose expected output was written by hand: the
// behaviour the core should have (each case says why it does not). -rewrite leaves
// those files alone.

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/hermes-bridge/hermes-bridge/events"
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
		td.MaybeScanArgs(t, "request", &ask.RequestID)
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
	case "atomic-claim":
		h.cfg.AtomicClaim = true
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
		td.MaybeScanArgs(t, "request", &d.RequestID)
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
	td.MaybeScanArgs(t, "key-rev", &ev.KeyRev)
	switch e.Kind {
	case EffCreate, EffGet, EffUpdate, EffDelete, EffClaim:
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
