package kvstore_test

// A simulated bridge over the ledger: a delivery driver that follows the ledger's
// verdicts exactly as the bridge does, a simulated Hermes that counts what it receives,
// and the result JSON the driver settles. Used by the scripted crash tests
// (ledger_test.go) and the model (ledger_model_test.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
	"github.com/hermes-bridge/hermes-bridge/kvstore/kvtest"
)

// simAction is an action as published.
type simAction struct {
	ID          string
	Cap         string
	Unsafe      bool
	Key         string // the raw idempotency key, "" for none
	Input       string // the input's hash
	Approval    bool   // needs an approval decision
	PreApproved bool   // carries a valid pre-approval
	Run         bool   // a governed run: post, then Bind the run id, then follow it
}

func (a simAction) scopedKey() string {
	if a.Key == "" {
		return ""
	}
	return kvstore.IdempotencyKey(a.Cap, a.Key)
}

func (a simAction) needsPark() bool { return a.Approval && !a.PreApproved }

// startsAtOnce: an unsafe action with nothing to decide first (no approval, no
// governed run), which the bridge starts with Ledger.Start.
func (a simAction) startsAtOnce() bool { return a.Unsafe && !a.Approval && !a.Run }

func (a simAction) intent(owner string) kvstore.Intent {
	return kvstore.Intent{ActionID: a.ID, CapabilityID: a.Cap, InputSHA256: a.Input, IdemKey: a.scopedKey(), Owner: owner}
}

// simResult is the result JSON the driver settles (the fields of CONTRACT §4 that the
// ledger and the checks read, plus who settled it, for traces).
type simResult struct {
	ActionID string    `json:"action_id"`
	Status   string    `json:"status"` // completed, failed, cancelled
	Error    *simError `json:"error,omitempty"`
	ReplayOf string    `json:"replay_of,omitempty"`
	Output   string    `json:"output,omitempty"`
	By       string    `json:"by,omitempty"`
}

type simError struct {
	Code      string `json:"code"`
	Retryable bool   `json:"retryable"`
	Uncertain bool   `json:"uncertain_outcome"`
}

func (r simResult) String() string {
	s := r.Status
	if r.Error != nil {
		s += "/" + r.Error.Code
		if r.Error.Uncertain {
			s += "?"
		}
	}
	if r.ReplayOf != "" {
		s += " replay_of " + r.ReplayOf
	}
	return s
}

func (r simResult) uncertain() bool { return r.Error != nil && r.Error.Uncertain }

func failed(code string, retryable, uncertain bool) simResult {
	status := "failed"
	if code == "cancelled" {
		status = "cancelled"
	}
	return simResult{Status: status, Error: &simError{Code: code, Retryable: retryable, Uncertain: uncertain}}
}

func decodeResult(b []byte) (simResult, error) {
	var r simResult
	err := json.Unmarshal(b, &r)
	return r, err
}

// simHermes counts the requests it receives: sends (every request), executions (the
// requests that did the work) per action id and per scoped key.
type simHermes struct {
	mu       sync.Mutex
	sends    map[string]int
	execs    map[string]int
	keyExecs map[string]int
	// durable: POST /v1/runs with a key seen before names that run (durable run
	// idempotency) instead of starting another; runs holds the run of each scoped key.
	durable bool
	runs    map[string]string
	bound   map[string]bool        // action ids whose run a delivery bound (Bind returned nil)
	refuse  func(a simAction) bool // a 429 from the concurrency gate: no work done
	trace   func(format string, args ...any)
}

func newSimHermes() *simHermes {
	return &simHermes{sends: map[string]int{}, execs: map[string]int{}, keyExecs: map[string]int{}, runs: map[string]string{}, bound: map[string]bool{}}
}

