package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Capabilities of the scenarios (one endpoint, ep1).
const (
	capUnsafe   = "cap:hermes_agent:ep1:session_create"
	capStream   = "cap:hermes_agent:ep1:chat_stream"
	capSafe     = "cap:hermes_agent:ep1:session_get"
	capApproval = "cap:hermes_agent:ep1:session_delete"
	capRun      = "cap:hermes_agent:ep1:run"
)

var (
	inputA = strings.Repeat("a", 64)
	inputB = strings.Repeat("b", 64)
)

// action is an action of a scenario, as published.
type action struct {
	id      string
	cap     string
	op      core.Op
	key     string // the raw idempotency key, "" for none
	scoped  string // the scoped key's record key
	input   string // the input's hash
	pre     bool   // carries a valid pre-approval
	invalid int    // 1: its envelope is invalid; 2: validation fails
	timeout time.Duration
	tools   int // a run's tool approvals
}

func (a *action) String() string {
	f := words{a.id, a.op.Name}
	f.add(a.key != "", "key="+a.key)
	f = append(f, "input="+a.input[:1], "timeout="+a.timeout.String())
	f.add(a.pre, "pre-approved")
	f.add(a.invalid != 0, fmt.Sprintf("invalid=%d", a.invalid))
	f.add(a.tools > 0, fmt.Sprintf("tools=%d", a.tools))
	return f.String()
}

// coreAction is the action as the driver decodes it from its message, published at
// published (its deadline runs from there) or resumed at now.
func (a *action) coreAction(published, now time.Time) *core.Action {
	raw, _ := json.Marshal(map[string]string{"sim": a.id})
	ca := &core.Action{ID: a.id, CapabilityID: a.cap, Op: a.op, InputSHA256: a.input, IdemKey: a.scoped,
		Deadline: published.Add(a.timeout), Input: raw, Raw: raw}
	if a.invalid == 1 {
		ca.Invalid = &events.ErrorInfo{Code: "invalid_action", Category: "permanent", Message: "the envelope is invalid"}
	}
	if a.pre {
		at := published.Add(-time.Minute)
		ca.PreApproval = &events.Approval{Decision: events.DecisionApprove, Approver: "pre", InputSHA256: a.input, DecidedAt: &at}
	}
	return ca
}

// validation is what Validate answers for the action.
func (a *action) validation() *events.ErrorInfo {
	if a.invalid == 2 {
		return &events.ErrorInfo{Code: "invalid_action", Category: "permanent", Message: "the input is invalid"}
	}
	return nil
}

// failed is a failed result of the action with code.
func (a *action) failed(code, msg string, retryable, uncertain bool) *events.Result {
	status := events.StatusFailed
	if code == "cancelled" {
		status = events.StatusCancelled
	}
	return &events.Result{ActionID: a.id, CapabilityID: a.cap, Status: status, Output: json.RawMessage("null"),
		Error: &events.ErrorInfo{Code: code, Message: msg, Category: "temporary", Retryable: retryable, UncertainOutcome: uncertain}}
}

// scenario is what a seed plays: its actions, their publishes, the cancel requests, and
// the approver that answers pending results.
type scenario struct {
	w       *World
	actions []*action
	byID    map[string]*action
	cancels []*cancelReq
	lines   []string
	// seen is every result message a live subscriber received, in order.
	seen []*logMsg
	// answered: the approver answered this pending message id.
	answered map[string]bool
	// pendingDecisions counts decisions the approver scheduled and has not published.
	pendingDecisions int
}

func (s *scenario) logf(format string, args ...any) {
	s.lines = append(s.lines, fmt.Sprintf(format, args...))
}

