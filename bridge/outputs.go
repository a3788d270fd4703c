package bridge

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Live subscribers see what the output stream stored (schemas/README.md, "Results"). The bridge does not
// publish an action's events and results on their public subjects
// (<prefix>.events.<id>, <prefix>.results.<id>): it publishes them on
// <prefix>.out.events.<id> and <prefix>.out.results.<id>, which only the output stream
// captures. The stream's subject transform stores them under the public subjects, and
// its RePublish delivers each stored message, and only those, on its public subject. A
// result the stream refuses (a delivery that lost its claim woke up and appended after
// another's) never reaches a live subscriber. The fast batches' commits and pings go on
// <prefix>.out.batch.<id>, captured (and never stored) by the stream. The republished
// copies carry no reply subject (the bridge's own publishes do: a JetStream ack inbox,
// a fast batch's flow subject), so a core subscriber of a public subject sees plain
// outputs. A stream that does not republish is refused (checkRepublishes).
//
// Republishing is done by the stream's leader as it stores: a message stored just as
// the leader changes may not be republished. Core NATS subscriptions are at most once
// anyway (a subscriber that reconnects misses what was sent meanwhile): readers that
// must see everything replay the stream (an ordered consumer, as client.Client.Follow
// and hermes-bridge watch do).

// outputs names the subjects the bridge publishes outputs on.
type outputs struct {
	// base is "<prefix>.out": the output stream captures it and republishes what it
	// stored on the public subjects (outputStream; checkRepublishes refuses a stream
	// that does not).
	base string
}

// outputsFor returns where the bridge publishes the outputs of prefix.
func outputsFor(prefix string) outputs { return outputs{base: prefix + ".out"} }

func (o outputs) events(id string) string  { return o.base + ".events." + id }
func (o outputs) results(id string) string { return o.base + ".results." + id }

// batchSubject is the subject of the control messages (commit, ping) of an action's
// fast batches (package fastbatch); batchSubjects(base) is the output stream's subject
// that captures them. base is the base of the bridge's output subjects (outputs.base).
func batchSubject(base, actionID string) string { return base + ".batch." + actionID }

func batchSubjects(base string) string { return base + ".batch.>" }

// outputStream is the output stream's configuration for prefix: it captures the
// bridge's publish subjects (<prefix>.out.>), stores them under the public ones, and
// republishes every stored message there. The republish source and destination do not
// collide with the captured subjects (<prefix>.<kind>.> against <prefix>.out.<kind>.>).
func outputStream(prefix string) (subjects []string, transform *jetstream.SubjectTransformConfig, republish *jetstream.RePublish) {
	out := prefix + ".out"
	subjects = []string{out + ".events.>", out + ".results.>", batchSubjects(out)}
	transform = &jetstream.SubjectTransformConfig{Source: out + ".>", Destination: prefix + ".>"}
	republish = &jetstream.RePublish{Source: prefix + ".*.>", Destination: prefix + ".{{wildcard(1)}}.>"}
	return subjects, transform, republish
}

// checkRepublishes refuses an output stream that does not store the bridge's
// <prefix>.out.> publishes under the public subjects and republish them there
// (outputStream), as one an older bridge provisioned: the bridge would have to publish
// on the public subjects itself, and a live subscriber of <prefix>.events.<id> or
// <prefix>.results.<id> would then see each publish's reply subject (its JetStream
// ack inbox, a fast batch's flow subject) and a result the stream refused. The error
// says how to repair the stream.
func checkRepublishes(prefix string, c jetstream.StreamConfig) error {
	if t := c.SubjectTransform; t != nil && t.Source == prefix+".out.>" && c.RePublish != nil &&
		strings.HasPrefix(c.RePublish.Destination, prefix+".") && !c.RePublish.HeadersOnly {
		return nil
	}
	subjects, transform, republish := outputStream(prefix)
	return fmt.Errorf("bridge: stream %s does not republish what the bridge publishes on %s.out.> "+
		"(it was provisioned by an older bridge, or by hand): live subscribers would see the bridge's reply subjects "+
		"and results the stream refused; provision it once (HERMES_BRIDGE_PROVISION=true), or set its subjects to %s, "+
		"its subject transform to %s -> %s and its republish to %s -> %s",
		c.Name, prefix, strings.Join(subjects, ", "), transform.Source, transform.Destination, republish.Source, republish.Destination)
}

// discardOf is the output stream's discard policy for a byte limit n: new (refuse new
// messages when full) when there is one.
func discardOf(n int64) jetstream.DiscardPolicy {
	if n > 0 {
		return jetstream.DiscardNew
	}
	return jetstream.DiscardOld
}

// checkOutputStream refuses an output stream the result log cannot rely on: one that
// discards its oldest messages when full (it could discard a result an idempotency key
// refers to), or answers direct gets (a follower could answer a read of the result log
// from behind, and the core decides "no result" on that read). Provisioning creates
// neither; an operator-made stream is checked here.
func checkOutputStream(c jetstream.StreamConfig) error {
	if c.MaxBytes > 0 && c.Discard == jetstream.DiscardOld {
		return fmt.Errorf("bridge: stream %s has a byte limit (%d) and discards its oldest messages when full: "+
			"it could discard a result an idempotency key refers to; set its discard policy to new "+
			"(provisioning does: HERMES_BRIDGE_OUTPUT_MAX_BYTES)", c.Name, c.MaxBytes)
	}
	if c.AllowDirect {
		return fmt.Errorf("bridge: stream %s allows direct gets: a follower could answer a read of an action's "+
			"results from behind, and the bridge decides that an action has no result on that read; "+
			"turn allow_direct off (provisioning does)", c.Name)
	}
	return nil
}