// postRun receives a's POST /v1/runs: it starts a run (an execution), or, with durable
// run idempotency, names the run its key started before. The simulated run ends at once,
// completed.
func (h *simHermes) postRun(a simAction, owner string) (runID string) {
	h.mu.Lock()
	h.sends[a.ID]++
	k := a.scopedKey()
	if id, ok := h.runs[k]; ok && h.durable {
		h.mu.Unlock()
		if h.trace != nil {
			h.trace("hermes: %s from %s replays run %s (durable idempotency)", a.ID, owner, id)
		}
		return id
	}
	h.execs[a.ID]++
	h.keyExecs[k]++
	runID = fmt.Sprintf("run-%s-%d", a.ID, h.execs[a.ID])
	h.runs[k] = runID
	h.mu.Unlock()
	if h.trace != nil {
		h.trace("hermes: %s from %s started %s", a.ID, owner, runID)
	}
	return runID
}

// send receives a's request; executed is false for a refusal.
func (h *simHermes) send(a simAction, owner string) (executed bool) {
	refused := h.refuse != nil && h.refuse(a)
	h.mu.Lock()
	h.sends[a.ID]++
	if !refused {
		h.execs[a.ID]++
		if a.Unsafe && a.Key != "" {
			h.keyExecs[a.scopedKey()]++
		}
	}
	n := h.execs[a.ID]
	h.mu.Unlock()
	if h.trace != nil {
		if refused {
			h.trace("hermes: %s from %s refused (429)", a.ID, owner)
		} else {
			h.trace("hermes: %s from %s executed (#%d)", a.ID, owner, n)
		}
	}
	return !refused
}

func (h *simHermes) counts(id string) (sends, execs int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sends[id], h.execs[id]
}

// bridge drives deliveries through the ledger the way the bridge does.
type bridge struct {
	l           *kvstore.Ledger
	hermes      *simHermes
	heartbeat   time.Duration
	approvalTTL time.Duration
	maxAttempts int

	// point is called at the driver's named steps, in the delivery's goroutine: it may
	// pause the delivery or end it (runtime.Goexit, a crash). Optional.
	point func(d *delivery, step string)
	// preFail reports a bridge-side certain failure before Dispatch (nothing sent).
	// Optional.
	preFail func(d *delivery, a simAction) bool
	trace   func(format string, args ...any)
	// violation reports a broken promise of the ledger seen by the driver.
	violation func(format string, args ...any)
	// oracle returns a record as it is now (no stale read), for the driver's checks.
	oracle func(key string) (kvstore.Entry, bool)
	// goroutine starts f (the model counts them).
	goroutine func(f func())
}

func (b *bridge) tracef(format string, args ...any) {
	if b.trace != nil {
		b.trace(format, args...)
	}
}

func (b *bridge) go_(f func()) {
	if b.goroutine != nil {
		b.goroutine(f)
		return
	}
	go f()
}

// role tells the model's store hooks which goroutine of which delivery calls.
type role struct {
	d         *delivery
	heartbeat bool
}

type roleKey struct{}

func roleOf(ctx context.Context) (role, bool) {
	r, ok := ctx.Value(roleKey{}).(role)
	return r, ok
}

// delivery is one delivery of a message (or a sweeper's or canceller's run, which has
// no message).
type delivery struct {
	b     *bridge
	owner string
	kind  string // action, decision, sweep, cancel

	ctx    context.Context
	cancel context.CancelFunc
	// work is cancelled when a heartbeat learns of a cancel request or a lost claim:
	// it bounds waits (ClaimKey) and the Hermes call.
	work       context.Context
	workCancel context.CancelFunc

	// paused is closed when a pause ends (nil while none): the heartbeat waits on it
	// too, so a pause stalls the whole delivery like a stalled replica.
	pmu       sync.Mutex
	paused    chan struct{}
	cancelReq atomic.Bool
	lostClaim atomic.Bool
	waits     atomic.Int32
	// keySeen is the key record Start found held by another action (ClaimKeyAfter).
	keySeen *kvstore.Entry

	ack      func()
	progress func()
	done     chan struct{}
	finished sync.Once
	// stall, when set, blocks while the delivery's replica is stalled as a whole.
	stall func()
}

