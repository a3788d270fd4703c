// Package kvstore keeps the bridge's action and idempotency records in JetStream
// key-value buckets: a [Store] is one bucket. The bridge keeps action records, the park
// index and idempotency keys in one (default HERMES_IDEMPOTENCY): its TTL keeps a record
// longer than the output stream keeps its result, and each key carries a message TTL of
// its own ([Config] KeysTTL) that keeps it no longer than the result it replays. A
// deployment that has a keys bucket of its own (default HERMES_KEYS, made by earlier
// releases, or where the server takes no message TTLs) keeps its keys there, with that
// bucket's TTL.
//
// # One write to claim
//
// An unsafe keyed action's start writes its key and its action record, already
// dispatched, with [Store.CreateAll]: one nats-server atomic batch (2.12+) in which each
// message expects its subject to be empty, so both are written or neither, in one round
// trip and one replicated write. A batch refused as a whole (either subject holds a
// value, or the server refuses it) writes nothing, and the bridge claims the key on its
// own. Batches are used where the server holds them in memory until they commit: on
// replicated or memory buckets. For a single-replica file stream nats-server 2.15
// stages each batch in a file store of its own, which costs more than the round trip it
// saves ([Store.Atomic] says so, and the bridge then writes the key, then the record).
//
// # Durable writes per action
//
// Each write below is one the delivery guarantees need; e2e's TestDurableWritesPerAction
// counts them (the records bucket's stream grows by one per write, an atomic batch
// counting once; the output stream by one result message per action).
//
//   - An unsafe action with an idempotency key, on its first delivery: two where the
//     bucket takes atomic batches (memory or replicated: the key and the record in one
//     batch, then the result message), three on a single-replica file bucket or where
//     the keys live in a keys bucket of their own (the key, the record, the result). The
//     key's Create is what stops a second call for the same key; the record's Create,
//     already dispatched, is the write-ahead mark and the fence in one (it fails wherever
//     another delivery or a cancel holds the id); the result message is the outcome.
//   - An unsafe action without a key: two, the record created dispatched and the result.
//   - A safe action without a key: two, its claim (a record created claimed) and the
//     result. No mark: a read may run twice.
//   - The ordinary path, taken by an action that needs an approval, a run, and a delivery
//     that finds a record or a key holder (a redelivery, a duplicate, a cancel that came
//     first): the claim, the key's claim, the write-ahead mark and the result, four for a
//     keyed unsafe action. A duplicate of a settled key costs its claim and its replayed
//     result. A parked action adds the park index, its pending message and two record
//     updates; each heartbeat of an action that runs longer than the heartbeat interval
//     one record write (two with a key).
//
// No read precedes the first write: a record created afresh proves that the action has
// no stored result, because records are kept longer than results (below).
//
// # The record after the action settles
//
// Settling appends the terminal result to the result log and writes no record: the
// action record keeps the state the call left it in (dispatched for an unsafe call,
// claimed for a safe one, settling for an unsafe one that ended without a call), so
// `nats kv get HERMES_IDEMPOTENCY act.<id>` shows dispatched long after the action
// settled. The terminal state is the action's last message in the output stream
// (terminal by its status, [LogEntry].Terminal), which `hermes-bridge status` reads
// beside the record. Writing it into the record too would cost every action one more
// durable write and decide nothing: the log's append with an expected last subject
// sequence is what keeps a result the only one. Only a cancel that arrives before its
// action creates a record in state settled, holding the cancelled result.
//
// # Keys
//
// Three kinds of keys; the action core (bridge/core) owns their transitions, each one
// compare-and-set:
//
//   - [ActionKey] "act.<action_id>": one record per action id, the dedup unit
//     for redeliveries and re-publishes of the same action, and the claim of
//     whoever runs it (with the write-ahead "dispatched" mark).
//   - [IdempotencyKey] "idem.<hex sha256(capability_id NUL key)>": one record
//     per caller idempotency key, scoped to the capability. The raw key is
//     never stored or used as a key. It names the action that holds the key;
//     that action's terminal result is its result message in the output stream
//     ([JetStreamLog]), to which the key refers (schemas/README.md, "Delivery
//     guarantees").
//   - [ParkKey] "park.<action_id>": the index of parked actions.
//   - [AskKey] "ask.<action_id>.<k>": the index of governed runs waiting for their tool
//     approval k (what `hermes-bridge pending` lists): written by the run's owner after
//     the action record holds the approval and before its pending_approval message,
//     deleted when the approval is answered (decision or expiry) and when the action
//     settles. It is an index, not the truth: an entry left by a crash between those
//     writes names an approval whose action's last result is no longer that approval's
//     pending message (or is terminal), and readers skip it; the bucket TTL removes it.
//
// # Records
//
// A value is a [Record] encoded as compact JSON with these fields (names are
// stable; empty optional fields are omitted):
//
//	{"v":1,"state":"claimed","action_id":"a1","capability_id":"cap:hermes_agent:ep:chat",
//	 "input_sha256":"…","owner":"replica-1:…","attempt":1,"idem_key":"idem.…",
//	 "created_at":"…","updated_at":"…"}
//
// A parked action's record adds "action", "expires_at" and "pending_seq"; a decided
// one "decision", "approver" and "reason"; a cancel request that found no reachable
// owner "cancel"; a cancel that came before its action is a "settled" record with
// its "result". "v" is the record format version (1; the fields above were added
// within it, and "lease_until", which older bridges wrote, is ignored). The states
// and their transitions are bridge/core's table; owners prove they are alive by
// moving the revision.
//
// # Expiry
//
// Expiry is the bucket TTL (the stream's MaxAge), counted from each revision's write:
// the bridge gives records its output stream's max age plus an hour. Idempotency keys
// expire by their message TTL (the idempotency TTL, default 24 h), which every write of
// a key carries, Updates included (nats.go's Update writes none: the Store publishes the
// revision itself), so that no state change drops it. A changed idempotency TTL applies
// to the keys written after the change.
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
