package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Bridge consumes actions from JetStream, calls Hermes and republishes events and results.
// Create it with New and run it with Run; it is not reusable after Run returns.
type Bridge struct {
	cfg      Config
	log      zerolog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects events.Subjects
	store    recordStore           // the bucket, for the sweeper and the status endpoint
	recs     buckets               // the buckets as the jobs use them
	results  *kvstore.JetStreamLog // the result log (the terminal register)
	out      outputs               // where outputs are published
	coreCfg  core.Config
	output   jetstream.Stream
	objects  jetstream.ObjectStore
	// maxOut is the largest event or result body published as one message; larger
	// ones go to the object store (see offload).
	maxOut int
	// recordLimit is the bucket's largest record (0: unknown); a parked action larger
	// than it is kept in the object store (parkable).
	recordLimit int
	eps         map[string]*endpoint
	now         func() time.Time

	// shutdown: handlers use work (cancelled after the grace period), not Run's ctx.
	workCtx    context.Context
	cancelWork context.CancelFunc
	wg         sync.WaitGroup // the worker pool's goroutines (workers.go): drain waits for them
	beats      *heartbeats
	inflight   registry // deliveries running here, for cancel requests
	ready      chan struct{}
	readyOnce  sync.Once

	metrics  *metrics    // nil when Config.Metrics is nil
	tracing  *tracing    // nil when Config.TracerProvider is nil
	draining atomic.Bool // Run's context is done: no new work is taken
	health   healthCache // the last JetStream check, for Health
}

type endpoint struct {
	cfg    Endpoint
	client caller
	lim    *limiter // the learned concurrency gate (limiter.go), at most cfg.MaxConcurrency
	brk    *breaker
	// runsDurable is the durable runs idempotency last read from the endpoint's
	// capabilities: 0 not read yet, 1 no, 2 yes (only to log a change).
	runsDurable atomic.Int32
}

// caller is what the bridge needs from a Hermes client: it sends requests that
// hermes.Prepare mapped during validation.
type caller interface {
	Send(ctx context.Context, p *hermes.Prepared, onEvent func(hermes.Event) error) (*hermes.Result, error)
}

// records is the compare-and-set record store the jobs' effects use
// (kvstore.Store, timed when metrics are on).
type records interface {
	Create(ctx context.Context, key string, r kvstore.Record) (uint64, error)
	Get(ctx context.Context, key string) (kvstore.Entry, error)
	Update(ctx context.Context, key string, r kvstore.Record, rev uint64) (uint64, error)
	Delete(ctx context.Context, key string, rev uint64) error
	Wait(ctx context.Context, key string, afterRev uint64) (kvstore.Entry, error)
}

// recordStore is what the bridge reads from the KV records besides the jobs: the park
// index, for the sweeper (kvstore.Store satisfies it).
type recordStore interface {
	records
	Keys(ctx context.Context, filter string) ([]string, error)
}

var _ recordStore = (*kvstore.Store)(nil)

