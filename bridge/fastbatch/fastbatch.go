package fastbatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
)

const (
	// batchFlow is the flow asked for: the server acks at most every batchFlow stored
	// messages (a lone batch gets min(500, batchFlow), batches sharing a stream fewer).
	// It sizes every publisher's reply buffer (batchReplyBuffer, 9 KiB held for as long
	// as its stream runs) and the window of messages in flight: a flow of 64 (2 KiB)
	// cut a lone stream's events/s by a fifth (bench scenario 2: 0.57-0.64 of raw
	// async publishing against 0.75-0.81).
	batchFlow = 500
	// batchAcksAhead is how many flows of messages may await their ack.
	batchAcksAhead = 2
	// batchMinWindow is how many messages may await their ack whatever the flow: before
	// the first ack, and when many batches share the stream (the server then acks
	// every message or so).
	batchMinWindow = 32
	// batchPing is how long a wait for the server goes without a reply before the
	// publisher pings the batch (or asks again for its commit).
	batchPing = time.Second
	// batchStall is how long the publisher waits without any reply about the current
	// batch before it gives up with an error.
	batchStall = 30 * time.Second
	// batchIdle: an open batch that has sent nothing for this long is committed before
	// the next event is published, and a new batch starts with that event; this
	// confirms the events at its end and comes before the server's batch timeout
	// (10 s by default) abandons it.
	batchIdle = 5 * time.Second
)

// Batch operations, the <op> token of the reply subject.
const (
	batchOpStart  = 0
	batchOpAppend = 1
	batchOpEOB    = 3 // commit without storing this message
	batchOpPing   = 4
)

// JetStream error codes of fast batch publishing (nats-server errors.json).
const (
	errCodeBatchDisabled jetstream.ErrorCode = 10205 // the stream does not allow batch publishing
	errCodeBatchPattern  jetstream.ErrorCode = 10206 // the reply subject is not a valid batch pattern
	errCodeBatchID       jetstream.ErrorCode = 10207 // the batch id is too long
	errCodeBatchUnknown  jetstream.ErrorCode = 10208 // no such batch (abandoned, ended, or lost with a leader)
	errCodeBatchTooMany  jetstream.ErrorCode = 10211 // too many batches in flight on the stream or server
)

// statusNoResponders is the status of the reply to a message nothing listened to.
const statusNoResponders = "503"

// batchReplyBuffer is the capacity of a publisher's reply channel: more than the replies
// one window can bring (an ack per flow, and after a batch ended early an error for
// each message still in flight, at most 2*batchFlow). A reply that finds it full is
// dropped (nats.go's slow consumer), which the probes recover from.
const batchReplyBuffer = batchAcksAhead*batchFlow + 128

// ErrRefused is wrapped by the errors of Usable and of a Publisher that mean fast
// batch publishing cannot be used; the caller publishes the events another way (the
// error says why).
var ErrRefused = errors.New("fast batch publishing refused")

// refusedError says why fast batch publishing was refused.
type refusedError struct {
	reason string
	api    *jetstream.APIError // nil when not refused by a JetStream error
}

func (e *refusedError) Error() string {
	if e.api != nil {
		return fmt.Sprintf("%s: %s (%s)", ErrRefused, e.reason, e.api)
	}
	return fmt.Sprintf("%s: %s", ErrRefused, e.reason)
}

func (e *refusedError) Unwrap() error { return ErrRefused }

// errBatchStalled: no reply about the current batch for batchStall.
var errBatchStalled = errors.New("no reply from the stream about the event batch")

// batchReply is any reply of the server to a fast batch message.
type batchReply struct {
	Type    string              `json:"type"`     // "ack", "gap", "err"; "" for a PubAck
	Seq     uint64              `json:"seq"`      // ack, gap, err: a batch sequence; PubAck: the stream sequence
	Msgs    uint16              `json:"msgs"`     // ack: the flow
	LastSeq uint64              `json:"last_seq"` // gap: the batch sequence expected
	Batch   string              `json:"batch"`    // PubAck: the batch id
	Count   uint64              `json:"count"`    // PubAck: messages accepted
	Error   *jetstream.APIError `json:"error"`
}

