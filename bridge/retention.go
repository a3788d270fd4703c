package bridge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// ErrRetentionShrink is wrapped by the error Run returns when provisioning would shorten
// the max age or TTL of a stream or bucket that holds data and
// Config.AllowRetentionShrink is not set. Nothing was changed then.
var ErrRetentionShrink = errors.New("bridge: refusing to shorten the retention of a stream or bucket that holds data " +
	"(the server would delete at once every message the new limit does not keep)")

// allowShrinkVar is the variable that sets Config.AllowRetentionShrink.
const allowShrinkVar = "HERMES_BRIDGE_ALLOW_RETENTION_SHRINK"

// retention is the retention setting of one resource the bridge provisions: the value
// in force, if the resource exists, and the configured one. It is an age (max age, TTL)
// or, when size is set, a stream's max bytes.
type retention struct {
	resource string // "stream HERMES_OUTPUT", "KV bucket HERMES_IDEMPOTENCY", ...
	bucket   string // the KV bucket, for a bucket's TTL
	setting  string // "max age", "TTL" or "max bytes"
	// variable sets the value ("HERMES_BRIDGE_OUTPUT_MAX_AGE"); field names the Config
	// field when no variable does.
	variable, field string
	// plus is what the requested value adds to the variable's (the records bucket's
	// TTL is the output max age plus RecordMargin).
	plus time.Duration

	exists bool
	// current and requested are an age in nanoseconds or, when size, a max bytes; 0
	// means unlimited.
	current, requested int64
	size               bool
	msgs               uint64 // messages the resource holds
	bytes              uint64 // bytes the resource holds (a max bytes only)
}

// changed reports whether provisioning changes the value of an existing resource.
func (r retention) changed() bool { return r.exists && r.current != r.requested }

// shrinks reports whether provisioning shortens (or lowers) the value of an existing
// resource.
func (r retention) shrinks() bool { return r.exists && lowerLimit(r.current, r.requested) }

// refused reports whether provisioning must not apply r, without permission: it
// shortens the retention of a resource that holds data (the server then deletes every
// message older than the new age at once, however old the messages are), or lowers a
// max bytes below what the stream holds (the server deletes the oldest at once).
func (r retention) refused(allow bool) bool {
	if allow || !r.shrinks() {
		return false
	}
	if r.size {
		return r.bytes > uint64(r.requested)
	}
	return r.msgs > 0
}

// problem is r's line in the refusal.
func (r retention) problem() string {
	want := fmt.Sprintf("the configured %s %s (Config.%s)", r.setting, r.fmt(r.requested), r.field)
	if r.variable != "" {
		want = r.variable + "=" + r.fmt(r.requested)
		if r.plus > 0 {
			want = fmt.Sprintf("%s=%s (plus %s)", r.variable, fmtAge(time.Duration(r.requested)-r.plus), fmtAge(r.plus))
		}
	}
	msgs := fmt.Sprintf("%d messages", r.msgs)
	if r.msgs == 1 {
		msgs = "1 message"
	}
	if r.size {
		return fmt.Sprintf("%s holds %s (%s) with %s %s; %s would delete the oldest of them",
			r.resource, msgs, FormatSize(int64(min(r.bytes, math.MaxInt64))), r.setting, r.fmt(r.current), want)
	}
	return fmt.Sprintf("%s holds %s with %s %s; %s would shorten it",
		r.resource, msgs, r.setting, r.fmt(r.current), want)
}

// fmt writes v, r's current or requested value, as the variables take it.
func (r retention) fmt(v int64) string {
	if r.size {
		return FormatSize(v)
	}
	return fmtAge(time.Duration(v))
}

// lowerLimit reports whether requested is a lower limit (a shorter age, a smaller max
// bytes) than current; 0 means unlimited, the highest of all.
func lowerLimit(current, requested int64) bool {
	return requested > 0 && (current == 0 || requested < current)
}

