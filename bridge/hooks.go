package bridge

import "github.com/hermes-bridge/hermes-bridge/bridge/core"

// Point names a place in the flow of one action where Config.Hook is called (the job
// emits it: core.Point). The points are stable: fault-injection tests kill the process
// at each of them.
type Point = core.Point

// The points, in flow order (see core.Point*).
const (
	PointDelivered  = core.PointDelivered
	PointClaimed    = core.PointClaimed
	PointDispatched = core.PointDispatched
	PointRunStarted = core.PointRunStarted
	PointRunBound   = core.PointRunBound
	PointEvent      = core.PointEvent
	PointStored     = core.PointStored
	PointPublished  = core.PointPublished
)

// Points lists every Point in flow order.
func Points() []Point { return core.Points() }

func (b *Bridge) hook(p Point, actionID string) {
	if b.cfg.Hook != nil {
		b.cfg.Hook(p, actionID)
	}
}
