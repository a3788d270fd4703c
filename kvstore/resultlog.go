package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LogEntry is one result message of an action in the result log.
type LogEntry struct {
	// Seq is the message's stream sequence (0 when not known).
	Seq uint64
	// Terminal is false for a pending_approval message, true for the terminal result
	// (read from the result's status: see Terminal).
	Terminal bool
	// By is the owner that appended it (HeaderOwner), "" when unknown.
	By     string
	Header nats.Header
	Data   []byte
}

// HeaderOwner names, on a result message, the delivery that appended it: how an append
// whose reply was lost recognises its own message.
const HeaderOwner = "Hermes-Bridge-Owner"

// Terminal reports whether the result message data is a terminal result: its status is
// not pending_approval. Whether a result is terminal is read from its status, never from
// its message id (schemas/README.md, "Results": a governed run's pending messages are
// <action_id>:pending:<k>). An unreadable message counts as terminal: whatever is stored
// stands.
func Terminal(data []byte) bool {
	var r struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(data, &r) != nil || r.Status != "pending_approval"
}

func entryOf(seq uint64, h nats.Header, data []byte) LogEntry {
	return LogEntry{Seq: seq, Terminal: Terminal(data), By: h.Get(HeaderOwner), Header: h, Data: data}
}

// JetStreamLog is the terminal register of every action: the result messages stored
// on <prefix>.results.<action_id> in the output stream. Append is a compare-and-set on
// the subject's last sequence (Nats-Expected-Last-Subject-Sequence, decided by the
// stream leader, through the stream's Raft group on a cluster), so at most one terminal
// result is ever stored per action, whoever appends it has settled the action, and the
// writes are linearizable even where a read is not.
type JetStreamLog struct {
	nc      *nats.Conn
	stream  jetstream.Stream
	subject func(actionID string) string // where results are stored and read
	// publishTimeout bounds one publish attempt; the caller's ctx bounds them all.
	publishTimeout time.Duration
	// recheck is how often WaitTerminal reads the stream again in case it missed a
	// message (a reconnect loses core messages).
	recheck time.Duration
}

// NewJetStreamLog returns the result log on stream, whose result subject for an
// action is subject(actionID). Append publishes a message on its own subject, which
// the stream may store under subject(actionID) (a subject transform).
func NewJetStreamLog(js jetstream.JetStream, stream jetstream.Stream, subject func(string) string) *JetStreamLog {
	return &JetStreamLog{nc: js.Conn(), stream: stream, subject: subject,
		publishTimeout: 5 * time.Second, recheck: time.Second}
}

