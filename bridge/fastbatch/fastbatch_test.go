package fastbatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"hermes.batch.>", "hermes.batch.a1", true},
		{"hermes.batch.>", "hermes.batch.a.b", true},
		{"hermes.batch.>", "hermes.batch", false},
		{"hermes.>", "hermes.batch.a1", true},
		{">", "hermes.batch.a1", true},
		{"hermes.*.a1", "hermes.batch.a1", true},
		{"hermes.*", "hermes.batch.a1", false},
		{"hermes.events.>", "hermes.batch.a1", false},
		{"acme.hermes.batch.>", "acme.hermes.batch.a1", true},
		{"hermes.batch.a1", "hermes.batch.a1", true},
		{"hermes.batch.a1.x", "hermes.batch.a1", false},
	} {
		if got := subjectMatches(c.pattern, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}

// TestDenied: only a permission violation for a publish on a subject Controls matches
// denies the control subject.
func TestDenied(t *testing.T) {
	c := Config{Control: "hermes.out.batch.a1", Controls: "hermes.out.batch.>"}
	violation := func(s string) error { return fmt.Errorf("%w for %s", nats.ErrPermissionViolation, s) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{violation(`Publish to "hermes.out.batch.a1"`), true},
		{violation(`Publish to "hermes.out.batch.other"`), true},
		{violation(`Publish to "hermes.out.events.a1"`), false},
		{violation(`Publish to "hermes.out.batch"`), false},
		{violation(`Subscription to "hermes.out.batch.a1"`), false},
		{errors.New(`Publish to "hermes.out.batch.a1"`), false},
	} {
		if got := c.denied(tc.err); got != tc.want {
			t.Errorf("denied(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestBatchPublisherInOrder: without faults, one batch carries every event, pipelined
// within the window, and one commit ends it.
func TestBatchPublisherInOrder(t *testing.T) {
	f, nc, js := newFakeStream(t, 100, func(*fakeMsg) fault { return faultNone })
	if _, err := publishAll(t, nc, js, 1000); err != nil {
		t.Fatal(err)
	}
	f.check(1000)
	started, plain, eob, pings := f.counts()
	if started != 1 || plain != 0 || eob != 1 || pings != 0 {
		t.Errorf("batches %d, plain publishes %d, commits %d, pings %d; want 1, 0, 1, 0", started, plain, eob, pings)
	}
	if f.ahead > 2*100 {
		t.Errorf("%d messages beyond the last ack, want at most two flows (200)", f.ahead)
	}
}

// TestBatchPublisherGap: a message lost on the way ends the batch at the gap; the
// events from there on go again in a new batch.
func TestBatchPublisherGap(t *testing.T) {
	f, nc, js := newFakeStream(t, 100, once(faultDrop, event(300)))
	if _, err := publishAll(t, nc, js, 1000); err != nil {
		t.Fatal(err)
	}
	f.check(1000)
	if started, _, _, _ := f.counts(); started != 2 {
		t.Errorf("%d batches, want 2", started)
	}
}

// TestBatchPublisherNoLeader: a message answered with "no responders" (no stream
// leader) went nowhere: the batch ends, and the rest goes in a new batch.
func TestBatchPublisherNoLeader(t *testing.T) {
	f, nc, js := newFakeStream(t, 100, once(faultNoLeader, event(300)))
	if _, err := publishAll(t, nc, js, 1000); err != nil {
		t.Fatal(err)
	}
	f.check(1000)
	if started, _, _, _ := f.counts(); started != 2 {
		t.Errorf("%d batches, want 2", started)
	}
}

// TestBatchPublisherRefusedEvent: an event the batch refuses ends the batch before it;
// that event is published alone, and the rest in a new batch.
func TestBatchPublisherRefusedEvent(t *testing.T) {
	for _, at := range []int64{0, 500} {
		t.Run(fmt.Sprint("event ", at), func(t *testing.T) {
			f, nc, js := newFakeStream(t, 100, once(faultRefuse, event(at)))
			if _, err := publishAll(t, nc, js, 1000); err != nil {
				t.Fatal(err)
			}
			f.check(1000)
			if _, plain, _, _ := f.counts(); plain != 1 {
				t.Errorf("%d events published alone, want 1", plain)
			}
		})
	}
}

// TestBatchPublisherRejectedEvent: an event refused before it reaches the batch (as with
// a full ingest queue) is published alone; the batch is ended before it.
func TestBatchPublisherRejectedEvent(t *testing.T) {
	f, nc, js := newFakeStream(t, 100, once(faultReject, event(200)))
	if _, err := publishAll(t, nc, js, 1000); err != nil {
		t.Fatal(err)
	}
	f.check(1000)
	if _, plain, _, _ := f.counts(); plain != 1 {
		t.Errorf("%d events published alone, want 1", plain)
	}
}

// TestBatchPublisherUnknownBatch: when the stream no longer knows the batch (abandoned,
// or lost with its leader), the events after the last ack go again in a new batch; the
// ones already stored are skipped by their message ids.
func TestBatchPublisherUnknownBatch(t *testing.T) {
	f, nc, js := newFakeStream(t, 100, once(faultForget, event(450)))
	if _, err := publishAll(t, nc, js, 1000); err != nil {
		t.Fatal(err)
	}
	f.check(1000)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started != 2 || f.seen["a1:400"] != 2 || f.seen["a1:399"] != 1 {
		t.Errorf("%d batches, event 400 sent %d times, event 399 %d times; want 2, 2 (from the last ack), 1",
			f.started, f.seen["a1:400"], f.seen["a1:399"])
	}
}

// TestBatchPublisherLostCommit: when the commit (or its PubAck) is lost, flush asks again
// after batchPing.
func TestBatchPublisherLostCommit(t *testing.T) {
	f, nc, js := newFakeStream(t, 100, once(faultDrop, func(m *fakeMsg) bool { return m.op == batchOpEOB }))
	if _, err := publishAll(t, nc, js, 150); err != nil {
		t.Fatal(err)
	}
	f.check(150)
	if _, _, eob, _ := f.counts(); eob != 2 {
		t.Errorf("%d commits, want 2", eob)
	}
}

// TestBatchPublisherLostAcks: when the flow acks stop coming, the publisher pings the
// batch once the window is full, and goes on after the ack that answers.
func TestBatchPublisherLostAcks(t *testing.T) {
	f, nc, js := newFakeStream(t, 100, once(faultSilent, event(250)))
	if _, err := publishAll(t, nc, js, 1000); err != nil {
		t.Fatal(err)
	}
	f.check(1000)
	if started, _, _, pings := f.counts(); started != 1 || pings < 1 {
		t.Errorf("%d batches, %d pings; want 1 and at least 1", started, pings)
	}
}

// TestBatchPublisherIdle: after batchIdle without events, the batch is committed before
// the next event, which starts a new batch; nothing is sent twice.
func TestBatchPublisherIdle(t *testing.T) {
	f, nc, js := newFakeStream(t, 100, func(*fakeMsg) fault { return faultNone })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := newTestPublisher(t, nc, js)
	defer b.Close()
	for i := range 20 {
		if i == 10 {
			b.lastPub = b.lastPub.Add(-batchIdle) // as if it had been idle since
		}
		if err := b.Add(ctx, testMsg(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.check(20)
	started, _, eob, _ := f.counts()
	f.mu.Lock()
	defer f.mu.Unlock()
	if started != 2 || eob != 2 || len(f.seen) != 20 || f.seen["a1:9"] != 1 {
		t.Errorf("%d batches, %d commits, %d events sent, event 9 %d times; want 2, 2, 20, 1", started, eob, len(f.seen), f.seen["a1:9"])
	}
}

// TestBatchPublisherRefused: a stream that refuses the batch (too many in flight) or a
// server that stores batch messages as plain publishes (no fast batches) makes add
// return ErrRefused, with the unconfirmed events for the caller.
func TestBatchPublisherRefused(t *testing.T) {
	for name, what := range map[string]fault{"too many batches": faultTooMany, "no fast batches": faultPlain} {
		t.Run(name, func(t *testing.T) {
			_, nc, js := newFakeStream(t, 100, once(what, event(0)))
			b, err := publishAll(t, nc, js, 1000)
			var refused *refusedError
			if !errors.Is(err, ErrRefused) || !errors.As(err, &refused) {
				t.Fatalf("publish: %v, want ErrRefused", err)
			}
			left := b.Unconfirmed()
			if len(left) == 0 || left[0].Header.Get(jetstream.MsgIDHeader) != "a1:0" {
				t.Fatalf("%d unconfirmed events, want them from event 0", len(left))
			}
		})
	}
}

// TestFastBatchServerProtocol pins what the publisher relies on from nats-server's fast
// batch publishing (2.15.2 here), speaking the protocol directly to a real server.
func TestFastBatchServerProtocol(t *testing.T) {
	dir := t.TempDir()
	conf := dir + "/n.conf"
	if err := os.WriteFile(conf, []byte("jetstream { limits { batch { max_inflight_per_stream: 1 } } }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := natsembed.RunTest(t, func(o *natsembed.Options) { o.ConfigFile = conf })
	nc, js := natsembed.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A stream shaped like the bridge's output stream: it captures the events and the
	// control subject under hermes.out and stores them under hermes.
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTPUT",
		Subjects:         []string{"hermes.out.events.>", "hermes.out.results.>", "hermes.out.batch.>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "hermes.out.>", Destination: "hermes.>"},
		Storage:          jetstream.FileStorage, Duplicates: 2 * time.Minute, AllowBatchPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"plain.>"}}); err != nil {
		t.Fatal(err)
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox + ".>")
	if err != nil {
		t.Fatal(err)
	}
	reply := func(id string, flow int, seq uint64, op int) string {
		return fmt.Sprintf("%s.%s.%d.fail.%d.%d.$FI", inbox, id, flow, seq, op)
	}
	send := func(subject, reply string, ev int, hdr ...string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Reply = reply
		if ev >= 0 {
			m.Header.Set(jetstream.MsgIDHeader, "a:"+strconv.Itoa(ev))
			m.Data = []byte(strconv.Itoa(ev))
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			m.Header.Set(hdr[i], hdr[i+1])
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(want string) {
		t.Helper()
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		var r batchReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("reply %q: %v", m.Data, err)
		}
		var got string
		switch {
		case r.Type == "" && r.Error != nil:
			got = fmt.Sprintf("error %d", r.Error.ErrorCode)
		case r.Type == "ack":
			got = fmt.Sprintf("ack %d/%d", r.Seq, r.Msgs)
		case r.Type == "gap":
			got = fmt.Sprintf("gap %d/%d", r.LastSeq, r.Seq)
		case r.Type == "err":
			got = fmt.Sprintf("err %d", r.Seq)
		default:
			got = fmt.Sprintf("pubAck %s/%d", r.Batch, r.Count)
		}
		if got != want {
			t.Fatalf("reply %s (%s), want %s", got, m.Data, want)
		}
	}
	ev := "hermes.out.events.a" // stored as hermes.events.a
	// A stream without allow_batched refuses a batch.
	send("plain.a", reply("p", 10, 1, batchOpStart), 0)
	expect(fmt.Sprintf("error %d", errCodeBatchDisabled))

	// The first message is acked at 0 with the flow; then every flow messages stored.
	// A message id stored before is skipped but counts; a gap ends the batch with a
	// PubAck counting the messages accepted; the batch is then unknown.
	send(ev, reply("b1", 2, 1, batchOpStart), 0)
	expect("ack 0/2")
	send(ev, reply("b1", 2, 2, batchOpAppend), 1)
	expect("ack 2/2")
	send(ev, reply("b1", 2, 3, batchOpAppend), 0) // duplicate of event 0
	send(ev, reply("b1", 2, 4, batchOpAppend), 2)
	expect("ack 4/2")
	send("hermes.out.batch.a", reply("b1", 2, 4, batchOpPing), -1) // a ping on the control subject
	expect("ack 4/2")
	send(ev, reply("b1", 2, 6, batchOpAppend), 3) // 5 is missing
	expect("gap 5/6")
	expect("pubAck b1/4")
	send(ev, reply("b1", 2, 7, batchOpAppend), 4)
	expect(fmt.Sprintf("error %d", errCodeBatchUnknown))

	// A lone batch gets min(500, flow asked); a commit at end of batch on the control
	// subject ends it without storing anything.
	send(ev, reply("b2", 1000, 1, batchOpStart), 3)
	expect("ack 0/500")
	// With max_inflight_per_stream 1, a second batch is refused meanwhile.
	send(ev, reply("b3", 500, 1, batchOpStart), 4)
	expect(fmt.Sprintf("error %d", errCodeBatchTooMany))
	send("hermes.out.batch.a", reply("b2", 1000, 2, batchOpEOB), -1)
	expect("pubAck b2/1")

	// A message refused in the batch (here: a wrong expected stream) is reported, and
	// the batch ends before it.
	send(ev, reply("b4", 500, 1, batchOpStart), 4)
	expect("ack 0/500")
	send(ev, reply("b4", 500, 2, batchOpAppend), 5, jetstream.ExpectedStreamHeader, "OTHER")
	expect("err 2")
	expect("pubAck b4/1")

	// Stored: events 0, 1, 2, 3, 4 once each, in order; nothing on the control subject.
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("hermes.>"))
	if err != nil {
		t.Fatal(err)
	}
	if stored := "hermes.events.a"; info.State.Msgs != 5 || len(info.State.Subjects) != 1 || info.State.Subjects[stored] != 5 {
		t.Fatalf("stream holds %d messages on %v, want 5 on %s", info.State.Msgs, info.State.Subjects, stored)
	}
	for i := range 5 {
		m, err := st.GetMsg(ctx, uint64(i+1))
		if err != nil || string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("stored message %d: %q, %v; want event %d", i+1, m.Data, err, i)
		}
	}
}
