package sim

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// resultLog is the simulated output stream's result subjects: per action id, the
// result messages with their stream sequences. An append is a compare-and-set on the
// subject's last sequence (Nats-Expected-Last-Subject-Sequence), after the stream's
// duplicate window on the message id; messages age out after maxAge. Every message
// ever stored is kept (aged out or not) for the invariants, and every stored message,
// and only those, is handed to the live subscribers as it is stored.
type resultLog struct {
	maxAge time.Duration
	seq    *uint64 // the output stream's sequence, shared with the events
	// subjects holds every message ever stored per action id, aged out or not.
	subjects map[string][]*logMsg
	// live receives each message as it is stored (the approver, the watchers).
	live func(m *logMsg)
	// noCAS ignores the expected sequence (a sabotage for the tests).
	noCAS bool
}

// logMsg is one stored result message.
type logMsg struct {
	seq    uint64
	id     string // Nats-Msg-Id
	action string
	result *events.Result
	data   []byte // the result as stored, JSON
	by     string // the owner that appended it
	at     time.Time
}

func (m *logMsg) terminal() bool { return m.result.Status != events.StatusPendingApproval }

// last returns the subject's last message still kept at now.
func (l *resultLog) last(id string, now time.Time) *logMsg {
	ms := l.subjects[id]
	if len(ms) == 0 || !now.Before(ms[len(ms)-1].at.Add(l.maxAge)) {
		return nil
	}
	return ms[len(ms)-1]
}

// append stores r as id's next result message, by owner, with message id msgID, if the
// subject's last kept message has sequence expect. A message id stored within the
// duplicate window answers that message's sequence when the same owner stored it (an
// earlier attempt of this append landed), Conflict otherwise (the production driver
// compares the stored message's owner header).
func (l *resultLog) append(id string, r *events.Result, msgID string, expect uint64, owner string, now time.Time) (core.Status, uint64) {
	for _, m := range l.subjects[id] {
		if m.id == msgID && now.Sub(m.at) < dupWindow {
			if m.by == owner {
				return core.OK, m.seq
			}
			return core.Conflict, 0
		}
	}
	var lastSeq uint64
	if m := l.last(id, now); m != nil {
		lastSeq = m.seq
	}
	if lastSeq != expect && !l.noCAS {
		return core.Conflict, 0
	}
	data, err := json.Marshal(r)
	if err != nil {
		return core.Failed, 0
	}
	var stored events.Result
	_ = json.Unmarshal(data, &stored)
	*l.seq++
	m := &logMsg{seq: *l.seq, id: msgID, action: id, result: &stored, data: data, by: owner, at: now}
	l.subjects[id] = append(l.subjects[id], m)
	l.live(m)
	return core.OK, m.seq
}

// entryOf is m as the core reads it (a copy of its result).
func entryOf(m *logMsg) core.LogEntry {
	var r events.Result
	if json.Unmarshal(m.data, &r) != nil {
		return core.LogEntry{Seq: m.seq, By: m.by, MsgID: m.id}
	}
	return core.LogEntry{Seq: m.seq, Result: &r, By: m.by, MsgID: m.id}
}

// eventLog is the simulated events subjects: per action id, the numbers of the events
// stored (Nats-Msg-Id <id>:<n> deduplicates a republish), in the order stored.
type eventLog struct {
	seq   *uint64
	order map[string][]int64
}

// put stores event n of id unless it is stored.
func (e *eventLog) put(id string, n int64) {
	if !slices.Contains(e.order[id], n) {
		*e.seq++
		e.order[id] = append(e.order[id], n)
	}
}

// next is the number of the first event of id not stored after the contiguous prefix
// from 0 (what RunStoredEvents answers).
func (e *eventLog) next(id string) int64 {
	var n int64
	for slices.Contains(e.order[id], n) {
		n++
	}
	return n
}