// Last returns the action's last result message (a pending_approval or its terminal
// result). Errors: ErrNotFound.
func (l *JetStreamLog) Last(ctx context.Context, actionID string) (LogEntry, error) {
	ctx, cancel := opCtx(ctx)
	defer cancel()
	m, err := l.stream.GetLastMsgForSubject(ctx, l.subject(actionID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return LogEntry{}, fmt.Errorf("%w: results of %s", ErrNotFound, actionID)
	}
	if err != nil {
		return LogEntry{}, fmt.Errorf("kvstore: read results of %s: %w", actionID, err)
	}
	return entryOf(m.Sequence, m.Header, m.Data), nil
}

// Append stores m as the action's next result message if the last stored one has
// sequence expect (0: none), and returns its sequence. Errors: ErrConflict when the
// subject moved on (read Last). Transient failures (no responders during a leader
// change, a timeout, a reconnect) are retried with backoff until ctx ends; a publish
// whose acknowledgement was lost is found by its retry, which then conflicts with the
// publish itself: Append reports that as success when the stored message is m.
//
// A replicated stream checks a message's Nats-Msg-Id against its duplicate window
// before the expected sequence, and answers a duplicate with the stored message's
// sequence and no error: every terminal result of an action has the same id, so a
// second settler would be told that its result was stored. Append reads a duplicate
// back and reports ErrConflict unless the stored message is m.
func (l *JetStreamLog) Append(ctx context.Context, actionID string, m *nats.Msg, expect uint64) (uint64, error) {
	delay := 50 * time.Millisecond
	// The expected sequence goes in as a header, not as a publish option, which
	// jetstream would turn into an options struct and a header value on every publish.
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header[jetstream.ExpectedLastSubjSeqHeader] = expectNone
	if expect != 0 {
		m.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(expect, 10)}
	}
	for attempt := 0; ; attempt++ {
		pctx, cancel := l.publishCtx(ctx)
		seq, dup, err := publish(pctx, l.nc, m)
		cancel()
		if err == nil && dup {
			return l.duplicate(ctx, actionID, m, seq)
		}
		if err == nil {
			return seq, nil
		}
		if isCASFailure(err) {
			if attempt > 0 {
				// An earlier attempt may have landed without its ack reaching us.
				if last, lerr := l.Last(ctx, actionID); lerr == nil && same(last.Header, last.Data, m) {
					return last.Seq, nil
				}
			}
			return 0, fmt.Errorf("%w: results of %s moved past %d: %w", ErrConflict, actionID, expect, err)
		}
		if isTooLarge(err) || ctx.Err() != nil {
			return 0, fmt.Errorf("kvstore: publish result of %s: %w", actionID, err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return 0, fmt.Errorf("kvstore: publish result of %s: %w (last error: %w)", actionID, ctx.Err(), err)
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// expectNone is the expected last subject sequence of an Append that expects no result
// message before its own (the usual one), made once: nothing writes into it.
var expectNone = []string{"0"}

// publishCtx bounds ctx to publishTimeout for one publish attempt (a ctx without a
// deadline included), with no timer of its own when ctx ends within publishTimeout.
func (l *JetStreamLog) publishCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return boundCtx(ctx, d, l.publishTimeout)
	}
	return context.WithTimeout(ctx, l.publishTimeout)
}

// duplicate decides about a publish the stream answered as a duplicate of the
// message with sequence seq: success when that message is m (an earlier attempt of
// this Append landed), ErrConflict when it is another one with the same id.
func (l *JetStreamLog) duplicate(ctx context.Context, actionID string, m *nats.Msg, seq uint64) (uint64, error) {
	sm, err := l.stream.GetMsg(ctx, seq)
	if err != nil {
		return 0, fmt.Errorf("kvstore: read the result of %s that a publish duplicates: %w", actionID, err)
	}
	if same(sm.Header, sm.Data, m) {
		return seq, nil
	}
	return 0, fmt.Errorf("%w: results of %s: message %d has the id %s already", ErrConflict, actionID, seq,
		m.Header.Get(jetstream.MsgIDHeader))
}

// same reports whether a stored message (its header and data) is m: the same message id
// and, when m names its owner (HeaderOwner), the same owner, else the same data.
func same(h nats.Header, data []byte, m *nats.Msg) bool {
	if h.Get(jetstream.MsgIDHeader) != m.Header.Get(jetstream.MsgIDHeader) {
		return false
	}
	if owner := m.Header.Get(HeaderOwner); owner != "" {
		return h.Get(HeaderOwner) == owner
	}
	return string(data) == string(m.Data)
}

// WaitTerminal blocks until the action has a terminal result message and returns it,
// or ctx ends. It subscribes to the result subject, then reads
// the stream (so that a result published in between is not missed), and reads it
// again every recheck while it waits.
func (l *JetStreamLog) WaitTerminal(ctx context.Context, actionID string) (LogEntry, error) {
	ch := make(chan *nats.Msg, 4)
	sub, err := l.nc.ChanSubscribe(l.subject(actionID), ch)
	if err != nil {
		return LogEntry{}, fmt.Errorf("kvstore: watch results of %s: %w", actionID, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	t := time.NewTicker(l.recheck)
	defer t.Stop()
	for {
		e, err := l.Last(ctx, actionID)
		if err == nil && e.Terminal {
			return e, nil
		}
		if ctx.Err() != nil {
			return LogEntry{}, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return LogEntry{}, ctx.Err()
		case <-ch:
			// A result message was published: read the stream again (the stored
			// terminal message is the one that won, not necessarily this one).
		case <-t.C:
		}
	}
}
