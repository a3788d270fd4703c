package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// Service discovery (nats.go/micro). Every replica registers the micro service
// events.ServiceName while Run consumes: `nats micro ls|info|stats hermes-bridge`
// list the replicas, their versions and metadata, and per-endpoint request counts.
// The one endpoint, "status" on <prefix>.status (queue group "hermes-bridge": one
// replica answers each request), reads what the ledger knows about an action. It is a
// read of the KV record and the result log, possibly stale on a cluster, for
// information only: nothing decides on it.
//
// The handler runs in the endpoint subscription's goroutine (micro dispatches one
// request at a time per endpoint), each bounded by statusTimeout.

// statusTimeout bounds the reads of one status request.
const statusTimeout = 2 * time.Second

// statusQueue is the queue group of the status endpoint.
const statusQueue = "hermes-bridge"

// semver is the version rule micro checks (a copy of nats.go/micro's semVerRegexp, so
// that a version passed through never makes AddService, and so Run, fail).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// serviceVersion returns the first word of v as a semantic version for micro, which
// requires one: a leading "v" is dropped ("v1.2.3" from git describe or a module
// version); anything else ("dev", a bare commit) becomes "0.0.0-dev".
func serviceVersion(v string) string {
	if f := strings.Fields(v); len(f) > 0 {
		v = f[0] // "v1.2.3 (rev) go1.26 linux/amd64": the version
	}
	v = strings.TrimPrefix(v, "v")
	if semver.MatchString(v) {
		return v
	}
	return "0.0.0-dev"
}

// startService registers the micro service on the bridge's connection. The returned
// function stops it: its subscriptions are drained (a request being read ends within
// statusTimeout) and, when it returns, the server routes no more requests here (or a
// second passed). Call it once.
func (b *Bridge) startService() (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	eps := make([]string, 0, len(b.cfg.Endpoints))
	for _, ep := range b.cfg.Endpoints {
		eps = append(eps, ep.ID)
	}
	svc, err := micro.AddService(b.nc, micro.Config{
		Name:        events.ServiceName,
		Version:     serviceVersion(b.cfg.Version),
		Description: "NATS JetStream to Hermes Agent bridge",
		Metadata: map[string]string{
			"replica_id": b.cfg.ReplicaID,
			"version":    b.cfg.Version,
			"prefix":     b.cfg.Prefix,
			"consumer":   b.cfg.Consumer,
			"endpoints":  strings.Join(eps, ","),
		},
		QueueGroup: statusQueue,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bridge: register micro service: %w", err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) { b.serveStatus(ctx, req) }),
		micro.WithEndpointSubject(b.subjects.Status()),
		micro.WithEndpointMetadata(map[string]string{
			"description": `what the ledger knows about an action; request {"action_id":"..."}; a possibly-stale read`,
		}))
	if err != nil {
		cancel()
		_ = svc.Stop()
		return nil, fmt.Errorf("bridge: register micro endpoint status: %w", err)
	}
	// The subscriptions are sent asynchronously: once the server has them, the replica
	// is discoverable (before Run reports it ready).
	if err := b.nc.FlushTimeout(kvstore.OpTimeout); err != nil {
		b.log.Warn().Err(err).Msg("micro service registered; the server has not confirmed it yet")
	}
	return func() {
		cancel()
		if err := svc.Stop(); err != nil {
			b.log.Warn().Err(err).Msg("stop micro service")
			return
		}
		// Stop only queues the unsubscribes; the round trip makes sure the server has
		// them, so that no discovery or status request reaches this replica after Run.
		if err := b.nc.FlushTimeout(time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			b.log.Debug().Err(err).Msg("flush after stopping the micro service")
		}
	}, nil
}

// serveStatus answers one status request: a StatusReply, or a micro error (code
// StatusErrBadRequest or StatusErrUnavailable) in the Nats-Service-Error headers.
func (b *Bridge) serveStatus(ctx context.Context, req micro.Request) {
	var in events.StatusRequest
	if err := json.Unmarshal(req.Data(), &in); err != nil || !events.ValidActionID(in.ActionID) {
		_ = req.Error(events.StatusErrBadRequest, `the request must be {"action_id":"..."} with an id matching [A-Za-z0-9_-]{1,128}`, nil)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	reply, err := b.actionStatus(ctx, in.ActionID)
	if err != nil {
		b.log.Warn().Err(err).Str("action_id", in.ActionID).Msg("status request: the records could not be read")
		_ = req.Error(events.StatusErrUnavailable, "the records could not be read in time", nil)
		return
	}
	if err := req.RespondJSON(reply); err != nil {
		b.log.Debug().Err(err).Msg("status reply not sent")
	}
}

// actionStatus reads the action record and the action's last result message and
// summarises them (see events.StatusReply). It returns an error only when a read
// failed for another reason than absence.
func (b *Bridge) actionStatus(ctx context.Context, id string) (*events.StatusReply, error) {
	out := &events.StatusReply{ActionID: id, State: events.StateUnknown, AnsweredBy: b.cfg.ReplicaID}
	e, err := b.store.Get(ctx, kvstore.ActionKey(id))
	found := err == nil
	if err != nil && !errors.Is(err, kvstore.ErrNotFound) {
		return nil, err
	}
	le, lerr := b.results.Last(ctx, id)
	if lerr != nil && !errors.Is(lerr, kvstore.ErrNotFound) {
		return nil, lerr
	}
	if found {
		r := e.Record
		out.State = string(r.State)
		out.CapabilityID = r.CapabilityID
		out.Owner, _, _ = strings.Cut(r.Owner, ":")
		out.Attempt = r.Attempt
		out.CancelRequested = r.Cancel
		out.Decision = r.Decision
		if !r.CreatedAt.IsZero() {
			out.CreatedAt = r.CreatedAt.UTC().Format(time.RFC3339Nano)
			out.AgeMS = b.now().Sub(r.CreatedAt).Milliseconds()
		}
		if !r.UpdatedAt.IsZero() {
			out.UpdatedAt = r.UpdatedAt.UTC().Format(time.RFC3339Nano)
		}
		if r.State == kvstore.StateParked && !r.ExpiresAt.IsZero() {
			out.ApprovalExpiresAt = r.ExpiresAt.UTC().Format(time.RFC3339)
		}
		if r.State == kvstore.StateSettled && len(r.Result) > 0 {
			var res events.Result
			if json.Unmarshal(r.Result, &res) == nil {
				out.Result = summarize(&res, 0)
			}
		}
	}
	if lerr == nil {
		if res, err := events.DecodeResult(le.Header, le.Data); err == nil {
			if out.CapabilityID == "" {
				out.CapabilityID = res.CapabilityID
			}
			out.Result = summarize(res, le.Seq)
		}
		if le.Terminal {
			out.State = string(kvstore.StateSettled)
		}
	}
	return out, nil
}

// summarize is the StatusResult of r: status, error code and replay_of only.
func summarize(r *events.Result, seq uint64) *events.StatusResult {
	s := &events.StatusResult{Status: r.Status, ReplayOf: r.ReplayOf, Seq: seq}
	if r.Error != nil {
		s.ErrorCode = r.Error.Code
	}
	return s
}
