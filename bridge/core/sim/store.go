package sim

import (
	"slices"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// bucket is the simulated KV bucket of the records: keys with revisions drawn from one
// counter for the whole bucket (as a JetStream KV's stream sequence), compare-and-set
// writes, and a TTL counted from each revision's write: the keys bucket's for
// idempotency keys, the records bucket's for the rest (the bridge keeps them in two
// buckets; one counter serves both here). It keeps every version ever written,
// deleted or expired, for stale reads and for the invariants.
type bucket struct {
	keysTTL, recordsTTL time.Duration
	rev                 uint64
	// versions is the history of each key, oldest first.
	versions map[string][]kvVersion
}

// ttlOf is the TTL of key's bucket.
func (b *bucket) ttlOf(key string) time.Duration {
	if kvstore.IsIdempotencyKey(key) {
		return b.keysTTL
	}
	return b.recordsTTL
}

// kvVersion is one write of a key: a value, or a deletion.
type kvVersion struct {
	rev     uint64
	rec     kvstore.Record
	deleted bool
	written time.Time
}

// live returns the key's current value at now: none when it was never written, was
// deleted, or its last write is older than the TTL.
func (b *bucket) live(key string, now time.Time) (kvVersion, bool) {
	vs := b.versions[key]
	if len(vs) == 0 {
		return kvVersion{}, false
	}
	v := vs[len(vs)-1]
	if v.deleted || !now.Before(v.written.Add(b.ttlOf(key))) {
		return kvVersion{}, false
	}
	return v, true
}

// written reports whether key's last version, a value or a deletion, is still in the
// stream: an expected last subject sequence of 0 then fails.
func (b *bucket) written(key string, now time.Time) bool {
	vs := b.versions[key]
	return len(vs) > 0 && now.Before(vs[len(vs)-1].written.Add(b.ttlOf(key)))
}

// asOf returns the key's value as it was at time t (for a read that is behind), none
// when it had none then.
func (b *bucket) asOf(key string, t time.Time) (kvVersion, bool) {
	vs := b.versions[key]
	for i := len(vs) - 1; i >= 0; i-- {
		v := vs[i]
		if v.written.After(t) {
			continue
		}
		if v.deleted || !t.Before(v.written.Add(b.ttlOf(key))) {
			return kvVersion{}, false
		}
		return v, true
	}
	return kvVersion{}, false
}

// expiries returns the times at which key's values expired or will expire: their TTL
// passed without a write (a deletion is not an expiry), oldest first.
func (b *bucket) expiries(key string) []time.Time {
	vs := b.versions[key]
	var out []time.Time
	for i, v := range vs {
		end := v.written.Add(b.ttlOf(key))
		if !v.deleted && (i+1 == len(vs) || !vs[i+1].written.Before(end)) {
			out = append(out, end)
		}
	}
	return out
}

// expiredBetween reports whether key's record expired at some time in (from, to).
func (b *bucket) expiredBetween(key string, from, to time.Time) bool {
	return slices.ContainsFunc(b.expiries(key), func(end time.Time) bool { return end.After(from) && end.Before(to) })
}

// gapIn returns the first moment in [from, to) at which key had no live value, if any.
func (b *bucket) gapIn(key string, from, to time.Time) (time.Time, bool) {
	vs := b.versions[key]
	for t := from; t.Before(to); {
		cur := -1
		for i, v := range vs {
			if !v.written.After(t) {
				cur = i
			}
		}
		if cur < 0 || vs[cur].deleted || !t.Before(vs[cur].written.Add(b.ttlOf(key))) {
			return t, true
		}
		next := vs[cur].written.Add(b.ttlOf(key))
		if cur+1 < len(vs) && vs[cur+1].written.Before(next) {
			next = vs[cur+1].written
		}
		t = next
	}
	return time.Time{}, false
}

// older returns the values of key written before its current one, oldest first.
func (b *bucket) older(key string, now time.Time) []kvVersion {
	cur, ok := b.live(key, now)
	var out []kvVersion
	for _, v := range b.versions[key] {
		if !v.deleted && (!ok || v.rev < cur.rev) {
			out = append(out, v)
		}
	}
	return out
}

func (b *bucket) write(key string, rec kvstore.Record, deleted bool, now time.Time) uint64 {
	b.rev++
	b.versions[key] = append(b.versions[key], kvVersion{rev: b.rev, rec: rec, deleted: deleted, written: now})
	return b.rev
}

// create writes rec at key unless the key holds a value (Exists).
func (b *bucket) create(key string, rec kvstore.Record, now time.Time) (core.Status, uint64) {
	if _, ok := b.live(key, now); ok {
		return core.Exists, 0
	}
	return core.OK, b.write(key, rec, false, now)
}

// update writes rec at key if its current revision is rev (Conflict otherwise,
// including a key that is gone: its last revision is a deletion or nothing).
func (b *bucket) update(key string, rec kvstore.Record, rev uint64, now time.Time) (core.Status, uint64) {
	if v, ok := b.live(key, now); !ok || v.rev != rev {
		return core.Conflict, 0
	}
	return core.OK, b.write(key, rec, false, now)
}

// del deletes key if its current revision is rev.
func (b *bucket) del(key string, rev uint64, now time.Time) core.Status {
	if v, ok := b.live(key, now); !ok || v.rev != rev {
		return core.Conflict
	}
	b.write(key, kvstore.Record{}, true, now)
	return core.OK
}

// entry is v as a Get answers it.
func entry(key string, v kvVersion) kvstore.Entry {
	return kvstore.Entry{Key: key, Record: v.rec, Revision: v.rev, Written: v.written}
}

// list returns the live keys with prefix, sorted.
func (b *bucket) list(prefix string, now time.Time) []string {
	return slices.DeleteFunc(b.everKeys(prefix), func(k string) bool {
		_, ok := b.live(k, now)
		return !ok
	})
}

// everKeys returns every key with prefix ever written, live or not, sorted.
func (b *bucket) everKeys(prefix string) []string {
	var out []string
	for k := range b.versions {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
