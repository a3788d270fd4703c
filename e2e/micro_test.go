package e2e_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// collect sends a request on subject and returns every reply that arrives within
// wait (the way `nats micro ls` gathers the replicas).
func collect(t *testing.T, nc *nats.Conn, subject string, wait time.Duration) []*nats.Msg {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	requireOK(t, err)
	defer sub.Unsubscribe()
	requireOK(t, nc.PublishRequest(subject, inbox, nil))
	var out []*nats.Msg
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}

// statusOf asks the status endpoint about id and decodes the reply.
func statusOf(t *testing.T, nc *nats.Conn, id string) events.StatusReply {
	t.Helper()
	body, _ := json.Marshal(events.StatusRequest{ActionID: id})
	m, err := nc.Request("hermes.status", body, 5*time.Second)
	if err != nil {
		t.Fatalf("status %s: %v", id, err)
	}
	if e := m.Header.Get(micro.ErrorHeader); e != "" {
		t.Fatalf("status %s: error reply %s %s", id, m.Header.Get(micro.ErrorCodeHeader), e)
	}
	var r events.StatusReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("status %s: %v: %s", id, err, m.Data)
	}
	if r.ActionID != id {
		t.Fatalf("status %s: reply for %q", id, r.ActionID)
	}
	return r
}

