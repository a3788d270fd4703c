package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Ledger is the state machine of every action. It owns three kinds of records in the
// bucket and one register in the output stream, and every transition below is one
// compare-and-set on one of them; no decision is taken on a read alone.
//
// # Records
//
//   - act.<id>, the action record: who runs the action and how far it got.
//   - idem.<hash>, the key record: which action holds a scoped idempotency key. It is
//     written when the action claims the key (ClaimKey after Begin, or Start before
//     the action record exists) and rewritten by heartbeats while the
//     action runs (so that it lives as long as the action); it names the action and
//     never holds a result.
//   - park.<id>, the park index: one entry per parked action, so that any replica can
//     expire parked actions without scanning every record.
//   - The result log ([ResultLog]): the action's result messages in the output stream.
//     The terminal result message is the action's terminal state: appending it is a
//     compare-and-set on the subject's last sequence, so at most one is ever stored,
//     and the key record of a keyed action refers to it (CONTRACT §5).
//
// # Action record states and transitions
//
//	from        to          by                                    write
//	(none)      claimed     Begin: a delivery claims the id        Create act
//	released    claimed     Begin: the next delivery takes it      Update act
//	claimed     claimed     Begin: owner gone (see Owners)         Update act
//	(none)      dispatched  Start: claim and mark in one write     Create act (after Create idem)
//	claimed     claimed     Renew: a heartbeat                     Update act
//	claimed     dispatched  Dispatch: the write-ahead mark         Update act
//	dispatched  dispatched  Bind: a durable run's id (run_id)      Update act
//	dispatched  dispatched  AskApproval: a run's tool approval k   Append pending, Update act
//	dispatched  dispatched  AnswerApproval/ExpireApproval: k once  Update act
//	dispatched  dispatched  Begin: owner gone, outcome unknown     Update act
//	claimed     released    Release: certain non-execution, retry  Update act
//	claimed     parked      Park: waits for a decision             Update act, Create park, Append pending, Update act
//	parked      claimed     Decide: a decision, expiry or cancel   Update act
//	claimed     settling    Settle: the fence of an unsent unsafe  Update act
//	settling    settling    Begin: owner gone; nothing was sent    Update act
//	any live    +cancel     CancelStored: cancel flag              Update act
//	(none)      settled     CancelStored: cancel before arrival    Create act
//	any         terminal    Settle: the terminal result            Append result
//
// Only the delivery that holds the claim's current revision can Dispatch, Park,
// Release or Settle: a replica that lost its claim (it was paused past the lease and
// taken over) fails its next compare-and-set and stops: it neither sends nor settles.
// The mark is the dispatched state of the action record for every unsafe call, keyed
// or not, so it is fenced by the same revision, or, for an unsafe action that runs at
// once (Start), by the Create that makes the record: it succeeds only where no
// delivery has ever claimed the id (and no cancel came first), right before the send.
// Park and the Settle of a claim that
// never dispatched begin with such a compare-and-set, since what follows it writes
// elsewhere (the park index, the log). A claim that dispatched settles without one:
// whoever takes its record over gets Uncertain and never sends, so of its result and
// a taker's outcome_unknown the first appended stands.
//
// # Owners
//
// Nobody compares clocks of different machines. An owner proves it is alive by moving
// its record's revision (Renew, every heartbeat); a reader decides that the owner is
// gone only after watching the revision not move for a whole lease on its own
// monotonic clock, and then takes over with a compare-and-set on the revision it
// watched, which fails if the owner moved after all.
//
// # Absence
//
// Absence is never concluded from a read: "no record" leads to a Create, "no result"
// to an Append with an expected sequence; both are decided by the server. Reads only
// choose which write to try.
//
// # Key records
//
// A key record names its action (and the input's hash). Same key and input: the
// duplicate replays the holder's terminal result from the result log, waiting for it
// while the holder runs (the holder's own message guarantees that it ends). Different
// input: conflict. A holder whose terminal result is retryable and certain (Hermes
// never started the work) frees the key (Delete with compare-and-set), so that a later
// action runs.
type Ledger struct {
	rec   Records
	log   ResultLog
	lease time.Duration
}

// Records is the compare-and-set record store the ledger writes (Store, or an
// in-memory one in tests).
type Records interface {
	Create(ctx context.Context, key string, r Record) (uint64, error)
	Get(ctx context.Context, key string) (Entry, error)
	Update(ctx context.Context, key string, r Record, rev uint64) (uint64, error)
	Delete(ctx context.Context, key string, rev uint64) error
	Wait(ctx context.Context, key string, afterRev uint64) (Entry, error)
}

var _ Records = (*Store)(nil)

// Ledger errors, matched with errors.Is.
var (
	// ErrLostClaim: another delivery took the claim over; this one must stop without
	// sending or settling.
	ErrLostClaim = errors.New("kvstore: the claim was taken over")
	// ErrCancelRequested: a cancel request flagged the action; the owner settles it
	// cancelled instead.
	ErrCancelRequested = errors.New("kvstore: cancel requested")
	// ErrSettled: the action already has a terminal result (another one won).
	ErrSettled = errors.New("kvstore: already settled")
	// ErrFenced: Dispatch on a claim taken over from an owner that was settling a
	// result it reached without calling Hermes: the action must not be sent now (that
	// owner may still append its result); settle it as certainly not sent.
	ErrFenced = errors.New("kvstore: the action was being settled without a call; it is not sent")
	// ErrNotFresh: Start found a record of the action, or its key held by another
	// action (then the error is a *NotFreshError naming the holder): nothing was sent;
	// take the ordinary path (Begin).
	ErrNotFresh = errors.New("kvstore: the action has a record or its key another holder; begin it")
	// ErrNotParked: a decision found its action neither parked nor decided.
	ErrNotParked = errors.New("kvstore: the action is not waiting for a decision")
	// ErrNotDispatched: Bind on a claim whose record is not marked dispatched.
	ErrNotDispatched = errors.New("kvstore: the action is not dispatched")
	// ErrNotPending: an approval answer found no bound run asking that approval.
	ErrNotPending = errors.New("kvstore: no run waits for this approval")
	// ErrAnswered: the approval was answered already (the record names by what).
	ErrAnswered = errors.New("kvstore: the approval was answered already")
)

