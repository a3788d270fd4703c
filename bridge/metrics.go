package bridge

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// metrics holds the bridge's Prometheus collectors. Every label value is bounded by the
// configuration (endpoint ids, their tenants, operations) or by a fixed set (statuses, the schema's
// error codes, outcomes): never an action id, a key or content. A nil *metrics (no
// registry configured) records nothing; every method is safe on it.
type metrics struct {
	settled       *prometheus.CounterVec   // endpoint, operation, status, code
	hermesSeconds *prometheus.HistogramVec // endpoint, operation, class
	firstEvent    *prometheus.HistogramVec // endpoint, operation
	eventsOut     prometheus.Counter
	replays       prometheus.Counter
	conflicts     prometheus.Counter
	redeliveries  prometheus.Counter
	takeovers     prometheus.Counter
	inFlight      prometheus.Gauge
	waiting       prometheus.Gauge
	pending       prometheus.Gauge
	ackPending    prometheus.Gauge
	dlq           prometheus.Counter
	breakerOpens  *prometheus.CounterVec   // endpoint
	kvSeconds     *prometheus.HistogramVec // op
	cancels       *prometheus.CounterVec   // state
	steers        *prometheus.CounterVec   // outcome
	approvals     *prometheus.CounterVec   // outcome
	tokens        *prometheus.CounterVec   // endpoint, tenant, operation, direction
	costUSD       *prometheus.CounterVec   // endpoint, tenant, operation

	kv [len(kvOps)]prometheus.Observer // by kvOp
}

// Names of the metrics, for the documentation (deploy/README.md, "Metrics") and tests.
const (
	MetricActionsSettled  = "hermes_bridge_actions_settled_total"
	MetricHermesRequest   = "hermes_bridge_hermes_request_duration_seconds"
	MetricFirstEvent      = "hermes_bridge_stream_first_event_seconds"
	MetricEventsPublished = "hermes_bridge_events_published_total"
	MetricReplays         = "hermes_bridge_replays_total"
	MetricConflicts       = "hermes_bridge_idempotency_conflicts_total"
	MetricRedeliveries    = "hermes_bridge_redeliveries_total"
	MetricTakeovers       = "hermes_bridge_takeovers_total"
	MetricInFlight        = "hermes_bridge_actions_in_flight"
	MetricWaiting         = "hermes_bridge_actions_waiting"
	MetricPending         = "hermes_bridge_consumer_pending"
	MetricAckPending      = "hermes_bridge_consumer_ack_pending"
	MetricDLQ             = "hermes_bridge_dlq_messages_total"
	MetricBreakerState    = "hermes_bridge_breaker_state"
	MetricBreakerOpens    = "hermes_bridge_breaker_opens_total"
	MetricKVSeconds       = "hermes_bridge_kv_operation_duration_seconds"
	MetricCancels         = "hermes_bridge_cancel_requests_total"
	MetricApprovals       = "hermes_bridge_approval_decisions_total"
	// MetricConcurrencyLimit is an endpoint's learned concurrency limit (limiter.go);
	// MetricGateRejections counts the 429 rate_limit_exceeded answers of its gate.
	MetricConcurrencyLimit = "hermes_bridge_endpoint_concurrency_limit"
	MetricGateRejections   = "hermes_bridge_gate_rejections_total"
	MetricTokens           = "hermes_bridge_tokens_total"
	MetricCostUSD          = "hermes_bridge_cost_usd_total"
	MetricSteers           = "hermes_bridge_steer_requests_total"
)

