// Package bridge is the hermes-bridge service: it consumes action CloudEvents from a
// durable JetStream pull consumer, calls Hermes at most once per action, and publishes
// every streamed event and the terminal result on the action's own subjects.
//
// # Who decides
//
// Every decision about an action (claim, wait, take over, validate, replay, send,
// retry, park, settle, ack) is made by the action core, package bridge/core: a pure
// state machine whose doc comment has the record transitions and whose table.go has the
// job's. This package is its driver. A job (a delivery of an action or of a decision,
// the sweeper's expiry of a parked action, a cancel answered from the records) runs
// through one door, driver.go: it steps a core.Job with events and carries out the
// effects it returns (effects.go: KV and result-log operations, each bounded;
// call.go: validation, the endpoint's slot and breaker, the Hermes request; runs.go:
// the durable run operations; finish.go: ack, nak, term, the dead letter queue, the log
// line and metrics). Heartbeats (heartbeat.go), cancel requests (cancel.go), timers,
// panic recovery, worker slots, spans (tracing.go) and hooks (hooks.go) wrap the
// effects there, for every kind of job alike.
//
// # Flow of one action
//
//  1. The message is decoded as a CloudEvent (events.DecodeEnvelope, deliver.go). A
//     message that is not a readable CloudEvent or has no usable id is copied to the
//     DLQ subject with the reason in a header and terminated.
//  2. An unsafe action with nothing to decide first (no approval, not a run) takes the
//     one-write start: once it is valid and under the endpoint's limit and breaker, it
//     claims its idempotency key, creates the action record already dispatched, and
//     calls. A start that finds the record, or the key held by another action, writes
//     nothing more and takes the ordinary path. (Action records are kept an hour longer
//     than the output stream keeps results, and keys no longer than results (see
//     buckets.go): a record created afresh proves that the action has no result.)
//  3. The ordinary path claims the action id (a Create of act.<id>). A redelivery or a
//     second publish of the same id finds the record: a settled action (its terminal
//     result is in the log) is acknowledged, a parked one too, and one that another
//     delivery owns is waited for, without the worker slot, until its result comes or
//     its revision has stood still for a lease (then it is taken over).
//  4. The action is validated (subject, capability, JSON Schema, the Hermes client's
//     input rules, required idempotency key, tenant); a failure settles it failed with
//     invalid_action (or the specific code) and Hermes is not called. Actions that need
//     approval park until a decision arrives on <prefix>.approvals.<id>.
//  5. The idempotency key (scoped to the capability) is claimed; same key and input:
//     the holder's result is replayed with replay_of; a changed input fails with
//     idempotency_conflict.
//  6. Under the endpoint's concurrency limit and circuit breaker, an unsafe call is
//     marked dispatched right before the request. A crash after that point never leads
//     to a second call: the next delivery settles outcome_unknown (uncertain_outcome
//     true), or follows the run the record names.
//  7. Events are published in order (fast batches where the stream allows them,
//     publish.go) with Nats-Msg-Id "<action_id>:<sequence>"; the terminal result is
//     appended to the result log; then the message is acknowledged.
//
// A keyed unsafe action thus costs three durable writes on its first delivery (the key,
// the record created dispatched, the result message) and no read.
//
// # Outputs
//
// The bridge publishes on <prefix>.out.events.<id>, <prefix>.out.results.<id> and
// <prefix>.out.batch.<id>; the output stream captures those subjects, stores them as
// <prefix>.events.<id> and so on (a subject transform) and republishes what it stored
// there (RePublish, outputs.go). A subscriber thus receives only what the stream
// stored: a result refused by the stream (a zombie's, a loser's) never reaches it.
// Outputs too large for one message go to an object store and are referenced
// (offload.go).
//
// # Around the flow
//
// An endpoint that keeps failing is paused by a circuit breaker (breaker.go). While Run
// consumes, every replica registers the NATS micro service hermes-bridge, whose status
// endpoint on <prefix>.status reports what the records know about an action
// (service.go). A steer request on <prefix>.steer.<id> is forwarded to the governed
// run by the replica that follows it (steer.go); its text is never logged. The NATS client's dead-server detection follows the lease, and a
// configuration whose lease cannot cover it is refused (liveness.go, config.go). With
// Config.Provision, Run creates or updates the streams, the consumer, the KV bucket and
// the object store, and never changes a retention silently (retention.go).
//
// The package logs one line per job outcome and never logs content, keys or session
// identifiers. With Config.TracerProvider, every delivery of an action is a span
// continuing the action's traceparent, with children for the claims, the Hermes call,
// the events and the settle; no span holds content, keys or session identifiers.
package bridge
