package bridge

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// StoreRequestBound bounds every store and log request of a job (the core sets it as
// the request's deadline): lease/8, at most kvstore.OpTimeout. A renewal waits behind
// at most one such request, and one sent to a server that stopped answering fails
// after it: so the lease holds RenewalGap with this as its store request, which is
// at most one ping interval (NATSLiveness).
func StoreRequestBound(lease time.Duration) time.Duration { return min(kvstore.OpTimeout, lease/8) }

// Bounds of the ping interval NATSLiveness derives from the lease.
const (
	MinPingInterval = 250 * time.Millisecond
	MaxPingInterval = 10 * time.Second
)

// Liveness is how a NATS connection notices that its server stopped answering (a
// paused or partitioned server keeps its TCP connection open, so only unanswered pings
// tell) and how soon it then tries a server again. Options turns it into the
// connection's options.
type Liveness struct {
	// PingInterval is how often the client pings the server (nats.PingInterval).
	PingInterval time.Duration
	// MaxPingsOut is how many pings may go unanswered (nats.MaxPingsOutstanding): at
	// the tick after that many the client gives the server up and reconnects.
	MaxPingsOut int
	// ReconnectWait and ReconnectJitter are the pause, and the most random time added
	// to it, before a server of the pool is tried again once every one has been tried
	// (nats.ReconnectWait, nats.ReconnectJitter for TLS and plain connections alike).
	// A cluster's other servers are tried at once. A zero ReconnectJitter keeps
	// nats.go's defaults.
	ReconnectWait, ReconnectJitter time.Duration
}

// NATSLiveness returns the liveness of the NATS connection a bridge with this claim
// lease runs on (the connection given to New): a ping every lease/8, held between
// MinPingInterval and MaxPingInterval, two of them unanswered at most, so a server that
// stops answering is given up after two to three ping intervals (3/8 of the lease, 750ms
// at least, 30s at most); then a reconnect wait of one ping interval, 1s at most, plus a
// tenth of it of jitter.
//
// The budget it serves: a replica proves that it is alive by renewing the claim of every
// action it runs every Heartbeat, and another replica takes a claim over once its
// revision has stood still for the lease (measured from when that replica read it). When
// the server the replica is connected to stops answering, a claim may stand still for
//
//	5/4 × heartbeat (a beat comes a heartbeat after the previous one ended, checked
//	                 every quarter heartbeat)
//	+ DeadServerDetection (3 × ping interval: until the client gives the server up)
//	+ ReconnectDelay (reconnect wait + jitter, when the pool has no other server left)
//	+ one store request (the renewal, or the request it waits behind, sent to the
//	                     silent server waits for its reply up to StoreRequestBound,
//	                     lease/8 at most 5s; one answered takes milliseconds)
//
// (RenewalGap), and that must fit in the lease, or the replica's claims are taken over
// while it holds Hermes answers it can no longer store (an unsafe call then settles
// outcome_unknown). Each term is its worst case, and the other replica starts counting
// only once it has read the revision (usually after a redelivery, an ack wait after the
// last heartbeat): that is the margin. Every term follows the lease: Config.Validate
// refuses a lease that cannot hold the budget (with the store request counted as one
// ping interval, which StoreRequestBound never exceeds). nats.go's own default (a ping
// every 2 minutes) outlasts any usual lease.
func NATSLiveness(lease time.Duration) Liveness {
	ping := min(max(lease/8, MinPingInterval), MaxPingInterval)
	wait := min(ping, time.Second)
	return Liveness{PingInterval: ping, MaxPingsOut: 2, ReconnectWait: wait, ReconnectJitter: wait / 10}
}

// DeadServerDetection is the longest the connection waits on a server that stopped
// answering before it gives it up: (MaxPingsOut + 1) × PingInterval.
func (l Liveness) DeadServerDetection() time.Duration {
	return time.Duration(l.MaxPingsOut+1) * l.PingInterval
}

// ReconnectDelay is the longest pause before a reconnect attempt: ReconnectWait +
// ReconnectJitter.
func (l Liveness) ReconnectDelay() time.Duration { return l.ReconnectWait + l.ReconnectJitter }

// Options returns l as connection options.
func (l Liveness) Options() []nats.Option {
	opts := []nats.Option{
		nats.PingInterval(l.PingInterval),
		nats.MaxPingsOutstanding(l.MaxPingsOut),
		nats.ReconnectWait(l.ReconnectWait),
	}
	if l.ReconnectJitter > 0 {
		opts = append(opts, nats.ReconnectJitter(l.ReconnectJitter, l.ReconnectJitter))
	}
	return opts
}

// RenewalGap is the longest a running action's claim may stand still when the NATS
// server its replica is connected to stops answering, for a replica that renews every
// heartbeat on a connection of NATSLiveness(lease), and whose renewal sent to the
// silent server waits storeRequest for its reply (see NATSLiveness):
// 5/4 × heartbeat + DeadServerDetection + ReconnectDelay + storeRequest.
func RenewalGap(heartbeat, lease, storeRequest time.Duration) time.Duration {
	l := NATSLiveness(lease)
	return heartbeat + heartbeat/4 + l.DeadServerDetection() + l.ReconnectDelay() + storeRequest
}