// FormatSize writes a byte count as the HERMES_BRIDGE_*_MAX_BYTES variables take it:
// the largest binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB) unit that divides
// it exactly, else bytes ("1KiB", "10GB", "1500KB", "1023B"); 0 or less is "unlimited".
func FormatSize(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	units := []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"TB", 1e12}, {"GiB", 1 << 30}, {"GB", 1e9}, {"MiB", 1 << 20}, {"MB", 1e6}, {"KiB", 1 << 10}, {"KB", 1e3}}
	for _, u := range units {
		if n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// fmtAge writes d as a value the variables accept, without zero units ("24h", "1h30m",
// "90s" as "1m30s"), and 0 as "unlimited".
func fmtAge(d time.Duration) string {
	if d == 0 {
		return "unlimited"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// checkRetention refuses the changes of plan that shorten the retention of a resource
// holding data, all of them in one error wrapping ErrRetentionShrink, unless allow.
func checkRetention(plan []retention, allow bool) error {
	var problems []string
	for _, r := range plan {
		if r.refused(allow) {
			problems = append(problems, r.problem())
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n  - %s\nset %s=true to apply the shorter values, or configure the current ones",
		ErrRetentionShrink, strings.Join(problems, "\n  - "), allowShrinkVar)
}

// retentionPlan reads the retention in force of every stream and bucket the bridge
// provisions, next to the configured one.
func (b *Bridge) retentionPlan(ctx context.Context, streams []jetstream.StreamConfig) ([]retention, error) {
	c := b.cfg
	// The variable and Config field of each stream's max age and max bytes.
	vars := map[string][4]string{
		c.ActionsStream: {"", "ActionsMaxAge", "HERMES_BRIDGE_ACTIONS_MAX_BYTES", "ActionsMaxBytes"},
		c.OutputStream:  {"HERMES_BRIDGE_OUTPUT_MAX_AGE", "OutputMaxAge", "HERMES_BRIDGE_OUTPUT_MAX_BYTES", "OutputMaxBytes"},
		c.DLQStream:     {"HERMES_BRIDGE_DLQ_MAX_AGE", "DLQMaxAge", "HERMES_BRIDGE_DLQ_MAX_BYTES", "DLQMaxBytes"},
	}
	var plan []retention
	for _, sc := range streams {
		v := vars[sc.Name]
		age := retention{resource: "stream " + sc.Name, setting: "max age", variable: v[0], field: v[1], requested: int64(sc.MaxAge)}
		size := retention{resource: "stream " + sc.Name, setting: "max bytes", variable: v[2], field: v[3],
			size: true, requested: max(sc.MaxBytes, 0)}
		s, err := b.js.Stream(ctx, sc.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return nil, fmt.Errorf("bridge: read stream %s: %w", sc.Name, err)
		default:
			info := s.CachedInfo()
			age.exists, age.current, age.msgs = true, int64(info.Config.MaxAge), info.State.Msgs
			size.exists, size.current, size.msgs, size.bytes = true, max(info.Config.MaxBytes, 0), info.State.Msgs, info.State.Bytes
		}
		plan = append(plan, age, size)
	}

	for _, kr := range []retention{bucketRetention(c, c.Bucket), bucketRetention(c, c.KeysBucket)} {
		kv, err := b.js.KeyValue(ctx, kr.bucket)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
		case err != nil:
			return nil, fmt.Errorf("bridge: read bucket %s: %w", kr.bucket, err)
		default:
			st, err := kv.Status(ctx)
			if err != nil {
				return nil, fmt.Errorf("bridge: bucket %s status: %w", kr.bucket, err)
			}
			kr.exists, kr.current, kr.msgs = true, int64(st.TTL()), st.Values()
		}
		plan = append(plan, kr)
	}

	or := retention{resource: "object store " + c.ObjectBucket, setting: "TTL", variable: "HERMES_BRIDGE_OUTPUT_MAX_AGE",
		field: "OutputMaxAge", requested: int64(c.OutputMaxAge)}
	obs, err := b.js.ObjectStore(ctx, c.ObjectBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
	case err != nil:
		return nil, fmt.Errorf("bridge: read object store %s: %w", c.ObjectBucket, err)
	default:
		st, err := obs.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("bridge: object store %s status: %w", c.ObjectBucket, err)
		}
		or.exists, or.current = true, int64(st.TTL())
		if bs, ok := st.(*jetstream.ObjectBucketStatus); ok && bs.StreamInfo() != nil {
			or.msgs = bs.StreamInfo().State.Msgs
		} else if st.Size() > 0 {
			or.msgs = 1 // holds data; the count is unknown
		}
	}
	plan = append(plan, or)
	return plan, nil
}

// bucketShrinkError turns kvstore's refusal (the bucket filled between the plan and
// Open) into the bridge's.
func bucketShrinkError(cfg Config, err error) error {
	var se *kvstore.TTLShrinkError
	if !errors.As(err, &se) {
		return nil
	}
	r := bucketRetention(cfg, se.Bucket)
	r.exists, r.current, r.requested, r.msgs = true, int64(se.Current), int64(se.Requested), se.Values
	return checkRetention([]retention{r}, false)
}

// bucketRetention is the TTL cfg asks of bucket: RecordsTTL for the records bucket (it
// follows HERMES_BRIDGE_OUTPUT_MAX_AGE), IdempotencyTTL for the keys bucket.
func bucketRetention(cfg Config, bucket string) retention {
	r := retention{resource: "KV bucket " + bucket, bucket: bucket, setting: "TTL",
		variable: "HERMES_BRIDGE_IDEMPOTENCY_TTL", field: "IdempotencyTTL", requested: int64(cfg.IdempotencyTTL)}
	if bucket == cfg.Bucket {
		r.variable, r.field, r.requested, r.plus = "HERMES_BRIDGE_OUTPUT_MAX_AGE", "OutputMaxAge", int64(cfg.RecordsTTL()), RecordMargin
	}
	return r
}

// logRetention logs every change of plan that provisioning applied: at info when it
// lengthens a retention, at warn when it shortens one.
func (b *Bridge) logRetention(plan []retention) {
	for _, r := range plan {
		if !r.changed() {
			continue
		}
		ev := b.log.Info()
		if r.shrinks() {
			ev = b.log.Warn()
		}
		ev.Str("resource", r.resource).Str("setting", r.setting).Str("old", r.fmt(r.current)).
			Str("new", r.fmt(r.requested)).Uint64("messages", r.msgs).Bool("shortened", r.shrinks()).
			Msg("retention changed")
	}
}
