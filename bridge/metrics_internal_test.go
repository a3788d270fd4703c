package bridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// statusClass maps what a Hermes call ended with to its bounded class.
func TestStatusClass(t *testing.T) {
	for _, c := range []struct {
		res  *hermes.Result
		err  error
		want string
	}{
		{&hermes.Result{HTTPStatus: 200}, nil, "2xx"},
		{&hermes.Result{HTTPStatus: 201}, nil, "2xx"},
		{nil, &hermes.Error{Code: hermes.CodeRemoteRejected, HTTPStatus: 404}, "4xx"},
		{nil, &hermes.Error{Code: hermes.CodeRemoteUnavailable, HTTPStatus: 503}, "5xx"},
		{nil, &hermes.Error{Code: hermes.CodeTransport}, "transport"},
		{nil, errors.New("other"), "transport"},
	} {
		if got := statusClass(c.res, c.err); got != c.want {
			t.Errorf("statusClass(%v, %v) = %s, want %s", c.res, c.err, got, c.want)
		}
	}
}

// The breaker state gauge follows the breaker: closed, open for the cooldown, then
// half-open; opening is counted once per opening.
func TestBreakerStateAndOpens(t *testing.T) {
	opens := 0
	brk := newBreaker(2, time.Second, time.Minute)
	brk.onOpen = func() { opens++ }
	now := time.Now()
	fail := &hermes.Error{Code: hermes.CodeTransport}
	if s := brk.state(now); s != core.BreakerClosed {
		t.Fatalf("state %d", s)
	}
	brk.done(now, fail)
	brk.done(now, fail)
	if s := brk.state(now); s != core.BreakerOpen || opens != 1 {
		t.Fatalf("after 2 failures: state %d, opens %d", s, opens)
	}
	brk.done(now, fail) // a late failure while open does not reopen it
	if s := brk.state(now.Add(2 * time.Second)); s != core.BreakerHalfOpen || opens != 1 {
		t.Fatalf("after the cooldown: state %d, opens %d", s, opens)
	}
	brk.done(now.Add(2*time.Second), nil)
	if s := brk.state(now.Add(2 * time.Second)); s != core.BreakerClosed {
		t.Fatalf("after a success: state %d", s)
	}
}

type nopRecords struct{}

func (nopRecords) Create(context.Context, string, kvstore.Record) (uint64, error) { return 1, nil }
func (nopRecords) Get(context.Context, string) (kvstore.Entry, error)             { return kvstore.Entry{}, nil }
func (nopRecords) Update(context.Context, string, kvstore.Record, uint64) (uint64, error) {
	return 2, nil
}
func (nopRecords) Delete(context.Context, string, uint64) error { return nil }
func (nopRecords) Wait(context.Context, string, uint64) (kvstore.Entry, error) {
	return kvstore.Entry{}, nil
}

// BenchmarkMetricsPerAction is what the metrics add to one keyed chat: the in-flight
// gauge, one Hermes call observed, five record operations timed, one settled action
// counted. Compare with the bench's process CPU per action (hundreds of µs).
func BenchmarkMetricsPerAction(b *testing.B) {
	br := &Bridge{eps: map[string]*endpoint{"primary": {brk: newBreaker(5, time.Second, time.Minute)}}}
	m, err := newMetrics(prometheus.NewRegistry(), br.eps)
	noErr(b, err)
	br.metrics = m
	recs := buckets{records: nopRecords{}, keys: nopRecords{}, m: m}
	j := &driver{b: br, md: &jetstream.MsgMetadata{NumDelivered: 1},
		act: actionInfo{endpointID: "primary", op: "chat", capID: "cap:hermes_agent:primary:chat"}}
	res := &hermes.Result{HTTPStatus: 200}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.inFlight.Inc()
		_, _ = recs.Create(ctx, "a", kvstore.Record{})
		_, _ = recs.Create(ctx, "k", kvstore.Record{})
		_, _ = recs.Update(ctx, "k", kvstore.Record{}, 1)
		_, _ = recs.Update(ctx, "a", kvstore.Record{}, 1)
		_, _ = recs.Get(ctx, "a")
		m.observeCall(j, time.Now(), res, nil)
		m.settledAction(j, "completed", "")
		m.inFlight.Dec()
	}
}
