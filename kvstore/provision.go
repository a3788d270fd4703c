package kvstore

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// provision creates the bucket's stream, or updates the settings the bridge manages on
// an existing one (description, TTL, value limit, replicas, and the message TTLs and
// atomic batches that cfg asks for), leaving every other setting as it is. It writes the
// stream directly rather than through nats.go's CreateOrUpdateKeyValue, whose template
// would switch atomic batches off at every start and ask the server to switch message
// TTLs off, which it refuses.
func provision(ctx context.Context, js jetstream.JetStream, cfg Config, maxPayload int) error {
	name := "KV_" + cfg.Bucket
	set := func(sc *jetstream.StreamConfig) {
		sc.Description = cfg.Description
		sc.MaxAge = cfg.TTL
		sc.MaxMsgSize = cmp.Or(cfg.MaxValueSize, int32(maxPayload), -1) // default: the server's max payload
		sc.Replicas = cfg.Replicas
		sc.Duplicates = min(2*time.Minute, cfg.TTL) // nats.go's KV rule
		sc.AllowMsgTTL = sc.AllowMsgTTL || cfg.KeysTTL > 0
		sc.AllowAtomicPublish = sc.AllowAtomicPublish || cfg.Atomic
	}
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// The stream nats.go's CreateKeyValue makes for a bucket of history 1.
		sc := jetstream.StreamConfig{Name: name, Subjects: []string{"$KV." + cfg.Bucket + ".>"}, MaxMsgsPerSubject: 1,
			MaxBytes: -1, MaxMsgs: -1, MaxConsumers: -1, Storage: cfg.Storage, AllowRollup: true, DenyDelete: true,
			AllowDirect: true, Discard: jetstream.DiscardNew}
		set(&sc)
		if _, err = js.CreateStream(ctx, sc); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		s, err = js.Stream(ctx, name) // another replica created it meanwhile: update it
	}
	if err != nil {
		return err
	}
	sc := s.CachedInfo().Config
	set(&sc)
	_, err = js.UpdateStream(ctx, sc)
	return err
}
