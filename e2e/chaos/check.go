package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// roundResult is what one round's check found.
type roundResult struct {
	round            int
	faults           []fault
	actions          int
	kinds            [kinds]int
	messages         int
	results          int            // terminal result messages of the round's ids
	missing          int            // ids without a terminal result
	duplicated       int            // ids with more than one terminal result
	unexpected       int            // results or events of ids never published
	dupCallsID       int            // extra Hermes calls of one action's input (unsafe routes)
	dupCallsKey      int            // extra Hermes calls with one idempotency key
	outcomeUnknown   int            // non-replay outcome_unknown results
	explained        int            // of which a call was in flight on a killed or paused-past-lease replica
	causes           map[string]int // outcome_unknown by "explanation: error message (details)"
	otherFailed      map[string]int // failures other than outcome_unknown, by code
	replayErrors     int            // key groups without exactly one executor, or a wrong replay
	outOfOrder       int            // streams whose stored events are not 0,1,2,... in order
	eventErrors      int            // completed streams whose stored events disagree with the output
	unattributed     int            // unsafe calls whose bridge process could not be resolved
	runsReal         int            // governed runs settled with the run's own result
	runsReattached   int            // of which a replica that took the run over followed it
	runsUnknown      int            // governed runs settled outcome_unknown
	settleAfterFault time.Duration
	settleTimedOut   bool
	settled          time.Time // when the round was seen settled (or gave up)
	problems         []string  // setup or recovery problems of the round (unhealthy cluster, ...)
}

func (r *roundResult) ok() bool {
	return r.missing == 0 && r.duplicated == 0 && r.unexpected == 0 && r.dupCallsID == 0 && r.dupCallsKey == 0 &&
		r.outcomeUnknown == r.explained && len(r.otherFailed) == 0 && r.replayErrors == 0 && r.outOfOrder == 0 &&
		r.eventErrors == 0 && !r.settleTimedOut && len(r.problems) == 0
}

// violations prints the first few violations of each kind with the bridge log lines of
// the action.
type violations struct {
	w      *world
	round  int
	byKind map[string]int
	logs   []string // every bridge log line, read once
}

func (v *violations) add(kind, id, format string, args ...any) {
	if v.byKind == nil {
		v.byKind = map[string]int{}
	}
	v.byKind[kind]++
	if v.byKind[kind] > 8 {
		if v.byKind[kind] == 9 {
			fmt.Printf("  [r%d %s] more violations of this kind: not shown\n", v.round, kind)
		}
		return
	}
	fmt.Printf("  [r%d %s] %s\n", v.round, kind, fmt.Sprintf(format, args...))
	if id == "" {
		return
	}
	if v.logs == nil {
		files, _ := filepath.Glob(filepath.Join(v.w.dir, "bridge-*.log"))
		sort.Strings(files)
		v.logs = []string{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, ln := range strings.Split(string(b), "\n") {
				v.logs = append(v.logs, filepath.Base(f)+": "+ln)
			}
		}
	}
	for _, ln := range v.logs {
		if strings.Contains(ln, id) {
			if len(ln) > 500 {
				ln = ln[:500] + "..."
			}
			fmt.Printf("      %s\n", ln)
		}
	}
}

type storedResult struct {
	res *events.Result
	seq uint64
	at  time.Time
}