// New checks cfg and builds a Bridge on the connection nc. Nothing is provisioned or
// consumed until Run. The logger receives one line per action outcome and lifecycle
// events; it never receives content, keys or session identifiers.
func New(nc *nats.Conn, cfg Config, log zerolog.Logger) (*Bridge, error) {
	cfg = cfg.WithDefaults()
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = nuid.Next()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// An async publish whose ack is lost (a server restart, a leader change) fails after
	// OpTimeout instead of never; the event publisher then republishes it in order.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(kvstore.OpTimeout))
	if err != nil {
		return nil, fmt.Errorf("bridge: jetstream: %w", err)
	}
	b := &Bridge{
		cfg:      cfg,
		log:      log,
		nc:       nc,
		js:       js,
		subjects: events.Subjects{Prefix: cfg.Prefix},
		out:      outputsFor(cfg.Prefix),
		eps:      make(map[string]*endpoint, len(cfg.Endpoints)),
		now:      time.Now,
		beats:    newHeartbeats(cfg.Heartbeat),
		coreCfg:  cfg.core(),
		ready:    make(chan struct{}),
	}
	for _, ep := range cfg.Endpoints {
		opts := []hermes.Option{hermes.WithEndpointID(ep.ID), hermes.WithIdleConns(ep.MaxConcurrency),
			hermes.WithCapabilitiesTTL(cfg.CapabilitiesTTL)}
		if ep.Key != nil {
			opts = append(opts, hermes.WithKeyFunc(ep.Key))
		}
		c, err := hermes.New(ep.BaseURL, opts...)
		if err != nil {
			return nil, fmt.Errorf("bridge: endpoint %q: %w", ep.ID, err)
		}
		b.eps[ep.ID] = &endpoint{cfg: ep, client: c, lim: newLimiter(ep.MaxConcurrency),
			brk: newBreaker(cfg.BreakerThreshold, cfg.BreakerCooldown, cfg.BreakerMaxCooldown)}
	}
	if b.metrics, err = newMetrics(cfg.Metrics, b.eps); err != nil {
		return nil, fmt.Errorf("bridge: metrics: %w", err)
	}
	b.tracing = newTracing(cfg.TracerProvider, b.eps)
	return b, nil
}

// Config returns the configuration in force, defaults applied.
func (b *Bridge) Config() Config { return b.cfg }

// Ready is closed once Run has provisioned (or bound to) the streams, consumer and
// buckets and consumes actions: a program that runs the bridge itself can publish from
// then on. It stays open when Run fails before that.
func (b *Bridge) Ready() <-chan struct{} { return b.ready }

// Run provisions (or binds to) the streams, consumer and bucket, then handles actions
// until ctx is cancelled. On cancellation it stops fetching, lets in-flight actions
// finish within ShutdownGrace, then cancels them (their messages are redelivered to
// another replica), and returns nil. It returns an error if setup fails.
func (b *Bridge) Run(ctx context.Context) error {
	cons, err := b.setup(ctx)
	if err != nil {
		return err
	}
	b.workCtx, b.cancelWork = context.WithCancel(context.WithoutCancel(ctx))
	defer b.cancelWork()
	stopCancel, err := b.subscribeCancel(b.workCtx)
	if err != nil {
		return fmt.Errorf("bridge: subscribe to cancel requests: %w", err)
	}
	defer stopCancel()
	stopSteer, err := b.subscribeSteer(b.workCtx)
	if err != nil {
		return fmt.Errorf("bridge: subscribe to steer requests: %w", err)
	}
	defer stopSteer()
	stopService, err := b.startService()
	if err != nil {
		return err
	}
	defer stopService()
	// Heartbeats outlive the work context: deliveries finishing within the shutdown grace
	// still need them. They stop once every handler has returned (drain).
	defer goUntil(context.WithoutCancel(ctx), b.beats.run)()
	defer goUntil(ctx, (&sweeper{b: b}).run)()

	// pullHeartbeat bounds a delivery stall seen under bursts (1,000 actions at once): the
	// iterator stopped asking for messages with none outstanding on the server, until it
	// missed the server's heartbeats for two intervals (30 s with the defaults). It is a
	// lost wake-up in nats.go v1.55.0's Messages(): checkPending skips the next pull
	// request while fetchInProgress is set, that is while pullMessages is still sending
	// the previous one; if that request's messages are all consumed before pullMessages
	// clears the flag (a descheduled goroutine on a loaded machine), nothing checks again.
	// Reproduced with a copy of nats.go that sleeps 2 ms before clearing the flag: a burst
	// of 1,000 messages stalls after nearly every 64-message batch (consumer info: waiting
	// 0, pending > 0, ack pending 0). The missing-heartbeat reset re-checks; with 1 s it
	// comes after about 2 s. Idle heartbeats cost one small message a second per replica.
	//
	// The dispatcher's iterator (nextMessages) bounds the same stall to nextWait.
	const pullHeartbeat = time.Second
	it, err := cons.Messages(
		jetstream.PullMaxMessages(prefetch(b.cfg.Workers)),
		jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.WithMessagesErrOnMissingHeartbeat(false),
	)
	if err != nil {
		return fmt.Errorf("bridge: consume: %w", err)
	}
	b.log.Info().Str("consumer", b.cfg.Consumer).Int("workers", b.cfg.Workers).
		Int("endpoints", len(b.eps)).Msg("bridge started")
	b.readyOnce.Do(func() { close(b.ready) })
	defer goUntil(ctx, func(ctx context.Context) { b.metrics.sampleConsumer(ctx, cons, b.cfg.MetricsInterval) })()

	stop := context.AfterFunc(ctx, func() { b.draining.Store(true); it.Drain() })
	defer stop()
	sem := make(chan struct{}, b.cfg.Workers)
	pool := newWorkerPool(b.cfg.Workers, &b.wg)
	next := &nextMessages{it: it, bounded: true}
loop:
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		msg, err := next.next(ctx)
		if err != nil {
			<-sem
			switch {
			case ctx.Err() != nil, errors.Is(err, jetstream.ErrMsgIteratorClosed):
				break loop
			case errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, nats.ErrTimeout),
				errors.Is(err, context.DeadlineExceeded):
				continue // transient: the iterator re-pulls by itself
			default:
				b.log.Warn().Err(err).Msg("consumer iterator error; retrying")
				select {
				case <-time.After(200 * time.Millisecond):
				case <-ctx.Done():
					break loop
				}
				continue
			}
		}
		pool.do(func() {
			var once sync.Once
			yield := func() { once.Do(func() { <-sem }) }
			defer yield()
			b.handle(b.workCtx, msg, yield)
		})
	}
	b.handBack(it)
	pool.stop()
	b.drain()
	return nil
}