// NewLedger returns a ledger over rec and log. lease is how long an owner's revision
// must stand still before a reader takes the claim over; it must exceed the owner's
// heartbeat interval several times over.
func NewLedger(rec Records, log ResultLog, lease time.Duration) *Ledger {
	return &Ledger{rec: rec, log: log, lease: lease}
}

// Lease returns the lease.
func (l *Ledger) Lease() time.Duration { return l.lease }

// Log returns the result log.
func (l *Ledger) Log() ResultLog { return l.log }

// Intent is what a delivery asks to run.
type Intent struct {
	ActionID     string
	CapabilityID string
	InputSHA256  string
	// IdemKey is the scoped key's record key (IdempotencyKey), "" for none.
	IdemKey string
	// Owner names this delivery (unique per delivery).
	Owner string
	// Safe says the operation may run twice (a read): its Settle needs no fence.
	Safe bool
	// WaitLimit, when positive, bounds Begin's wait for another delivery (ctx bounds it
	// too); the error is then context.DeadlineExceeded while ctx is live. A Begin that
	// finds no record does not wait, and makes no timer for it.
	WaitLimit time.Duration
}

// Verdict says what a delivery does after Begin or Decide.
type Verdict int

const (
	// Run: the claim is held and nothing was sent; run the action (Claim.Record says
	// whether an approval decision, or a cancel flag, came with it).
	Run Verdict = iota
	// Uncertain: the claim is held over a record whose request may have reached
	// Hermes: settle outcome_unknown (or cancelled with uncertain outcome); never
	// resend. (The record may also be that of a delivery that stopped while it
	// settled a result it reached without sending, see Settle; its Decision, if not
	// approve, still says that nothing was sent.)
	Uncertain
	// Done: the action has its terminal result (Outcome.Log); acknowledge.
	Done
	// Parked: the action waits for its decision; acknowledge.
	Parked
	// Stored: the record holds a terminal result that is not in the log yet (a cancel
	// that came before its action): append it with SettleUnclaimed.
	Stored
)

func (v Verdict) String() string {
	return [...]string{"run", "uncertain", "done", "parked", "stored"}[v]
}

// Outcome is the result of Begin or Decide.
type Outcome struct {
	Verdict Verdict
	Claim   *Claim   // Run, Uncertain
	Log     LogEntry // Done
	Record  Record   // Parked, Stored
}

// Claim is a delivery's hold on an action record. Its methods are safe for concurrent
// use (the heartbeat renews it while the delivery works).
type Claim struct {
	l   *Ledger
	id  string
	key string

	mu     sync.Mutex
	rev    uint64
	rec    Record
	keyRev uint64 // the key record's revision while held, 0 otherwise
	keyRec Record
	lost   bool
	done   bool
	// safe: the operation may run twice; Settle does not fence it (see Settle).
	safe bool
	// replay: Settle settles a replay of the key holder's result (see Replays).
	replay bool
	// tookOver: the claim was taken from an owner that may still be alive (paused):
	// Settle looks at the log before appending, so that a woken owner's result, if it
	// came first, is not followed by a second result message for live subscribers.
	tookOver bool
}

func (l *Ledger) newClaim(key string, rev uint64, r Record) *Claim {
	return &Claim{l: l, id: r.ActionID, key: key, rev: rev, rec: r}
}

// claimFor is newClaim for a claim taken for in (its safety decides the fence).
func (l *Ledger) claimFor(in Intent, key string, rev uint64, r Record) *Claim {
	c := l.newClaim(key, rev, r)
	c.safe = in.Safe
	return c
}

// record is the action record a fresh claim for in creates. It carries its
// CreatedAt, so that the claim's later updates (which rewrite the whole record) keep
// it: the status endpoint reports the action's age from it.
func (in Intent) record() Record {
	return Record{State: StateClaimed, ActionID: in.ActionID, CapabilityID: in.CapabilityID,
		InputSHA256: in.InputSHA256, Owner: in.Owner, Attempt: 1, IdemKey: in.IdemKey,
		CreatedAt: time.Now().UTC()}
}

// Record returns the claimed record as last written by this claim.
func (c *Claim) Record() Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec
}

// Revision returns the claim's current revision of the action record.
func (c *Claim) Revision() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev
}

// Lost reports whether the claim was taken over or given up.
func (c *Claim) Lost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// Replays marks the claim's coming Settle as a replay of its key holder's result,
// which needs no fence: a replay is chosen only when the holder's result keeps the
// key, so any delivery that takes the claim over replays the same result too (it
// saves the fence's write on every duplicate).
func (c *Claim) Replays() {
	c.mu.Lock()
	c.replay = true
	c.mu.Unlock()
}