// plan draws the actions, their publishes (some twice, some again after their records
// expired) and the cancel requests (some before their action), and schedules them.
func (s *scenario) plan() {
	w := s.w
	n := 3 + w.intN(8)
	for i := range n {
		a := &action{id: fmt.Sprintf("a%d", i), input: pick(&w.sched, inputA, inputB)}
		key := pick(&w.sched, "k1", "k2")
		switch w.intN(9) {
		case 0, 1:
			a.cap, a.op, a.key = capUnsafe, core.Op{Name: "session_create"}, key
		case 2:
			a.cap, a.op = capUnsafe, core.Op{Name: "session_create"}
		case 3:
			a.cap, a.op, a.key = capStream, core.Op{Name: "chat_stream", Stream: true}, pick(&w.sched, key, "")
		case 4:
			a.cap, a.op = capSafe, core.Op{Name: "session_get", Safe: true}
			if w.chance(0.5) {
				a.key = key
			}
		case 5, 6:
			a.cap, a.op, a.key = capApproval, core.Op{Name: "session_delete", Approval: true}, key
		case 7:
			a.cap, a.op, a.key, a.pre = capApproval, core.Op{Name: "session_delete", Approval: true}, key, true
		case 8:
			a.cap, a.op, a.key = capRun, core.Op{Name: "run", Run: true, Stream: true, KeyRequired: true}, key
			a.tools = w.intN(3)
		}
		if a.key != "" {
			a.scoped = kvstore.IdempotencyKey(a.cap, a.key)
		}
		if w.chance(w.p.pInvalid) {
			a.invalid = 1 + w.intN(2)
		}
		a.timeout = pick(&w.sched, time.Minute, 5*time.Minute, 5*time.Minute, 10*time.Second)
		if a.op.Run {
			a.timeout = pick(&w.sched, 5*time.Minute, 10*time.Minute, 2*time.Minute)
		}
		s.actions = append(s.actions, a)
		s.byID[a.id] = a
		w.stats.Actions++
		at := w.between(0, 2*time.Minute)
		s.publish(&message{act: a}, at, "published")
		if w.chance(w.p.pDuplicate) {
			d := at + w.between(0, 2*time.Minute)
			if w.chance(0.5) {
				d = at + w.between(0, 100*time.Millisecond) // the two deliveries overlap
			}
			s.publish(&message{act: a}, d, "published again")
		}
		if w.chance(w.p.pRepublish) {
			// After the duplicate window, while its records are kept.
			d := at + dupWindow + w.between(time.Minute, 6*time.Minute)
			s.publish(&message{act: a}, d, "re-published after the duplicate window")
		}
		if w.chance(w.p.pRepublish) {
			// After its key expired, while its record is kept (and maybe its result).
			d := at + w.p.ttl + w.between(time.Minute, w.p.recordsTTL-w.p.ttl-time.Minute)
			s.publish(&message{act: a}, d, "re-published after its key expired")
		}
		if w.chance(w.p.pRepublish) {
			// After its records expired (the records TTL), its result aged out before.
			d := at + w.p.recordsTTL + w.between(time.Minute, 10*time.Minute)
			w.stats.Republishes++
			s.publish(&message{act: a, republish: true}, d, "re-published after its records expired")
		}
		if w.chance(w.p.pCancel) {
			c := max(0, at+w.between(0, 4*time.Minute)-time.Minute)
			req := &cancelReq{id: a.id, at: origin.Add(c)}
			s.cancels = append(s.cancels, req)
			s.logf("%s cancelled at %s", a.id, c)
			w.at(req.at, func() { w.cancel(req) })
			w.lastPlanned = maxTime(w.lastPlanned, req.at)
		}
		if w.chance(w.p.pStray) {
			d := at + w.between(0, time.Minute)
			dec := &core.Decision{MsgID: fmt.Sprintf("stray-%s", a.id), Decision: events.DecisionApprove,
				Approver: "stray", InputSHA256: a.input, Choice: events.ChoiceOnce}
			s.publish(&message{act: a, dec: dec}, d, "stray decision (approve) published")
		}
	}
	if w.p.lapse {
		s.planLapse()
	}
}