// goUntil runs f in a goroutine of its own with a context derived from ctx, and returns
// the function that cancels that context and waits for f to return.
func goUntil(ctx context.Context, f func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	return func() { cancel(); <-done }
}

// handBack stops the iterator and hands the deliveries it had prefetched back to the
// server (a Nak), so that another replica gets them within handBackDelay instead of
// after an ack wait. The short delay lets the iterator's unsubscribe reach the server
// first, which then skips this replica's pull request (it has no interest any more);
// a message that comes back all the same ends the hand-back. Bounded by handBackFor.
func (b *Bridge) handBack(it jetstream.MessagesContext) {
	const handBackDelay, handBackFor = 250 * time.Millisecond, 2 * time.Second
	it.Drain()
	seen := map[uint64]bool{}
	until := time.Now().Add(handBackFor)
	for time.Now().Before(until) {
		msg, err := it.Next(jetstream.NextMaxWait(min(time.Until(until), 500*time.Millisecond)))
		if err != nil {
			break
		}
		md, err := msg.Metadata()
		if err != nil || seen[md.Sequence.Stream] {
			_ = msg.NakWithDelay(handBackDelay)
			break
		}
		seen[md.Sequence.Stream] = true
		_ = msg.NakWithDelay(handBackDelay)
	}
	if len(seen) > 0 {
		b.log.Info().Int("handed_back", len(seen)).Msg("handed prefetched actions back to the server")
	}
}

// nextWait is how long the first Next after a message waits; see nextMessages.
const nextWait = 100 * time.Millisecond

