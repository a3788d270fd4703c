package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestTwoReplicasExactlyOnce: two bridge replicas share the consumer. Twenty actions in
// pairs sharing a key, plus hand-made duplicate copies of some action ids, give exactly
// one Hermes call per key and one result per action id.
func TestTwoReplicasExactlyOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFake(hermestest.WithAgent(scriptedAgent)))
	h.startBridge()
	const keys = 10
	var ids []string
	for i := 0; i < keys; i++ {
		in := fmt.Sprintf(`{"prompt":"slow: pair %d"}`, i)
		for j := 0; j < 2; j++ {
			id := fmt.Sprintf("pair-%d-%d", i, j)
			h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: fmt.Sprintf("pair-key-%d", i)}, client.WithActionID(id))
			ids = append(ids, id)
			if j == 0 && i%2 == 0 { // a copy JetStream does not deduplicate
				h.publishRaw("hermes.actions.primary.chat", binaryHeader(id, events.TypeAction, ""),
					[]byte(fmt.Sprintf(`{"input":%s,"idempotency_key":"pair-key-%d"}`, in, i)))
			}
		}
	}
	replays := 0
	for i := 0; i < keys; i++ {
		a, _ := h.follow(ids[2*i])
		b, _ := h.follow(ids[2*i+1])
		requireCompleted(t, a)
		requireCompleted(t, b)
		switch {
		case a.ReplayOf == nil && b.ReplayOf != nil && *b.ReplayOf == a.ActionID:
		case b.ReplayOf == nil && a.ReplayOf != nil && *a.ReplayOf == b.ActionID:
		default:
			t.Errorf("pair %d: replay_of %v and %v, want exactly one replaying the other", i, a.ReplayOf, b.ReplayOf)
			continue
		}
		replays++
		if !sameJSON(t, a.Output, b.Output) {
			t.Errorf("pair %d: outputs differ", i)
		}
	}
	if c := h.fake.Calls("chat"); c != keys {
		t.Errorf("chat calls %d, want %d (one per key)", c, keys)
	}
	h.requireResults(1, 20*time.Second, ids...)
	// Both replicas handled actions (the harness names them r0 and r1 in the log).
	byReplica := map[string]int{}
	for _, l := range h.logLines() {
		if l.str("message") == "action" {
			byReplica[l.str("replica")]++
		}
	}
	if byReplica["r0"] == 0 || byReplica["r1"] == 0 {
		t.Errorf("actions handled per replica %v, want both replicas to take part", byReplica)
	}
	if replays != keys {
		t.Errorf("%d replays, want %d", replays, keys)
	}
}
