package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// buckets is the record store the jobs' effects use: idempotency keys (idem.*) in the
// keys bucket, action records and the park index in the records bucket, each operation
// timed when metrics are on (m not nil). The records bucket keeps a record longer than
// the output stream keeps its result, and the keys bucket a key no longer than the
// result it replays (Config.RecordsTTL).
type buckets struct {
	records, keys records
	m             *metrics
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

// openBuckets provisions (or binds to) the records and keys buckets. A keys bucket that
// provisioning creates receives the idempotency keys that the records bucket holds (a
// bridge before the keys bucket kept them there), so that no key is forgotten across
// the upgrade.
func (b *Bridge) openBuckets(ctx context.Context) (recs, keys *kvstore.Store, err error) {
	c := b.cfg
	open := func(bucket, desc string) (*kvstore.Store, error) {
		s, err := kvstore.Open(ctx, b.js, kvstore.Config{Bucket: bucket, TTL: time.Duration(bucketRetention(c, bucket).requested),
			Replicas: c.Replicas, Storage: c.Storage, Provision: c.Provision, AllowRetentionShrink: c.AllowRetentionShrink,
			Description: desc})
		if err != nil {
			if serr := bucketShrinkError(c, err); serr != nil {
				return nil, serr
			}
			return nil, fmt.Errorf("bridge: %w", err)
		}
		return s, nil
	}
	if recs, err = open(c.Bucket, "hermes-bridge action records and park index"); err != nil {
		return nil, nil, err
	}
	_, err = b.js.KeyValue(ctx, c.KeysBucket)
	created := c.Provision && errors.Is(err, jetstream.ErrBucketNotFound)
	if keys, err = open(c.KeysBucket, "hermes-bridge idempotency keys"); err != nil {
		return nil, nil, err
	}
	if created {
		if err := b.moveKeys(ctx, recs, keys); err != nil {
			return nil, nil, err
		}
	}
	return recs, keys, nil
}

// moveKeys copies every idempotency key of the records bucket into the new keys
// bucket (a Create: a key already there stays). The copies in the records bucket are
// left to expire.
func (b *Bridge) moveKeys(ctx context.Context, from, to *kvstore.Store) error {
	ks, err := from.Keys(ctx, "idem.>")
	if err != nil {
		return fmt.Errorf("bridge: list the keys to move to bucket %s: %w", b.cfg.KeysBucket, err)
	}
	moved := 0
	for _, k := range ks {
		e, err := from.Get(ctx, k)
		if errors.Is(err, kvstore.ErrNotFound) {
			continue // expired meanwhile
		}
		if err != nil {
			return fmt.Errorf("bridge: read a key to move to bucket %s: %w", b.cfg.KeysBucket, err)
		}
		if _, err := to.Create(ctx, k, e.Record); err != nil && !errors.Is(err, kvstore.ErrExists) {
			return fmt.Errorf("bridge: move a key to bucket %s: %w", b.cfg.KeysBucket, err)
		}
		moved++
	}
	if moved > 0 {
		b.log.Info().Int("keys", moved).Str("from", b.cfg.Bucket).Str("to", b.cfg.KeysBucket).
			Msg("moved the idempotency keys to their own bucket")
	}
	return nil
}
