package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// buckets is the record store the jobs' effects use: action records, the park index
// and idempotency keys (idem.*), each operation timed when metrics are on (m not nil).
// Keys live in the records bucket with a message TTL of their own (Config.IdempotencyTTL)
// unless a keys bucket holds them (a deployment that has one, or a server without
// message TTLs); either way a record outlives the output stream's result
// (Config.RecordsTTL) and a key does not outlive the result it replays.
type buckets struct {
	records, keys records
	// batch writes a key and an action record in one atomic batch; nil when claims
	// take two writes.
	batch interface {
		CreateAll(ctx context.Context, puts []kvstore.Put) ([]uint64, error)
	}
	m *metrics
}

func (b buckets) of(key string) records {
	if kvstore.IsIdempotencyKey(key) {
		return b.keys
	}
	return b.records
}

func (b buckets) Create(ctx context.Context, key string, r kvstore.Record) (uint64, error) {
	defer b.m.observeKV(kvCreate, time.Now())
	return b.of(key).Create(ctx, key, r)
}

// Claim creates the key with kr and the action record of id with ar in one atomic
// batch, and returns their revisions (kvstore.Store.CreateAll); without batches it
// fails with kvstore.ErrBatchRefused, writing nothing.
func (b buckets) Claim(ctx context.Context, key string, kr kvstore.Record, id string, ar kvstore.Record) (keyRev, rev uint64, err error) {
	if b.batch == nil {
		return 0, 0, kvstore.ErrBatchRefused
	}
	defer b.m.observeKV(kvClaim, time.Now())
	revs, err := b.batch.CreateAll(ctx, []kvstore.Put{{Key: key, Record: kr}, {Key: kvstore.ActionKey(id), Record: ar}})
	if err != nil {
		return 0, 0, err
	}
	return revs[0], revs[1], nil
}

func (b buckets) Get(ctx context.Context, key string) (kvstore.Entry, error) {
	defer b.m.observeKV(kvGet, time.Now())
	return b.of(key).Get(ctx, key)
}

func (b buckets) Update(ctx context.Context, key string, r kvstore.Record, rev uint64) (uint64, error) {
	defer b.m.observeKV(kvUpdate, time.Now())
	return b.of(key).Update(ctx, key, r, rev)
}

func (b buckets) Delete(ctx context.Context, key string, rev uint64) error {
	defer b.m.observeKV(kvDelete, time.Now())
	return b.of(key).Delete(ctx, key, rev)
}

func (b buckets) Wait(ctx context.Context, key string, afterRev uint64) (kvstore.Entry, error) {
	defer b.m.observeKV(kvWait, time.Now())
	return b.of(key).Wait(ctx, key, afterRev)
}

// openBuckets provisions (or binds to) the records bucket, and decides where the
// idempotency keys live: in the records bucket, with a message TTL of
// Config.IdempotencyTTL, unless the keys bucket exists (an earlier release made it) or
// the records bucket's stream cannot take message TTLs (nats-server before 2.11), in
// which case they live in the keys bucket. The choice rests on what the server holds,
// so every replica makes the same one. keys is recs when they share it.
func (b *Bridge) openBuckets(ctx context.Context) (recs, keys *kvstore.Store, err error) {
	c := b.cfg
	open := func(bucket, desc string, keysTTL time.Duration) (*kvstore.Store, error) {
		s, err := kvstore.Open(ctx, b.js, kvstore.Config{Bucket: bucket, TTL: time.Duration(bucketRetention(c, bucket).requested),
			Replicas: c.Replicas, Storage: c.Storage, Provision: c.Provision, AllowRetentionShrink: c.AllowRetentionShrink,
			Description: desc, KeysTTL: keysTTL, Atomic: keysTTL > 0})
		if err != nil {
			if serr := bucketShrinkError(c, err); serr != nil {
				return nil, serr
			}
			return nil, fmt.Errorf("bridge: %w", err)
		}
		return s, nil
	}
	_, err = b.js.KeyValue(ctx, c.KeysBucket)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, fmt.Errorf("bridge: read bucket %s: %w", c.KeysBucket, err)
	}
	keysBucket := err == nil
	keysTTL := c.IdempotencyTTL
	if keysBucket {
		keysTTL = 0
	}
	if recs, err = open(c.Bucket, "hermes-bridge action records, idempotency keys and park index", keysTTL); err != nil {
		return nil, nil, err
	}
	if !keysBucket && recs.KeysTTL() == c.IdempotencyTTL {
		if ok, why := recs.Atomic(); ok {
			b.log.Info().Str("bucket", c.Bucket).Msg("an unsafe keyed action claims its key and its record in one atomic write")
		} else {
			b.log.Info().Str("bucket", c.Bucket).Str("reason", why).
				Msg("an unsafe keyed action claims its key and its record in two writes")
		}
		return recs, recs, nil
	}
	why := "the keys bucket exists"
	if !keysBucket {
		why = "the records bucket's stream takes no message TTLs (nats-server 2.11+)"
	}
	b.log.Info().Str("bucket", c.KeysBucket).Str("reason", why).
		Msg("idempotency keys live in their own bucket: an unsafe keyed action claims its key and its record in two writes")
	if keys, err = open(c.KeysBucket, "hermes-bridge idempotency keys", 0); err != nil {
		return nil, nil, err
	}
	return recs, keys, nil
}