// planLapse (worlds with lapse) plays a key that lapses under a dispatched action: a
// governed run x whose only delivery dies after the run ended, before its result is
// stored, so that its record stays dispatched (the run bound) and its key lapses after
// the keys' TTL;
// then an action y with x's key and input, published after that, which claims the key;
// then x published again, while its record is kept. That delivery takes over a
// dispatched record whose key another action holds (script dispatched_key_lost). All
// three are drawn from the lapse generator.
func (s *scenario) planLapse() {
	w, l := s.w, &s.w.lapseRnd
	x := &action{id: fmt.Sprintf("a%d", len(s.actions)), cap: capRun, op: core.Op{Name: "run", Run: true, Stream: true, KeyRequired: true},
		key: pick(l, "k1", "k2"), input: pick(l, inputA, inputB), timeout: pick(l, 2*time.Minute, 5*time.Minute)}
	x.scoped = kvstore.IdempotencyKey(x.cap, x.key)
	y := *x
	y.id = fmt.Sprintf("a%d", len(s.actions)+1)
	for _, a := range []*action{x, &y} {
		s.actions = append(s.actions, a)
		s.byID[a.id] = a
		w.stats.Actions++
	}
	at := l.between(0, 2*time.Minute)
	s.publish(&message{act: x, lapse: true}, at, "published (its only delivery dies after the call, before its result is stored)")
	claim := at + w.p.ttl + l.between(3*time.Minute, 5*time.Minute)
	s.publish(&message{act: &y}, claim, "published after "+x.id+"'s key lapsed, with its key and input")
	s.publish(&message{act: x}, claim+l.between(time.Minute, 2*time.Minute), "re-published after "+y.id+" claimed its lapsed key")
}

func (s *scenario) publish(m *message, at time.Duration, what string) {
	w := s.w
	t := origin.Add(at)
	if m.dec == nil {
		s.logf("%s %s at %s", m.act, what, at)
	} else {
		s.logf("%s: %s at %s", m.act.id, what, at)
	}
	w.js.publish(m, t)
	w.lastPlanned = maxTime(w.lastPlanned, t)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// onPending is the approver: it answers each pending_approval result once (sometimes
// twice, differently; sometimes never), after a while: a parked action's with approve,
// deny or a mismatching hash; a run's tool approval with a choice (sometimes with a
// mismatching hash).
func (s *scenario) onPending(m *logMsg) {
	w := s.w
	if s.answered[m.id] || w.final {
		return
	}
	s.answered[m.id] = true
	a := s.byID[m.action]
	var out struct {
		InputSHA256 string `json:"input_sha256"`
		Approval    *struct {
			Index     int    `json:"index"`
			RequestID string `json:"request_id"`
		} `json:"approval"`
	}
	_ = json.Unmarshal(m.result.Output, &out)
	n := 1
	switch {
	case w.chance(w.p.pNoAnswer):
		n = 0
		s.logf("approver: %s gets no answer", m.id)
	case w.chance(w.p.pTwoDecides):
		n = 2
	}
	for i := range n {
		dec := &core.Decision{MsgID: fmt.Sprintf("dec-%s-%d", m.id, i), Approver: "ann", InputSHA256: out.InputSHA256}
		kind := pick(&w.sched, "approve", "approve", "approve", "deny", "deny", "mismatch")
		switch kind {
		case "approve":
			dec.Decision, dec.Choice = events.DecisionApprove, pick(&w.sched, events.ChoiceOnce, events.ChoiceSession, events.ChoiceAlways)
		case "deny":
			dec.Decision, dec.Choice, dec.Reason = events.DecisionDeny, events.ChoiceDeny, "no"
		case "mismatch":
			dec.Decision, dec.Choice, dec.InputSHA256 = events.DecisionApprove, events.ChoiceOnce, strings.Repeat("0", 64)
		}
		if out.Approval != nil {
			// A run's tool approval: the decision names its request_id (as the CLI
			// does), none, or (stale) one the run no longer waits for: the
			// previous approval's.
			switch pick(&w.sched, "named", "named", "none", "stale") {
			case "named":
				dec.RequestID = out.Approval.RequestID
			case "stale":
				dec.RequestID = strings.TrimSuffix(out.Approval.RequestID, fmt.Sprint(out.Approval.Index)) + fmt.Sprint(out.Approval.Index-1)
				dec.MsgID += ":stale"
				kind += "/stale"
			}
		}
		d := w.between(0, 2*time.Minute)
		s.pendingDecisions++
		w.stats.Decisions++
		w.tr.printf("approver", "%s: decides %s, published in %s", m.id, kind, d)
		w.after(d, func() {
			s.pendingDecisions--
			s.logf("%s: decision %s (%s) published at %s", m.id, dec.MsgID, kind, rel(w.now))
			w.js.publish(&message{act: a, dec: dec}, w.now)
		})
	}
}
