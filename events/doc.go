// Package events holds the hermes-bridge wire contract: subject names, the
// action CloudEvent reader and writer, the event and result CloudEvent writers,
// RFC 8785 canonical JSON. The client that publishes actions and follows their
// output over NATS is package bridge/client.
//
// # Content modes
//
// Actions are read in either CloudEvents content mode (see [DecodeEnvelope]).
// Events and results are always written in binary content mode: CloudEvent
// attributes in ce- headers, the JSON data as the payload, and the CloudEvent
// id repeated as the JetStream Nats-Msg-Id header so the output stream
// deduplicates republished messages.
//
// # Error classes
//
// Decoding separates two failure classes that the bridge treats differently:
//
//   - [ErrNotCloudEvent] (as *[DecodeError]): the message is not a readable
//     CloudEvent or has no usable action id. Nobody can be told about it on a
//     results subject, so it goes to the dead-letter subject.
//   - [ErrInvalidAttribute] (as *[AttributeError]) and [ErrInvalidAction] (as
//     *[ActionError]): the action id is known and valid, but an attribute or
//     the action object is wrong. The bridge answers on the action's results
//     subject with a failed result (code invalid_action).
//
// Error texts describe constraints and never quote input values: inputs may
// hold prompts, secrets or session identifiers.
//
// The package does no logging and no I/O: it imports nats.go only for the
// nats.Header type.
package events
