package bridge

// Point names a place in the flow of one action where Config.Hook is called. The
// points are stable: fault-injection tests kill the process at each of them.
type Point string

const (
	// PointDelivered: the message was decoded as an action; nothing is claimed yet.
	PointDelivered Point = "delivered"
	// PointClaimed: the action record is claimed; Hermes was not called.
	PointClaimed Point = "claimed"
	// PointDispatched: an unsafe call is recorded as dispatched; the request goes next.
	PointDispatched Point = "dispatched"
	// PointEvent: one streamed event was handed to the publisher.
	PointEvent Point = "event"
	// PointStored: the terminal result is stored in KV; it is not published yet.
	PointStored Point = "stored"
	// PointPublished: the terminal result is published; the message is not acked yet.
	PointPublished Point = "published"
)

// Points lists every Point in flow order.
func Points() []Point {
	return []Point{PointDelivered, PointClaimed, PointDispatched, PointEvent, PointStored, PointPublished}
}

func (b *Bridge) hook(p Point, actionID string) {
	if b.cfg.Hook != nil {
		b.cfg.Hook(p, actionID)
	}
}
