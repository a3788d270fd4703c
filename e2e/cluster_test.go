package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// TestClusterLeaderRestarts (issue 12): three nats-server nodes in this process, R3
// streams and bucket, two in-process bridge replicas each connected to all three nodes
// (each first to a different one), and a steady mixed load from a client. While the
// load runs, the leader of HERMES_ACTIONS, then that of HERMES_OUTPUT, then that of
// KV_HERMES_IDEMPOTENCY is shut down (gracefully), the cluster is seen to make progress
// without it, and it is restarted and waited for until every asset's peers are current
// again. Then the load stops and every action settles. Checks: one terminal result
// stored per action id, at most one Hermes call per action id and per key for the
// unsafe operations, events stored in order, and no outcome_unknown (no bridge replica
// stops in this test). It runs alone (not parallel): three servers and two bridges
// under -race load both CPUs of a CI box.
func TestClusterLeaderRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster under load: skipped in -short mode")
	}
	start := time.Now()
	c := startCluster(t, 3)
	agent := func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		return hermestest.Reply{Text: "stub reply: " + turn.UserText + " with a few more words to stream",
			Deltas: clDeltas, DeltaDelay: 25 * time.Millisecond, Delay: 30 * time.Millisecond}
	}
	fake := hermestest.NewServer(hermestest.WithAgent(agent), hermestest.WithMaxConcurrentRuns(0))
	t.Cleanup(fake.Close)
	key := fake.APIKey()
	const workers = 12
	cfg := bridge.Config{
		Provision: true,
		Replicas:  3,
		// Short but valid: heartbeat 5/3 s, lease 2 x ack wait = 10 s (Config.Validate).
		// The lease must outlast a leader outage (up to ~5 s seen on a loaded 2-core
		// machine) plus a heartbeat: with 6 s, a loaded CI run once saw an owner that
		// could not renew through a KV leader change taken over (outcome_unknown), which
		// is the lease working as documented, not what this test is about.
		AckWait:          5 * time.Second,
		RetryBase:        20 * time.Millisecond,
		RetryMax:         200 * time.Millisecond,
		BreakerThreshold: 1000,
		Workers:          workers,
		MaxAckPending:    2 * workers,
		ShutdownGrace:    10 * time.Second,
		Endpoints: []bridge.Endpoint{{
			ID: "primary", BaseURL: fake.URL, Key: func() string { return key }, MaxConcurrency: workers,
		}},
	}
	nc, err := nats.Connect(strings.Join(c.urls(0), ","), nats.Name(t.Name()+"/client"),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	requireOK(t, err, "connect client: %v")
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	requireOK(t, err)
	c.js = js
	c.waitMetaLeader(60 * time.Second)
	h := &harness{t: t, ns: c.nodes[0].srv, nc: nc, js: js, fake: fake, client: client.New(js), cfg: cfg,
		logs: &syncBuffer{}, state: &harnessState{}}
	for i := range 2 {
		// Each replica's first server is a different node; it fails over to the others.
		h.bridgeNATS = []nats.Option{withServers(c.urls(i)), nats.DontRandomize(), nats.Name(fmt.Sprintf("%s/r%d", t.Name(), i))}
		h.startBridge()
	}
	t.Logf("cluster and 2 bridge replicas up after %s", time.Since(start).Round(time.Millisecond))

	ld := &clLoad{h: h, rate: 40, start: time.Now(), settled: watchSettled(t, nc)}
	stop := make(chan struct{})
	var pubs sync.WaitGroup
	pubErr := make(chan error, 4)
	for range 4 {
		pubs.Go(func() {
			if err := ld.publisher(stop); err != nil {
				pubErr <- err
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); pubs.Wait() })
	defer stopLoad()
	loadFailed := func() {
		select {
		case err := <-pubErr:
			stopLoad()
			t.Fatalf("publishing: %v", err)
		default:
		}
	}

	// Warm up, then take each leader down in turn, and let the load go on a while.
	c.waitProgress(ld, 40, 60*time.Second, "warm-up")
	var faults []string
	for _, asset := range []string{"HERMES_ACTIONS", "HERMES_OUTPUT", "KV_HERMES_IDEMPOTENCY"} {
		loadFailed()
		faults = append(faults, c.bounceLeader(ld, asset))
	}
	c.waitProgress(ld, 40, 60*time.Second, "after the last restart")
	stopLoad()
	loadFailed()
	pubEnd := time.Now()
	ids := ld.ids()
	settleTook := c.waitSettled(h, ld, len(ids), 90*time.Second)
	fig := ld.check(t, c)
	fig.faults = faults
	fig.runtime = time.Since(start)
	fig.publish = pubEnd.Sub(ld.start)
	fig.settle = settleTook
	fig.report(t)
}

// clDeltas is the number of text deltas of every streamed reply.
const clDeltas = 6

// ---- the cluster ----

type clusterNode struct {
	name string
	srv  *natsembed.Server
}

// natsCluster is a JetStream cluster of embedded servers on loopback ports with
// temporary stores, shut down at cleanup.
type natsCluster struct {
	t     *testing.T
	nodes []*clusterNode
	js    jetstream.JetStream // the test client's, set once connected
}

// startCluster starts n nodes named n0, n1, ... routed to each other.
func startCluster(t *testing.T, n int) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t}
	for i, s := range natsembed.RunTestCluster(t, n, "") {
		c.nodes = append(c.nodes, &clusterNode{name: fmt.Sprintf("n%d", i), srv: s})
	}
	return c
}

