// Package bridge is the hermes-bridge service: it consumes action CloudEvents from a
// durable JetStream pull consumer, calls Hermes once, and republishes every streamed
// event and the terminal result on the action's own subjects.
//
// # Flow of one action
//
// Every record transition goes through kvstore.Ledger (its doc comment has the state
// table), and every job, whatever started it, goes through Bridge.serve (serve.go).
//
//  1. The message is decoded as a CloudEvent (events.DecodeEnvelope). A message that is
//     not a readable CloudEvent or has no usable id is copied to the DLQ subject with
//     the reason in a header and terminated.
//  2. The action id is claimed (Ledger.Begin: a Create of "act.<id>"). A redelivery or a
//     second publish of the same id finds the record: a settled action (its result
//     message exists) is acknowledged, a parked one too, and one that another delivery
//     owns is waited for, without the worker slot, until its result comes or its
//     revision has stood still for a lease (then it is taken over with CAS).
//  3. The action is validated: subject, capability, JSON Schema, the Hermes client's
//     input rules, required idempotency key, tenant. A failure settles the action
//     "failed" with invalid_action (or the specific code) and Hermes is not called.
//  4. The idempotency key (scoped to the capability) is claimed (Claim.ClaimKey: a
//     Create of "idem.<hash>" naming the action). Same key and input: the holder's
//     result is replayed with replay_of, after waiting (without the worker slot) while
//     it runs; a changed input fails with idempotency_conflict.
//  5. Under the endpoint's concurrency limit and circuit breaker, an unsafe call is
//     marked dispatched right before the request (Claim.Dispatch: a compare-and-set on
//     the claim's revision, so a delivery that lost its claim cannot send). A crash after
//     that point can never lead to a second call: the redelivered action settles failed
//     with outcome_unknown and uncertain_outcome true.
//  6. SSE events are republished in order by the goroutine reading the stream, with
//     Nats-Msg-Id "<action_id>:<sequence>", while the stream is still open.
//  7. The terminal result is appended as the result message (Claim.Settle: a publish
//     with Nats-Expected-Last-Subject-Sequence, so the stream stores one), then the
//     message is acknowledged. A result that is retryable and certain (Hermes never
//     started) frees the key record, so that a later action runs.
//
// An unsafe action with nothing to decide first (no approval, not a run) takes steps 2,
// 4 and 5 in one step: once it is valid, under the endpoint's limit and breaker,
// Ledger.Start claims the key and then creates the action record already dispatched
// (the Create is the mark, and it fails wherever any delivery claimed the id before),
// and the request follows. A start that finds the record, or the key held by another
// action, writes nothing more and the delivery takes the steps above.
//
// A keyed unsafe action thus costs three durable writes on its first delivery (the key,
// the record created dispatched, the result message) and four on the ordinary path
// (two claims, the mark, the result); an unkeyed one two; a safe unkeyed one two.
//
// While a job runs past a Heartbeat, a shared ticker (heartbeat.go) sends InProgress to
// JetStream and renews its claim (and key record) every Heartbeat; a renewal that finds
// the claim taken over, or flagged by a cancel, cancels the job's context. Failures that
// certainly did not start any work (a refused connection, Hermes's 429 concurrency gate)
// and, for safe operations, transport errors and 5xx release the claim and are retried
// with NakWithDelay and jittered exponential backoff within the action's deadline and
// the consumer's MaxDeliver. A panic settles the action failed (code internal, reason
// panic) and copies its message to the DLQ.
//
// Actions that need approval (response_delete, session_delete) are parked in KV until a
// decision arrives on <prefix>.approvals.<id>, whose delivery then carries the action
// on (see approvals.go); cancel requests on
// <prefix>.cancel.<id> are answered by the replica running the action or from the stored
// state (see cancel.go). Outputs too large for one message go to an object store and are
// referenced (see offload.go); an endpoint that keeps failing is paused by a circuit
// breaker (see breaker.go). While Run consumes, every replica registers the NATS micro
// service hermes-bridge (discovery with `nats micro`), whose status endpoint on
// <prefix>.status reports what the records know about an action (see service.go).
//
// With Config.Provision, Run creates or updates the streams, the consumer, the KV bucket
// and the object store. It never changes a retention silently (see retention.go): it
// reads the max ages and TTLs in force first, refuses to shorten one of a resource that
// holds data unless Config.AllowRetentionShrink, and logs every one it changes.
//
// Every acknowledgement decision is made in one place (Bridge.apply). The package logs
// one line per action outcome and never logs content, keys or session identifiers.
// With Config.TracerProvider, every delivery of an action is a span continuing the
// action's traceparent, with children for the claims, the Hermes call, the events and
// the settle (see tracing.go); no span holds content, keys or session identifiers.
package bridge