// nextMessages takes messages from a Messages() iterator, bounding a nats.go lost wake-up
// (see pullHeartbeat in Run) to nextWait at no network cost. Next re-checks what the
// iterator has outstanding each time it is called, so a Next that gives up after nextWait
// and is called again sends the pull request that the lost wake-up skipped. With the 2 ms
// window, a burst of 1,000 takes 1.5 s with it instead of 28 s without; unpatched it
// changes nothing (50 ms). Only the first Next after a message is bounded: the one after
// a timeout waits without limit, because the missing-heartbeat check lives inside a Next
// call (two heartbeats, 2 s) and is what recovers a pull request the server dropped; a
// Next that always returned after nextWait would never reach it. When idle, the
// dispatcher therefore waits in one unbounded Next. Not safe for concurrent use.
type nextMessages struct {
	it interface {
		Next(opts ...jetstream.NextOpt) (jetstream.Msg, error)
	}
	bounded bool // the next call gives up after nextWait
}

// boundedNext are the options of a bounded Next, made once (not an option and its
// slice per message): jetstream only reads them.
var boundedNext = []jetstream.NextOpt{jetstream.NextMaxWait(nextWait)}

// next returns the next message; nats.ErrTimeout after nextWait when the call was
// bounded, and ctx's error or the iterator's when it ends otherwise.
func (n *nextMessages) next(ctx context.Context) (jetstream.Msg, error) {
	var msg jetstream.Msg
	var err error
	if n.bounded {
		msg, err = n.it.Next(boundedNext...) // Stop ends it on shutdown
	} else {
		msg, err = n.it.Next(jetstream.NextContext(ctx))
	}
	n.bounded = err == nil
	return msg, err
}

// drain waits for in-flight actions for up to ShutdownGrace, then cancels them.
func (b *Bridge) drain() {
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	t := time.NewTimer(b.cfg.ShutdownGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		b.log.Warn().Str("grace", b.cfg.ShutdownGrace.String()).Msg("shutdown grace over; cancelling in-flight actions")
		b.cancelWork()
		for _, d := range b.drivers("") {
			d.signal(core.EvShutdown)
		}
		<-done
	}
	b.log.Info().Msg("bridge stopped")
}

