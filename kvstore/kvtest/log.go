package kvtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Log is an in-memory [kvstore.ResultLog] with the semantics of
// [kvstore.JetStreamLog] on a stream:
//
//   - sequences are one counter for the whole stream: every stored message takes the
//     next one, whatever its action;
//   - Append stores m as the action's next message only if the action's last stored
//     message has sequence expect (0: the action has none), and fails with an error
//     matching kvstore.ErrConflict otherwise; nothing stops an Append after a terminal
//     message (the stream would not either: the ledger never asks for one);
//   - an entry is terminal when its Nats-Msg-Id does not end in ":pending"
//     ([kvstore.IsTerminalMsgID]);
//   - Last fails with an error matching kvstore.ErrNotFound when the action has no
//     message;
//   - WaitTerminal returns the action's last message once it is terminal, blocking until
//     then, or ctx.Err() when ctx ends.
//
// Messages are copied in and out. Failed calls store nothing and take no sequence.
type Log struct {
	hooks hooks

	mu       sync.Mutex
	seq      uint64
	subjects map[string]*subject
	faults   faults
	calls    map[Op]int
	appends  []Appended
}

type subject struct {
	entries []kvstore.LogEntry
	changed chan struct{}
}

// Appended is one stored message, as Appends reports it.
type Appended struct {
	ActionID string
	Seq      uint64
	Terminal bool
}

var _ kvstore.ResultLog = (*Log)(nil)

// NewLog returns an empty log.
func NewLog() *Log {
	return &Log{subjects: map[string]*subject{}, calls: map[Op]int{}}
}

// OnCall sets f to run at the start of every call (f(op, actionID)); see
// [Records.OnCall].
func (l *Log) OnCall(f func(op Op, actionID string)) { l.hooks.set(f) }

// OnCallContext is OnCall with the call's ctx.
func (l *Log) OnCallContext(f func(ctx context.Context, op Op, actionID string)) {
	l.hooks.setCtx(f)
}

// FailNext makes the next call of op on actionID (any when "") fail with err and
// store nothing.
func (l *Log) FailNext(op Op, actionID string, err error) {
	l.mu.Lock()
	l.faults.add(fault{op: op, key: actionID, kind: faultFail, err: err})
	l.mu.Unlock()
}

// LoseAck makes the next Append on actionID (any when "") store its message and then
// fail with an error wrapping ErrLostAck. See the package doc for JetStreamLog's own
// recovery of lost replies, which this does not emulate.
func (l *Log) LoseAck(actionID string) {
	l.mu.Lock()
	l.faults.add(fault{op: OpAppend, key: actionID, kind: faultLost})
	l.mu.Unlock()
}

// StaleLast makes the next Last of actionID return e although a newer message may be
// stored (a direct get served by a replica behind the leader); the zero LogEntry makes
// it fail with kvstore.ErrNotFound.
func (l *Log) StaleLast(actionID string, e kvstore.LogEntry) {
	l.mu.Lock()
	l.faults.add(fault{op: OpLast, key: actionID, kind: faultStale, value: e})
	l.mu.Unlock()
}

// PendingFaults returns how many scripted faults no call has taken yet.
func (l *Log) PendingFaults() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.faults.pending()
}

func (l *Log) enter(ctx context.Context, op Op, id string) (fault, bool) {
	l.hooks.call(ctx, op, id)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[op]++
	return l.faults.take(op, id)
}

func (l *Log) subject(id string) *subject {
	s := l.subjects[id]
	if s == nil {
		s = &subject{changed: make(chan struct{})}
		l.subjects[id] = s
	}
	return s
}