// Publisher publishes one sequence of events with fast batches. It is used by one
// goroutine; replies are read from a subscription by that goroutine while it
// publishes or waits, so nothing else runs on its behalf.
type Publisher struct {
	nc      *nats.Conn
	cfg     Config
	log     zerolog.Logger
	inbox   string
	sub     *nats.Subscription
	replies chan *nats.Msg // the subscription's messages
	timer   *time.Timer    // wait's, reused

	// queue holds the events not yet confirmed stored, oldest first: event number
	// stored+i is queue[i]; next is the number of the next event to come.
	queue  []*nats.Msg
	stored int64
	next   int64
	// failed is an event the server refused in a batch (-1: none): it is published
	// alone (Config.Alone) once the events before it are stored.
	failed int64

	// The current batch; id "" when none is open.
	id          string
	replyPrefix string    // reply subject up to the batch sequence
	first       int64     // event number of batch sequence 1
	sent        uint64    // messages of the batch sent
	acked       uint64    // messages of the batch the server confirmed stored
	flow        uint16    // the server's flow for the batch, 0 before its first ack
	ending      bool      // the batch ends: waiting for its PubAck
	eob         bool      // the end-of-batch commit was sent
	why         string    // why the batch ends, for the log
	heard       time.Time // the last reply about the batch (or its start)
	lastPub     time.Time // the last message of the batch sent

	refused error // set when fast batch publishing cannot be used (wraps ErrRefused)
	stalled error // set when the stream stopped answering (wraps errBatchStalled)
}

// New returns a publisher of events on nc, with its commits and pings on cfg.Control.
// It subscribes to its reply inbox on the first event.
func New(nc *nats.Conn, cfg Config) *Publisher {
	return &Publisher{nc: nc, cfg: cfg, log: cfg.Log, failed: -1}
}

// Add publishes m (its subject, headers and data; Add sets its reply subject) as the
// next event. It returns once m is sent in a batch, waiting while the batch's window
// is full or the batch is being ended (idle, or after a failure). Waits are bounded by
// ctx and by 30 s without a reply about the batch (then the error says so, and every
// later call returns it). An error wrapping ErrRefused means fast batch publishing is
// not possible: the caller publishes the events of Unconfirmed (m among them) another
// way.
func (b *Publisher) Add(ctx context.Context, m *nats.Msg) error {
	if err := cmp.Or(b.refused, b.stalled); err != nil {
		return err
	}
	if b.sub == nil {
		// A channel subscription of our own size: a synchronous one would allocate
		// nats.go's 64k-message channel (512 KiB) for each publisher.
		b.inbox = b.nc.NewInbox()
		b.replies = make(chan *nats.Msg, batchReplyBuffer)
		sub, err := b.nc.ChanSubscribe(b.inbox+".>", b.replies)
		if err != nil {
			b.refused = &refusedError{reason: "subscribe to the batch replies: " + err.Error()}
		}
		b.sub = sub
	}
	b.queue = append(b.queue, m)
	b.next++
	if b.refused != nil {
		return b.refused
	}
	if b.id != "" && !b.ending && time.Since(b.lastPub) >= batchIdle {
		b.end("idle")
	}
	return b.drive(ctx, false)
}

// Flush returns once every event added is stored, in the order added, after ending the
// batch; or an error (one wrapping ErrRefused: see Add).
func (b *Publisher) Flush(ctx context.Context) error {
	if err := cmp.Or(b.refused, b.stalled); err != nil {
		return err
	}
	if b.sub == nil {
		return nil // nothing was added
	}
	return b.drive(ctx, true)
}

// Close ends the subscription. The publisher is not usable afterwards.
func (b *Publisher) Close() {
	if b.sub != nil {
		_ = b.sub.Unsubscribe()
	}
	if b.timer != nil {
		b.timer.Stop()
	}
}

// Unconfirmed returns the events added and not confirmed stored, oldest first.
func (b *Publisher) Unconfirmed() []*nats.Msg { return slices.Clone(b.queue) }

// window is how many messages of the batch may await their ack: batchAcksAhead flows
// (the server's flow is at most the batchFlow asked for), at least batchMinWindow.
func (b *Publisher) window() uint64 {
	return uint64(max(batchMinWindow, batchAcksAhead*int(min(b.flow, batchFlow))))
}

// drive sends every queued event (opening batches as needed) and, with commit, ends the
// batch and waits until every event is stored.
func (b *Publisher) drive(ctx context.Context, commit bool) error {
	for {
		b.poll()
		if b.refused != nil {
			return b.refused
		}
		if b.id == "" {
			if b.stored == b.next {
				return nil
			}
			if b.failed == b.stored {
				if err := b.publishFailed(ctx); err != nil {
					return err
				}
				continue
			}
			b.open()
		}
		if b.ending {
			if err := b.wait(ctx); err != nil {
				return err
			}
			continue
		}
		if at := b.first + int64(b.sent); at < b.next {
			switch {
			case at == b.failed:
				b.end("an event was refused") // it is published alone once the batch ended
			case b.sent-b.acked < b.window():
				if err := b.send(ctx, b.queue[at-b.stored]); err != nil {
					return err
				}
			default:
				if err := b.wait(ctx); err != nil {
					return err
				}
			}
			continue
		}
		if !commit {
			return nil
		}
		b.end("")
	}
}

