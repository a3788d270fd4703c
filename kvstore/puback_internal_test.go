package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// ackAsJSON reads an ack as nats.go does: ok when it is a stored message's ack.
func ackAsJSON(b []byte) (seq uint64, dup, ok bool) {
	var a struct {
		jetstream.PubAck
		Error *jetstream.APIError `json:"error"`
	}
	if json.Unmarshal(b, &a) != nil || a.Error != nil || a.Stream == "" {
		return 0, false, false
	}
	return a.Sequence, a.Duplicate, true
}

var ackCases = []struct {
	in  string
	seq uint64 // 0: parseAck leaves it to encoding/json
}{
	{`{"stream":"KV_HERMES_IDEMPOTENCY","seq":12}`, 12},
	{`{"stream":"HERMES_OUTPUT","domain":"hub","seq":18446744073709551}`, 18446744073709551},
	{`{"stream":"S","seq":1}`, 1},
	{`{"stream":"S","seq":7,"duplicate": true}`, 0},
	{`{"stream":"S","seq":7,"batch":"b1","count":2}`, 0},
	{`{"stream":"S","seq":7,"val":"3"}`, 0},
	{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 2"},"stream":"S","seq":0}`, 0},
	{`{"error":{"code":503,"err_code":10077,"description":"JetStream resource limits exceeded for server"}}`, 0},
	{`{"stream": "S", "seq": 7}`, 0},
	{`{"stream":"S","seq":0}`, 0},
	{`{"stream":"S","seq":07}`, 0},
	{`{"stream":"","seq":7}`, 0},
	{`{"stream":"S\"x","seq":7}`, 0},
	{`{"stream":"S","seq":99999999999999999999}`, 0},
	{`{"stream":"S","seq":7}x`, 0},
	{``, 0},
}

// TestParseAck: the acks nats-server writes for a stored message are read by hand,
// the same as encoding/json reads them; anything else is left to encoding/json.
func TestParseAck(t *testing.T) {
	for _, c := range ackCases {
		seq, ok := parseAck([]byte(c.in))
		if ok != (c.seq != 0) || seq != c.seq {
			t.Errorf("parseAck(%s) = %d %v, want %d", c.in, seq, ok, c.seq)
		}
	}
}

// FuzzParseAck: whatever parseAck reads, encoding/json reads the same, a stored message
// that is no duplicate.
func FuzzParseAck(f *testing.F) {
	for _, c := range ackCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ok := parseAck(b)
		if !ok {
			return
		}
		jseq, dup, jok := ackAsJSON(b)
		if !jok || dup || jseq != seq {
			t.Fatalf("parseAck(%q) = %d, encoding/json reads %d dup=%v ok=%v", b, seq, jseq, dup, jok)
		}
	})
}

// TestPublishReadsServerAcks: against a real server, every ack publish reads is the
// one the stream gave (parsed by hand where it can be), a refusal is the API error
// jetstream returns, and a duplicate says so.
func TestPublishReadsServerAcks(t *testing.T) {
	nc, js := natsembed.Connect(t, natsembed.RunTest(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ACKS", Subjects: []string{"acks.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	raw, err := nc.Request("acks.raw", []byte("x"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if seq, ok := parseAck(raw.Data); !ok || seq != 1 {
		t.Fatalf("the server's ack %s is not read by hand (%d %v)", raw.Data, seq, ok)
	}
	m := &nats.Msg{Subject: "acks.a", Data: []byte("a"), Header: nats.Header{jetstream.MsgIDHeader: {"id-1"},
		jetstream.ExpectedLastSubjSeqHeader: {"0"}}}
	if seq, dup, err := publish(ctx, nc, m); err != nil || dup || seq != 2 {
		t.Fatalf("publish: %d %v %v, want 2", seq, dup, err)
	}
	delete(m.Header, jetstream.ExpectedLastSubjSeqHeader)
	if seq, dup, err := publish(ctx, nc, m); err != nil || !dup || seq != 2 {
		t.Fatalf("publish again: %d %v %v, want the duplicate of 2", seq, dup, err)
	}
	m = &nats.Msg{Subject: "acks.a", Data: []byte("b"), Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}}}
	_, _, err = publish(ctx, nc, m)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || !isCASFailure(err) {
		t.Fatalf("publish over a stored message: %v, want the wrong-last-sequence API error", err)
	}
	if _, _, err := publish(ctx, nc, &nats.Msg{Subject: "nostream.x", Data: []byte("x")}); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("publish with no stream: %v, want ErrNoStreamResponse", err)
	}
}
