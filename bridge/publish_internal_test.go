package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// testOutputStream is the output stream of the publisher tests.
const testOutputStream = "OUT"

// connectPublisher connects to url as the bridge does (reconnecting forever) and returns
// the connection and a JetStream context with the bridge's async publish timeout.
func connectPublisher(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	noErr(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(kvstore.OpTimeout))
	noErr(t, err)
	return nc, js
}

// createOutputStream creates the test output stream as the bridge provisions it
// (outputStream: it captures <prefix>.out.>, stores and republishes under <prefix>.>)
// with replicas and the batch flag, retrying while a new cluster elects its leaders.
func createOutputStream(t *testing.T, ctx context.Context, js jetstream.JetStream, replicas int, batched bool) jetstream.Stream {
	t.Helper()
	subjects, transform, republish := outputStream("hermes")
	cfg := jetstream.StreamConfig{Name: testOutputStream, Subjects: subjects, SubjectTransform: transform, RePublish: republish,
		Replicas: replicas, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, AllowBatchPublish: batched}
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := js.CreateOrUpdateStream(actx, cfg)
		cancel()
		if err == nil {
			return st
		}
		if ctx.Err() != nil {
			t.Fatalf("create stream: %v", err)
		}
		select { // the cluster elects its meta leader
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// testBridge is the part of a Bridge that an eventPublisher uses.
func testBridge(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream, out jetstream.Stream, hook func(Point, string)) *Bridge {
	t.Helper()
	cfg := validConfig()
	cfg.Hook = hook
	return &Bridge{cfg: cfg, log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel), nc: nc, js: js,
		subjects: events.Subjects{Prefix: cfg.Prefix}, out: outputsFor(cfg.Prefix), output: out,
		maxOut: outputLimit(int(nc.MaxPayload()), 0), workCtx: ctx}
}

// testEvent is SSE event i of a streamed chat, with some padding.
func testEvent(i int) hermes.Event {
	return hermes.Event{Index: i, Kind: "data", Data: json.RawMessage(fmt.Sprintf(`{"delta":"token %d %s"}`, i, strings.Repeat("x", 64)))}
}

// publishPaced publishes n events of a new action at the pace of a fast model (four per
// millisecond) and flushes them; it returns the action's driver.
func publishPaced(t *testing.T, ctx context.Context, js jetstream.JetStream, b *Bridge, n int) *driver {
	t.Helper()
	j := &driver{b: b, id: events.NewActionID()}
	p := newEventPublisher(js, j)
	t0 := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for i := range n {
		if i%4 == 0 {
			<-tick.C
		}
		if err := p.publish(testEvent(i)); err != nil {
			t.Fatalf("publish event %d: %v", i, err)
		}
	}
	if err := p.flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Logf("published and flushed %d events in %s", n, time.Since(t0).Round(time.Millisecond))
	return j
}

// storedSequences returns the "sequence" field of every event stored on subject, in
// stream order. It reads again from the start after an error (the stream may still be
// electing a leader after a leader change).
func storedSequences(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string, want int) []int64 {
	t.Helper()
	// Fewer than want is read again for a while: right after a leader change the
	// consumer's server may not have applied every committed message yet, and a read
	// that may be stale must not decide that events were lost (a real loss still fails,
	// once the re-reads give up).
	settle := time.Now().Add(10 * time.Second)
	for {
		seqs, err := readSequences(ctx, js, subject)
		if err == nil && (len(seqs) >= want || time.Now().After(settle)) {
			return seqs
		}
		if err == nil {
			t.Logf("read %d of %d stored events; reading again", len(seqs), want)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("read the stored events: %v", err)
		}
	}
}

func readSequences(ctx context.Context, js jetstream.JetStream, subject string) ([]int64, error) {
	c, err := js.OrderedConsumer(ctx, testOutputStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	want := int(info.NumPending)
	var seqs []int64
	for len(seqs) < want {
		batch, err := c.Fetch(min(want-len(seqs), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			d, err := events.DecodeEvent(m.Headers(), m.Data())
			if err != nil {
				return nil, fmt.Errorf("stored message %d: %w", len(seqs), err)
			}
			seqs = append(seqs, d.Sequence)
		}
		if batch.Error() != nil {
			return nil, batch.Error()
		}
		if n == 0 {
			return nil, fmt.Errorf("read %d of %d stored events", len(seqs), want)
		}
	}
	return seqs, nil
}

// checkContiguous fails unless seqs is exactly 0, 1, ..., n-1.
func checkContiguous(t *testing.T, seqs []int64, n int) {
	t.Helper()
	bad := 0
	for i, s := range seqs {
		if s != int64(i) {
			if bad < 10 {
				lo, hi := max(i-3, 0), min(i+4, len(seqs))
				t.Errorf("stored event %d has sequence %d (around it: %v)", i, s, seqs[lo:hi])
			}
			bad++
		}
	}
	if len(seqs) != n || bad > 0 {
		t.Fatalf("stored %d events (want %d), %d out of place", len(seqs), n, bad)
	}
}

// streamLeader returns the name of the output stream's current leader ("" while none).
func streamLeader(ctx context.Context, js jetstream.JetStream) string {
	st, err := js.Stream(ctx, testOutputStream)
	if err != nil {
		return ""
	}
	if ci := st.CachedInfo().Cluster; ci != nil {
		return ci.Leader
	}
	return ""
}

// TestEventOrderAcrossLeaderChanges (issue 12, finding 3): a stream's events are stored
// in sequence order, without gaps or duplicates, although the replicated output
// stream's leader steps down three times while they are published. The events come at
// the pace of a fast model (a few per millisecond), so that the stream has a new leader
// again while later events are still being published.
func TestEventOrderAcrossLeaderChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	servers := natsembed.RunTestCluster(t, 3, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nc, js := connectPublisher(t, servers[0].ClientURL())
	st := createOutputStream(t, ctx, js, 3, true)
	admin, _ := connectPublisher(t, servers[1].ClientURL())
	// A live subscriber on another node sees the stream leader's republished copies,
	// which carry no reply subject (the publisher's carry its batch's flow subject).
	var live, withReply atomic.Int64
	watcher, _ := connectPublisher(t, servers[2].ClientURL())
	sub, err := watcher.Subscribe("hermes.events.>", func(m *nats.Msg) {
		live.Add(1)
		if m.Reply != "" {
			withReply.Add(1)
		}
	})
	noErr(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	noErr(t, watcher.Flush())

	const n = 8000
	stepAt := map[int]bool{n / 4: true, n / 2: true, 3 * n / 4: true}
	steps := make(chan int, len(stepAt))
	var count int
	b := testBridge(t, ctx, nc, js, st, func(p Point, _ string) {
		if p == PointEvent {
			count++
			if stepAt[count] {
				steps <- count
			}
		}
	})
	// The stepper asks the stream's leader to step down whenever the publisher passes
	// one of the marks, concurrently with the publishing.
	var changes []string
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		for range steps {
			before := streamLeader(ctx, js)
			_, err := admin.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+testOutputStream, nil)
			if err != nil {
				t.Errorf("step down: %v", err)
				continue
			}
			changes = append(changes, before)
		}
	}()

	j := publishPaced(t, ctx, js, b, n)
	close(steps)
	<-stepped
	if len(changes) != len(stepAt) {
		t.Fatalf("%d leader step-downs, want %d", len(changes), len(stepAt))
	}
	checkContiguous(t, storedSequences(t, ctx, js, b.subjects.Events(j.id), n), n)
	if live.Load() == 0 || withReply.Load() != 0 {
		t.Errorf("live subscriber: %d events, %d of them with a reply subject; want some, none with one", live.Load(), withReply.Load())
	}
}

// cutProxy forwards TCP connections to a server until cut closes them all.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// startCutProxy listens on a loopback port and forwards each connection to target.
// t.Cleanup stops it and waits for its goroutines.
func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	noErr(t, err)
	p := &cutProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		p.wg.Go(func() { pipe(out, in) })
		p.wg.Go(func() { pipe(in, out) })
	}
}

