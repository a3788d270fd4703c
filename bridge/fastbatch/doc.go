// Package fastbatch publishes a sequence of messages to a JetStream stream with fast
// batches (nats-server 2.14+, stream option allow_batched): pipelined, and stored in
// the order they were added, once each, even when the connection breaks or the
// stream's leader changes.
//
// # The protocol
//
// Every message of a batch carries its place in the batch in its reply subject,
//
//	<inbox>.<batch id>.<flow>.fail.<batch seq>.<op>.$FI
//
// and with gap mode "fail" the stream's leader accepts a message only if it is the next
// of its batch: after a missing or refused message it ends the batch (a PubAck whose
// count is the number of messages accepted, all of them in order) and refuses the
// rest. Accepted means stored, or skipped as a duplicate Nats-Msg-Id of an event stored
// before. The server sends, on the reply subject of the message that caused it:
//
//   - {"type":"ack","seq":S,"msgs":M}: the batch's first S messages are stored; the next
//     ack comes after M more (the flow, at most the one asked for, fewer when batches
//     share the stream); also sent by a new stream leader to say what it has;
//   - {"type":"gap","last_seq":E,"seq":C}: message E was expected, C came; with "fail"
//     the batch ends and its PubAck follows;
//   - {"type":"err","seq":S,"error":{...}}: message S was refused; the batch ends at S-1
//     and its PubAck follows;
//   - a PubAck with "batch" and "count": the batch ended (committed) with its first
//     count messages stored;
//   - a PubAck with an error: the message was refused before it reached the batch
//     (the stream does not allow batches, too many batches in flight, an unknown batch
//     after the batch was abandoned or lost with a leader, a full ingest queue, ...).
//
// A batch that receives nothing for the server's batch timeout (10 s by default) is
// abandoned. Op 3 (commit at end of batch) ends a batch without storing the message and
// gets the PubAck; op 4 (ping) asks for the latest ack, or reports a gap and ends the
// batch if the server has fewer messages than the ping names. Neither is stored, but
// both are messages on a subject of the stream, which core subscribers of that subject
// would receive: so they go on [Config.Control], a subject of the stream that carries
// nothing else.
//
// The publisher keeps every event not yet confirmed stored. When a batch ends or is
// lost before all its events were confirmed, it starts a new batch from the first
// unconfirmed event: Nats-Msg-Id makes the already stored ones no-ops, and gap mode
// "fail" keeps a later event from landing before an earlier one. Since every batch
// starts at an event whose predecessors are all confirmed, and accepts an event only
// after its predecessor in the batch, an event is stored only after all events before
// it, whatever the interleaving of an old batch's late messages with a new one's.
package fastbatch