func (b *bridge) newDelivery(parent context.Context, owner, kind string, ack, progress func()) *delivery {
	d := &delivery{b: b, owner: owner, kind: kind, ack: ack, progress: progress, done: make(chan struct{})}
	d.ctx, d.cancel = context.WithCancel(context.WithValue(parent, roleKey{}, role{d: d}))
	d.work, d.workCancel = context.WithCancel(d.ctx)
	if d.ack == nil {
		d.ack = func() {}
	}
	if d.progress == nil {
		d.progress = func() {}
	}
	return d
}

func (d *delivery) onWait() { d.waits.Add(1) }

func (d *delivery) step(name string) {
	d.waitPause()
	if d.b.point != nil {
		d.b.point(d, name)
	}
}

// pause stalls the delivery and its heartbeat for dur.
func (d *delivery) pause(dur time.Duration) {
	ch := make(chan struct{})
	d.pmu.Lock()
	d.paused = ch
	d.pmu.Unlock()
	time.Sleep(dur)
	d.pmu.Lock()
	d.paused = nil
	d.pmu.Unlock()
	close(ch)
}

// waitPause returns once no pause of the delivery or of its replica is under way.
func (d *delivery) waitPause() {
	d.pmu.Lock()
	ch := d.paused
	d.pmu.Unlock()
	if ch != nil {
		<-ch
	}
	if d.stall != nil {
		d.stall()
	}
}

// finish ends the delivery (its heartbeat and keep-alive stop); it may be called more
// than once.
func (d *delivery) finish() {
	d.finished.Do(func() {
		d.cancel()
		close(d.done)
	})
}

// keepAlive extends the message's ack wait while the delivery works, waits or is
// renewed, as the bridge does with InProgress; a pause stops it.
func (d *delivery) keepAlive() {
	d.b.go_(func() {
		t := time.NewTicker(d.b.heartbeat)
		defer t.Stop()
		for {
			select {
			case <-d.ctx.Done():
				return
			case <-t.C:
			}
			d.waitPause()
			if d.ctx.Err() != nil {
				return
			}
			d.progress()
		}
	})
}

func (d *delivery) doAck(why string) {
	d.b.tracef("%s: ack (%s)", d.owner, why)
	d.ack()
}

// heartbeat renews c until the delivery ends, like the bridge's heartbeat: it moves
// the claim's revision (and the key record's), and learns of a cancel request or a
// lost claim.
func (d *delivery) heartbeat(c *kvstore.Claim) {
	hctx := context.WithValue(d.ctx, roleKey{}, role{d: d, heartbeat: true})
	d.b.go_(func() {
		t := time.NewTicker(d.b.heartbeat)
		defer t.Stop()
		for {
			select {
			case <-d.ctx.Done():
				return
			case <-t.C:
			}
			d.waitPause()
			if d.ctx.Err() != nil {
				return
			}
			switch err := c.Renew(hctx); {
			case errors.Is(err, kvstore.ErrCancelRequested):
				d.b.tracef("%s: heartbeat: cancel requested", d.owner)
				d.cancelReq.Store(true)
				d.workCancel()
			case errors.Is(err, kvstore.ErrLostClaim):
				d.b.tracef("%s: heartbeat: claim lost", d.owner)
				d.lostClaim.Store(true)
				d.workCancel()
				return
			}
		}
	})
}

