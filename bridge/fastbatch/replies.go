package fastbatch

import (
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// handle processes one reply.
func (b *Publisher) handle(m *nats.Msg) {
	id, seq, op, ok := b.parseReply(m.Subject)
	if !ok || id != b.id || b.id == "" || b.refused != nil {
		return // a late reply about an earlier batch
	}
	if len(m.Data) == 0 {
		// A status: 503 when nothing listened on the subject (no stream leader), so the
		// message went nowhere. The batch ends; its commit is asked for again until a
		// leader answers.
		if m.Header.Get("Status") == statusNoResponders {
			b.end("no stream leader")
		}
		return
	}
	// go-json-experiment reads a reply in about half of encoding/json's time, with 2
	// allocations instead of 12; many streams get a reply per event.
	var r batchReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		b.log.Warn().Str("batch", b.id).Err(err).Msg("unreadable reply about the event batch; ending the batch")
		b.end("unreadable reply")
		return
	}
	b.heard = time.Now()
	switch r.Type {
	case "ack":
		if r.Msgs > 0 {
			b.flow = r.Msgs
		}
		b.confirm(r.Seq)
	case "gap":
		// With gap mode "fail" the server ended the batch; its PubAck follows.
		b.log.Info().Str("batch", b.id).Uint64("expected", r.LastSeq).Uint64("got", r.Seq).Msg("the stream saw a gap in the event batch")
		b.end("gap")
	case "err":
		// Message r.Seq was refused and the batch ended before it; its PubAck follows.
		b.refuse(r.Seq, r.Error)
		b.end("an event was refused")
	case "":
		b.handlePubAck(seq, op, &r)
	}
}

// handlePubAck processes a PubAck about message seq (operation op) of the batch.
func (b *Publisher) handlePubAck(seq uint64, op int, r *batchReply) {
	if r.Error == nil {
		if r.Batch == "" {
			// An ordinary PubAck: the server stored the message as a plain publish, so
			// it does not know fast batches (before nats-server 2.14).
			b.refused = &refusedError{reason: "the server does not know fast batches"}
			return
		}
		b.confirm(r.Count)
		b.closeBatch()
		return
	}
	switch r.Error.ErrorCode {
	case errCodeBatchDisabled, errCodeBatchTooMany, errCodeBatchPattern, errCodeBatchID:
		b.refused = &refusedError{reason: "the stream refused the batch", api: r.Error}
	case errCodeBatchUnknown:
		// The batch is gone (abandoned by the server, or lost with a stream leader):
		// what its acks confirmed is stored; the rest is sent again in a new batch.
		why := "the stream does not know the batch"
		if b.why != "" {
			why += " (ending it: " + b.why + ")"
		}
		b.why = why
		b.closeBatch()
	default:
		if op == batchOpEOB || op == batchOpPing {
			return // a commit or ping refused (a full ingest queue, ...): the probe repeats
		}
		// The event was refused before it reached the batch (full ingest queue,
		// resource limits, ...).
		b.refuse(seq, r.Error)
		if seq <= 1 {
			// The batch was not created (or dropped with its first message).
			b.why = "an event was refused"
			b.closeBatch()
			return
		}
		b.end("an event was refused")
	}
}

// refuse records that the server refused the batch's message seq: that event is
// published alone once the events before it are stored.
func (b *Publisher) refuse(seq uint64, apiErr *jetstream.APIError) {
	if seq == 0 || seq > b.sent {
		return
	}
	ev := b.first + int64(seq) - 1
	if b.failed < 0 || ev < b.failed {
		b.failed = ev
	}
	ev0 := b.log.Warn().Str("batch", b.id).Int64("sequence", ev)
	if apiErr != nil {
		ev0 = ev0.Int("code", int(apiErr.ErrorCode)).Str("error", apiErr.Description)
	}
	ev0.Msg("the stream refused an event of the batch; it is published alone")
}

// parseReply returns the batch id, batch sequence and operation of a reply subject
// <inbox>.<id>.<flow>.<gap>.<seq>.<op>.$FI.
func (b *Publisher) parseReply(subject string) (id string, seq uint64, op int, ok bool) {
	rest, ok := strings.CutPrefix(subject, b.inbox+".")
	if !ok {
		return "", 0, 0, false
	}
	id, rest, _ = strings.Cut(rest, ".")
	_, rest, _ = strings.Cut(rest, ".") // flow
	_, rest, _ = strings.Cut(rest, ".") // gap mode
	s, rest, _ := strings.Cut(rest, ".")
	o, _, _ := strings.Cut(rest, ".")
	seq, err := strconv.ParseUint(s, 10, 64)
	op, err2 := strconv.Atoi(o)
	return id, seq, op, err == nil && err2 == nil
}