// Fenced reports whether the claim was taken over from an owner that was settling
// without a call (StateSettling): Dispatch refuses it.
func (c *Claim) Fenced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec.State == StateSettling
}

// TookOver reports whether the claim was taken over from an earlier owner whose lease
// had run out (it may still be alive, paused).
func (c *Claim) TookOver() bool { return c.tookOver }

// Dispatched reports whether the claim's record is marked dispatched.
func (c *Claim) Dispatched() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec.State == StateDispatched
}

// Begin claims the action id for in, or decides what this delivery does about an
// existing record. It waits while another delivery owns the action (calling onWait
// once before the first wait, so that the caller can give back resources it holds),
// for at most in.WaitLimit when that is set, and takes the claim over once the owner's
// revision has stood still for a lease.
func (l *Ledger) Begin(ctx context.Context, in Intent, onWait func()) (Outcome, error) {
	key := ActionKey(in.ActionID)
	r := in.record()
	rev, err := l.rec.Create(ctx, key, r)
	if err == nil {
		return Outcome{Verdict: Run, Claim: l.claimFor(in, key, rev, r)}, nil
	}
	if !errors.Is(err, ErrExists) {
		return Outcome{}, err
	}
	return l.takeOver(ctx, in, onWait)
}

// Start claims the action id of an unsafe action that runs at once (no approval, no
// governed run) and writes its write-ahead mark, in one write: the action record is
// created already dispatched, so from Start's success on the request may reach Hermes
// and is never sent again. A keyed action first claims its key (a Create naming the
// action, or a key record that already names it: an earlier delivery crashed between
// the two Creates); the key comes first so that a crash between the two leaves a key
// whose holder's own message runs it, never a mark with no key.
//
// Start sends nothing itself and decides nothing on a read: when the action record
// exists (another delivery claimed the id, a cancel came first) or another action
// holds the key, it returns ErrNotFresh and the caller takes the ordinary path
// (Begin, then ClaimKey, Dispatch), which handles every such case; the key this call
// may have claimed stays the action's, as ClaimKey would have left it. Any other error
// is the store's; a Create whose reply was lost leaves a dispatched record that the
// next delivery settles outcome_unknown, as a lost Dispatch reply does.
//
// Compared with Begin, ClaimKey and Dispatch it saves the claimed record's Update: one
// durable write of three for a keyed action (key, mark, result) and of two unkeyed.
func (l *Ledger) Start(ctx context.Context, in Intent) (*Claim, error) {
	var keyRev uint64
	var kr Record
	if in.IdemKey != "" {
		var err error
		if keyRev, kr, err = l.startKey(ctx, in); err != nil {
			return nil, err
		}
	}
	key := ActionKey(in.ActionID)
	r := in.record()
	r.State = StateDispatched
	rev, err := l.rec.Create(ctx, key, r)
	if errors.Is(err, ErrExists) {
		return nil, ErrNotFresh
	}
	if err != nil {
		return nil, err
	}
	c := l.claimFor(in, key, rev, r)
	c.keyRev, c.keyRec = keyRev, kr
	return c, nil
}

// NotFreshError is Start's ErrNotFresh when another action holds the key: Holder is
// the key record as Start read it, for ClaimKeyAfter.
type NotFreshError struct{ Holder Entry }

func (e *NotFreshError) Error() string        { return ErrNotFresh.Error() }
func (e *NotFreshError) Is(target error) bool { return target == ErrNotFresh }

// startKey claims in's key for Start: its revision and record, or a *NotFreshError
// when another action holds it.
func (l *Ledger) startKey(ctx context.Context, in Intent) (uint64, Record, error) {
	kr := keyRecord(in.ActionID, in.CapabilityID, in.InputSHA256, in.Owner)
	rev, e, err := l.createOrRead(ctx, in.IdemKey, kr)
	switch {
	case err != nil:
		return 0, Record{}, err
	case rev != 0:
		return rev, kr, nil
	case e.Record.ActionID != in.ActionID:
		return 0, Record{}, &NotFreshError{Holder: e}
	}
	return e.Revision, e.Record, nil
}

// createOrRead creates key with r, or reads the record that holds it: the new
// revision (not 0) when the Create won, else the entry it found.
func (l *Ledger) createOrRead(ctx context.Context, key string, r Record) (uint64, Entry, error) {
	for {
		rev, err := l.rec.Create(ctx, key, r)
		if err == nil {
			return rev, Entry{}, nil
		}
		if !errors.Is(err, ErrExists) {
			return 0, Entry{}, err
		}
		e, err := l.rec.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			continue // gone since: create it afresh
		}
		return 0, e, err
	}
}

// keyRecord is the key record naming action id as the holder of its key.
func keyRecord(id, capID, inputSHA, owner string) Record {
	return Record{State: StateClaimed, ActionID: id, CapabilityID: capID, InputSHA256: inputSHA, Owner: owner}
}