// cut closes every connection through the proxy; what was in flight is lost.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestEventOrderAcrossDisconnects: a stream's events are stored in sequence order,
// without gaps or duplicates, although the publisher's connection is cut three times
// while they are published (what was in flight is lost; the client reconnects).
func TestEventOrderAcrossDisconnects(t *testing.T) {
	s := natsembed.RunTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, direct := natsembed.Connect(t, s)
	st := createOutputStream(t, ctx, direct, 1, true)
	proxy := startCutProxy(t, strings.TrimPrefix(s.ClientURL(), "nats://"))
	nc, js := connectPublisher(t, proxy.url())

	const n = 8000
	cutAt := map[int]bool{n / 4: true, n / 2: true, 3 * n / 4: true}
	var count, cuts int
	b := testBridge(t, ctx, nc, js, st, func(p Point, _ string) {
		if p == PointEvent {
			count++
			if cutAt[count] {
				proxy.cut()
				cuts++
			}
		}
	})
	j := publishPaced(t, ctx, js, b, n)
	if cuts != len(cutAt) {
		t.Fatalf("%d cuts, want %d", cuts, len(cutAt))
	}
	checkContiguous(t, storedSequences(t, ctx, direct, b.subjects.Events(j.id), n), n)
}

// natsConf is a server option reading the configuration text conf from a file.
func natsConf(t *testing.T, conf string) func(*natsembed.Options) {
	p := filepath.Join(t.TempDir(), "n.conf")
	noErr(t, os.WriteFile(p, []byte(conf), 0o600))
	return func(o *natsembed.Options) { o.ConfigFile = p }
}