// urls returns every node's client URL, starting with node first.
func (c *natsCluster) urls(first int) []string {
	var out []string
	for i := range c.nodes {
		out = append(out, c.nodes[(first+i)%len(c.nodes)].srv.ClientURL())
	}
	return out
}

// withServers sets a connection's server list (nats.Connect's URL argument is replaced).
func withServers(urls []string) nats.Option {
	return func(o *nats.Options) error {
		o.Servers = slices.Clone(urls)
		return nil
	}
}

func (c *natsCluster) node(name string) *clusterNode {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	return nil
}

// poll calls f every 50ms until it returns nil, and fails the test with f's last
// error when timeout passes.
func (c *natsCluster) poll(timeout time.Duration, what string, f func(context.Context) error) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMetaLeader waits until the cluster answers JetStream API requests.
func (c *natsCluster) waitMetaLeader(timeout time.Duration) {
	c.t.Helper()
	c.poll(timeout, "JetStream meta leader", func(ctx context.Context) error {
		_, err := c.js.AccountInfo(ctx)
		return err
	})
}

// assetInfo returns the cluster info of a stream, or of the bridge's consumer when
// name is "consumer".
func (c *natsCluster) assetInfo(ctx context.Context, name string) (*jetstream.ClusterInfo, error) {
	if name == "consumer" {
		cons, err := c.js.Consumer(ctx, "HERMES_ACTIONS", "hermes-bridge")
		if err != nil {
			return nil, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		return info.Cluster, nil
	}
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	return info.Cluster, nil
}

// leader returns the server name of the asset's current leader ("" when none).
func (c *natsCluster) leader(ctx context.Context, name string) (string, error) {
	ci, err := c.assetInfo(ctx, name)
	if err != nil {
		return "", err
	}
	if ci == nil || ci.Leader == "" {
		return "", fmt.Errorf("%s has no leader", name)
	}
	return ci.Leader, nil
}

// healthy checks that every stream of the account (streams, bucket, object store)
// and the bridge's consumer have a leader and every other peer is online and current.
func (c *natsCluster) healthy(ctx context.Context) error {
	names := []string{"consumer"}
	lister := c.js.StreamNames(ctx)
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		return err
	}
	if len(names) < 6 { // actions, output, dlq, bucket, object store, and the consumer
		return fmt.Errorf("only %v listed", names)
	}
	for _, n := range names {
		ci, err := c.assetInfo(ctx, n)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if ci == nil || ci.Leader == "" {
			return fmt.Errorf("%s has no leader", n)
		}
		if len(ci.Replicas) != len(c.nodes)-1 {
			return fmt.Errorf("%s (leader %s) lists %d other peers, want %d", n, ci.Leader, len(ci.Replicas), len(c.nodes)-1)
		}
		for _, p := range ci.Replicas {
			if !p.Current || p.Offline {
				return fmt.Errorf("%s (leader %s): peer %s current=%v offline=%v lag=%d", n, ci.Leader, p.Name, p.Current, p.Offline, p.Lag)
			}
		}
	}
	return nil
}