// takeOver decides about an existing action record; see Begin.
func (l *Ledger) takeOver(ctx context.Context, in Intent, onWait func()) (Outcome, error) {
	if in.WaitLimit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, in.WaitLimit)
		defer cancel()
	}
	key := ActionKey(in.ActionID)
	for {
		e, err := l.rec.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			// Gone since (expired or released by deletion): claim it afresh.
			r := in.record()
			rev, err := l.rec.Create(ctx, key, r)
			if errors.Is(err, ErrExists) {
				continue
			}
			if err != nil {
				return Outcome{}, err
			}
			return Outcome{Verdict: Run, Claim: l.claimFor(in, key, rev, r)}, nil
		}
		if err != nil {
			return Outcome{}, err
		}
		r := e.Record
		if r.State == StateSettled {
			return Outcome{Verdict: Stored, Record: r}, nil
		}
		// The result log is the terminal register: look there before anything else.
		le, err := l.log.Last(ctx, in.ActionID)
		switch {
		case err == nil && le.Terminal:
			return Outcome{Verdict: Done, Log: le}, nil
		case err != nil && !errors.Is(err, ErrNotFound):
			return Outcome{}, err
		}
		switch r.State {
		case StateParked:
			return Outcome{Verdict: Parked, Record: r}, nil
		case StateReleased:
			nr := r
			nr.State, nr.Owner, nr.Attempt = StateClaimed, in.Owner, r.Attempt+1
			rev, err := l.rec.Update(ctx, key, nr, e.Revision)
			if errors.Is(err, ErrConflict) {
				continue
			}
			if err != nil {
				return Outcome{}, err
			}
			return Outcome{Verdict: Run, Claim: l.claimFor(in, key, rev, nr)}, nil
		}
		// Claimed or dispatched by another delivery: wait for it to end, or for its
		// revision to stand still for a lease.
		if onWait != nil {
			onWait()
			onWait = nil
		}
		moved, done, le, err := l.awaitMove(ctx, e, in.ActionID)
		switch {
		case err != nil:
			return Outcome{}, err
		case done:
			return Outcome{Verdict: Done, Log: le}, nil
		case moved:
			continue
		}
		// (Settling a dispatched claim does not move its record: awaitMove has looked
		// at the log once more after the lease.)
		nr := r
		nr.Owner, nr.Attempt = in.Owner, r.Attempt+1
		rev, err := l.rec.Update(ctx, key, nr, e.Revision)
		if errors.Is(err, ErrConflict) {
			continue // the owner moved after all
		}
		if err != nil {
			return Outcome{}, err
		}
		v := Run
		if r.State == StateDispatched {
			v = Uncertain
		}
		c := l.claimFor(in, key, rev, nr)
		c.tookOver = true
		return Outcome{Verdict: v, Claim: c}, nil
	}
}

// awaitMove watches e's key for a revision after e's for up to a lease, and the
// action's result log for its terminal result (an owner's last act is that append,
// not a record write). moved is true when a revision came (or the key was deleted);
// done is true (with the entry) when the terminal result came; both are false when the
// lease passed without either.
func (l *Ledger) awaitMove(ctx context.Context, e Entry, id string) (moved, done bool, le LogEntry, err error) {
	wctx, cancel := context.WithTimeout(ctx, l.lease)
	defer cancel()
	type terminal struct {
		le  LogEntry
		err error
	}
	tc := make(chan terminal, 1)
	go func() {
		le, err := l.log.WaitTerminal(wctx, id)
		if err == nil {
			cancel() // ends the record watch
		}
		tc <- terminal{le, err}
	}()
	_, err = l.rec.Wait(wctx, e.Key, e.Revision)
	cancel()
	// The watcher of the log ends with wctx; its answer is used if it is already there
	// (otherwise the lease branch below reads the log itself), so that a call stuck
	// in the log cannot hold this one.
	select {
	case t := <-tc:
		if t.err == nil {
			return false, true, t.le, nil
		}
	default:
	}
	switch {
	case err == nil, errors.Is(err, ErrNotFound):
		return true, false, LogEntry{}, nil
	case ctx.Err() != nil:
		return false, false, LogEntry{}, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		// The lease passed with neither: one more look at the log, which the owner may
		// have appended to just as the watch ended.
		if le, lerr := l.log.Last(ctx, id); lerr == nil && le.Terminal {
			return false, true, le, nil
		} else if lerr != nil && !errors.Is(lerr, ErrNotFound) {
			return false, false, LogEntry{}, lerr
		}
		return false, false, LogEntry{}, nil
	default:
		return false, false, LogEntry{}, err
	}
}

// KeyVerdict says what a delivery does about its idempotency key.
type KeyVerdict int

const (
	// KeyHeld: this action holds the key; go on.
	KeyHeld KeyVerdict = iota
	// KeyReplay: another action with the same input holds it and has its terminal
	// result (KeyOutcome.Log): replay that result.
	KeyReplay
	// KeyConflict: another action holds it with a different input.
	KeyConflict
)

// KeyOutcome is the result of ClaimKey.
type KeyOutcome struct {
	Verdict  KeyVerdict
	Original string   // the holder's action id (KeyReplay, KeyConflict)
	Log      LogEntry // the holder's terminal result (KeyReplay)
}

// ClaimKey claims the claim's idempotency key (Record().IdemKey), or finds who holds
// it. While a holder with the same input runs, it waits for the holder's terminal
// result (calling onWait once before the first wait); a holder whose result frees the
// key (retryable and certain) is replaced.
func (c *Claim) ClaimKey(ctx context.Context, onWait func()) (KeyOutcome, error) {
	return c.claimKey(ctx, nil, onWait)
}