// newMetrics registers the bridge's collectors on reg; nil when reg is nil. The breaker
// state gauges read eps at scrape time.
func newMetrics(reg prometheus.Registerer, eps map[string]*endpoint) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricActionsSettled,
			Help: "Actions settled by this replica (a terminal result stored), by endpoint, operation, status and error code (empty when none)."},
			[]string{"endpoint", "operation", "status", "code"}),
		hermesSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricHermesRequest,
			Help:    "Duration of Hermes calls (the whole response, streams included), by endpoint, operation and status class (2xx, 4xx, 5xx, transport).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}},
			[]string{"endpoint", "operation", "class"}),
		firstEvent: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricFirstEvent,
			Help:    "Time from sending a streaming Hermes request to its first event, by endpoint and operation.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}},
			[]string{"endpoint", "operation"}),
		eventsOut: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricEventsPublished,
			Help: "Stream events handed to the output stream."}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricReplays,
			Help: "Actions settled with the result of an earlier action holding the same idempotency key (replay_of set)."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricConflicts,
			Help: "Actions that reused an idempotency key with a different input (idempotency_conflict)."}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricRedeliveries,
			Help: "Action and decision messages received again (JetStream delivery count above 1)."}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricTakeovers,
			Help: "Claims taken over from another delivery whose lease had run out."}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricInFlight,
			Help: "Jobs being handled by this replica now (actions, decisions, expiries, cancels)."}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricWaiting,
			Help: "Jobs of this replica that gave their worker slot back to wait (a duplicate for its original, a takeover for a lease)."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricPending,
			Help: "Messages of the shared consumer not yet delivered (consumer info, sampled)."}),
		ackPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricAckPending,
			Help: "Messages of the shared consumer delivered and not yet acknowledged, over every replica (consumer info, sampled)."}),
		dlq: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricDLQ,
			Help: "Messages copied to the dead-letter stream."}),
		breakerOpens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBreakerOpens,
			Help: "Times an endpoint's circuit breaker opened (or reopened after a failed probe)."}, []string{"endpoint"}),
		kvSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricKVSeconds,
			Help:    "Duration of action and idempotency record operations in the KV bucket, by operation (wait: until a record changes).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30}},
			[]string{"op"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricCancels,
			Help: "Cancel requests answered by this replica, by the state the reply reports."}, []string{"state"}),
		steers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSteers,
			Help: "Steer requests answered by this replica, by outcome (accepted, or the refusal's code)."}, []string{"outcome"}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricApprovals,
			Help: "Approval decision messages handled, by outcome (approve, deny, mismatch, expired, early, orphan, stale)."}, []string{"outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricTokens,
			Help: "Tokens Hermes reported for the actions this replica settled (the result's usage; a replayed result is not counted again), by endpoint, the endpoint's configured tenant (empty when it serves any), operation and direction (input, output)."},
			[]string{"endpoint", "tenant", "operation", "direction"}),
		costUSD: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricCostUSD,
			Help: "Cost in US dollars Hermes reported for the actions this replica settled (the result's usage.cost_usd, where Hermes gives one), by endpoint, the endpoint's configured tenant and operation."},
			[]string{"endpoint", "tenant", "operation"}),
	}
	cs := []prometheus.Collector{m.settled, m.hermesSeconds, m.firstEvent, m.eventsOut, m.replays, m.conflicts,
		m.redeliveries, m.takeovers, m.inFlight, m.waiting, m.pending, m.ackPending, m.dlq, m.breakerOpens,
		m.kvSeconds, m.cancels, m.steers, m.approvals, m.tokens, m.costUSD}
	for id, ep := range eps {
		brk := ep.brk
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricBreakerState,
			Help:        "State of the endpoint's circuit breaker: 0 closed, 1 open, 2 half-open (a probe may go out).",
			ConstLabels: prometheus.Labels{"endpoint": id}}, func() float64 { return float64(brk.state(time.Now())) }))
		lim := ep.lim
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricConcurrencyLimit,
			Help:        "The endpoint's learned concurrency limit: calls admitted at a time, between 1 and its configured max_concurrency (AIMD on Hermes's 429 gate).",
			ConstLabels: prometheus.Labels{"endpoint": id}}, func() float64 { return float64(lim.current()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricGateRejections,
				Help:        "Calls Hermes's concurrency gate refused (429 rate_limit_exceeded: not run, retried without spending an attempt).",
				ConstLabels: prometheus.Labels{"endpoint": id}}, func() float64 { return float64(lim.gateRejections()) }))
		// Pre-resolve the label children of every configured capability, so that the
		// series exist from the start (rate() sees the first increase) and lookups are
		// cheap.
		for _, s := range Operations() {
			if s.Stream {
				m.firstEvent.WithLabelValues(id, s.Name)
			}
			for _, c := range statusClasses {
				m.hermesSeconds.WithLabelValues(id, s.Name, c)
			}
		}
		for _, op := range usageOps {
			m.tokens.WithLabelValues(id, ep.cfg.TenantID, op, "input")
			m.tokens.WithLabelValues(id, ep.cfg.TenantID, op, "output")
			m.costUSD.WithLabelValues(id, ep.cfg.TenantID, op)
		}
		brk.onOpen = m.breakerOpens.WithLabelValues(id).Inc
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for op, name := range kvOps {
		m.kv[op] = m.kvSeconds.WithLabelValues(name)
	}
	for _, o := range []string{"approve", "deny", "mismatch", "expired", "early", "orphan", "stale"} {
		m.approvals.WithLabelValues(o)
	}
	return m, nil
}