// TestEventPublisherFallbacks: without fast batches (a stream that does not allow them,
// or a server refusing another batch in flight) events still go out, in order.
func TestEventPublisherFallbacks(t *testing.T) {
	publishN := func(t *testing.T, p *eventPublisher, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := p.publish(testEvent(i)); err != nil {
				t.Fatalf("publish event %d: %v", i, err)
			}
		}
	}
	t.Run("stream without batches", func(t *testing.T) {
		s := natsembed.RunTest(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		nc, js := connectPublisher(t, s.ClientURL())
		st := createOutputStream(t, ctx, js, 1, false)
		b := testBridge(t, ctx, nc, js, st, nil)
		j := &driver{b: b, id: events.NewActionID()}
		p := newEventPublisher(js, j)
		if p.batch != nil {
			t.Fatal("the publisher uses fast batches on a stream that does not allow them")
		}
		publishN(t, p, 0, 500)
		noErr(t, p.flush(ctx))
		checkContiguous(t, storedSequences(t, ctx, js, b.subjects.Events(j.id), 500), 500)
	})
	t.Run("no permission for the batch subject", func(t *testing.T) {
		s := natsembed.RunTest(t, natsConf(t, "authorization { users: [ { user: b, password: p, permissions: { publish: { deny: [\"hermes.out.batch.>\"] } } } ] }\n"))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		url := strings.Replace(s.ClientURL(), "nats://", "nats://b:p@", 1)
		nc, js := connectPublisher(t, url)
		st := createOutputStream(t, ctx, js, 1, true)
		b := testBridge(t, ctx, nc, js, st, nil)
		for i, want := range []string{"after the first denied commit", "from the start"} {
			j := &driver{b: b, id: events.NewActionID()}
			p := newEventPublisher(js, j)
			if (p.batch == nil) != (i == 1) {
				t.Fatalf("action %d: fast batch publisher %v; want it only for the first action", i, p.batch != nil)
			}
			publishN(t, p, 0, 100)
			if err := p.flush(ctx); err != nil {
				t.Fatalf("action %d: %v", i, err)
			}
			if p.batch != nil {
				t.Errorf("action %d: still publishing in fast batches, want a fallback %s", i, want)
			}
			checkContiguous(t, storedSequences(t, ctx, js, b.subjects.Events(j.id), 100), 100)
		}
	})
	t.Run("too many batches", func(t *testing.T) {
		s := natsembed.RunTest(t, natsConf(t, "jetstream { limits { batch { max_inflight_per_stream: 1 } } }\n"))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		nc, js := connectPublisher(t, s.ClientURL())
		st := createOutputStream(t, ctx, js, 1, true)
		b := testBridge(t, ctx, nc, js, st, nil)
		first := &driver{b: b, id: events.NewActionID()}
		second := &driver{b: b, id: events.NewActionID()}
		p1, p2 := newEventPublisher(js, first), newEventPublisher(js, second)
		publishN(t, p1, 0, 5) // its batch is the one in flight
		publishN(t, p2, 0, 500)
		noErr(t, p2.flush(ctx))
		if p2.batch != nil {
			t.Error("the second publisher still uses a fast batch the server refused")
		}
		if p1.batch == nil {
			t.Fatal("the first publisher does not use a fast batch")
		}
		publishN(t, p1, 5, 500)
		noErr(t, p1.flush(ctx))
		checkContiguous(t, storedSequences(t, ctx, js, b.subjects.Events(first.id), 500), 500)
		checkContiguous(t, storedSequences(t, ctx, js, b.subjects.Events(second.id), 500), 500)
	})
}
