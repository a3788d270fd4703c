package kvstore

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// nullKV answers every Create and Update with the next revision at once, as a server
// that is never in the way would: it lets a benchmark count the Store's own cost.
type nullKV struct {
	jetstream.KeyValue
	rev atomic.Uint64
}

func (k *nullKV) Create(ctx context.Context, _ string, _ []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	select { // as nats.go's request does
	case <-ctx.Done():
		return 0, ctx.Err()
	default:
	}
	return k.rev.Add(1), nil
}

func (k *nullKV) Update(ctx context.Context, _ string, _ []byte, _ uint64) (uint64, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	default:
	}
	return k.rev.Add(1), nil
}

// nullJS acknowledges every publish at once with the next sequence.
type nullJS struct {
	jetstream.JetStream
	seq atomic.Uint64
}

func (j *nullJS) Conn() *nats.Conn { return nil }

func (j *nullJS) PublishMsg(ctx context.Context, _ *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	return &jetstream.PubAck{Stream: "OUT", Sequence: j.seq.Add(1)}, nil
}

// BenchmarkClaimPathOverhead is BenchmarkClaimPath's writes with a server that
// answers at once (nullKV, nullJS): what remains is the cost of the package's own
// code around the three writes of a keyed unsafe action's start (the key's Create,
// the record's Create, the result's Append). The deadline=10m case is an action's
// context, minutes from its deadline (each request gets a timer of OpTimeout);
// deadline=2s one in its last seconds.
func BenchmarkClaimPathOverhead(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	near := nearDeadline{context.Background(), 2 * time.Second}
	b.Run("deadline=10m", func(b *testing.B) { benchClaimPathOverhead(b, ctx) })
	b.Run("deadline=2s", func(b *testing.B) { benchClaimPathOverhead(b, near) })
}

// nearDeadline is a context whose deadline is always d from now (and never ends).
type nearDeadline struct {
	context.Context
	d time.Duration
}

func (c nearDeadline) Deadline() (time.Time, bool) { return time.Now().Add(c.d), true }

func benchClaimPathOverhead(b *testing.B, ctx context.Context) {
	s := &Store{kv: &nullKV{}, bucket: DefaultBucket, ttl: DefaultTTL, limit: 1 << 20}
	log := NewJetStreamLog(&nullJS{}, nil, func(id string) string { return "bench.results." + id })
	capID := "cap:hermes_agent:ep1:chat"
	idem := IdempotencyKey(capID, "k")
	key := Record{State: StateClaimed, ActionID: "01JDQ3ZC7V4M8XG2K9T6RB5NWE", CapabilityID: capID,
		InputSHA256: strings.Repeat("ab", 32), Owner: "replica-1.gcX8Gp6L9TlUpf1N4O7dmR"}
	r := key
	r.State, r.Attempt, r.IdemKey = StateDispatched, 1, idem
	m := nats.NewMsg("bench.results.x")
	m.Header.Set(jetstream.MsgIDHeader, "x:result")
	m.Data = []byte(`{"action_id":"x","status":"completed","output":{"text":"hello"},"error":null}`)
	b.ReportAllocs()
	start := cpuTime(b)
	for b.Loop() {
		if _, err := s.Create(ctx, idem, key); err != nil {
			b.Fatalf("key: %v", err)
		}
		if _, err := s.Create(ctx, ActionKey(key.ActionID), r); err != nil {
			b.Fatalf("record: %v", err)
		}
		if _, err := log.Append(ctx, key.ActionID, m, 0); err != nil {
			b.Fatalf("append: %v", err)
		}
	}
	reportCPU(b, start)
}

// cpuTime is the CPU time (user and system) the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per iteration since start as cpu-ns/op:
// unlike ns/op it does not count time spent waiting for a CPU on a busy machine.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}