var statusClasses = []string{"2xx", "4xx", "5xx", "transport"}

// statusClass is the class of a Hermes call's outcome: the HTTP status class when
// Hermes answered, "transport" when it did not (or the call was abandoned).
func statusClass(res *hermes.Result, err error) string {
	status := 0
	if res != nil {
		status = res.HTTPStatus
	}
	if he, ok := errors.AsType[*hermes.Error](err); status == 0 && ok {
		status = he.HTTPStatus
	}
	switch {
	case status >= 200 && status < 300:
		return "2xx"
	case status >= 400 && status < 500:
		return "4xx"
	case status >= 500:
		return "5xx"
	}
	return "transport"
}

// observeCall records one Hermes call of d that began at start.
func (m *metrics) observeCall(d *driver, start time.Time, res *hermes.Result, err error) {
	if m == nil {
		return
	}
	m.hermesSeconds.WithLabelValues(d.act.endpointID, d.act.op, statusClass(res, err)).Observe(time.Since(start).Seconds())
}

// observeFirstEvent records the time from d's call to its first event.
func (m *metrics) observeFirstEvent(d *driver, dur time.Duration) {
	if m == nil {
		return
	}
	m.firstEvent.WithLabelValues(d.act.endpointID, d.act.op).Observe(dur.Seconds())
}

// settledAction counts one stored terminal result of d. An endpoint or operation that
// is not configured (an invalid action's subject may name anything) counts as
// "unknown", so that the labels stay bounded.
func (m *metrics) settledAction(d *driver, status, code string) {
	if m == nil {
		return
	}
	ep, op := d.act.endpointID, d.act.op
	if _, known := d.b.eps[ep]; !known {
		ep = "unknown"
	}
	if _, known := LookupOperation(op); !known {
		op = "unknown"
	}
	m.settled.WithLabelValues(ep, op, status, code).Inc()
}

// usageOps are the operations whose results carry usage (an agent turn or a run).
var usageOps = []string{"chat", "chat_stream", "responses", "responses_stream", "session_chat", "session_chat_stream", "run_events", RunOperation}

// usage counts the usage of one terminal result d stored itself (never a replay). The
// tenant label is the endpoint's configured tenant ("" when it serves any): an action's own
// tenant_id is free text and would make the series unbounded.
func (m *metrics) usage(d *driver, u *events.Usage) {
	if m == nil || d.act.ep == nil {
		return
	}
	ep, op, tenant := d.act.endpointID, d.act.op, d.act.ep.cfg.TenantID
	if _, known := LookupOperation(op); !known {
		op = "unknown"
	}
	m.tokens.WithLabelValues(ep, tenant, op, "input").Add(float64(u.InputTokens))
	m.tokens.WithLabelValues(ep, tenant, op, "output").Add(float64(u.OutputTokens))
	if u.CostUSD != nil {
		m.costUSD.WithLabelValues(ep, tenant, op).Add(*u.CostUSD)
	}
}

// sampleConsumer sets the consumer gauges from consumer info every interval until ctx
// is done. A failed lookup keeps the last values.
func (m *metrics) sampleConsumer(ctx context.Context, cons jetstream.Consumer, every time.Duration) {
	if m == nil {
		return
	}
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ictx, cancel := context.WithTimeout(ctx, every)
		info, err := cons.Info(ictx)
		cancel()
		if err == nil {
			m.pending.Set(float64(info.NumPending))
			m.ackPending.Set(float64(info.NumAckPending))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// kvOp is a KV operation of the jobs, the op label of MetricKVSeconds (kvOps).
type kvOp int

const (
	kvCreate kvOp = iota
	kvGet
	kvUpdate
	kvDelete
	kvWait
	kvClaim
)

var kvOps = [...]string{kvCreate: "create", kvGet: "get", kvUpdate: "update", kvDelete: "delete", kvWait: "wait", kvClaim: "claim"}

// observeKV records one KV operation of the jobs that began at start; nil-safe.
func (m *metrics) observeKV(op kvOp, start time.Time) {
	if m != nil {
		m.kv[op].Observe(time.Since(start).Seconds())
	}
}

// approvalOutcome counts one approval decision outcome (see MetricApprovals); nil-safe.
func (m *metrics) approvalOutcome(outcome string) {
	if m != nil {
		m.approvals.WithLabelValues(outcome).Inc()
	}
}
