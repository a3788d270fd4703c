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
// [publish-failed] [waits-for=<request_id>] (a status that waits for that approval;
// a bare "waiting" only says so to the reader). An operation the job aborts is answered Aborted at once, as the driver
// does; what the job does then is printed indented under the abort.
//
// A file named bug_*.txt holds cases whose expected output was written by hand: the
// behaviour the core should have (each case says why it does not). -rewrite leaves
// those files alone.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

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
	td.MaybeScanArgs(t, "approval-request", &r.ApprovalRequestID)
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
		NotStarted: td.HasArg("not-started"), Gated: td.HasArg("gated"), Retryable: td.HasArg("retryable"), Auth: td.HasArg("auth")}
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
	var req string
	if td.MaybeScanArgs(t, "waits-for", &req) {
		a.WaitsFor = &RunApprovalAsk{Data: json.RawMessage(`{"request_id":"` + req + `"}`), SHA256: "s-" + req, RequestID: req}
	}
	return a
}