// TestMicroDiscoveryAndStatus runs two replicas: both answer the micro discovery
// requests with distinct ids, the version and the status endpoint; the status endpoint
// says what the ledger knows of a running, a settled, a replayed, a parked and an
// unknown action, directly and through `hermes-bridge status`; once a replica stops,
// only the other answers.
func TestMicroDiscoveryAndStatus(t *testing.T) {
	const version = "v1.4.2-rc.1 (0123456789ab) go1.26.0 linux/amd64"
	h := newHarness(t, withoutBridge())
	h.cfg.Version = version
	r0 := h.startBridge()
	r1 := h.startBridge()

	// Discovery: PING, INFO and STATS each answered by both replicas.
	pings := collect(t, h.nc, "$SRV.PING.hermes-bridge", time.Second)
	requireEq(t, len(pings), 2, "%d PING replies, want 2")
	replicas := map[string]string{} // service id -> replica id
	for _, m := range pings {
		var p micro.Ping
		requireOK(t, json.Unmarshal(m.Data, &p))
		if p.Name != "hermes-bridge" || p.Version != "1.4.2-rc.1" || p.Type != micro.PingResponseType {
			t.Errorf("ping %+v", p)
		}
		if p.Metadata["version"] != version || p.Metadata["consumer"] != "hermes-bridge" ||
			p.Metadata["prefix"] != "hermes" || p.Metadata["endpoints"] != "primary" || p.Metadata["replica_id"] == "" {
			t.Errorf("ping metadata %v", p.Metadata)
		}
		for k, v := range p.Metadata {
			if strings.Contains(v, h.fake.APIKey()) || strings.Contains(v, h.fake.URL) {
				t.Errorf("metadata %s holds the key or the Hermes URL: %q", k, v)
			}
		}
		replicas[p.ID] = p.Metadata["replica_id"]
	}
	owners := map[string]bool{}
	for _, r := range replicas {
		owners[r] = true
	}
	if len(replicas) != 2 || len(owners) != 2 {
		t.Fatalf("service ids -> replica ids %v, want two distinct", replicas)
	}
	infos := collect(t, h.nc, "$SRV.INFO.hermes-bridge", time.Second)
	requireEq(t, len(infos), 2, "%d INFO replies, want 2")
	for _, m := range infos {
		var in micro.Info
		requireOK(t, json.Unmarshal(m.Data, &in))
		if len(in.Endpoints) != 1 || in.Endpoints[0].Name != "status" || in.Endpoints[0].Subject != "hermes.status" ||
			in.Endpoints[0].QueueGroup != "hermes-bridge" {
			t.Errorf("info endpoints %+v", in.Endpoints)
		}
		if _, ok := replicas[in.ID]; !ok {
			t.Errorf("INFO from %s, not among the PING ids %v", in.ID, replicas)
		}
	}

	// Unknown: no record, no result; a bad request gets a micro error.
	if r := statusOf(t, h.nc, "never-published"); r.State != events.StateUnknown || r.Result != nil || r.Owner != "" || !owners[r.AnsweredBy] {
		t.Errorf("unknown: %+v", r)
	}
	m, err := h.nc.Request("hermes.status", []byte(`{"action_id":"a.b"}`), 5*time.Second)
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != events.StatusErrBadRequest {
		t.Errorf("bad id: err %v header %v", err, m.Header)
	}

	// Running: a chat held in the fake.
	h.fake.InjectFault(hermestest.Fault{Route: "chat", Delay: 30 * time.Second})
	const secret = "micro-status-prompt-marker"
	running := h.publish("chat", events.Action{Input: mustJSON(t, map[string]any{"prompt": secret})})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	requireOK(t, h.fake.WaitCalls(ctx, "chat", 1))
	r := statusOf(t, h.nc, running)
	if (r.State != "claimed" && r.State != "dispatched") || !owners[r.Owner] || r.Attempt != 1 ||
		r.CapabilityID != "cap:hermes_agent:primary:chat" || r.Result != nil || r.CancelRequested ||
		r.CreatedAt == "" || r.AgeMS < 0 || r.AgeMS > 10_000 {
		t.Errorf("running: %+v", r)
	}
	if strings.Contains(r.Owner, ":") {
		t.Errorf("owner %q carries the delivery nonce", r.Owner)
	}
	// Cancelled: it settles, the status says so.
	if _, err := h.client.Cancel(ctx, running); err != nil {
		t.Fatal(err)
	}
	if res, _ := h.follow(running); res.Status != events.StatusCancelled {
		t.Fatalf("cancelled action: %+v", res)
	}
	r = statusOf(t, h.nc, running)
	if r.State != "settled" || r.Result == nil || r.Result.Status != events.StatusCancelled || r.Result.Seq == 0 {
		t.Errorf("cancelled: %+v", r)
	}

	// Settled, and a replay of it.
	done := h.publish("chat", events.Action{Input: mustJSON(t, map[string]any{"prompt": secret}), IdempotencyKey: "micro-k1"})
	requireCompleted(t, func() *events.Result { res, _ := h.follow(done); return res }())
	r = statusOf(t, h.nc, done)
	if r.State != "settled" || !owners[r.Owner] || r.Attempt != 1 || r.Result == nil ||
		r.Result.Status != events.StatusCompleted || r.Result.ErrorCode != "" || r.Result.ReplayOf != nil {
		t.Errorf("settled: %+v", r)
	}
	replay := h.publish("chat", events.Action{Input: mustJSON(t, map[string]any{"prompt": secret}), IdempotencyKey: "micro-k1"})
	h.follow(replay)
	r = statusOf(t, h.nc, replay)
	if r.State != "settled" || r.Result == nil || r.Result.ReplayOf == nil || *r.Result.ReplayOf != done {
		t.Errorf("replay: %+v", r)
	}

	// Parked: a session_delete without an approval.
	// (The pending_approval result is stored a moment before the record says parked.)
	parked, _ := parkedDelete(t, h, "micro-s1", "micro-del")
	h.until(5*time.Second, "state parked", func() bool { r = statusOf(t, h.nc, parked); return r.State == "parked" })
	if r.ApprovalExpiresAt == "" || r.Result == nil || r.Result.Status != events.StatusPendingApproval || r.Decision != "" {
		t.Errorf("parked: %+v", r)
	}

	// The CLI: a human summary, --json, and exit 1 for an unknown id.
	out, errOut, code := h.cli("status", done)
	if code != 0 || !strings.Contains(out, "state        settled") || !strings.Contains(out, "result       completed") ||
		!strings.Contains(out, "possibly-stale") {
		t.Errorf("status %s: exit %d\n%s\n%s", done, code, out, errOut)
	}
	out, errOut, code = h.cli("status", "--json", replay)
	var cr events.StatusReply
	if code != 0 || json.Unmarshal([]byte(out), &cr) != nil || cr.State != "settled" || cr.Result == nil ||
		cr.Result.ReplayOf == nil || *cr.Result.ReplayOf != done {
		t.Errorf("status --json %s: exit %d\n%s\n%s", replay, code, out, errOut)
	}
	out, errOut, code = h.cli("status", "never-published")
	if code != 1 || !strings.Contains(out, "unknown") {
		t.Errorf("status unknown: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, s := range []string{out, errOut} {
		if strings.Contains(s, secret) {
			t.Errorf("the prompt appears in the status output")
		}
	}

	// Stats: the status endpoint counted the requests (one replica or the other).
	total, errs := 0, 0
	for _, m := range collect(t, h.nc, "$SRV.STATS.hermes-bridge", time.Second) {
		var st micro.Stats
		requireOK(t, json.Unmarshal(m.Data, &st))
		if len(st.Endpoints) != 1 || st.Endpoints[0].Name != "status" {
			t.Fatalf("stats endpoints %+v", st.Endpoints)
		}
		total += st.Endpoints[0].NumRequests
		errs += st.Endpoints[0].NumErrors
	}
	// 7 direct requests (one with a bad id, the one error; the parked one may have been
	// asked more than once) and 3 by the CLI.
	if total < 10 || errs != 1 {
		t.Errorf("stats: %d status requests, %d errors; want at least 10 and 1", total, errs)
	}

	// One replica stops: only the other answers.
	r0.stop(t)
	pings = collect(t, h.nc, "$SRV.PING.hermes-bridge", time.Second)
	if len(pings) != 1 {
		t.Fatalf("%d PING replies after a replica stopped, want 1\n%s", len(pings), h.logs.String())
	}
	if r := statusOf(t, h.nc, done); r.State != "settled" {
		t.Errorf("after a stop: %+v", r)
	}

	// Both stopped: nobody answers, and no goroutine of the micro package is left.
	r1.stop(t)
	wantEq(t, len(collect(t, h.nc, "$SRV.PING.hermes-bridge", 500*time.Millisecond)), 0, "%d PING replies after both replicas stopped")
	h.until(5*time.Second, "no micro goroutine left", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "nats.go/micro.")
	})
}
