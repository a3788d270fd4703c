package bridge

// Point names a place in the flow of one action where Config.Hook is called. The
// points are stable: fault-injection tests kill the process at each of them.
type Point string

const (
	// PointDelivered: the message was decoded as an action; nothing is claimed yet.
	PointDelivered Point = "delivered"
	// PointClaimed: the action record is claimed, or, for an action that starts at
	// once (one write claims it and marks it dispatched), about to be; Hermes was not
	// called. A start that gives way to the ordinary path passes it twice.
	PointClaimed Point = "claimed"
	// PointDispatched: an unsafe call is recorded as dispatched (by Dispatch, or by the
	// Create of a start); the request goes next.
	PointDispatched Point = "dispatched"
	// PointRunStarted: Hermes answered a governed run's POST /v1/runs with its run_id,
	// which is not stored yet (the one window in which a crash leaves the run unknown).
	PointRunStarted Point = "run_started"
	// PointRunBound: the run_id is stored in the action record.
	PointRunBound Point = "run_bound"
	// PointEvent: one streamed event was handed to the publisher.
	PointEvent Point = "event"
	// PointStored: the terminal result is stored in KV; it is not published yet.
	PointStored Point = "stored"
	// PointPublished: the terminal result is published; the message is not acked yet.
	PointPublished Point = "published"
)

// Points lists every Point in flow order.
func Points() []Point {
	return []Point{PointDelivered, PointClaimed, PointDispatched, PointRunStarted, PointRunBound, PointEvent, PointStored, PointPublished}
}

func (b *Bridge) hook(p Point, actionID string) {
	if b.cfg.Hook != nil {
		b.cfg.Hook(p, actionID)
	}
}