// setup creates or binds every JetStream resource and returns the consumer.
func (b *Bridge) setup(ctx context.Context) (jetstream.Consumer, error) {
	c := b.cfg
	outSubjects, outTransform, outRepublish := outputStream(c.Prefix)
	streams := []jetstream.StreamConfig{
		{Name: c.ActionsStream, Subjects: []string{b.subjects.Actions(), b.subjects.AllApprovals()}, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.ActionsMaxAge, MaxBytes: streamMaxBytes(c.ActionsMaxBytes), Retention: jetstream.LimitsPolicy, Duplicates: 2 * time.Minute,
			Description: "hermes-bridge actions and approval decisions in"},
		// The output stream stores and republishes what the bridge publishes on
		// <prefix>.out.> (see outputs). With a byte limit it refuses new messages when
		// full rather than discard old ones: a result an idempotency key refers to is
		// never discarded before its max age (schemas/README.md, "Delivery guarantees").
		{Name: c.OutputStream, Subjects: outSubjects, SubjectTransform: outTransform, RePublish: outRepublish,
			Storage: c.Storage, Replicas: c.Replicas, MaxAge: c.OutputMaxAge, MaxBytes: streamMaxBytes(c.OutputMaxBytes),
			Discard: discardOf(c.OutputMaxBytes), Duplicates: 2 * time.Minute, AllowBatchPublish: true, // events: see eventPublisher
			Description: "hermes-bridge events and results out"},
		{Name: c.DLQStream, Subjects: []string{b.subjects.DLQ()}, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.DLQMaxAge, MaxBytes: streamMaxBytes(c.DLQMaxBytes), Duplicates: 2 * time.Minute, Description: "hermes-bridge dead letters"},
	}
	// Changing the max age or TTL of an existing resource applies to every message at
	// once: read what is in force first, and refuse (before changing anything) to
	// shorten one that holds data without permission.
	var plan []retention
	if c.Provision {
		var err error
		if plan, err = b.retentionPlan(ctx, streams); err != nil {
			return nil, err
		}
		if err := checkRetention(plan, c.AllowRetentionShrink); err != nil {
			return nil, err
		}
	}
	for _, sc := range streams {
		var s jetstream.Stream
		var err error
		if c.Provision {
			if s, err = b.js.CreateOrUpdateStream(ctx, sc); err != nil {
				return nil, fmt.Errorf("bridge: provision stream %s: %w", sc.Name, err)
			}
		} else if s, err = b.js.Stream(ctx, sc.Name); err != nil {
			return nil, fmt.Errorf("bridge: stream %s is not available (provisioning is off): %w", sc.Name, err)
		}
		if sc.Name == c.OutputStream {
			b.output = s
			if !c.Provision { // provisioning made it so
				if err := checkRepublishes(b.subjects.Prefix, s.CachedInfo().Config); err != nil {
					return nil, err
				}
			}
			if err := checkOutputStream(s.CachedInfo().Config); err != nil {
				return nil, err
			}
		}
	}
	store, keys, err := b.openBuckets(ctx)
	if err != nil {
		return nil, err
	}
	bs := buckets{records: store, keys: keys, m: b.metrics}
	if ok, _ := store.Atomic(); ok && keys == store {
		bs.batch = store
		b.coreCfg.AtomicClaim = true
	}
	b.store, b.recs = store, bs
	b.recordLimit = store.MaxValueSize()
	b.results = kvstore.NewJetStreamLog(b.js, b.output, b.subjects.Results)
	ocfg := jetstream.ObjectStoreConfig{Bucket: c.ObjectBucket, TTL: c.OutputMaxAge, Storage: c.Storage,
		Replicas: c.Replicas, Description: "hermes-bridge outputs and events too large for one message"}
	if c.Provision {
		b.objects, err = b.js.CreateOrUpdateObjectStore(ctx, ocfg)
	} else {
		b.objects, err = b.js.ObjectStore(ctx, c.ObjectBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("bridge: object store %s: %w", c.ObjectBucket, err)
	}
	b.logRetention(plan)
	b.maxOut = outputLimit(int(b.nc.MaxPayload()), store.MaxValueSize())
	cc := jetstream.ConsumerConfig{
		Durable:        c.Consumer,
		Description:    "hermes-bridge replicas share this consumer",
		FilterSubjects: []string{b.subjects.Actions(), b.subjects.AllApprovals()},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        c.AckWait,
		MaxDeliver:     c.MaxDeliver,
		MaxAckPending:  c.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		Replicas:       c.Replicas,
	}
	var cons jetstream.Consumer
	if c.Provision {
		if cons, err = b.js.CreateOrUpdateConsumer(ctx, c.ActionsStream, cc); err != nil {
			return nil, fmt.Errorf("bridge: provision consumer %s: %w", c.Consumer, err)
		}
	} else if cons, err = b.js.Consumer(ctx, c.ActionsStream, c.Consumer); err != nil {
		return nil, fmt.Errorf("bridge: consumer %s on %s is not available (provisioning is off): %w", c.Consumer, c.ActionsStream, err)
	}
	b.warnAckPending(cons.CachedInfo().Config)
	return cons, nil
}

// streamMaxBytes is a stream's MaxBytes for a configured limit: -1 (unlimited) for 0.
func streamMaxBytes(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// warnAckPending warns when the shared consumer's limit of unacknowledged deliveries
// leaves no room for a second replica of this size: replicas then share one replica's
// concurrency, silently.
func (b *Bridge) warnAckPending(cc jetstream.ConsumerConfig) {
	held := HeldPerReplica(b.cfg.Workers)
	if limit := cc.MaxAckPending; limit > 0 && limit < 2*held {
		b.log.Warn().Int("max_ack_pending", limit).Int("held_per_replica", held).
			Msg("the consumer's max ack pending is less than two replicas hold: more replicas add no concurrency; " +
				"raise HERMES_BRIDGE_MAX_ACK_PENDING to replicas x held_per_replica")
	}
}
