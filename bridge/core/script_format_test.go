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
	"strings"
	"time"
)

func (h *harness) rel(at time.Time) string { return scriptForm.at(at) }

// scriptForm is how the scripts show effects, records and results.
var scriptForm = Form{Origin: t0, Sign: "+"}

// effect prints an effect on one line.
func (h *harness) effect(e Effect) string { return scriptForm.Effect(e) }

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
		f = append(f, fmt.Sprintf("claimed %s@%d", scriptForm.Record(j.rec), j.rev))
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
