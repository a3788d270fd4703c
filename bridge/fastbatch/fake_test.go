package fastbatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// fakeStream plays a stream's leader for fast batch publishing (gap mode fail), as
// nats-server 2.15 does, on a core NATS subscription to hermes.> that no real stream
// captures; fault decides, per message, what goes wrong. It also stores plain
// JetStream publishes (answered with a PubAck). Stored events are counted by the
// number at the end of their Nats-Msg-Id; a message id seen before is skipped.
type fakeStream struct {
	t    *testing.T
	nc   *nats.Conn
	flow uint16 // the flow of every batch

	mu      sync.Mutex
	fault   func(f *fakeMsg) fault
	stored  []int64
	ids     map[string]bool
	batches map[string]*fakeBatch
	started int            // batches started
	plain   int            // plain publishes stored
	ops     map[int]int    // fast batch messages seen, by operation
	silent  bool           // no flow acks until a ping
	ahead   uint64         // the most messages of a batch seen beyond its last ack
	seen    map[string]int // event messages seen (sent), by message id
}

type fakeBatch struct {
	lseq, acked uint64
}

// fakeMsg is one message the fake received.
type fakeMsg struct {
	id     string // batch id ("" for a plain publish)
	seq    uint64
	op     int
	msgID  string
	number int64 // event number
}

type fault int

const (
	faultNone     fault = iota
	faultDrop           // the message is lost on the way
	faultReject         // refused before the batch (as a full ingest queue does)
	faultRefuse         // refused by the batch (an err, then the PubAck)
	faultForget         // the batch is forgotten first (abandoned, or lost with a leader)
	faultTooMany        // no new batch: too many in flight
	faultPlain          // stored as a plain publish, as a server without fast batches does
	faultSilent         // no flow acks from here until a ping
	faultNoLeader       // lost, and answered with status 503 as when no stream leader listens
)

// newFakeStream starts a NATS server, the fake on it, and returns the fake and a
// connection for the publisher.
func newFakeStream(t *testing.T, flow uint16, fault func(f *fakeMsg) fault) (*fakeStream, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := natsembed.RunTest(t)
	srv, _ := natsembed.Connect(t, s)
	f := &fakeStream{t: t, nc: srv, flow: flow, fault: fault, ids: map[string]bool{}, batches: map[string]*fakeBatch{},
		ops: map[int]int{}, seen: map[string]int{}}
	if _, err := srv.Subscribe("hermes.>", f.handle); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, js := natsembed.Connect(t, s)
	return f, nc, js
}

func (f *fakeStream) respond(reply string, v any) {
	b, _ := json.Marshal(v)
	if err := f.nc.Publish(reply, b); err != nil && !errors.Is(err, nats.ErrConnectionClosed) { // closed: the test is over
		f.t.Errorf("fake stream: respond: %v", err)
	}
}

func (f *fakeStream) pubAck(reply, batch string, count uint64) {
	f.respond(reply, map[string]any{"stream": "FAKE", "seq": len(f.stored), "batch": batch, "count": count})
}

func (f *fakeStream) apiError(reply string, code jetstream.ErrorCode, desc string) {
	f.respond(reply, map[string]any{"stream": "FAKE", "error": map[string]any{"code": 400, "err_code": code, "description": desc}})
}

// store stores the event unless its message id was stored before.
func (f *fakeStream) store(m *fakeMsg) {
	if !f.ids[m.msgID] {
		f.ids[m.msgID] = true
		f.stored = append(f.stored, m.number)
	}
}