// check reads the whole output stream and the call log, and checks round r's actions.
func (w *world) check(ctx context.Context, l *load, rr *roundResult) error {
	prefix := fmt.Sprintf("r%d-", l.round)
	v := &violations{w: w, round: l.round}
	results := map[string][]storedResult{}
	evs := map[string][]*events.EventData{}
	evAt := map[string][]time.Time{}
	err := readStream(ctx, w.js, "HERMES_OUTPUT", func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		switch {
		case strings.HasPrefix(m.Subject(), "hermes.results."+prefix):
			res, err := events.DecodeResult(m.Headers(), m.Data())
			if err != nil {
				v.add("decode", "", "result on %s: %v", m.Subject(), err)
				rr.unexpected++
				return
			}
			results[res.ActionID] = append(results[res.ActionID], storedResult{res: res, seq: md.Sequence.Stream, at: md.Timestamp})
		case strings.HasPrefix(m.Subject(), "hermes.events."+prefix):
			ev, err := events.DecodeEvent(m.Headers(), m.Data())
			if err != nil {
				v.add("decode", "", "event on %s: %v", m.Subject(), err)
				rr.unexpected++
				return
			}
			evs[ev.ActionID] = append(evs[ev.ActionID], ev)
			evAt[ev.ActionID] = append(evAt[ev.ActionID], md.Timestamp)
		}
	})
	if err != nil {
		return err
	}

	calls := w.calls.snapshot()
	byOwner, byKey := map[string][]hermesCall{}, map[string]int{}
	for _, c := range calls {
		if !strings.HasPrefix(c.owner, prefix) && !strings.HasPrefix(c.key, "k-"+prefix) {
			continue
		}
		if c.route != "chat" && c.route != "chat_stream" && c.route != "run" {
			continue
		}
		if c.instance == "?" {
			rr.unattributed++
			v.add("unattributed", "", "a %s call naming %s at %s: its bridge process was not resolved", c.route, c.owner, c.start.Format("15:04:05.000"))
		}
		if c.owner != "" {
			byOwner[c.owner] = append(byOwner[c.owner], c)
		}
		if c.key != "" {
			byKey[c.key]++
		}
	}
	for owner, cs := range byOwner {
		if len(cs) > 1 {
			rr.dupCallsID += len(cs) - 1
			var who []string
			for _, c := range cs {
				who = append(who, fmt.Sprintf("%s at %s", c.instance, c.start.Format("15:04:05.000")))
			}
			v.add("duplicate_call", owner, "the input of %s reached Hermes %d times: %s", owner, len(cs), strings.Join(who, ", "))
		}
	}
	for k, n := range byKey {
		if n > 1 {
			rr.dupCallsKey += n - 1
			v.add("duplicate_call", "", "idempotency key %s reached Hermes %d times", k, n)
		}
	}

	actions := l.all()
	known := map[string]action{}
	groups := map[string][]action{}
	kills := slices.DeleteFunc(slices.Clone(rr.faults), func(f fault) bool { return f.kind != faultBridgeKill && f.kind != faultBridgeLong })
	for _, a := range actions {
		rr.actions++
		rr.kinds[a.kind]++
		known[a.id] = a
		var term []storedResult
		for _, s := range results[a.id] {
			if events.Terminal(s.res.Status) {
				term = append(term, s)
			} else {
				rr.unexpected++
				v.add("pending", a.id, "%s: a %s result (stream seq %d); nothing in this load parks", a.id, s.res.Status, s.seq)
			}
		}
		rr.results += len(term)
		switch {
		case len(term) == 0:
			rr.missing++
			v.add("missing", a.id, "%s (%s): no terminal result", a.id, kindNames[a.kind])
			continue
		case len(term) > 1:
			rr.duplicated++
			var seqs []string
			for _, s := range term {
				seqs = append(seqs, fmt.Sprintf("seq %d %s %s", s.seq, s.res.Status, errString(s.res.Error)))
			}
			v.add("duplicated", a.id, "%s (%s): %d terminal results: %s", a.id, kindNames[a.kind], len(term), strings.Join(seqs, "; "))
		}
		res := term[0].res
		code := ""
		if res.Error != nil {
			code = res.Error.Code
		}
		ok := res.Status == events.StatusCompleted && res.Error == nil
		if a.kind == kRun && res.ReplayOf == nil {
			var out struct {
				RunID      string `json:"run_id"`
				Reattached bool   `json:"reattached"`
			}
			switch {
			case code == "outcome_unknown":
				rr.runsUnknown++
			case json.Unmarshal(res.Output, &out) == nil && out.RunID != "":
				rr.runsReal++
				if out.Reattached {
					rr.runsReattached++
				}
			}
		}
		switch {
		case ok:
		case code == "outcome_unknown" && res.ReplayOf != nil:
			// A duplicate key replaying an original that settled outcome_unknown: counted
			// (and explained or not) at the original.
		case code == "outcome_unknown":
			rr.outcomeUnknown++
			why, explained := explain(a, byOwner[a.owner], kills, l.publishedAt(a.id), term[0].at)
			if explained {
				rr.explained++
			}
			cause := fmt.Sprintf("%s: %s", why, res.Error.Message)
			if r := res.Error.Details["reason"]; r != nil {
				cause += fmt.Sprintf(" (reason %v)", r)
			}
			rr.causes[cause]++
			if !explained {
				v.add("outcome_unknown", a.id, "%s (%s): outcome_unknown not explained by a replica kill or pause: error %s; calls %s",
					a.id, kindNames[a.kind], errString(res.Error), describeCalls(byOwner[a.owner]))
			}
		default:
			rr.otherFailed[code]++
			v.add("failed", a.id, "%s (%s): %s %s", a.id, kindNames[a.kind], res.Status, errString(res.Error))
		}
		if a.key != "" {
			groups[a.key] = append(groups[a.key], a)
		}
		ev := evs[a.id]
		if a.op != "chat_stream" && a.op != "run" {
			if len(ev) > 0 {
				rr.unexpected++
				v.add("events", a.id, "%s (%s): %d events for a JSON operation", a.id, kindNames[a.kind], len(ev))
			}
			continue
		}
		inOrder := true
		seqs := make([]int64, len(ev))
		for k, e := range ev {
			seqs[k] = e.Sequence
			inOrder = inOrder && e.Sequence == int64(k)
		}
		if !inOrder {
			rr.outOfOrder++
			at := evAt[a.id]
			v.add("out_of_order", a.id, "%s (%s): event sequences in stream order %v, stored %s to %s",
				a.id, kindNames[a.kind], seqs, at[0].Format("15:04:05.000"), at[len(at)-1].Format("15:04:05.000"))
		}
		if ok && res.ReplayOf == nil && a.op == "run" {
			// A run taken over mid-stream is followed by its status: its events after the
			// crash are not republished (Hermes drops the queue of a subscriber that went
			// away); the output says whether they are complete.
			var out struct {
				Status         string `json:"status"`
				EventCount     int64  `json:"event_count"`
				EventsComplete bool   `json:"events_complete"`
			}
			if err := json.Unmarshal(res.Output, &out); err != nil || out.Status != "completed" ||
				(out.EventsComplete && (out.EventCount != int64(len(ev)) || !inOrder || len(ev) == 0 || ev[len(ev)-1].Kind != events.KindDone)) {
				rr.eventErrors++
				v.add("events", a.id, "%s: run output %s, %d events stored", a.id, res.Output, len(ev))
			}
			continue
		}
		if ok && res.ReplayOf == nil {
			var out struct {
				EventCount int64 `json:"event_count"`
				Terminal   bool  `json:"terminal"`
			}
			if err := json.Unmarshal(res.Output, &out); err != nil || out.EventCount != int64(len(ev)) || !out.Terminal ||
				len(ev) == 0 || (inOrder && ev[len(ev)-1].Kind != events.KindDone) {
				rr.eventErrors++
				v.add("events", a.id, "%s: output counts %d events (terminal %v, err %v), %d stored", a.id, out.EventCount, out.Terminal, err, len(ev))
			}
		}
	}
	for id := range results {
		if _, ok := known[id]; !ok {
			rr.unexpected++
			v.add("unexpected", id, "a result for %s, which was not published", id)
		}
	}
	for id := range evs {
		if _, ok := known[id]; !ok {
			rr.unexpected++
			v.add("unexpected", id, "events for %s, which was not published", id)
		}
	}
	for key, g := range groups {
		var exec []action
		for _, a := range g {
			if rs := results[a.id]; len(rs) > 0 && rs[0].res.ReplayOf == nil {
				exec = append(exec, a)
			}
		}
		if len(exec) != 1 {
			rr.replayErrors++
			v.add("replay", "", "key %s: %d of %d actions executed (no replay_of), want 1", key, len(exec), len(g))
			continue
		}
		er := results[exec[0].id][0].res
		for _, a := range g {
			rs := results[a.id]
			if len(rs) == 0 || a.id == exec[0].id {
				continue
			}
			res := rs[0].res
			if res.ReplayOf == nil || *res.ReplayOf != exec[0].id || res.Status != er.Status || errString(res.Error) != errString(er.Error) {
				rr.replayErrors++
				v.add("replay", a.id, "%s: replay_of %v %s %s, original %s %s %s", a.id, res.ReplayOf, res.Status, errString(res.Error), exec[0].id, er.Status, errString(er.Error))
			}
		}
	}
	return nil
}

