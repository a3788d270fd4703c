package kvtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Records is an in-memory [kvstore.Records] with the semantics of [kvstore.Store] on a
// JetStream bucket with history 1 and no TTL:
//
//   - revisions are one counter for the whole bucket, like a stream's sequence: every
//     applied write (a Create, an Update, a Delete's marker) takes the next one;
//   - Create fails with kvstore.ErrExists over a live value and succeeds over a deleted
//     one (or a key never written);
//   - Update and Delete succeed only with the key's latest revision of a live value, and
//     fail with an error matching kvstore.ErrConflict otherwise (a wrong revision, a
//     deleted key, revision 0);
//   - Get fails with an error matching kvstore.ErrNotFound when the key has no live value;
//   - Wait returns at once a value newer than afterRev, blocks until one is written,
//     fails with kvstore.ErrNotFound when the key is deleted or has no value (at the
//     start or while it waits), and with ctx.Err() when ctx ends;
//   - Create sets UpdatedAt to now and CreatedAt to now when zero, Update sets
//     UpdatedAt, and Entry.Written is the write's time.
//
// Values are copied in and out, so a caller never shares a Record's slices with the
// store. Failed calls write nothing and take no revision.
type Records struct {
	hooks hooks

	mu     sync.Mutex
	rev    uint64
	keys   map[string]*slot
	faults faults
	writes []Write
	calls  map[Op]int
	now    func() time.Time
}

// slot is one key: its latest value and every version written.
type slot struct {
	live    bool
	entry   kvstore.Entry // the live value, when live
	history []Version
	changed chan struct{} // closed (and replaced) by every write to the key
}

// Version is one write of a key, as History reports it.
type Version struct {
	Entry   kvstore.Entry // for a delete, only Key, Revision and Written are set
	Deleted bool
}

// Write is one applied write, as Writes reports it.
type Write struct {
	Op       Op
	Key      string
	Revision uint64
}

var _ kvstore.Records = (*Records)(nil)

// NewRecords returns an empty store.
func NewRecords() *Records {
	return &Records{keys: map[string]*slot{}, calls: map[Op]int{}, now: time.Now}
}

// SetClock sets the clock for the records' timestamps (time.Now by default).
func (s *Records) SetClock(now func() time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

// OnCall sets f to run at the start of every call (f(op, key)), in the calling
// goroutine, before the call takes a scripted fault: f may block (to hold the caller at
// that exact call), script a fault for the call, or call the store. nil removes it.
func (s *Records) OnCall(f func(op Op, key string)) { s.hooks.set(f) }

// OnCallContext is OnCall with the call's ctx, so that a hook can tell callers apart by
// values their ctx carries.
func (s *Records) OnCallContext(f func(ctx context.Context, op Op, key string)) {
	s.hooks.setCtx(f)
}

// FailNext makes the next call of op on key (any key when "") fail with err and change
// nothing. Faults are taken in the order they were scripted.
func (s *Records) FailNext(op Op, key string, err error) {
	s.mu.Lock()
	s.faults.add(fault{op: op, key: key, kind: faultFail, err: err})
	s.mu.Unlock()
}

// LoseAck makes the next write of op (OpCreate, OpUpdate or OpDelete) on key (any key
// when "") take effect and then fail with an error wrapping ErrLostAck, as when the
// server applied it and its reply was lost. See the package doc for Create's own
// recovery of lost replies, which this does not emulate.
func (s *Records) LoseAck(op Op, key string) {
	s.mu.Lock()
	s.faults.add(fault{op: op, key: key, kind: faultLost})
	s.mu.Unlock()
}

// StaleGet makes the next Get of key return e although the key may hold a newer value
// (a read served by a replica behind the leader); the zero Entry makes that Get fail
// with kvstore.ErrNotFound. e is returned as given (its Key is set to key).
func (s *Records) StaleGet(key string, e kvstore.Entry) {
	s.mu.Lock()
	s.faults.add(fault{op: OpGet, key: key, kind: faultStale, value: e})
	s.mu.Unlock()
}

// PendingFaults returns how many scripted faults no call has taken yet.
func (s *Records) PendingFaults() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.pending()
}

