package kvstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults applied by Open.
const (
	DefaultBucket = "HERMES_IDEMPOTENCY"
	DefaultTTL    = 24 * time.Hour
)

// Config describes the bucket. The zero value (plus Provision) gives the
// defaults.
type Config struct {
	// Bucket is the KV bucket name. Default DefaultBucket.
	Bucket string
	// TTL is the bucket TTL (stream MaxAge), counted from each revision's
	// write. Default DefaultTTL; JetStream requires at least 100 ms.
	TTL time.Duration
	// Replicas is the bucket's replica count when provisioning. Default 1.
	Replicas int
	// Storage is the bucket's storage when provisioning. The zero value is
	// jetstream.FileStorage.
	Storage jetstream.StorageType
	// Provision creates the bucket or updates its configuration when true;
	// when false Open only binds to an existing bucket.
	Provision bool
	// AllowRetentionShrink lets a provisioning Open shorten the TTL of a bucket
	// that holds values; the server then deletes those older than the new TTL at
	// once. Without it such an Open fails with ErrTTLShrink and changes nothing.
	// Lengthening the TTL, or shortening that of an empty bucket, needs no
	// permission.
	AllowRetentionShrink bool
	// MaxValueSize limits an encoded record in bytes. 0 means the server's
	// max payload when provisioning, or the existing bucket's limit when
	// binding.
	MaxValueSize int32
	// Description is the bucket's description when provisioning.
	Description string
	// KeysTTL, when positive, keeps idempotency keys (IsIdempotencyKey) in this bucket
	// for KeysTTL after each of their writes instead of the bucket TTL: every Create
	// and Update of a key carries it as the message's TTL. The bucket's stream must
	// allow message TTLs (nats-server 2.11+); provisioning allows them. Where the stream
	// does not, Store.KeysTTL reports 0 and keys live as long as any record.
	KeysTTL time.Duration
	// Atomic, when provisioning, allows atomic batch publishes on the bucket's stream
	// (nats-server 2.12+), which CreateAll needs.
	Atomic bool
}

// Store reads and writes records in one bucket. It is safe for concurrent
// use.
type Store struct {
	kv      jetstream.KeyValue
	bucket  string
	ttl     time.Duration
	limit   int           // client-side size check; 0 = none
	keysTTL time.Duration // the message TTL of idempotency keys; 0 = the bucket TTL
	// keysTTLHdr is keysTTL as the Nats-TTL header's value.
	keysTTLHdr []string
	nc         *nats.Conn // the bucket's connection
	// pub publishes a write (put): publish on nc; a test replaces it to lose replies.
	pub func(context.Context, *nats.Msg) (seq uint64, dup bool, err error)
	// batch says whether CreateAll writes one atomic batch; noBatch says why not.
	batch   bool
	noBatch string
}

// Entry is a record with its revision. Revision is the compare-and-set token
// for Update and Delete.
type Entry struct {
	Key      string
	Record   Record
	Revision uint64
	// Written is when this revision was stored; the bucket TTL runs from it.
	Written time.Time
}

// Open provisions (cfg.Provision) or binds to the bucket and returns a Store.
// Binding to a missing bucket fails with an error matching ErrNoBucket (and
// jetstream.ErrBucketNotFound) whose message says to create the bucket or
// enable provisioning. Provisioning is idempotent. It compares the existing
// bucket's TTL with cfg.TTL first: a shorter TTL on a bucket that holds values
// fails with a *TTLShrinkError (ErrTTLShrink) unless cfg.AllowRetentionShrink.
// Without a ctx deadline Open applies a 30 s timeout.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if js == nil {
		return nil, errors.New("kvstore: nil JetStream")
	}
	cfg.Bucket = cmp.Or(cfg.Bucket, DefaultBucket)
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	cfg.Replicas = cmp.Or(cfg.Replicas, 1)
	switch {
	case cfg.TTL < 0:
		return nil, fmt.Errorf("kvstore: negative TTL %s", cfg.TTL)
	case cfg.Replicas < 0:
		return nil, fmt.Errorf("kvstore: negative replicas %d", cfg.Replicas)
	case cfg.MaxValueSize < 0:
		return nil, fmt.Errorf("kvstore: negative MaxValueSize %d", cfg.MaxValueSize)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}

	var maxPayload int
	if nc := js.Conn(); nc != nil {
		maxPayload = int(nc.MaxPayload())
	}

	if cfg.Provision {
		if err := checkTTL(ctx, js, cfg); err != nil {
			return nil, err
		}
		if err := provision(ctx, js, cfg, maxPayload); err != nil {
			return nil, fmt.Errorf("kvstore: provision bucket %s: %w", cfg.Bucket, err)
		}
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, &bucketError{bucket: cfg.Bucket, err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: bind bucket %s: %w", cfg.Bucket, err)
	}

	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s status: %w", cfg.Bucket, err)
	}
	nc := js.Conn()
	s := &Store{kv: kv, nc: nc, bucket: cfg.Bucket, ttl: st.TTL(), noBatch: "the bucket's stream is unknown",
		pub: func(ctx context.Context, m *nats.Msg) (uint64, bool, error) { return publish(ctx, nc, m) }}
	var bucketMax int
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		bucketMax = int(bs.Config().MaxValueSize)
		s.setStream(bs.StreamInfo().Config, cfg.KeysTTL)
	}
	s.limit = minPositive(int(cfg.MaxValueSize), bucketMax, maxPayload)
	return s, nil
}

