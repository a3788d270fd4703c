// Package bridge is the hermes-bridge service: it consumes action CloudEvents from a
// durable JetStream pull consumer, calls Hermes once, and republishes every streamed
// event and the terminal result on the action's own subjects.
//
// # Flow of one action
//
//  1. The message is decoded as a CloudEvent (events.DecodeEnvelope). A message that is
//     not a readable CloudEvent or has no usable id is copied to the DLQ subject with
//     the reason in a header and terminated.
//  2. The action id is claimed in the KV bucket (record "act.<id>", a KV Create). A
//     redelivery or a second publish of the same id finds the record: a settled action's
//     result is republished, an in-flight one is waited for, and a claim whose owner's
//     lease ran out is taken over with CAS.
//  3. The action is validated: subject, capability, JSON Schema, the Hermes client's
//     input rules, required idempotency key, tenant. A failure settles the action
//     "failed" with invalid_action (or the specific code) and Hermes is not called.
//  4. Hermes is called under the endpoint's concurrency limit and circuit breaker. With
//     the slot held, right before the request, the idempotency key (scoped to the
//     capability) is claimed (record "idem.<hash>", a KV Create). Same key and input:
//     the original result is replayed with replay_of; a changed input fails with
//     idempotency_conflict; an original still in flight is waited for (by watching its
//     action record).
//  5. Unsafe operations are marked "dispatched" before the request is sent (write-ahead),
//     so a crash after that point can never lead to a second call: the redelivered action
//     settles failed with outcome_unknown and uncertain_outcome true. For a keyed action
//     the key's claim is created "dispatched" and is the mark (one write, not two); the
//     action record names it (idem_key) for whoever recovers the action.
//  6. SSE events are republished in order by the goroutine reading the stream, with
//     Nats-Msg-Id "<action_id>:<sequence>", while the stream is still open.
//  7. The terminal result is stored in the action record, then published with
//     Nats-Msg-Id "<action_id>:result", then the message is acknowledged. The key record
//     is not written again: it names the action, whose record holds the result; the
//     first duplicate copies the result into it. A result that is retryable and certain
//     (Hermes never started) deletes the key record instead, so that a later action runs.
//
// A keyed unsafe action thus costs four durable writes (two claims, the result in KV,
// the published result); an unkeyed one four as well (claim, mark, result, publish); a
// safe unkeyed one three.
//
// While an action runs past a Heartbeat, a shared ticker (heartbeat.go) sends InProgress
// to JetStream and renews its claim's lease every Heartbeat. Failures that certainly did not start any work (a refused
// connection, Hermes's 429 concurrency gate) and, for safe operations, transport errors
// and 5xx are retried with NakWithDelay and jittered exponential backoff within the
// action's deadline and the consumer's MaxDeliver.
//
// Actions that need approval (response_delete, session_delete) are parked in KV until a
// decision arrives on <prefix>.approvals.<id> (see approvals.go); cancel requests on
// <prefix>.cancel.<id> are answered by the replica running the action or from the stored
// state (see cancel.go). Outputs too large for one message go to an object store and are
// referenced (see offload.go); an endpoint that keeps failing is paused by a circuit
// breaker (see breaker.go).
//
// With Config.Provision, Run creates or updates the streams, the consumer, the KV bucket
// and the object store. It never changes a retention silently (see retention.go): it
// reads the max ages and TTLs in force first, refuses to shorten one of a resource that
// holds data unless Config.AllowRetentionShrink, and logs every one it changes.
//
// Every acknowledgement decision is made in one place (Bridge.apply). The package logs
// one line per action outcome and never logs content, keys or session identifiers.
package bridge