// deliverAction is one delivery of action a's message. An action that starts at once
// takes Ledger.Start, as the bridge does, unless a certain failure came first (the
// bridge then takes the ordinary path, which settles it under a claim); Start's
// ErrNotFresh leads to the ordinary path too.
func (b *bridge) deliverAction(d *delivery, a simAction) {
	defer d.finish()
	d.keepAlive()
	if a.startsAtOnce() && (b.preFail == nil || !b.preFail(d, a)) {
		d.step("start")
		c, err := b.l.Start(d.ctx, a.intent(d.owner))
		switch {
		case err == nil:
			b.tracef("%s: start %s: dispatched (rev %d)", d.owner, a.ID, c.Revision())
			d.heartbeat(c)
			b.send(d, a, c)
			return
		case !errors.Is(err, kvstore.ErrNotFresh):
			b.tracef("%s: start %s: %v (nak)", d.owner, a.ID, err)
			return
		}
		var nf *kvstore.NotFreshError
		if errors.As(err, &nf) {
			d.keySeen = &nf.Holder
		}
		b.tracef("%s: start %s: not fresh (key holder seen: %v)", d.owner, a.ID, d.keySeen != nil)
	}
	d.step("begin")
	out, err := b.l.Begin(d.ctx, a.intent(d.owner), d.onWait)
	if err != nil {
		b.tracef("%s: begin %s: %v (nak)", d.owner, a.ID, err)
		return
	}
	b.tracef("%s: begin %s: %s", d.owner, a.ID, verdictString(out))
	b.follow(d, a, out)
}

// deliverDecision is one delivery of a decision message (or a sweeper's expiry).
func (b *bridge) deliverDecision(d *delivery, a simAction, decision string) {
	defer d.finish()
	d.keepAlive()
	d.step("decide")
	out, err := b.l.Decide(d.ctx, a.ID, d.owner, decided(decision, "approver"), d.onWait)
	if err != nil {
		b.tracef("%s: decide %s %s: %v (nak)", d.owner, a.ID, decision, err)
		return
	}
	b.tracef("%s: decide %s %s: %s", d.owner, a.ID, decision, verdictString(out))
	switch out.Verdict {
	case kvstore.Parked:
		// Decide only returns Parked from a stale read of a record another decision
		// moved on (a decided record never parks again): this decision is not the
		// first, and acknowledging it loses nothing. A record still parked means the
		// decision was dropped.
		if b.oracle != nil {
			if e, ok := b.oracle(kvstore.ActionKey(a.ID)); ok && e.Record.State == kvstore.StateParked {
				b.violation("%s: Decide(%s, %s) returned Parked, and the record is still parked: the decision was dropped",
					d.owner, a.ID, decision)
			}
		}
		d.doAck("parked (not the first decision)")
		return
	case kvstore.Run, kvstore.Uncertain:
		if out.Claim.Record().Decision == "" {
			b.violation("%s: Decide(%s, %s) gave a %s claim on a record with no decision", d.owner, a.ID, decision, out.Verdict)
			_ = out.Claim.Release(d.ctx, false)
			return
		}
	}
	b.follow(d, a, out)
}

// runCancelClaim settles the claim CancelStored returned for a parked action.
func (b *bridge) runCancelClaim(d *delivery, a simAction, c *kvstore.Claim) {
	defer d.finish()
	b.follow(d, a, kvstore.Outcome{Verdict: kvstore.Run, Claim: c})
}

func verdictString(o kvstore.Outcome) string {
	s := o.Verdict.String()
	if o.Claim != nil {
		r := o.Claim.Record()
		s += fmt.Sprintf(" (rev %d, attempt %d", o.Claim.Revision(), r.Attempt)
		if r.Decision != "" {
			s += ", decision " + r.Decision
		}
		if r.Cancel {
			s += ", cancel flag"
		}
		s += ")"
	}
	if o.Verdict == kvstore.Done {
		if r, err := decodeResult(o.Log.Data); err == nil {
			s += " " + r.String()
		}
	}
	return s
}