func (f *fakeStream) handle(msg *nats.Msg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &fakeMsg{msgID: msg.Header.Get(jetstream.MsgIDHeader)}
	if m.msgID != "" {
		_, n, _ := strings.Cut(m.msgID, ":")
		m.number, _ = strconv.ParseInt(n, 10, 64)
		f.seen[m.msgID]++
	}
	rest, isBatch := strings.CutSuffix(msg.Reply, ".$FI")
	if isBatch {
		tok := strings.Split(rest, ".")
		if len(tok) < 6 {
			f.t.Errorf("fake stream: bad batch reply %q", msg.Reply)
			return
		}
		n := len(tok)
		m.id = tok[n-5]
		m.seq, _ = strconv.ParseUint(tok[n-2], 10, 64)
		m.op, _ = strconv.Atoi(tok[n-1])
		f.ops[m.op]++
	}
	what := f.fault(m)
	switch what {
	case faultDrop:
		return
	case faultNoLeader:
		if err := f.nc.PublishMsg(&nats.Msg{Subject: msg.Reply, Header: nats.Header{"Status": []string{"503"}}}); err != nil &&
			!errors.Is(err, nats.ErrConnectionClosed) {
			f.t.Errorf("fake stream: respond: %v", err)
		}
		return
	case faultReject:
		f.apiError(msg.Reply, 10167, "too many requests")
		return
	case faultPlain:
		f.store(m)
		f.plain++
		f.respond(msg.Reply, map[string]any{"stream": "FAKE", "seq": len(f.stored)})
		return
	case faultSilent:
		f.silent = true
	}
	if !isBatch {
		f.store(m)
		f.plain++
		f.respond(msg.Reply, map[string]any{"stream": "FAKE", "seq": len(f.stored)})
		return
	}
	if what == faultForget {
		delete(f.batches, m.id)
	}
	b, ok := f.batches[m.id]
	if !ok {
		switch {
		case m.seq != 1 || m.op == batchOpPing:
			f.apiError(msg.Reply, errCodeBatchUnknown, "batch publish ID unknown")
			return
		case what == faultTooMany:
			f.apiError(msg.Reply, errCodeBatchTooMany, "batch publish too many inflight")
			return
		}
		b = &fakeBatch{}
		f.batches[m.id] = b
		f.started++
	}
	ack := func(seq uint64) {
		b.acked = seq
		f.respond(msg.Reply, map[string]any{"type": "ack", "seq": seq, "msgs": f.flow})
	}
	end := func() {
		delete(f.batches, m.id)
		f.pubAck(msg.Reply, m.id, b.lseq)
	}
	switch {
	case m.op == batchOpPing:
		if m.seq > b.lseq {
			f.respond(msg.Reply, map[string]any{"type": "gap", "last_seq": b.lseq + 1, "seq": m.seq + 1})
			end()
			return
		}
		f.silent = false
		ack(b.lseq)
		return
	case m.seq != b.lseq+1:
		f.respond(msg.Reply, map[string]any{"type": "gap", "last_seq": b.lseq + 1, "seq": m.seq})
		end()
		return
	case m.op == batchOpEOB:
		end()
		return
	case what == faultRefuse:
		if m.seq == 1 {
			delete(f.batches, m.id)
			f.apiError(msg.Reply, 10999, "refused")
			return
		}
		f.respond(msg.Reply, map[string]any{"type": "err", "seq": m.seq, "error": map[string]any{"code": 400, "err_code": 10999, "description": "refused"}})
		end()
		return
	}
	f.store(m)
	b.lseq++
	f.ahead = max(f.ahead, b.lseq-b.acked)
	if b.lseq == 1 {
		f.respond(msg.Reply, map[string]any{"type": "ack", "seq": 0, "msgs": f.flow})
	}
	if b.lseq%uint64(f.flow) == 0 && !f.silent {
		ack(b.lseq)
	}
}

// once returns a fault that happens to the first message for which match is true.
func once(what fault, match func(m *fakeMsg) bool) func(m *fakeMsg) fault {
	done := false
	return func(m *fakeMsg) fault {
		if !done && match(m) {
			done = true
			return what
		}
		return faultNone
	}
}

// event returns a match of the first message carrying event n.
func event(n int64) func(m *fakeMsg) bool {
	return func(m *fakeMsg) bool { return m.msgID != "" && m.number == n }
}

func testMsg(i int) *nats.Msg {
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, "a1:"+strconv.Itoa(i))
	return &nats.Msg{Subject: "hermes.events.a1", Header: h, Data: fmt.Appendf(nil, `{"sequence":%d}`, i)}
}

// newTestPublisher returns a publisher of action a1's events, with its control
// messages on hermes.batch.a1 and an event the batch refuses published alone on js.
func newTestPublisher(t *testing.T, nc *nats.Conn, js jetstream.JetStream) *Publisher {
	return New(nc, Config{Control: "hermes.batch.a1", Controls: "hermes.batch.>", Log: zerolog.New(zerolog.NewTestWriter(t)),
		Alone: func(ctx context.Context, m *nats.Msg) error {
			_, err := js.PublishMsg(ctx, m)
			return err
		}})
}

// publishAll adds n events to a new batch publisher and flushes it.
func publishAll(t *testing.T, nc *nats.Conn, js jetstream.JetStream, n int) (*Publisher, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := newTestPublisher(t, nc, js)
	defer b.Close()
	for i := range n {
		if err := b.Add(ctx, testMsg(i)); err != nil {
			return b, err
		}
	}
	return b, b.Flush(ctx)
}

// check fails unless the fake stored events 0..n-1 in order, once each.
func (f *fakeStream) check(n int) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.stored {
		if s != int64(i) {
			f.t.Fatalf("stored event %d is event %d (stored: %v)", i, s, f.stored[max(i-3, 0):min(i+4, len(f.stored))])
		}
	}
	if len(f.stored) != n {
		f.t.Fatalf("stored %d events, want %d", len(f.stored), n)
	}
}

func (f *fakeStream) counts() (started, plain, eob, pings int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started, f.plain, f.ops[batchOpEOB], f.ops[batchOpPing]
}