// ClaimKeyAfter is ClaimKey for an action whose Start found its key held by another
// action: it begins with the key record Start read (NotFreshError.Holder) instead of
// a Create that would fail and a read. That read may be behind as ClaimKey's own may,
// and nothing it decides needs more: a replay waits for the holder's terminal result
// in the log, a conflict names the input the key held when it was read, and freeing
// the key is a Delete with compare-and-set on the revision read (which fails, and
// starts over, if the key moved since). A nil seen is ClaimKey.
func (c *Claim) ClaimKeyAfter(ctx context.Context, seen *Entry, onWait func()) (KeyOutcome, error) {
	return c.claimKey(ctx, seen, onWait)
}

// claimKey is ClaimKey, beginning with seen when it is not nil.
func (c *Claim) claimKey(ctx context.Context, seen *Entry, onWait func()) (KeyOutcome, error) {
	l := c.l
	c.mu.Lock()
	kr := keyRecord(c.id, c.rec.CapabilityID, c.rec.InputSHA256, c.rec.Owner)
	ikey := c.rec.IdemKey
	c.mu.Unlock()
	for {
		var e Entry
		if seen != nil {
			e, seen = *seen, nil
		} else {
			rev, found, err := l.createOrRead(ctx, ikey, kr)
			if err != nil {
				return KeyOutcome{}, err
			}
			if rev != 0 {
				c.holdKey(rev, kr)
				return KeyOutcome{Verdict: KeyHeld}, nil
			}
			e = found
		}
		holder := e.Record
		if holder.ActionID == c.id {
			c.holdKey(e.Revision, holder) // an earlier delivery of this action claimed it
			return KeyOutcome{Verdict: KeyHeld}, nil
		}
		if holder.InputSHA256 != kr.InputSHA256 {
			return KeyOutcome{Verdict: KeyConflict, Original: holder.ActionID}, nil
		}
		le, err := l.log.Last(ctx, holder.ActionID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return KeyOutcome{}, err
		}
		if err != nil || !le.Terminal {
			if onWait != nil {
				onWait()
				onWait = nil
			}
			if le, err = l.log.WaitTerminal(ctx, holder.ActionID); err != nil {
				return KeyOutcome{}, err
			}
		}
		if FreesKey(le.Data) {
			if err := l.rec.Delete(ctx, ikey, e.Revision); err != nil && !errors.Is(err, ErrConflict) {
				return KeyOutcome{}, err
			}
			continue
		}
		return KeyOutcome{Verdict: KeyReplay, Original: holder.ActionID, Log: le}, nil
	}
}

func (c *Claim) holdKey(rev uint64, r Record) {
	c.mu.Lock()
	c.keyRev, c.keyRec = rev, r
	c.mu.Unlock()
}

// FreesKey reports whether a result (its JSON) frees its idempotency key: its error is
// retryable and certain (CONTRACT §5).
func FreesKey(result []byte) bool {
	var r struct {
		Error *struct {
			Retryable bool `json:"retryable"`
			Uncertain bool `json:"uncertain_outcome"`
		} `json:"error"`
	}
	return json.Unmarshal(result, &r) == nil && r.Error != nil && r.Error.Retryable && !r.Error.Uncertain
}

// update writes fn's change to the claimed record with the claim's revision: fn
// returns the record it is given with the change (the record goes by value, so that
// no copy of it escapes to the heap), and the claim's record is the changed one once
// it is written. A lost compare-and-set is reconciled: if the record is still this
// claim's (a cancel request flagged it), the claim adopts it and the error is
// ErrCancelRequested; otherwise the claim is lost (ErrLostClaim). Called with c.mu
// held.
func (c *Claim) update(ctx context.Context, fn func(Record) Record) error {
	if c.lost {
		return ErrLostClaim
	}
	nr := fn(c.rec)
	rev, err := c.l.rec.Update(ctx, c.key, nr, c.rev)
	if err == nil {
		c.rev, c.rec = rev, nr
		return nil
	}
	if !errors.Is(err, ErrConflict) {
		return err
	}
	e, gerr := c.l.rec.Get(ctx, c.key)
	if errors.Is(gerr, ErrNotFound) {
		// A record does not vanish while its action runs (heartbeats renew it): this is
		// a read that is behind (a direct get answered by a lagging replica). Unknown,
		// not lost: the caller retries (not matched as ErrNotFound).
		return fmt.Errorf("kvstore: %s changed and reads as absent (a stale read): %v", c.key, gerr)
	}
	if gerr != nil {
		return gerr
	}
	if e.Record.Owner == c.rec.Owner && e.Record.State == c.rec.State {
		c.rev, c.rec = e.Revision, e.Record
		if e.Record.Cancel {
			return ErrCancelRequested
		}
		return c.update(ctx, fn)
	}
	c.lost = true
	return ErrLostClaim
}

// beforeSettle checks and fences the claim for Settle (a safe claim is not fenced)
// and returns the sequence its result follows and whether the action was parked.
func (c *Claim) beforeSettle(ctx context.Context) (expect uint64, parked bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return 0, false, ErrLostClaim
	}
	if c.rec.State != StateDispatched && c.rec.State != StateSettling && !c.safe && !c.replay {
		if err := c.fence(ctx); err != nil {
			return 0, false, err
		}
	}
	return c.rec.PendingSeq, len(c.rec.Action) > 0, nil
}

// fence marks the claimed record settling before a Settle (see Settle). A cancel
// flag that came in does not stop it: the claim still holds the record and settles
// what it was settling. Called with c.mu held.
func (c *Claim) fence(ctx context.Context) error {
	for {
		err := c.update(ctx, func(r Record) Record { r.State = StateSettling; return r })
		if !errors.Is(err, ErrCancelRequested) {
			return err
		}
	}
}