// waitProgress waits until n more actions have settled than now.
func (c *natsCluster) waitProgress(ld *clLoad, n int, timeout time.Duration, what string) {
	c.t.Helper()
	from := ld.settled.count()
	c.poll(timeout, fmt.Sprintf("%d actions settled %s", n, what), func(context.Context) error {
		if got := ld.settled.count() - from; got < n {
			return fmt.Errorf("%d settled", got)
		}
		return nil
	})
}

// bounceLeader shuts down the node leading asset, waits for a new leader and for
// progress without it, restarts it and waits until the cluster is healthy again. It
// returns a description of what happened.
func (c *natsCluster) bounceLeader(ld *clLoad, asset string) string {
	c.t.Helper()
	var old string
	c.poll(30*time.Second, "leader of "+asset, func(ctx context.Context) (err error) {
		old, err = c.leader(ctx, asset)
		return err
	})
	nd := c.node(old)
	if nd == nil {
		c.t.Fatalf("leader %q of %s is not a node of this cluster", old, asset)
	}
	// What else the node leads: a reordering or an outcome_unknown can then be matched
	// with the assets whose leader moved.
	var leads []string
	for _, other := range []string{"HERMES_ACTIONS", "HERMES_OUTPUT", "KV_HERMES_IDEMPOTENCY", "consumer"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if l, err := c.leader(ctx, other); err == nil && l == old {
			leads = append(leads, other)
		}
		cancel()
	}
	at := time.Since(ld.start)
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := nd.srv.Shutdown(ctx)
	cancel()
	if err != nil {
		c.t.Fatalf("shutdown %s: %v", old, err)
	}
	down := time.Now()
	var next string
	c.poll(30*time.Second, fmt.Sprintf("a new leader of %s after %s stopped", asset, old), func(ctx context.Context) (err error) {
		next, err = c.leader(ctx, asset)
		if err == nil && next == old {
			err = fmt.Errorf("%s still named leader", old)
		}
		return err
	})
	elected := time.Since(down)
	c.waitProgress(ld, 20, 30*time.Second, fmt.Sprintf("while %s is down", old))
	downFor := time.Since(down)
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	err = nd.srv.Restart(ctx)
	cancel()
	if err != nil {
		c.t.Fatalf("restart %s: %v", old, err)
	}
	restarted := time.Now()
	c.poll(90*time.Second, fmt.Sprintf("cluster healthy after %s restarted", old), c.healthy)
	healthy := time.Since(restarted)
	c.waitProgress(ld, 20, 30*time.Second, fmt.Sprintf("after %s restarted", old))
	s := fmt.Sprintf("%s leader %s (leading %s) stopped at %.2fs (shutdown %s), new leader %s after %s, down %s, healthy %s after restart",
		asset, old, strings.Join(leads, "+"), at.Seconds(), down.Sub(t0).Round(time.Millisecond), next, elected.Round(time.Millisecond),
		downFor.Round(time.Millisecond), healthy.Round(time.Millisecond))
	return s
}