// checkTTL refuses to shorten the TTL of an existing bucket that holds values,
// unless cfg allows it. A missing bucket is not a problem: Open creates it.
func checkTTL(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kvstore: read bucket %s: %w", cfg.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("kvstore: bucket %s status: %w", cfg.Bucket, err)
	}
	if shortens(st.TTL(), cfg.TTL) && st.Values() > 0 && !cfg.AllowRetentionShrink {
		return &TTLShrinkError{Bucket: cfg.Bucket, Current: st.TTL(), Requested: cfg.TTL, Values: st.Values()}
	}
	return nil
}

// shortens reports whether requested is a shorter retention than current; 0 means
// no expiry, the longest of all.
func shortens(current, requested time.Duration) bool {
	return requested > 0 && (current == 0 || requested < current)
}

// minPositive returns the smallest positive argument, or 0 if none is.
func minPositive(vs ...int) int {
	m := 0
	for _, v := range vs {
		if v > 0 && (m == 0 || v < m) {
			m = v
		}
	}
	return m
}

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// TTL returns the bucket TTL in force (0 means no expiry).
func (s *Store) TTL() time.Duration { return s.ttl }

// MaxValueSize returns the encoded-record limit checked before writing (0
// means none known).
func (s *Store) MaxValueSize() int { return s.limit }

// Create claims key with r and returns the new revision. It fails with
// ErrExists when the key holds a live value; it succeeds over a deleted or
// expired key, and when the write landed although its reply was lost (it then
// finds its own bytes under key). Of any number of concurrent Creates on one
// key, exactly one succeeds. Create sets r.UpdatedAt to now, and r.CreatedAt when zero.
// Errors: ErrExists, ErrTooLarge.
func (s *Store) Create(ctx context.Context, key string, r Record) (uint64, error) {
	now := time.Now().UTC()
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.UpdatedAt = now
	return s.write(ctx, "create", key, &r, ErrExists, func(ctx context.Context, b []byte) (uint64, error) {
		rev, err := s.put(ctx, key, b, 0)
		if !isCASFailure(err) {
			return rev, err
		}
		// The key holds a value, or the marker of one deleted, which a Create may
		// replace: nats.go's Create tells which (nothing was written).
		if ttl := s.ttlOf(key); ttl > 0 {
			return s.kv.Create(ctx, key, b, jetstream.KeyTTL(ttl))
		}
		return s.kv.Create(ctx, key, b)
	})
}

// put publishes b as key's value if the key's last revision is last (0: none), with
// the key's message TTL, as the bucket's Create and Update do (publish).
func (s *Store) put(ctx context.Context, key string, b []byte, last uint64) (uint64, error) {
	h := nats.Header{jetstream.ExpectedLastSubjSeqHeader: expectNone}
	if last != 0 {
		h[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(last, 10)}
	}
	if ttl := s.ttlOf(key); ttl > 0 {
		h[jetstream.MsgTTLHeader] = s.keysTTLHdr
	}
	seq, _, err := s.pub(ctx, &nats.Msg{Subject: s.subject(key), Data: b, Header: h})
	if last != 0 && isCASFailure(err) {
		err = fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch) // as the bucket's Update says it
	}
	return seq, err
}

// lostReplyCheck bounds the read with which a failed Create or Update looks for its own
// write.
const lostReplyCheck = 2 * time.Second

// OpTimeout bounds one request to the server (a read or a write), whatever the
// caller's deadline: a request in flight when the connection breaks (a server restart,
// a leader change) gets no reply, and nats.go would wait for it until the caller's
// deadline, which may be an action's ten minutes. The caller sees an error and retries.
const OpTimeout = 5 * time.Second

// opCtx bounds ctx to OpTimeout for one request. A ctx without a deadline is left as
// it is: nats.go bounds such a request by its own default timeout (5 s), so a timer
// here would only be a second one on the hot path. So is a ctx whose deadline comes
// within OpTimeout: it bounds the request already.
func opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx, noCancel
	}
	return boundCtx(ctx, d, OpTimeout)
}

// boundCtx bounds ctx, whose deadline is d, to timeout from now: it returns ctx itself
// (and a cancel that does nothing) when d comes within timeout, as
// context.WithTimeout's context would then end with ctx anyway, and
// context.WithTimeout(ctx, timeout) otherwise.
func boundCtx(ctx context.Context, d time.Time, timeout time.Duration) (context.Context, context.CancelFunc) {
	now := time.Now()
	if d.Sub(now) <= timeout {
		return ctx, noCancel
	}
	return context.WithDeadline(ctx, now.Add(timeout)) // context.WithTimeout, with this now
}

func noCancel() {}