// Dispatch writes the write-ahead mark: from its success on, the request may reach
// Hermes and is never sent again. It fails with ErrLostClaim when the claim was taken
// over and ErrCancelRequested when a cancel flagged the action (nothing was sent).
func (c *Claim) Dispatch(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec.State == StateSettling {
		return ErrFenced
	}
	if c.rec.Cancel {
		return ErrCancelRequested
	}
	return c.update(ctx, func(r Record) Record { r.State = StateDispatched; return r })
}

// Bind stores the id of the durable work the dispatched request started (a Hermes
// run's run_id) in the claim's record, so that a delivery that takes the record over
// finds it (its Outcome is Uncertain, with Record().RunID set) and can follow that work
// to its real result instead of settling an unknown outcome. It must be the owner's
// first write after the request's answer. A cancel flag that came in does not stop it
// (the work exists and its id must be kept): the claim adopts the flag, which its
// Record then shows. Binding the bound id again does nothing; another id is refused.
// Errors: ErrNotDispatched, ErrLostClaim, ErrFenced.
func (c *Claim) Bind(ctx context.Context, runID string) error {
	if runID == "" {
		return errors.New("kvstore: Bind needs a run id")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.lost:
		return ErrLostClaim
	case c.rec.State == StateSettling:
		return ErrFenced
	case c.rec.State != StateDispatched:
		return ErrNotDispatched
	case c.rec.RunID == runID:
		return nil
	case c.rec.RunID != "":
		return fmt.Errorf("kvstore: %s is bound to another run", c.id)
	}
	for {
		err := c.update(ctx, func(r Record) Record { r.RunID = runID; return r })
		if !errors.Is(err, ErrCancelRequested) {
			return err
		}
	}
}

// AskApproval records that the claim's bound run asks tool approval seq (from 1, one
// more than the last): it appends the pending message after the action's last result
// message, then writes the approval's index, hash (sha) and expiry with the message's
// sequence into the record, where any replica's decision finds it (AnswerApproval). A
// cancel flag that came in is adopted. Errors: ErrNotDispatched (no bound run),
// ErrLostClaim, ErrSettled (a terminal result is stored).
func (c *Claim) AskApproval(ctx context.Context, seq int, sha string, expires time.Time, pending *nats.Msg) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.lost:
		return ErrLostClaim
	case c.rec.State != StateDispatched || c.rec.RunID == "":
		return ErrNotDispatched
	case seq <= c.rec.ApprovalSeq:
		return fmt.Errorf("kvstore: approval %d of %s is not after %d", seq, c.id, c.rec.ApprovalSeq)
	}
	pseq, err := c.l.log.Append(ctx, c.id, pending, c.rec.PendingSeq)
	if errors.Is(err, ErrConflict) {
		if le, lerr := c.l.log.Last(ctx, c.id); lerr == nil && le.Terminal {
			return ErrSettled
		}
	}
	if err != nil {
		return err
	}
	for {
		err := c.update(ctx, func(r Record) Record {
			r.PendingSeq, r.ApprovalSeq, r.ApprovalSHA256, r.ExpiresAt = pseq, seq, sha, expires.UTC()
			return r
		})
		if !errors.Is(err, ErrCancelRequested) {
			return err
		}
	}
}

// ExpireApproval answers the claim's pending approval seq as expired, unless a decision
// answered it first; won says whether the expiry answered it (the owner then denies it
// on Hermes). Errors: ErrLostClaim.
func (c *Claim) ExpireApproval(ctx context.Context, seq int) (won bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return false, ErrLostClaim
	}
	// The condition is checked in the write: a lost compare-and-set adopts the record a
	// decision wrote and applies this change again (see update).
	for {
		err = c.update(ctx, func(r Record) Record {
			won = r.ApprovalSeq == seq && r.ApprovalAnswered < seq
			if won {
				r.ApprovalAnswered, r.ApprovalDecision = seq, ""
			}
			return r
		})
		if !errors.Is(err, ErrCancelRequested) {
			return won && err == nil, err
		}
	}
}

// AnswerApproval records that decision (its message id) answers approval seq of action
// id's bound run: one compare-and-set on the action record, which any replica may do.
// Only the first answer of an approval wins; it returns the record as it stored it (the
// caller then forwards the decision to Hermes). Errors: ErrNotFound; ErrNotPending when
// no bound run asks approval seq (not yet asked, or not a bound run); ErrAnswered (with
// the stored record) when it was answered already.
func (l *Ledger) AnswerApproval(ctx context.Context, id string, seq int, decision string) (Record, error) {
	key := ActionKey(id)
	for {
		e, err := l.rec.Get(ctx, key)
		if err != nil {
			return Record{}, err
		}
		r := e.Record
		switch {
		case r.State != StateDispatched || r.RunID == "" || seq < 1 || r.ApprovalSeq < seq:
			return r, ErrNotPending
		case r.ApprovalAnswered >= seq:
			return r, ErrAnswered
		case r.ApprovalSeq != seq:
			return r, ErrAnswered // a later approval is asked: this one was answered
		}
		r.ApprovalAnswered, r.ApprovalDecision = seq, decision
		if _, err := l.rec.Update(ctx, key, r, e.Revision); err == nil {
			return r, nil
		} else if !errors.Is(err, ErrConflict) {
			return Record{}, err
		}
	}
}