// explain tells why an action may have settled outcome_unknown: one of its Hermes calls
// was in flight (or had just answered, within slack, or arrived just after) on a bridge
// process that was then SIGKILLed or SIGSTOPped past the lease. An action with no call at all is explained by
// such a fault while it was pending (the replica died between the write-ahead mark and
// the request).
func explain(a action, calls []hermesCall, faults []fault, published, settled time.Time) (string, bool) {
	const slack = 3 * time.Second
	// A request the replica had written just before it was stopped reaches the fake
	// after the stop: the call's recorded start can follow the fault by a little.
	const early = 250 * time.Millisecond
	for _, c := range calls {
		end := c.end
		if end.IsZero() {
			end = settled
		}
		for _, f := range faults {
			if f.target == c.instance && !f.at.Before(c.start.Add(-early)) && !f.at.After(end.Add(slack)) {
				return fmt.Sprintf("call in flight on %s %s", f.kind, f.target), true
			}
		}
	}
	if len(calls) == 0 {
		for _, f := range faults {
			if !f.at.Before(published) && !f.at.After(settled) {
				return fmt.Sprintf("no call; %s %s while pending", f.kind, f.target), true
			}
		}
		return "no call, no replica fault while pending", false
	}
	return "call on " + calls[0].instance + " not hit by a replica fault", false
}

func describeCalls(cs []hermesCall) string {
	if len(cs) == 0 {
		return "none"
	}
	var out []string
	for _, c := range cs {
		end := "still open"
		if !c.end.IsZero() {
			end = c.end.Format("15:04:05.000")
		}
		out = append(out, fmt.Sprintf("%s %s %s-%s", c.route, c.instance, c.start.Format("15:04:05.000"), end))
	}
	return strings.Join(out, ", ")
}

func errString(e *events.ErrorInfo) string {
	if e == nil {
		return "<nil>"
	}
	b, _ := json.Marshal(e)
	return string(b)
}

// readStream reads a whole stream, as it is now, with one ordered consumer.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s info: %w", stream, err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	last := info.State.LastSeq
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("ordered consumer on %s: %w", stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("read %s up to %d: %w", stream, last, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: metadata: %w", stream, err)
		}
		fn(m, md)
		if md.Sequence.Stream >= last {
			return nil
		}
	}
}
