package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publish sends m to JetStream and waits for its ack, as jetstream's PublishMsg does
// (a publish with no responders, during a leader change, is tried twice more 250 ms
// apart, then fails with jetstream.ErrNoStreamResponse; a refusal is a
// *jetstream.APIError, wrapped the same way), and returns the message's stream
// sequence and whether the stream took it for a duplicate. The ledger's writes take
// this path: the usual ack is read without encoding/json (parseAck), which was most
// of a publish's own CPU.
func publish(ctx context.Context, nc *nats.Conn, m *nats.Msg) (seq uint64, dup bool, err error) {
	resp, err := nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, false, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return 0, false, err
	}
	if seq, ok := parseAck(resp.Data); ok {
		return seq, false, nil
	}
	var a struct {
		jetstream.PubAck
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &a); err != nil {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if a.Error != nil {
		return 0, false, fmt.Errorf("nats: %w", a.Error)
	}
	if a.Stream == "" {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	return a.Sequence, a.Duplicate, nil
}

// parseAck reads the ack nats-server writes for a message it stored,
// {"stream":"<name>","seq":<n>} or {"stream":"<name>","domain":"<name>","seq":<n>},
// byte for byte. ok is false for anything else (an error, a duplicate, a batch's ack,
// other spacing): the caller reads that with encoding/json.
func parseAck(b []byte) (seq uint64, ok bool) {
	rest, ok := cutString(b, `{"stream":`)
	if !ok {
		return 0, false
	}
	if rest, ok = skipName(rest); !ok {
		return 0, false
	}
	if r, found := cutString(rest, `,"domain":`); found {
		if rest, ok = skipName(r); !ok {
			return 0, false
		}
	}
	if rest, ok = cutString(rest, `,"seq":`); !ok {
		return 0, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		if seq > (1<<64-1-9)/10 {
			return 0, false // would overflow
		}
		seq = seq*10 + uint64(rest[n]-'0')
		n++
	}
	if n == 0 || seq == 0 || rest[0] == '0' || string(rest[n:]) != "}" {
		return 0, false
	}
	return seq, true
}

// cutString returns b after prefix, when b starts with it.
func cutString(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return b, false
	}
	return b[len(prefix):], true
}

// skipName skips a JSON string of at least one character that needs no escape (a
// stream or domain name): b must start with its opening quote.
func skipName(b []byte) ([]byte, bool) {
	if len(b) < 3 || b[0] != '"' {
		return b, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[i+1:], i > 1
		case c == '\\' || c < 0x20 || c >= 0x80:
			return b, false
		}
	}
	return b, false
}