// Append implements [kvstore.ResultLog].
func (l *Log) Append(ctx context.Context, actionID string, m *nats.Msg, expect uint64) (uint64, error) {
	f, ok := l.enter(ctx, OpAppend, actionID)
	if ok && f.kind == faultFail {
		return 0, f.err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("kvtest: append result of %s: %w", actionID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.subject(actionID)
	var last uint64
	if n := len(s.entries); n > 0 {
		last = s.entries[n-1].Seq
	}
	if last != expect {
		return 0, fmt.Errorf("%w: results of %s: last sequence is %d, not %d", kvstore.ErrConflict, actionID, last, expect)
	}
	l.seq++
	e := kvstore.LogEntry{Seq: l.seq, Header: cloneHeader(m.Header), Data: slices.Clone(m.Data)}
	e.Terminal, e.By = kvstore.Terminal(e.Data), e.Header.Get(kvstore.HeaderOwner)
	s.entries = append(s.entries, e)
	l.appends = append(l.appends, Appended{ActionID: actionID, Seq: e.Seq, Terminal: e.Terminal})
	close(s.changed)
	s.changed = make(chan struct{})
	if ok && f.kind == faultLost {
		return 0, fmt.Errorf("kvtest: append result of %s: %w", actionID, ErrLostAck)
	}
	return e.Seq, nil
}

// Last implements [kvstore.ResultLog].
func (l *Log) Last(ctx context.Context, actionID string) (kvstore.LogEntry, error) {
	f, ok := l.enter(ctx, OpLast, actionID)
	if ok {
		switch f.kind {
		case faultFail:
			return kvstore.LogEntry{}, f.err
		case faultStale:
			e := f.value.(kvstore.LogEntry)
			if e.Seq == 0 {
				return kvstore.LogEntry{}, fmt.Errorf("%w: results of %s", kvstore.ErrNotFound, actionID)
			}
			return copyLogEntry(e), nil
		}
	}
	if err := ctx.Err(); err != nil {
		return kvstore.LogEntry{}, fmt.Errorf("kvtest: read results of %s: %w", actionID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.subjects[actionID]
	if s == nil || len(s.entries) == 0 {
		return kvstore.LogEntry{}, fmt.Errorf("%w: results of %s", kvstore.ErrNotFound, actionID)
	}
	return copyLogEntry(s.entries[len(s.entries)-1]), nil
}

// WaitTerminal implements [kvstore.ResultLog].
func (l *Log) WaitTerminal(ctx context.Context, actionID string) (kvstore.LogEntry, error) {
	f, ok := l.enter(ctx, OpWaitTerminal, actionID)
	if ok && f.kind == faultFail {
		return kvstore.LogEntry{}, f.err
	}
	for {
		if err := ctx.Err(); err != nil {
			return kvstore.LogEntry{}, err
		}
		l.mu.Lock()
		s := l.subject(actionID)
		if n := len(s.entries); n > 0 && s.entries[n-1].Terminal {
			e := copyLogEntry(s.entries[n-1])
			l.mu.Unlock()
			return e, nil
		}
		ch := s.changed
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return kvstore.LogEntry{}, ctx.Err()
		case <-ch:
		}
	}
}

// Entries returns every message stored for actionID, in order (for a test's checks; no
// hooks, no faults).
func (l *Log) Entries(actionID string) []kvstore.LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.subjects[actionID]
	if s == nil {
		return nil
	}
	out := make([]kvstore.LogEntry, len(s.entries))
	for i, e := range s.entries {
		out[i] = copyLogEntry(e)
	}
	return out
}

// Terminals returns the terminal messages stored for actionID.
func (l *Log) Terminals(actionID string) []kvstore.LogEntry {
	var out []kvstore.LogEntry
	for _, e := range l.Entries(actionID) {
		if e.Terminal {
			out = append(out, e)
		}
	}
	return out
}

// ActionIDs returns the actions with at least one stored message, sorted.
func (l *Log) ActionIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, s := range l.subjects {
		if len(s.entries) > 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Appends returns every stored message in order (a message whose reply was lost
// counts).
func (l *Log) Appends() []Appended {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.appends)
}

// Calls counts the calls of op, failed or not.
func (l *Log) Calls(op Op) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[op]
}

// ResultMsg returns a terminal result message of actionID carrying data, with the
// Nats-Msg-Id "<actionID>:result" of CONTRACT §4. Its subject is empty: Log ignores
// it, a JetStreamLog needs the caller to set it.
func ResultMsg(actionID string, data []byte) *nats.Msg {
	return msgWithID(actionID+":result", data)
}

// PendingMsg returns a pending_approval result message of actionID carrying data, with
// the Nats-Msg-Id "<actionID>:pending".
func PendingMsg(actionID string, data []byte) *nats.Msg {
	return msgWithID(actionID+":pending", data)
}

func msgWithID(id string, data []byte) *nats.Msg {
	m := nats.NewMsg("")
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = data
	return m
}

func cloneHeader(h nats.Header) nats.Header {
	if h == nil {
		return nil
	}
	out := make(nats.Header, len(h))
	for k, v := range h {
		out[k] = slices.Clone(v)
	}
	return out
}

func copyLogEntry(e kvstore.LogEntry) kvstore.LogEntry {
	e.Header = cloneHeader(e.Header)
	e.Data = slices.Clone(e.Data)
	return e
}