// follow carries out the verdict of Begin or Decide.
func (b *bridge) follow(d *delivery, a simAction, out kvstore.Outcome) {
	switch out.Verdict {
	case kvstore.Done:
		d.doAck("done")
		return
	case kvstore.Parked:
		d.doAck("parked")
		return
	case kvstore.Stored:
		b.settleStored(d, a.ID, out.Record)
		return
	}
	c := out.Claim
	d.heartbeat(c)
	rec := c.Record()
	settle := func(r simResult, why string) { b.settle(d, a, c, r, why) }

	// A run taken over after its owner dispatched it is followed, not resent: bound, it
	// ends with the run's result; not bound, it is posted again with its key only where
	// runs are durably idempotent (as bridge/run.go does).
	reposted := false
	if out.Verdict == kvstore.Uncertain && a.Run && rec.Decision == "" {
		switch {
		case rec.RunID != "":
			settle(runCompleted(), "reattached to "+rec.RunID)
			return
		case rec.Cancel:
			settle(failed("cancelled", false, true), "uncertain run, cancel flag")
			return
		case !b.hermes.durable:
			settle(failed("outcome_unknown", false, true), "run posted, id not stored")
			return
		}
		reposted = true
	} else if out.Verdict == kvstore.Uncertain {
		switch {
		case rec.Decision != "" && rec.Decision != kvstore.DecisionApprove:
			// The decision forbids sending: nothing was sent whatever the mark says.
			settle(decisionResult(rec.Decision), "uncertain, decided "+rec.Decision)
			return
		case !a.Unsafe:
			// A safe operation may be sent again.
		case rec.Cancel:
			settle(failed("cancelled", false, true), "uncertain, cancel flag")
			return
		default:
			settle(failed("outcome_unknown", false, true), "uncertain")
			return
		}
	}
	// After a takeover of a posted run, nothing this delivery settles is certain: the
	// run may exist (the bridge's unboundRun).
	if rec.Cancel {
		settle(failed("cancelled", false, reposted), "cancel flag")
		return
	}
	park := false
	switch rec.Decision {
	case "":
		park = a.needsPark()
	case kvstore.DecisionApprove:
	default:
		settle(decisionResult(rec.Decision), "decided "+rec.Decision)
		return
	}
	if a.Key != "" {
		d.step("claimkey")
		ko, err := c.ClaimKeyAfter(d.work, d.keySeen, d.onWait)
		if err != nil {
			b.tracef("%s: claim key: %v", d.owner, err)
			if d.cancelReq.Load() {
				settle(failed("cancelled", false, reposted), "cancel while waiting for the key")
			}
			return
		}
		switch ko.Verdict {
		case kvstore.KeyReplay:
			orig, err := decodeResult(ko.Log.Data)
			if err != nil {
				b.violation("%s: replayed result of %s unreadable: %v", d.owner, ko.Original, err)
				return
			}
			orig.ReplayOf, orig.By = ko.Original, ""
			settle(orig, "key replay of "+ko.Original)
			return
		case kvstore.KeyConflict:
			settle(failed("idempotency_conflict", false, false), "key conflict with "+ko.Original)
			return
		}
	}
	if park {
		d.step("park")
		act, _ := json.Marshal(a)
		pending, _ := json.Marshal(simResult{ActionID: a.ID, Status: "pending_approval", By: d.owner})
		err := c.Park(d.ctx, act, time.Now().Add(b.approvalTTL), kvtest.PendingMsg(a.ID, pending))
		switch {
		case err == nil:
			d.doAck("parked it")
		case errors.Is(err, kvstore.ErrCancelRequested):
			settle(failed("cancelled", false, false), "cancel flag at park")
		case errors.Is(err, kvstore.ErrSettled):
			d.doAck("settled before it parked")
		default:
			b.tracef("%s: park: %v (stop)", d.owner, err)
		}
		return
	}
	if b.preFail != nil && b.preFail(d, a) {
		// After a takeover of a posted run, nothing this delivery fails of is certain.
		settle(failed("remote_unavailable", !reposted, reposted), "failure before the dispatch")
		return
	}
	if a.Unsafe {
		d.step("dispatch")
		switch err := c.Dispatch(d.ctx); {
		case err == nil:
		case errors.Is(err, kvstore.ErrCancelRequested):
			settle(failed("cancelled", false, reposted), "cancel flag at dispatch")
			return
		case errors.Is(err, kvstore.ErrFenced):
			// As the bridge does (interruptedSettle): the owner it took over was settling
			// without a call, so nothing was sent; settle retryable and certain.
			settle(failed("internal", true, false), "fenced at dispatch")
			return
		default:
			b.tracef("%s: dispatch: %v (stop)", d.owner, err)
			return
		}
	}
	b.send(d, a, c)
}

