package bridge

import (
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/core"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// steppedDriver is a driver of b whose job the test steps by hand: the job's effects
// are recorded, not carried out, and each answer goes to the last effect that takes one.
type steppedDriver struct {
	*driver
	last core.Effect
}

// newSteppedDriver returns a driver of an unsafe session_chat action id, delivered.
func newSteppedDriver(t testing.TB, b *Bridge, id string) *steppedDriver {
	t.Helper()
	if b.now == nil {
		b.now = time.Now
	}
	if b.coreCfg.Lease == 0 {
		b.coreCfg = Config{}.WithDefaults().core()
	}
	d := b.newDriver(core.KindAction, id, nil, nil)
	act, err := events.DecodeAction([]byte(`{"input":{"session_id":"SESSION-SECRET","message":"hi"}}`))
	if err != nil {
		t.Fatal(err)
	}
	d.act = actionInfo{endpointID: "primary", op: "session_chat", capID: "cap:hermes_agent:primary:session_chat",
		deadline: time.Now().Add(time.Minute), env: &events.Envelope{ID: id}, action: act}
	d.act.spec, _ = LookupOperation(d.act.op)
	s := &steppedDriver{driver: d}
	s.feed(core.Event{Kind: core.EvDeliver, Start: &core.Start{Kind: core.KindAction, Owner: d.owner, Seed: 1,
		Delivery: 1, Action: d.act.core(id)}})
	return s
}

// feed steps ev (an answer gets the Op of the last effect that takes one) as the driver
// does, without carrying the effects out.
func (s *steppedDriver) feed(ev core.Event) []core.Effect {
	if ev.Kind != core.EvDeliver && ev.Op == 0 {
		ev.Op = s.last.Op
	}
	effs := s.step(&ev, nil)
	for _, e := range effs {
		if e.Op != 0 {
			s.last = e
		}
	}
	return effs
}

// toSettling steps the job of a one-write start to the append of its result: it is
// settling (a cancel comes too late).
func (s *steppedDriver) toSettling(t testing.TB) {
	t.Helper()
	s.feed(core.Event{Kind: core.EvValidated})
	s.feed(core.Event{Kind: core.EvAdmit, Status: core.OK})
	s.feed(core.Event{Kind: core.EvStore, Status: core.OK, Rev: 1})
	s.feed(core.Event{Kind: core.EvCall, Call: &core.CallAnswer{Responded: true,
		Result: &events.Result{ActionID: s.id, Status: events.StatusCompleted}}})
	if s.job.Awaiting() != "appended" {
		t.Fatalf("the job awaits %s, not appended", s.job.Awaiting())
	}
}

// TestGivesSlotBack: the effects a panic drops give the endpoint slot back when they hold
// an unadmit or a call never sent (the job forgot its slot when it emitted them).
func TestGivesSlotBack(t *testing.T) {
	for _, c := range []struct {
		effs []core.Effect
		want bool
	}{
		{nil, false},
		{[]core.Effect{{Kind: core.EffCreate}, {Kind: core.EffTimer}}, false},
		{[]core.Effect{{Kind: core.EffNote}, {Kind: core.EffUnadmit}, {Kind: core.EffCreate}}, true},
		{[]core.Effect{{Kind: core.EffHook}, {Kind: core.EffCall}}, true},
	} {
		if got := givesSlotBack(c.effs); got != c.want {
			t.Errorf("givesSlotBack(%v) = %v, want %v", c.effs, got, c.want)
		}
	}
}