// open starts a new batch at the first unconfirmed event.
func (b *Publisher) open() {
	b.id = nuid.Next()
	b.replyPrefix = b.inbox + "." + b.id + "." + strconv.Itoa(batchFlow) + ".fail."
	b.first, b.sent, b.acked, b.flow = b.stored, 0, 0, 0
	b.ending, b.eob, b.why = false, false, ""
	b.heard = time.Now()
}

// reply is the reply subject of the batch's message seq with op.
func (b *Publisher) reply(seq uint64, op int) string {
	return b.replyPrefix + strconv.FormatUint(seq, 10) + "." + strconv.Itoa(op) + ".$FI"
}

// send publishes m as the batch's next message. A publish the connection refuses
// (its reconnect buffer is full) is retried after a wait.
func (b *Publisher) send(ctx context.Context, m *nats.Msg) error {
	op := batchOpAppend
	if b.sent == 0 {
		op = batchOpStart
	}
	m.Reply = b.reply(b.sent+1, op)
	if err := b.nc.PublishMsg(m); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		return b.wait(ctx)
	}
	b.sent++
	b.lastPub = time.Now()
	return nil
}

// end asks the server to end the batch (commit at end of batch) and marks it ending;
// why is logged when the batch ends without all its events stored.
func (b *Publisher) end(why string) {
	if b.why == "" {
		b.why = why
	}
	if b.sent == 0 {
		b.id = "" // nothing sent: nothing to end
		return
	}
	b.ending = true
	if !b.eob {
		b.eob = b.probe() == nil
	}
}

// probe sends what makes the server report on the batch: a ping while it is open, the
// commit at end of batch while it ends.
func (b *Publisher) probe() error {
	if b.sent == 0 {
		return nil // nothing to report on
	}
	if b.ending {
		return b.nc.PublishRequest(b.cfg.Control, b.reply(b.sent+1, batchOpEOB), nil)
	}
	return b.nc.PublishRequest(b.cfg.Control, b.reply(b.sent, batchOpPing), nil)
}

// poll handles the replies already received.
func (b *Publisher) poll() {
	for b.refused == nil {
		select {
		case m := <-b.replies:
			b.handle(m)
		default:
			return
		}
	}
}

// wait handles the next reply, waiting up to batchPing for it; after a quiet batchPing
// it probes the batch, and after a quiet batchStall it fails.
func (b *Publisher) wait(ctx context.Context) error {
	if b.timer == nil {
		b.timer = time.NewTimer(batchPing)
	} else {
		b.timer.Reset(batchPing)
	}
	select {
	case m := <-b.replies:
		b.timer.Stop()
		b.handle(m)
		return nil
	case <-ctx.Done():
		b.timer.Stop()
		return ctx.Err()
	case <-b.timer.C:
	}
	if b.id == "" {
		return nil
	}
	if b.cfg.denied(b.nc.LastError()) {
		b.refused = b.cfg.deniedError()
		return nil
	}
	if quiet := time.Since(b.heard); quiet >= batchStall {
		b.log.Warn().Str("batch", b.id).Int64("from_sequence", b.first).Uint64("sent", b.sent).
			Uint64("acked", b.acked).Str("quiet", quiet.String()).Msg("no reply from the stream about the event batch; giving up")
		// Sticky: flush after a failed publish does not wait another batchStall.
		b.stalled = fmt.Errorf("%w for %s (events from %d unconfirmed)", errBatchStalled, quiet.Round(time.Second), b.stored)
		return b.stalled
	}
	if err := b.probe(); err == nil && b.ending {
		b.eob = true
	}
	return nil
}

// confirm records that the batch's first n messages are stored.
func (b *Publisher) confirm(n uint64) {
	n = min(n, b.sent)
	b.acked = max(b.acked, n)
	if to := b.first + int64(n); to > b.stored {
		b.drop(int(to - b.stored))
		b.stored = to
		if b.failed >= 0 && b.failed < b.stored {
			b.failed = -1 // stored after all
		}
	}
}

// closeBatch forgets the current batch after it ended or was lost with acked messages
// confirmed: the next batch starts at the first unconfirmed event.
func (b *Publisher) closeBatch() {
	if b.first+int64(b.sent) > b.stored {
		b.log.Info().Str("batch", b.id).Str("reason", b.why).Int64("from_sequence", b.stored).
			Int64("resent", b.first+int64(b.sent)-b.stored).Msg("event batch ended early; continuing in a new batch from the first unconfirmed event")
	}
	b.id = ""
}

// drop forgets the n oldest events of the queue (confirmed stored).
func (b *Publisher) drop(n int) {
	clear(b.queue[:n])
	b.queue = b.queue[n:]
}

// publishFailed publishes the refused event alone (Config.Alone).
func (b *Publisher) publishFailed(ctx context.Context) error {
	m := b.queue[0]
	m.Reply = ""
	if err := b.cfg.Alone(ctx, m); err != nil {
		return err
	}
	b.drop(1)
	b.stored++
	b.failed = -1
	return nil
}
