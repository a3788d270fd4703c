// Package kvstore keeps the bridge's action and idempotency records in a
// JetStream key-value bucket (default HERMES_IDEMPOTENCY).
//
// # Keys
//
// Two kinds of keys share the bucket:
//
//   - [ActionKey] "act.<action_id>": one record per action id, the dedup unit
//     for redeliveries and re-publishes of the same action.
//   - [IdempotencyKey] "idem.<hex sha256(capability_id NUL key)>": one record
//     per caller idempotency key, scoped to the capability. The raw key is
//     never stored or used as a key. The bridge writes it once, as a claim that
//     names the owning action (for an unsafe operation already "dispatched": the
//     claim is the write-ahead mark); the owner stores its result in its own
//     action record, and the first duplicate copies it here ("settled").
//
// # Records
//
// A value is a [Record] encoded as compact JSON with these fields (names are
// stable; empty optional fields are omitted):
//
//	{"v":1,"state":"claimed","action_id":"a1","capability_id":"cap:hermes_agent:ep:chat",
//	 "input_sha256":"…","owner":"replica-1","lease_until":"…","attempt":1,
//	 "idem_key":"idem.…","result":{…},"created_at":"…","updated_at":"…"}
//
// "v" is the record format version (currently 1; idem_key, the action record's
// pointer to its idempotency record, is an optional field added within it).
// States move forward:
// claimed → dispatched → settled, with parked for actions waiting on an
// approval. Ownership of an in-flight record is a lease carried in the value
// (Owner, LeaseUntil); see [Record.LeaseExpired].
//
// # Expiry
//
// All expiry is the bucket TTL (the stream's MaxAge, default 24 h), counted
// from each revision's write. Per-key TTLs are deliberately not used: an
// Update writes a revision without a TTL, so a per-key TTL would silently be
// lost on the first state change.
//
// Changing the TTL of an existing bucket applies to every value at once, so a
// shorter TTL deletes those older than it immediately. A provisioning [Open]
// therefore refuses to shorten the TTL of a bucket that holds values
// ([ErrTTLShrink]) unless [Config] AllowRetentionShrink is set.
//
// # Concurrency and errors
//
// A [Store] is safe for concurrent use by multiple goroutines and by multiple
// replicas: every write is a compare-and-set on the key's last revision, so
// the write, not a prior read, is the authority. Errors are matched with
// errors.Is against [ErrExists] (Create lost the claim), [ErrConflict] (an
// Update or Delete lost the compare-and-set), [ErrNotFound] (no live value)
// and [ErrTooLarge] (the encoded record exceeds the bucket's value limit).
// Conflicts are recognized from nats.go's ErrKeyExists and
// ErrKeyRevisionMismatch and from the raw JetStream codes 10071 and 10164
// (the latter is what replicated buckets report).
package kvstore
