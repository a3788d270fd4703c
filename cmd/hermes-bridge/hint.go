package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// The hints call and watch print when an action has given no news for waitHintAfter
// (see follow): what the command waits for, and why it may not come.

// callHint describes an action call published (ack is the stream's acknowledgement,
// filled in by the publish): where it is stored, and whether a bridge consumes it.
func (cl *clientConn) callHint(id string, ack *jetstream.PubAck) func(context.Context) string {
	return func(ctx context.Context) string {
		var b strings.Builder
		if ack.Duplicate {
			fmt.Fprintf(&b, "  stored:  stream %s already held an action with this id (message %d): this publish was a duplicate, and the output followed is that action's\n", ack.Stream, ack.Sequence)
		} else {
			fmt.Fprintf(&b, "  stored:  stream %s, message %d\n", ack.Stream, ack.Sequence)
		}
		fmt.Fprintf(&b, "  bridges: %s\n", cl.consumerState(ctx, id, ack))
		return b.String()
	}
}

// consumerState says what the bridges' shared consumer shows about the action at
// stream sequence ack.Sequence. The lookup may be refused to the user: that is reported
// in the hint, not as the command's failure.
func (cl *clientConn) consumerState(ctx context.Context, id string, ack *jetstream.PubAck) string {
	stream, name := ack.Stream, cl.cfg.Consumer
	subject := "$JS.API.CONSUMER.INFO." + stream + "." + name
	rctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	lctx, cancel := context.WithTimeout(rctx, hintLookupTimeout)
	defer cancel()
	defer cl.guard.tolerateOn(subject, refused)()
	c, err := cl.js.Consumer(lctx, stream, name)
	if err != nil {
		if pe := (*permissionError)(nil); errors.As(context.Cause(rctx), &pe) {
			return fmt.Sprintf("cannot tell: %s may not read the consumer's info (publish to %s)", pe.who(), subject)
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Sprintf("none is consuming: stream %s has no consumer %s, so no 'hermes-bridge run' has started on it (with this HERMES_BRIDGE_CONSUMER); one that starts picks the action up", stream, name)
		}
		return fmt.Sprintf("cannot tell: consumer %s of stream %s: %v", name, stream, err)
	}
	info := c.CachedInfo()
	seq := ack.Sequence
	switch {
	case info.AckFloor.Stream >= seq:
		return fmt.Sprintf("a bridge has finished with it (consumer %s acknowledged message %d), but no result arrived on %s in stream %s: does this command use the bridge's HERMES_BRIDGE_PREFIX and HERMES_BRIDGE_OUTPUT_STREAM?",
			name, seq, cl.subjects.Results(id), cl.cfg.OutputStream)
	case info.Delivered.Stream >= seq:
		return fmt.Sprintf("a bridge has it (delivered, not yet acknowledged; %s in progress on consumer %s), and no event has come yet: Hermes may be slow to answer, the endpoint busy (its max concurrency) or paused after failures, or the action waits for another one with its idempotency key",
			plural(info.NumAckPending, "action"), name)
	case info.NumWaiting == 0:
		return fmt.Sprintf("none is pulling: consumer %s has no pull request waiting, so no bridge is running, or every one is busy (%s in progress, %d waiting to be delivered, this one among them); a bridge that starts or frees a worker picks it up",
			name, plural(info.NumAckPending, "action"), info.NumPending)
	case info.Config.MaxAckPending > 0 && info.NumAckPending >= info.Config.MaxAckPending:
		return fmt.Sprintf("the bridges are at capacity: consumer %s has %d actions in progress, its max ack pending; %d wait to be delivered, this one among them",
			name, info.NumAckPending, info.NumPending)
	default:
		return fmt.Sprintf("not delivered yet, though %s of running bridges wait on consumer %s (%s in progress, %d waiting to be delivered); it should be delivered shortly",
			plural(info.NumWaiting, "pull request"), name, plural(info.NumAckPending, "action"), info.NumPending)
	}
}

// watchHint describes an action watch follows that has no output at all.
func (cl *clientConn) watchHint(id string) func(context.Context) string {
	return func(context.Context) string {
		return fmt.Sprintf("  nothing is stored for it on %s or %s in stream %s: the id may be unknown (mistyped, or older than the stream keeps outputs), or the action is not published yet, or it waits for a bridge\n",
			cl.subjects.Events(id), cl.subjects.Results(id), cl.cfg.OutputStream)
	}
}

// plural is "1 action" or "3 actions".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