// send sends a's request under c (dispatched, if a is unsafe) and settles its answer.
func (b *bridge) send(d *delivery, a simAction, c *kvstore.Claim) {
	settle := func(r simResult, why string) { b.settle(d, a, c, r, why) }
	d.step("send")
	if d.cancelReq.Load() {
		settle(failed("cancelled", false, a.Unsafe), "cancel before the send")
		return
	}
	if a.Run {
		runID := b.hermes.postRun(a, d.owner)
		d.step("posted") // a crash here leaves a run the record does not name
		if err := c.Bind(d.ctx, runID); err != nil {
			b.tracef("%s: bind %s: %v (stop)", d.owner, runID, err)
			return
		}
		b.hermes.mu.Lock()
		b.hermes.bound[a.ID] = true
		b.hermes.mu.Unlock()
		d.step("bound")
		settle(runCompleted(), "run "+runID)
		return
	}
	executed := b.hermes.send(a, d.owner)
	d.step("sent")
	if !executed {
		if c.Record().Attempt < b.maxAttempts {
			err := c.Release(d.ctx, true)
			b.tracef("%s: release after a refusal: %v (no ack)", d.owner, err)
			return
		}
		settle(failed("remote_unavailable", true, false), "refused, attempts used up")
		return
	}
	settle(simResult{Status: "completed", Output: "exec:" + a.ID}, "sent")
}

// runCompleted is the result of a run followed to its end.
func runCompleted() simResult { return simResult{Status: "completed", Output: "run"} }

func decisionResult(decision string) simResult {
	switch decision {
	case kvstore.DecisionDeny:
		return failed("approval_denied", false, false)
	case kvstore.DecisionExpired:
		return failed("approval_expired", false, false)
	case kvstore.DecisionMismatch:
		return failed("approval_mismatch", false, false)
	case kvstore.DecisionCancel:
		return failed("cancelled", false, false)
	}
	panic("no result for decision " + decision)
}

// settle settles c with r and acknowledges as the bridge does.
func (b *bridge) settle(d *delivery, a simAction, c *kvstore.Claim, r simResult, why string) {
	d.step("settle")
	r.ActionID, r.By = a.ID, d.owner
	data, _ := json.Marshal(r)
	le, err := c.Settle(d.ctx, kvtest.ResultMsg(a.ID, data), kvstore.FreesKey(data))
	switch {
	case err == nil:
		b.tracef("%s: settled %s %s at %d (%s)", d.owner, a.ID, r, le.Seq, why)
		d.step("settled")
		d.doAck("settled")
	case errors.Is(err, kvstore.ErrSettled):
		w, _ := decodeResult(le.Data)
		b.tracef("%s: settle %s %s: already settled %s by %s (%s)", d.owner, a.ID, r, w, w.By, why)
		d.doAck("already settled")
	default:
		b.tracef("%s: settle %s %s: %v (stop; %s)", d.owner, a.ID, r, err, why)
	}
}

// settleStored appends the result a settled record holds (a cancel before arrival).
func (b *bridge) settleStored(d *delivery, id string, r kvstore.Record) {
	d.step("settle")
	le, err := b.l.SettleUnclaimed(d.ctx, id, kvtest.ResultMsg(id, r.Result), r.PendingSeq)
	switch {
	case err == nil:
		b.tracef("%s: settled stored result of %s at %d", d.owner, id, le.Seq)
		d.doAck("settled stored")
	case errors.Is(err, kvstore.ErrSettled):
		d.doAck("stored result already settled")
	default:
		b.tracef("%s: settle stored %s: %v (stop)", d.owner, id, err)
	}
}