// enter runs the hooks, counts the call and takes its fault, if any.
func (s *Records) enter(ctx context.Context, op Op, key string) (fault, bool) {
	s.hooks.call(ctx, op, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	return s.faults.take(op, key)
}

func (s *Records) slot(key string) *slot {
	sl := s.keys[key]
	if sl == nil {
		sl = &slot{changed: make(chan struct{})}
		s.keys[key] = sl
	}
	return sl
}

// write applies one write to key under s.mu: the next revision, the history, the
// counters and the wake-up of waiters.
func (s *Records) write(op Op, key string, r *kvstore.Record) uint64 {
	s.rev++
	now := s.now()
	sl := s.slot(key)
	v := Version{Entry: kvstore.Entry{Key: key, Revision: s.rev, Written: now}}
	if r == nil {
		sl.live, sl.entry = false, kvstore.Entry{}
		v.Deleted = true
	} else {
		v.Entry.Record = copyRecord(*r)
		sl.live, sl.entry = true, v.Entry
	}
	sl.history = append(sl.history, v)
	s.writes = append(s.writes, Write{Op: op, Key: key, Revision: s.rev})
	close(sl.changed)
	sl.changed = make(chan struct{})
	return s.rev
}

// Create implements [kvstore.Records].
func (s *Records) Create(ctx context.Context, key string, r kvstore.Record) (uint64, error) {
	f, ok := s.enter(ctx, OpCreate, key)
	if ok && f.kind == faultFail {
		return 0, f.err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("kvtest: create %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl := s.keys[key]; sl != nil && sl.live {
		return 0, fmt.Errorf("%w: create %s: revision %d is live", kvstore.ErrExists, key, sl.entry.Revision)
	}
	now := s.now().UTC()
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.UpdatedAt = now
	rev := s.write(OpCreate, key, &r)
	if ok && f.kind == faultLost {
		return 0, lostAck(OpCreate, key)
	}
	return rev, nil
}

// Get implements [kvstore.Records].
func (s *Records) Get(ctx context.Context, key string) (kvstore.Entry, error) {
	f, ok := s.enter(ctx, OpGet, key)
	if ok {
		switch f.kind {
		case faultFail:
			return kvstore.Entry{}, f.err
		case faultStale:
			e := f.value.(kvstore.Entry)
			if e.Revision == 0 {
				return kvstore.Entry{}, fmt.Errorf("%w: %s", kvstore.ErrNotFound, key)
			}
			e.Key, e.Record = key, copyRecord(e.Record)
			return e, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return kvstore.Entry{}, fmt.Errorf("kvtest: get %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.keys[key]
	if sl == nil || !sl.live {
		return kvstore.Entry{}, fmt.Errorf("%w: %s", kvstore.ErrNotFound, key)
	}
	return copyEntry(sl.entry), nil
}

// Update implements [kvstore.Records].
func (s *Records) Update(ctx context.Context, key string, r kvstore.Record, rev uint64) (uint64, error) {
	f, ok := s.enter(ctx, OpUpdate, key)
	if ok && f.kind == faultFail {
		return 0, f.err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("kvtest: update %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkRev(OpUpdate, key, rev); err != nil {
		return 0, err
	}
	r.UpdatedAt = s.now().UTC()
	nrev := s.write(OpUpdate, key, &r)
	if ok && f.kind == faultLost {
		return 0, lostAck(OpUpdate, key)
	}
	return nrev, nil
}

// Delete implements [kvstore.Records].
func (s *Records) Delete(ctx context.Context, key string, rev uint64) error {
	f, ok := s.enter(ctx, OpDelete, key)
	if ok && f.kind == faultFail {
		return f.err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kvtest: delete %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkRev(OpDelete, key, rev); err != nil {
		return err
	}
	s.write(OpDelete, key, nil)
	if ok && f.kind == faultLost {
		return lostAck(OpDelete, key)
	}
	return nil
}

// checkRev is the compare-and-set of Update and Delete, under s.mu.
func (s *Records) checkRev(op Op, key string, rev uint64) error {
	if rev == 0 {
		return fmt.Errorf("%w: %s %s: revision 0", kvstore.ErrConflict, op, key)
	}
	sl := s.keys[key]
	switch {
	case sl == nil || !sl.live:
		return fmt.Errorf("%w: %s %s at %d: no live value", kvstore.ErrConflict, op, key, rev)
	case sl.entry.Revision != rev:
		return fmt.Errorf("%w: %s %s at %d: latest is %d", kvstore.ErrConflict, op, key, rev, sl.entry.Revision)
	}
	return nil
}

// Wait implements [kvstore.Records].
func (s *Records) Wait(ctx context.Context, key string, afterRev uint64) (kvstore.Entry, error) {
	f, ok := s.enter(ctx, OpWait, key)
	if ok && f.kind == faultFail {
		return kvstore.Entry{}, f.err
	}
	for {
		if err := ctx.Err(); err != nil {
			return kvstore.Entry{}, err
		}
		s.mu.Lock()
		sl := s.keys[key]
		if sl == nil || !sl.live {
			s.mu.Unlock()
			return kvstore.Entry{}, fmt.Errorf("%w: %s", kvstore.ErrNotFound, key)
		}
		if sl.entry.Revision > afterRev {
			e := copyEntry(sl.entry)
			s.mu.Unlock()
			return e, nil
		}
		ch := sl.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return kvstore.Entry{}, ctx.Err()
		case <-ch:
		}
	}
}

// Keys returns the keys with a live value that match filter (a NATS subject filter such
// as "park.>"), sorted, like [kvstore.Store.Keys].
func (s *Records) Keys(ctx context.Context, filter string) ([]string, error) {
	f, ok := s.enter(ctx, OpKeys, filter)
	if ok && f.kind == faultFail {
		return nil, f.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k, sl := range s.keys {
		if sl.live && matchFilter(filter, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// Peek returns key's live value without running hooks or taking faults (for a test's
// own checks).
func (s *Records) Peek(key string) (kvstore.Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.keys[key]
	if sl == nil || !sl.live {
		return kvstore.Entry{}, false
	}
	return copyEntry(sl.entry), true
}

// Live returns every live value whose key starts with prefix, by key.
func (s *Records) Live(prefix string) map[string]kvstore.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]kvstore.Entry{}
	for k, sl := range s.keys {
		if sl.live && strings.HasPrefix(k, prefix) {
			m[k] = copyEntry(sl.entry)
		}
	}
	return m
}

// History returns every version of key ever written, oldest first (history here is
// kept whole, unlike the bucket's; it is for a test's checks and for scripting stale
// reads).
func (s *Records) History(key string) []Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.keys[key]
	if sl == nil {
		return nil
	}
	out := make([]Version, len(sl.history))
	for i, v := range sl.history {
		out[i] = Version{Entry: copyEntry(v.Entry), Deleted: v.Deleted}
	}
	return out
}

// Revision returns the bucket's last revision.
func (s *Records) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Writes counts the applied writes of op (every op when "") on keys starting with
// prefix ("act.", "idem.", "park."; "" for all). A write whose reply was lost counts;
// a failed one does not.
func (s *Records) Writes(op Op, prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.writes {
		if (op == "" || w.Op == op) && strings.HasPrefix(w.Key, prefix) {
			n++
		}
	}
	return n
}

// WriteLog returns every applied write in order.
func (s *Records) WriteLog() []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// Calls counts the calls of op, failed or not.
func (s *Records) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func copyEntry(e kvstore.Entry) kvstore.Entry {
	e.Record = copyRecord(e.Record)
	return e
}

func copyRecord(r kvstore.Record) kvstore.Record {
	r.Result = slices.Clone(r.Result)
	r.Action = slices.Clone(r.Action)
	return r
}