// Renew moves the claim's revision (the owner's proof of life) and rewrites the key
// record it holds, so that neither expires while the action runs. It reports
// ErrLostClaim or ErrCancelRequested like Dispatch; after Settle or Release it does
// nothing.
func (c *Claim) Renew(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.lost {
		return nil
	}
	if err := c.update(ctx, func(r Record) Record { return r }); err != nil {
		return err
	}
	if c.keyRev != 0 {
		if rev, err := c.l.rec.Update(ctx, c.rec.IdemKey, c.keyRec, c.keyRev); err == nil {
			c.keyRev = rev
		}
	}
	return nil
}

// Release gives the claim up with certain non-execution, for a retry by a later
// delivery: the record moves to released. counted says whether this delivery spent an
// attempt. The key, if held, stays with the action.
func (c *Claim) Release(ctx context.Context, counted bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.lost {
		return nil
	}
	err := c.update(ctx, func(r Record) Record {
		r.State, r.Owner = StateReleased, ""
		if !counted {
			r.Attempt = max(r.Attempt-1, 0)
		}
		return r
	})
	c.done = true
	return err
}

// Park moves the claimed action to parked: first its park index entry, then its
// pending_approval message (appended at most once: a later Park finds it), then the
// record with the action JSON, the expiry and the pending message's sequence. It
// first proves the claim with a compare-and-set on the record, so that a claim that
// was taken over fails with ErrLostClaim before it writes an index entry or a pending
// message, and one that a cancel flagged fails with ErrCancelRequested.
func (c *Claim) Park(ctx context.Context, action json.RawMessage, expires time.Time, pending *nats.Msg) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec.Cancel {
		return ErrCancelRequested
	}
	if err := c.update(ctx, func(r Record) Record { return r }); err != nil {
		return err
	}
	l := c.l
	idx := Record{State: StateParked, ActionID: c.id, CapabilityID: c.rec.CapabilityID,
		InputSHA256: c.rec.InputSHA256, ExpiresAt: expires}
	if _, err := l.rec.Create(ctx, ParkKey(c.id), idx); err != nil && !errors.Is(err, ErrExists) {
		return err
	}
	seq, err := l.log.Append(ctx, c.id, pending, 0)
	if errors.Is(err, ErrConflict) {
		le, lerr := l.log.Last(ctx, c.id)
		if lerr != nil {
			return lerr
		}
		if le.Terminal {
			return ErrSettled
		}
		seq, err = le.Seq, nil
	}
	if err != nil {
		return err
	}
	err = c.update(ctx, func(r Record) Record {
		r.State, r.Owner, r.Action, r.ExpiresAt, r.PendingSeq = StateParked, "", action, expires, seq
		return r
	})
	if err == nil {
		c.done = true
	}
	return err
}

// Decision is what ends a parking: a Decision* constant, who decided, and why.
type Decision struct {
	Decision, Approver, Reason string
}

// Decide ends the parking of action id for the delivery owner with the decision
// that choose makes from the parked record (a Decision* constant and the approver):
// parked moves to claimed with the decision, and the caller runs or settles the
// action under the returned claim. A record that is no longer parked was decided
// before (a redelivered decision, or a second one): Decide then treats it as Begin
// does, so that the first decision is carried out, once. A record that is neither
// parked nor decided is watched until it moves (a parking under way finishes) or a
// lease passes. Errors: ErrNotFound when there is no record and ErrNotParked when it
// is not parked (the decision may have overtaken its action: try again later).
func (l *Ledger) Decide(ctx context.Context, id, owner string, choose func(Record) Decision, onWait func()) (Outcome, error) {
	key := ActionKey(id)
	waited := false
	for {
		e, err := l.rec.Get(ctx, key)
		if err != nil {
			return Outcome{}, err
		}
		r := e.Record
		if r.State != StateParked && r.Decision == "" && r.State != StateSettled {
			// Not parked (yet: the parking may be under way) and never decided.
			if le, err := l.log.Last(ctx, id); err == nil && le.Terminal {
				return Outcome{Verdict: Done, Log: le}, nil
			}
			if waited {
				return Outcome{}, ErrNotParked
			}
			waited = true
			if onWait != nil {
				onWait()
				onWait = nil
			}
			moved, done, le, err := l.awaitMove(ctx, e, id)
			switch {
			case err != nil:
				return Outcome{}, err
			case done:
				return Outcome{Verdict: Done, Log: le}, nil
			case moved:
				waited = false
			}
			continue
		}
		if r.State != StateParked {
			return l.takeOver(ctx, Intent{ActionID: id, CapabilityID: r.CapabilityID, InputSHA256: r.InputSHA256,
				IdemKey: r.IdemKey, Owner: owner}, onWait)
		}
		nr := r
		d := choose(r)
		nr.Decision, nr.Approver, nr.Reason = d.Decision, d.Approver, d.Reason
		nr.State, nr.Owner, nr.Attempt = StateClaimed, owner, 1
		rev, err := l.rec.Update(ctx, key, nr, e.Revision)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Verdict: Run, Claim: l.newClaim(key, rev, nr)}, nil
	}
}