// Get returns the live record under key. Errors: ErrNotFound, ErrCorrupt.
func (s *Store) Get(ctx context.Context, key string) (Entry, error) {
	ctx, cancel := opCtx(ctx)
	defer cancel()
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("kvstore: get %s: %w", key, err)
	}
	return toEntry(key, e)
}

func toEntry(key string, e jetstream.KeyValueEntry) (Entry, error) {
	r, err := decodeRecord(e.Value())
	if err != nil {
		return Entry{}, fmt.Errorf("kvstore: %s revision %d: %w", key, e.Revision(), err)
	}
	return Entry{Key: key, Record: r, Revision: e.Revision(), Written: e.Created()}, nil
}

// Update replaces the record under key if its latest revision is rev, and
// returns the new revision. It fails with ErrConflict when the key changed
// since rev or has no live value; it succeeds when the write landed although its reply
// was lost (it then finds its own bytes under key, as Create does). Update sets
// r.UpdatedAt to now. Errors: ErrConflict, ErrTooLarge.
func (s *Store) Update(ctx context.Context, key string, r Record, rev uint64) (uint64, error) {
	if rev == 0 {
		return 0, fmt.Errorf("%w: update %s: revision 0", ErrConflict, key)
	}
	r.UpdatedAt = time.Now().UTC()
	return s.write(ctx, "update", key, &r, ErrConflict, func(ctx context.Context, b []byte) (uint64, error) {
		return s.put(ctx, key, b, rev)
	})
}

// write encodes r (only read), checks it against the size limit (ErrTooLarge), runs put, the
// Create or Update of the bytes b under key, and maps its error (casErr for a failed
// compare-and-set). The write may have landed although its reply was lost (a
// timeout, a leader change, a reconnect): if key then holds exactly b (the bytes name the
// writer and the nanosecond), the write is this one and write returns its revision.
// So a lost reply of the write-ahead mark does not make its owner give the action up (the
// next delivery would settle outcome_unknown for a call never sent). A read that is behind
// finds other bytes: the error stands.
func (s *Store) write(ctx context.Context, op, key string, r *Record, casErr error, put func(context.Context, []byte) (uint64, error)) (uint64, error) {
	b, err := encodeRecord(r)
	if err != nil {
		return 0, fmt.Errorf("kvstore: encode %s: %w", key, err)
	}
	if s.limit > 0 && len(b) > s.limit {
		return 0, &TooLargeError{Key: key, Size: len(b), Limit: s.limit}
	}
	pctx, cancel := opCtx(ctx)
	rev, err := put(pctx, b)
	cancel()
	if err != nil && !isCASFailure(err) && !isTooLarge(err) {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lostReplyCheck)
		defer cancel()
		if e, gerr := s.kv.Get(gctx, key); gerr == nil && bytes.Equal(e.Value(), b) {
			return e.Revision(), nil
		}
	}
	return rev, mapWriteErr(op, key, len(b), err, casErr)
}

// Delete removes the record under key if its latest revision is rev,
// releasing the claim: a later Create on key succeeds. rev must be non-zero
// (there is no unconditional delete). Errors: ErrConflict.
func (s *Store) Delete(ctx context.Context, key string, rev uint64) error {
	if rev == 0 {
		return fmt.Errorf("%w: delete %s: revision 0", ErrConflict, key)
	}
	ctx, cancel := opCtx(ctx)
	defer cancel()
	err := s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	return mapWriteErr("delete", key, 0, err, ErrConflict)
}

// Wait blocks until key holds a revision newer than afterRev and returns it.
// It returns at once if one is already there. It fails with ErrNotFound
// when the key is deleted or has no value (never written or expired), and
// with ctx.Err() when ctx is done. Duplicates use it to wait for an
// in-flight original. The watch it opens is stopped before Wait returns.
func (s *Store) Wait(ctx context.Context, key string, afterRev uint64) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.kv.Watch(wctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return Entry{}, ctx.Err()
		}
		return Entry{}, fmt.Errorf("kvstore: watch %s: %w", key, err)
	}
	defer func() { _ = w.Stop() }()

	seen := false
	for {
		select {
		case <-ctx.Done():
			return Entry{}, ctx.Err()
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				if ctx.Err() != nil {
					return Entry{}, ctx.Err()
				}
				return Entry{}, fmt.Errorf("kvstore: watch %s: watcher closed", key)
			case e == nil: // end of initial values
				if !seen {
					return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, key)
				}
			case e.Operation() != jetstream.KeyValuePut:
				return Entry{}, fmt.Errorf("%w: %s deleted", ErrNotFound, key)
			default:
				seen = true
				if e.Revision() > afterRev {
					return toEntry(key, e)
				}
			}
		}
	}
}

// Keys returns the keys matching filter (a KV subject filter such as "park.>"); no
// keys is not an error.
func (s *Store) Keys(ctx context.Context, filter string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*OpTimeout) // a listing is many replies
	defer cancel()
	kl, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("kvstore: list %s: %w", filter, err)
	}
	defer kl.Stop()
	var keys []string
	for k := range kl.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}