// waitSettled waits until the consumer has nothing pending or unacknowledged and the
// output stream holds a result subject for each of the want action ids, and returns
// how long that took.
func (c *natsCluster) waitSettled(h *harness, ld *clLoad, want int, timeout time.Duration) time.Duration {
	c.t.Helper()
	t0 := time.Now()
	deadline := t0.Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = settledState(ctx, h.js, want)
		cancel()
		if last == nil {
			return time.Since(t0)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Errorf("[settle] not every action settled within %s after the load stopped: %v (live count %d of %d)",
		timeout, last, ld.settled.count(), want)
	return time.Since(t0)
}

func settledState(ctx context.Context, js jetstream.JetStream, want int) error {
	cons, err := js.Consumer(ctx, "HERMES_ACTIONS", "hermes-bridge")
	if err != nil {
		return err
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	if ci.NumPending != 0 || ci.NumAckPending != 0 {
		return fmt.Errorf("consumer: %d pending, %d awaiting ack", ci.NumPending, ci.NumAckPending)
	}
	s, err := js.Stream(ctx, "HERMES_OUTPUT")
	if err != nil {
		return err
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter("hermes.results.>"))
	if err != nil {
		return err
	}
	if got := len(si.State.Subjects); got < want {
		return fmt.Errorf("%d of %d actions have a result subject", got, want)
	}
	return nil
}

// ---- the load ----

type clKind int

const (
	clChat   clKind = iota // unsafe chat with its own key
	clStream               // unsafe chat_stream with its own key
	clModels               // safe read
	clDupKey               // same key and input as an earlier chat or chat_stream: replayed
	clSameID               // no key, published twice under one id (JetStream dedup) plus raw copies
	clKinds
)

var clKindNames = [clKinds]string{"chat", "chat_stream", "models", "dup_key", "same_id"}

// clMix is the kind of action i: clMix[i%20]. 40% chat, 20% streams, 20% models, 10% key
// duplicates (one of a chat, one of a stream), 10% same id (a chat and a stream).
var clMix = [20]clKind{
	clChat, clStream, clModels, clChat, clDupKey, clChat, clStream, clModels, clChat, clSameID,
	clChat, clStream, clModels, clChat, clDupKey, clChat, clStream, clModels, clChat, clSameID,
}

type clAction struct {
	i     int
	kind  clKind
	id    string
	op    string
	key   string
	orig  int    // clDupKey: the index of the action it duplicates
	owner string // the action id its prompt names ("" for models)
	input json.RawMessage
}

func clID(i int) string { return fmt.Sprintf("cl-%07d", i) }

var clIDRE = regexp.MustCompile(`cl-[0-9]{7}`)

func clPlan(i int) clAction {
	a := clAction{i: i, kind: clMix[i%20], id: clID(i), op: "chat", orig: -1}
	switch a.kind {
	case clChat, clStream, clSameID:
		if a.kind != clSameID {
			a.key = fmt.Sprintf("clk-%07d", i)
		}
		if a.kind == clStream || (a.kind == clSameID && i%20 == 19) {
			a.op = "chat_stream"
		}
		a.owner = a.id
		a.input = json.RawMessage(`{"prompt":"cluster ` + a.id + `"}`)
	case clModels:
		a.op = "models"
		a.input = json.RawMessage(`{}`)
	case clDupKey:
		// Slot 4 duplicates the chat just before it (both in flight together), slot 14
		// the stream three before it.
		o := i - 1
		if i%20 == 14 {
			o = i - 3
		}
		oa := clPlan(o)
		a.orig, a.op, a.key, a.owner, a.input = o, oa.op, oa.key, oa.owner, oa.input
	}
	return a
}

// clLoad publishes the planned actions at a steady rate until stopped.
type clLoad struct {
	h     *harness
	rate  float64
	start time.Time

	next     atomic.Int64
	mu       sync.Mutex
	actions  []clAction // by index
	messages int        // messages published, copies included
	retries  int

	settled *liveSettled
}

// ids returns the distinct action ids published.
func (ld *clLoad) ids() []string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var out []string
	for _, a := range ld.actions {
		if a.id != "" {
			out = append(out, a.id)
		}
	}
	return out
}

// publisher publishes actions in the index order shared with the other publishers,
// paced at ld.rate, until stop is closed. An action whose publishing began is published
// whole (copies included), so that every action recorded is stored.
func (ld *clLoad) publisher(stop <-chan struct{}) error {
	for {
		i := int(ld.next.Add(1) - 1)
		at := ld.start.Add(time.Duration(float64(i) / ld.rate * float64(time.Second)))
		tm := time.NewTimer(time.Until(at))
		select {
		case <-tm.C:
		case <-stop:
			tm.Stop()
			return nil
		}
		a := clPlan(i)
		ld.mu.Lock()
		for len(ld.actions) <= i {
			ld.actions = append(ld.actions, clAction{i: -1})
		}
		ld.actions[i] = a
		ld.mu.Unlock()
		if err := ld.publish(context.Background(), a); err != nil {
			return fmt.Errorf("action %s (%s): %w", a.id, clKindNames[a.kind], err)
		}
	}
}

// publish publishes a and its copies, retrying a failed publish with the same
// Nats-Msg-Id (a publish whose ack was lost during a leader change is stored once).
func (ld *clLoad) publish(ctx context.Context, a clAction) error {
	timeout := int64(5 * time.Minute / time.Millisecond) // a backlog must not expire actions
	act := events.Action{Input: a.input, IdempotencyKey: a.key, TimeoutMS: &timeout}
	pub := func() error {
		return ld.retry(ctx, func(ctx context.Context) error {
			_, err := ld.h.client.Publish(ctx, "primary", a.op, act, client.WithActionID(a.id))
			return err
		})
	}
	if err := pub(); err != nil {
		return err
	}
	if a.kind != clSameID {
		return nil
	}
	if err := pub(); err != nil { // a JetStream duplicate (same Nats-Msg-Id)
		return err
	}
	raw := func(id string, input json.RawMessage, op string) error {
		data, err := json.Marshal(events.Action{Input: input, TimeoutMS: &timeout})
		if err != nil {
			return err
		}
		return ld.retry(ctx, func(ctx context.Context) error {
			_, err := ld.h.js.PublishMsg(ctx, &nats.Msg{Subject: "hermes.actions.primary." + op,
				Header: binaryHeader(id, events.TypeAction, ""), Data: data})
			return err
		})
	}
	// A copy JetStream does not deduplicate (no Nats-Msg-Id): the bridge must.
	if err := raw(a.id, a.input, a.op); err != nil {
		return err
	}
	// And a late copy of the same-id action of the previous block, settled by now.
	if a.i >= 20 {
		p := clPlan(a.i - 20)
		return raw(p.id, p.input, p.op)
	}
	return nil
}

func (ld *clLoad) retry(ctx context.Context, f func(context.Context) error) error {
	err := retryPublish(ctx, f, func() { ld.mu.Lock(); ld.retries++; ld.mu.Unlock() })
	if err == nil {
		ld.mu.Lock()
		ld.messages++
		ld.mu.Unlock()
	}
	return err
}

// ---- the check ----

type clFigures struct {
	kinds                 [clKinds]int
	actions, messages     int
	publishRetries        int
	results, terminal     int
	completed, replays    int
	failed                map[string]int
	outcomeUnknown        int
	calls                 map[string]int
	dupCallsID, dupCallsK int
	events, streams       int
	outOfOrder            int
	errorLogs             int
	violations            int
	faults                []string
	runtime, publish      time.Duration
	settle                time.Duration
}

// check reads the whole output stream and the fake's request log and verifies the
// promises; each violation is an error of t.
func (ld *clLoad) check(t *testing.T, c *natsCluster) clFigures {
	h := ld.h
	ld.mu.Lock()
	actions := slices.Clone(ld.actions)
	fig := clFigures{failed: map[string]int{}, calls: map[string]int{}, messages: ld.messages, publishRetries: ld.retries}
	ld.mu.Unlock()
	v := &ldViolations{t: t}
	trail := func(id string) string {
		var b strings.Builder
		for _, ln := range strings.Split(h.logs.String(), "\n") {
			if strings.Contains(ln, id) {
				b.WriteString("\n\t\t")
				b.WriteString(truncate(ln, 600))
			}
		}
		return b.String()
	}

	out := ldReadOutputs(t, h.js, v)
	results, evs := out.results, out.events
	fig.results, fig.events = out.nResults, out.nEvents

	// Hermes calls: per route, per idempotency key, per action id named in the prompt.
	calls := countHermesCalls(h.fake.Requests(), clIDRE)
	fig.calls = calls.byRoute
	fig.dupCallsK = duplicates(calls.byKey, func(k string, n int) {
		v.add("duplicate_call", "idempotency key %s reached Hermes %d times", k, n)
	})
	fig.dupCallsID = duplicates(calls.byMarker, func(id string, n int) {
		v.add("duplicate_call", "the input of action %s reached Hermes %d times%s", id, n, trail(id))
	})

	known := map[string]clAction{}
	groups := map[string][]string{}
	modelsOK := 0
	for _, a := range actions {
		if a.i < 0 {
			continue // stopped before it was stored
		}
		fig.actions++
		fig.kinds[a.kind]++
		known[a.id] = a
		var term []ldResult
		for _, s := range results[a.id] {
			if events.Terminal(s.res.Status) {
				term = append(term, s)
			} else {
				v.add("terminal", "%s (%s): a %s result stored (stream seq %d); no action of this test parks", a.id, clKindNames[a.kind], s.res.Status, s.seq)
			}
		}
		if len(term) != 1 {
			var seqs []string
			for _, s := range term {
				seqs = append(seqs, fmt.Sprintf("seq %d %s %s", s.seq, s.res.Status, errString(s.res.Error)))
			}
			v.add("exactly_once", "%s (%s): %d terminal result messages stored in HERMES_OUTPUT, want 1 %v%s", a.id, clKindNames[a.kind], len(term), seqs, trail(a.id))
			if len(term) == 0 {
				continue
			}
		}
		fig.terminal++
		res := term[0].res
		code := ""
		if res.Error != nil {
			code = res.Error.Code
		}
		ok := res.Status == events.StatusCompleted && res.Error == nil
		if ok {
			fig.completed++
		} else {
			fig.failed[code]++
		}
		if res.ReplayOf != nil {
			fig.replays++
		}
		if code == "outcome_unknown" && res.ReplayOf == nil {
			fig.outcomeUnknown++
			v.add("outcome_unknown", "%s (%s): settled outcome_unknown although no bridge replica stopped: error %s%s", a.id, clKindNames[a.kind], errString(res.Error), trail(a.id))
		} else if !ok {
			v.add("status", "%s (%s): status %s error %s, want completed%s", a.id, clKindNames[a.kind], res.Status, errString(res.Error), trail(a.id))
		}
		switch a.kind {
		case clModels:
			if ok {
				modelsOK++
			}
		case clChat, clStream, clSameID:
			if n := calls.byMarker[a.id]; ok && res.ReplayOf == nil && n != 1 {
				v.add("calls", "%s (%s): completed with %d Hermes calls naming it, want 1", a.id, clKindNames[a.kind], n)
			}
		}
		if a.kind == clSameID && res.ReplayOf != nil {
			v.add("status", "%s (same id): replay_of %s on an action without key", a.id, *res.ReplayOf)
		}
		if a.key != "" {
			groups[a.key] = append(groups[a.key], a.id)
		}
		// Events: contiguous sequences from 0 in stream order; only streams have any.
		ev := evs[a.id]
		if a.op != "chat_stream" {
			if len(ev) > 0 {
				v.add("events", "%s (%s): %d events stored for a JSON operation", a.id, clKindNames[a.kind], len(ev))
			}
			continue
		}
		if !inOrder(ev) {
			fig.outOfOrder++
			seqs := make([]int64, len(ev))
			for k, e := range ev {
				seqs[k] = e.Sequence
			}
			at := out.eventAt[a.id]
			v.add("events", "%s (%s): events stored out of order or with gaps: sequences in stream order %v, stored %.2fs to %.2fs after the load started%s",
				a.id, clKindNames[a.kind], seqs, at[0].Sub(ld.start).Seconds(), at[len(at)-1].Sub(ld.start).Seconds(), trail(a.id))
		}
		if ok && res.ReplayOf == nil {
			fig.streams++
			var out struct {
				EventCount int64 `json:"event_count"`
				Terminal   bool  `json:"terminal"`
			}
			if err := json.Unmarshal(res.Output, &out); err != nil {
				v.add("events", "%s: output %q: %v", a.id, truncate(string(res.Output), 80), err)
			} else if out.EventCount != int64(len(ev)) || !out.Terminal {
				v.add("events", "%s: output counts %d events (terminal %v), %d stored", a.id, out.EventCount, out.Terminal, len(ev))
			}
			if len(ev) == 0 || (inOrder(ev) && ev[len(ev)-1].Kind != events.KindDone) {
				v.add("events", "%s: completed stream does not end with a done event", a.id)
			}
		}
	}
	ldCheckPublished(v, out, known)
	// A duplicate-key action's prompt names its original (the owner): when the load
	// stopped between the two, the duplicate was published and its original was not, and
	// the duplicate runs with the original's prompt.
	named := map[string]bool{}
	for _, a := range known {
		named[a.id], named[a.owner] = true, true
	}
	for id := range calls.byMarker {
		if !named[id] {
			v.add("calls", "a Hermes call naming %s, which no published action names", id)
		}
	}
	if fig.calls["models"] < modelsOK {
		v.add("calls", "models: %d calls for %d completed actions", fig.calls["models"], modelsOK)
	}
	for route, n := range fig.calls {
		if route != "chat" && route != "chat_stream" && route != "models" {
			v.add("calls", "unexpected route %q called %d times", route, n)
		}
	}
	ldCheckKeyGroups(t, v, out, groups, calls.byKey)
	for _, ln := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(ln, `"level":"error"`) {
			fig.errorLogs++
		}
	}
	fig.violations = v.total
	v.flush()
	return fig
}