// Settle appends the claim's terminal result m to the result log (after the action's
// pending message, if any) and then frees what the action held: its key when frees
// is true (the result is retryable and certain), and its park index entry. It fails
// with ErrLostClaim when the claim was taken over (nothing is appended), and with
// ErrSettled (and the winning entry) when another terminal result is stored already.
//
// A claim that never dispatched first proves that it still holds the record, with a
// compare-and-set that marks it settling (the fence): without it, a delivery paused
// past the lease could append a result that says the action never ran (a conflict, a
// cancel, a certain failure, which may free the key) while the delivery that took the
// record over runs it; and a delivery waiting on this one would take the record over
// a lease after the settle and run the action again, since the append does not move
// the record. From the fence on, whoever takes the record over never sends: it finds
// the result, or (Dispatch fails with ErrFenced) settles "certainly not sent". A dispatched claim needs no fence: its
// takers never send either, and its result is the real outcome, so the first of them
// to append wins. Nor does a safe one (Intent.Safe): a read may run twice, and a
// delivery waiting on it finds its result in the log (awaitMove), so it saves the write.
func (c *Claim) Settle(ctx context.Context, m *nats.Msg, frees bool) (LogEntry, error) {
	expect, parked, err := c.beforeSettle(ctx)
	if err != nil {
		return LogEntry{}, err
	}
	c.mu.Lock()
	tookOver := c.tookOver
	c.mu.Unlock()
	if tookOver {
		if le, err := c.l.log.Last(ctx, c.id); err == nil && le.Terminal {
			return le, ErrSettled
		}
	}
	le, err := c.l.SettleUnclaimed(ctx, c.id, m, expect)
	if err != nil {
		return le, err
	}
	c.mu.Lock()
	c.done = true
	ikey, keyRev := c.rec.IdemKey, c.keyRev
	c.mu.Unlock()
	if frees && keyRev != 0 {
		if err := c.l.rec.Delete(ctx, ikey, keyRev); err != nil && !errors.Is(err, ErrConflict) {
			return le, fmt.Errorf("kvstore: free key of %s: %w", c.id, err)
		}
	}
	if parked {
		c.l.Unpark(ctx, c.id)
	}
	return le, nil
}

// SettleUnclaimed appends the terminal result m of action id after the result
// message with sequence expect (0: none), following any pending message it did not
// know of. It is for results that need no claim: a result held in a settled record
// (Verdict Stored) and a last-resort result. Errors: ErrSettled with the stored entry.
func (l *Ledger) SettleUnclaimed(ctx context.Context, id string, m *nats.Msg, expect uint64) (LogEntry, error) {
	for {
		seq, err := l.log.Append(ctx, id, m, expect)
		if err == nil {
			return LogEntry{Seq: seq, Terminal: true, Header: m.Header, Data: m.Data}, nil
		}
		if !errors.Is(err, ErrConflict) {
			return LogEntry{}, err
		}
		le, lerr := l.log.Last(ctx, id)
		if lerr != nil {
			return LogEntry{}, lerr
		}
		if le.Terminal {
			return le, ErrSettled
		}
		expect = le.Seq
	}
}

// Unpark removes action id's park index entry, if any (best effort: a stale entry is
// removed by the next sweep).
func (l *Ledger) Unpark(ctx context.Context, id string) {
	if e, err := l.rec.Get(ctx, ParkKey(id)); err == nil {
		_ = l.rec.Delete(ctx, ParkKey(id), e.Revision)
	}
}

// Cancel states answered by CancelStored (CONTRACT §8).
const (
	CancelCancelled      = "cancelled"
	CancelAlreadySettled = "already_settled"
	CancelUnknown        = "unknown"
)

// CancelStored answers a cancel request for action id from the records, for an action
// that no replica reachable by the request is running:
//   - no record: it creates a settled record holding tombstone (the cancelled result),
//     so that the action, if it comes, settles cancelled without reaching Hermes
//     ("unknown"); when allowTombstone returns false it only answers "unknown";
//   - a terminal result (or a settled record): "already_settled";
//   - parked: the parking ends with DecisionCancel and the returned claim must be
//     settled cancelled by the caller ("cancelled");
//   - claimed, released or dispatched: it sets the record's cancel flag, which its
//     owner (or whoever takes it over) honours ("cancelled").
func (l *Ledger) CancelStored(ctx context.Context, id, owner string, tombstone json.RawMessage, allowTombstone func() bool) (string, *Claim, error) {
	key := ActionKey(id)
	for {
		e, err := l.rec.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			if !allowTombstone() {
				return CancelUnknown, nil, nil
			}
			_, err := l.rec.Create(ctx, key, Record{State: StateSettled, ActionID: id, Result: tombstone})
			if errors.Is(err, ErrExists) {
				continue
			}
			if err != nil {
				return "", nil, err
			}
			return CancelUnknown, nil, nil
		}
		if err != nil {
			return "", nil, err
		}
		r := e.Record
		if r.State == StateSettled {
			return CancelAlreadySettled, nil, nil
		}
		le, err := l.log.Last(ctx, id)
		if err == nil && le.Terminal {
			return CancelAlreadySettled, nil, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return "", nil, err
		}
		if r.State == StateParked {
			nr := r
			nr.State, nr.Owner, nr.Decision, nr.Attempt = StateClaimed, owner, DecisionCancel, 1
			rev, err := l.rec.Update(ctx, key, nr, e.Revision)
			if errors.Is(err, ErrConflict) {
				continue
			}
			if err != nil {
				return "", nil, err
			}
			return CancelCancelled, l.newClaim(key, rev, nr), nil
		}
		if r.Cancel {
			return CancelCancelled, nil, nil
		}
		nr := r
		nr.Cancel = true
		if _, err := l.rec.Update(ctx, key, nr, e.Revision); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return "", nil, err
		}
		return CancelCancelled, nil, nil
	}
}