// inOrder reports whether the events' sequences are 0, 1, 2, ... in stream order.
func inOrder(ev []*events.EventData) bool {
	for i, e := range ev {
		if e.Sequence != int64(i) {
			return false
		}
	}
	return true
}

func (f clFigures) report(t *testing.T) {
	t.Helper()
	kinds := make([]string, 0, clKinds)
	for k, n := range f.kinds {
		kinds = append(kinds, fmt.Sprintf("%s=%d", clKindNames[k], n))
	}
	routes, failed := countList(f.calls), countList(f.failed)
	for _, s := range f.faults {
		t.Log("fault: " + s)
	}
	t.Logf("actions %d (%s), %d messages, %d publish retries; results %d (%d terminal per action, %d completed, %d replays, failed [%s]); calls %s; events %d (%d completed streams); %d bridge error log lines",
		f.actions, strings.Join(kinds, " "), f.messages, f.publishRetries, f.results, f.terminal, f.completed, f.replays,
		strings.Join(failed, " "), strings.Join(routes, " "), f.events, f.streams, f.errorLogs)
	fmt.Fprintf(os.Stdout, "cluster: %d actions, %d results, calls %s, %d duplicate calls (%d by id, %d by key), %d faults, %d outcome_unknown, %d out-of-order, publish %.1fs, settle %.1fs, total %.1fs, %d violations\n",
		f.actions, f.results, strings.Join(routes, ","), f.dupCallsID+f.dupCallsK, f.dupCallsID, f.dupCallsK, len(f.faults),
		f.outcomeUnknown, f.outOfOrder, f.publish.Seconds(), f.settle.Seconds(), f.runtime.Seconds(), f.violations)
}
