package e2e_test

// Black-box regression tests for findings 2, 3 and 6 of issue 22. Each one states what
// the contract requires and fails on the bridge before the fix (commit 57a644c). They
// look at the bridge through NATS only: the subjects, the results and events the output
// stream stores, what a core subscriber receives live, and the requests the fake Hermes
// recorded.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// ---- helpers (issue 22, b) ----

// storedMsg is one output message (stored in the output stream, or received live).
type storedMsg struct {
	ceID string
	data []byte
	res  *events.Result // results only
}

// storedResults decodes every result message stored for an action, in order.
func (h *harness) storedResults(id string) []storedMsg {
	h.t.Helper()
	var out []storedMsg
	for _, m := range h.outputMsgs(h.cfg.WithDefaults().Prefix + ".results." + id) {
		r, err := events.DecodeResult(m.Header, m.Data)
		if err != nil {
			h.t.Fatalf("result message %d of %s: %v", m.Sequence, id, err)
		}
		out = append(out, storedMsg{ceID: headerFold(m.Header, "ce-id"), data: m.Data, res: r})
	}
	return out
}

// terminalOnly keeps the terminal results (a pending_approval one is not terminal).
func terminalOnly(ms []storedMsg) []storedMsg {
	var out []storedMsg
	for _, m := range ms {
		if m.res != nil && events.Terminal(m.res.Status) {
			out = append(out, m)
		}
	}
	return out
}

// describeResults renders results for a failure message: status, error code and
// uncertainty, replay_of.
func describeResults(ms []storedMsg) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, describeResult(m.res))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func describeResult(r *events.Result) string {
	if r == nil {
		return "<not a result>"
	}
	s := r.Status
	if r.Error != nil {
		s += fmt.Sprintf(" %s uncertain_outcome=%v", r.Error.Code, r.Error.UncertainOutcome)
	}
	if r.ReplayOf != nil {
		s += " replay_of=" + *r.ReplayOf
	}
	return s
}

// liveResults decodes the result messages a live tap received (every message on a
// results subject is one).
func (h *harness) liveResults(lt *liveTap) []storedMsg {
	h.t.Helper()
	lt.mu.Lock()
	msgs := append([]*nats.Msg(nil), lt.msgs...)
	lt.mu.Unlock()
	var out []storedMsg
	for i, m := range msgs {
		r, err := events.DecodeResult(m.Header, m.Data)
		if err != nil {
			h.t.Fatalf("live message %d on %s is not a result: %v", i, m.Subject, err)
		}
		out = append(out, storedMsg{ceID: headerFold(m.Header, "ce-id"), data: m.Data, res: r})
	}
	return out
}

// ---- finding 2: a last-resort settle without the claim ----

// TestRegress22_LastResortWithoutClaim (finding 2): with a finite MaxDeliver, a delivery
// of an action on its final delivery that gives up waiting for the action's owner must
// not settle the action as certainly not sent while that owner holds the claim and is
// about to send. Before the fix it stored "failed, internal, uncertain_outcome false"
// (bridge/action.go lastResort, through SettleUnclaimed without the claim); the owner then
// sent the call, Hermes answered, and its result was refused: certainly not sent, then
// sent.
//
// The action is published twice, as two stream messages (two Nats-Msg-Ids). The first,
// with a long timeout_ms, starts the call; the hook holds it right before the request
// goes (it has claimed the action and marked it dispatched; heartbeats keep its claim
// alive) until a result is stored for the action, or past the second copy's wait limit.
// The second copy carries a short timeout_ms, so that it gives up waiting (its remaining
// time plus two leases) well before the first one's deadline; MaxDeliver 1 makes that
// its final delivery.
//
// Demanded: at most one Hermes call; exactly one terminal result stored for the id; and
// whenever Hermes received the call, that result is not a certain failure (it is the
// call's real result, or at least uncertain_outcome true).
func TestRegress22_LastResortWithoutClaim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, key string }{
		{name: "unkeyed"},
		{name: "keyed", key: "r22-last-resort"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := "r22-last-resort-" + c.name
			const lease = 2 * time.Second // the shortest the lease budget allows here
			// Longer than the second copy's wait limit (its remaining time, at most
			// 500ms, plus two leases), with room to spare.
			const maxHold = 2*lease + 4*time.Second
			var h *harness
			var held, released atomic.Bool
			reached := make(chan struct{})
			h = newHarness(t, withConfig(func(cfg *bridge.Config) {
				cfg.MaxDeliver = 1
				cfg.AckWait = time.Second
				cfg.Lease = lease
				cfg.Heartbeat = 250 * time.Millisecond
				cfg.Hook = func(p bridge.Point, actionID string) {
					if p != bridge.PointDispatched || actionID != id || !held.CompareAndSwap(false, true) {
						return
					}
					close(reached)
					defer released.Store(true)
					// Hold the owner right before its request until the action has a
					// stored result, or for maxHold.
					deadline := time.Now().Add(maxHold)
					for time.Now().Before(deadline) {
						if n, err := h.storedResultCount(id); err == nil && n > 0 {
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}))
			in := mustJSON(t, `{"prompt":"sent once, by its owner"}`)
			long, short := int64(30000), int64(500)
			h.publishCopy("chat", id, id+"-copy-1", events.Action{Input: in, IdempotencyKey: c.key, TimeoutMS: &long})
			select {
			case <-reached:
			case <-time.After(15 * time.Second):
				t.Fatalf("the first copy never reached the dispatched point")
			}
			h.publishCopy("chat", id, id+"-copy-2", events.Action{Input: in, IdempotencyKey: c.key, TimeoutMS: &short})

			res, err := h.terminalWithin(id, 20*time.Second)
			requireOK(t, err, "no terminal result within 20s: %v")
			t.Logf("terminal result seen by a follower: %s", describeResult(res))
			// The owner goes on after the hold: wait for it, and for both copies to be
			// acknowledged, before counting.
			h.eventually(maxHold+10*time.Second, func() error {
				if !released.Load() {
					return errors.New("the owner is still held")
				}
				return nil
			})
			h.waitIdle(20 * time.Second)
			calls := h.fake.Calls("chat")
			stored := terminalOnly(h.storedResults(id))
			if calls > 1 {
				t.Fatalf("Hermes received %d chat calls for one action, want at most 1", calls)
			}
			if len(stored) != 1 {
				t.Fatalf("%d terminal results stored for %s, want exactly 1: %s", len(stored), id, describeResults(stored))
			}
			r := stored[0].res
			if calls == 1 && r.Status != events.StatusCompleted && (r.Error == nil || !r.Error.UncertainOutcome) {
				t.Fatalf("Hermes received the call, but the action's one stored result is %q (a certain failure, error %s): "+
					"a delivery that gave up waiting on its final delivery settled it as certainly not sent, without the claim, "+
					"and the owner then sent it", describeResult(r), errString(r.Error))
			}
		})
	}
}

// ---- finding 3: a byte limit on the output stream evicts results keys point to ----

// r22OutputMaxBytes is the output stream's byte limit in the finding 3 tests: room for
// a few dozen results, filled by r22Filler messages.
const r22OutputMaxBytes = 64 << 10

// r22Filler is the subject the other traffic that fills the output stream is stored on:
// events of another action, as far as the stream is concerned. It is published, as the
// bridge publishes, on r22FillerOut (the stream's subject transform drops ".out").
const (
	r22Filler    = "hermes.events.r22-filler"
	r22FillerOut = "hermes.out.events.r22-filler"
)

// fillOutput publishes 1 KiB messages on r22FillerOut until the output stream holds
// its byte limit (within one message), or refuses more because it is full (a stream
// that discards new messages); at most three times the limit in all. It fails the test
// if the stream ends up far below its limit.
func (h *harness) fillOutput(limit int64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	payload := []byte(strings.Repeat("f", 1024))
	refused := 0
	for sent := int64(0); sent < 3*limit; sent += int64(len(payload)) {
		if _, err := h.js.Publish(ctx, r22FillerOut, payload); err != nil {
			if !strings.Contains(err.Error(), "maximum bytes") {
				h.t.Fatalf("publish filler: %v", err)
			}
			if refused++; refused >= 3 {
				break // full, and it keeps what it holds
			}
		}
	}
	s, err := h.js.Stream(ctx, h.cfg.WithDefaults().OutputStream)
	requireOK(h.t, err, "output stream: %v")
	info, err := s.Info(ctx)
	requireOK(h.t, err, "output stream info: %v")
	if int64(info.State.Bytes) < limit-3*int64(len(payload)) {
		h.t.Fatalf("the output stream holds %d bytes after the filler, want about its limit %d", info.State.Bytes, limit)
	}
	h.t.Logf("output stream full: %d messages, %d bytes (limit %d); %d filler publishes refused", info.State.Msgs, info.State.Bytes, limit, refused)
}

// purgeFiller removes the other traffic from the output stream, as an operator would
// to make room.
func (h *harness) purgeFiller() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, h.cfg.WithDefaults().OutputStream)
	requireOK(h.t, err, "output stream: %v")
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(r22Filler)); err != nil {
		h.t.Fatalf("purge %s: %v", r22Filler, err)
	}
}

// r22KeyedHarness starts a bridge whose output stream is limited to r22OutputMaxBytes,
// with short leases, and completes one keyed chat under action id id; it returns the
// harness and that result.
func r22KeyedHarness(t *testing.T, id, key, input string) (*harness, *events.Result) {
	t.Helper()
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.OutputMaxBytes = r22OutputMaxBytes
		c.AckWait = time.Second
		c.Lease = 2 * time.Second
		c.Heartbeat = 250 * time.Millisecond
	}))
	h.publish("chat", events.Action{Input: mustJSON(t, input), IdempotencyKey: key}, client.WithActionID(id))
	res, err := h.terminalWithin(id, 15*time.Second)
	requireOK(t, err, "the keyed action did not settle: %v")
	requireCompleted(t, res)
	h.waitIdle(10 * time.Second)
	return h, res
}

// TestRegress22_OutputMaxBytesKeepsResults (finding 3): HERMES_BRIDGE_OUTPUT_MAX_BYTES
// must never make the output stream evict a result message before its max age: key
// records and action records point to it (schemas/README.md, "Delivery guarantees": a key's result is kept durably at
// least as long as the key). Before the fix the stream discarded its oldest messages
// when full, so that other traffic pushed a completed keyed action's result out; a
// duplicate with the same key then waited for a result that was gone and failed
// deadline_exceeded instead of replaying, and a re-publish of the completed action's id
// was taken over and settled a second time (outcome_unknown). The fix provisions the
// output stream with discard policy "new" when a byte limit is set: a full stream
// refuses new messages instead.
func TestRegress22_OutputMaxBytesKeepsResults(t *testing.T) {
	t.Parallel()

	// The stream is provisioned to refuse new messages when full, not to evict old ones.
	t.Run("discard_new", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withConfig(func(c *bridge.Config) { c.OutputMaxBytes = r22OutputMaxBytes }))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := h.js.Stream(ctx, h.cfg.WithDefaults().OutputStream)
		requireOK(t, err)
		sc := s.CachedInfo().Config
		if sc.MaxBytes != r22OutputMaxBytes {
			t.Fatalf("output stream max bytes %d, want %d", sc.MaxBytes, r22OutputMaxBytes)
		}
		if sc.Discard != jetstream.DiscardNew {
			t.Fatalf("output stream discard policy %v with max bytes %d, want %v: a full stream evicts stored results that keys still point to",
				sc.Discard, sc.MaxBytes, jetstream.DiscardNew)
		}
	})

	// Other traffic that fills the stream leaves the completed action's result stored.
	t.Run("result_kept", func(t *testing.T) {
		t.Parallel()
		const id = "r22-kept"
		h, _ := r22KeyedHarness(t, id, "r22-kept-key", `{"prompt":"keep my result"}`)
		h.fillOutput(r22OutputMaxBytes)
		if n, err := h.storedResultCount(id); err != nil || n != 1 {
			t.Fatalf("%d result messages stored for %s after other traffic filled the output stream (err %v), want 1: "+
				"the stream evicted the result its key points to", n, id, err)
		}
	})

	// A duplicate with the same key and input replays the result once the stream has
	// room again.
	t.Run("key_replays", func(t *testing.T) {
		t.Parallel()
		const id, key, in = "r22-replay", "r22-replay-key", `{"prompt":"replay me after the stream filled"}`
		h, _ := r22KeyedHarness(t, id, key, in)
		h.fillOutput(r22OutputMaxBytes)
		h.purgeFiller()
		timeout := int64(5000)
		dup := h.publish("chat", events.Action{Input: mustJSON(t, in), IdempotencyKey: key, TimeoutMS: &timeout})
		res, err := h.terminalWithin(dup, 20*time.Second)
		requireOK(t, err, "the duplicate did not settle within 20s: %v")
		if res.Status != events.StatusCompleted || res.ReplayOf == nil || *res.ReplayOf != id {
			t.Fatalf("duplicate with the same key and input: %s (error %s), want completed with replay_of %s: "+
				"the original's result was evicted from the output stream", describeResult(res), errString(res.Error), id)
		}
		wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
	})

	// A re-publish of the completed action's id (a new stream message) never produces a
	// second terminal result: neither stored nor live.
	t.Run("id_republished", func(t *testing.T) {
		t.Parallel()
		const id, key, in = "r22-republished", "r22-republished-key", `{"prompt":"completed once"}`
		h := newHarness(t, withConfig(func(c *bridge.Config) {
			c.OutputMaxBytes = r22OutputMaxBytes
			c.AckWait = time.Second
			c.Lease = 2 * time.Second
			c.Heartbeat = 250 * time.Millisecond
		}))
		lt := h.tap(h.cfg.WithDefaults().Prefix + ".results." + id)
		a := events.Action{Input: mustJSON(t, in), IdempotencyKey: key}
		h.publishCopy("chat", id, id+"-copy-1", a)
		first, err := h.terminalWithin(id, 15*time.Second)
		requireOK(t, err, "the action did not settle: %v")
		requireCompleted(t, first)
		h.waitIdle(10 * time.Second)
		h.fillOutput(r22OutputMaxBytes)
		h.purgeFiller()
		h.publishCopy("chat", id, id+"-copy-2", a)
		// Until the copy is handled and acknowledged, or a second terminal result has
		// already reached the live subscriber.
		var idleErr error
		h.eventually(20*time.Second, func() error {
			if len(terminalOnly(h.liveResults(lt))) > 1 {
				return nil
			}
			idleErr = h.consumerIdle()
			return idleErr
		})
		if idleErr == nil {
			h.quiet(lt, 500*time.Millisecond, 10*time.Second)
		}

		live := terminalOnly(h.liveResults(lt))
		if len(live) != 1 {
			t.Fatalf("a live subscriber of %s received %d terminal results %s, want 1 (the completed one): "+
				"the completed result was evicted from the output stream and the re-published copy settles the action again",
				id, len(live), describeResults(live))
		}
		stored := terminalOnly(h.storedResults(id))
		if len(stored) != 1 || stored[0].res.Status != events.StatusCompleted {
			t.Fatalf("stored terminal results of %s after its id was published again: %s, want only the completed one: "+
				"the completed result was evicted and the re-published copy settled the action a second time", id, describeResults(stored))
		}
		if idleErr != nil {
			t.Fatalf("the re-published copy of completed action %s was not acknowledged within 20s (%v)", id, idleErr)
		}
		wantEq(t, h.fake.Calls("chat"), 1, "chat calls %d, want 1")
	})
}

// ---- finding 6: a woken zombie's outputs reach live subscribers ----

// liveEvents decodes the event messages a live tap received.
func (h *harness) liveEvents(lt *liveTap) []storedMsg {
	h.t.Helper()
	lt.mu.Lock()
	msgs := append([]*nats.Msg(nil), lt.msgs...)
	lt.mu.Unlock()
	var out []storedMsg
	for i, m := range msgs {
		if _, err := events.DecodeEvent(m.Header, m.Data); err != nil {
			h.t.Fatalf("live message %d on %s is not an event: %v", i, m.Subject, err)
		}
		out = append(out, storedMsg{ceID: headerFold(m.Header, "ce-id"), data: m.Data})
	}
	return out
}

// storedEventMsgs returns every event message stored for an action, in order.
func (h *harness) storedEventMsgs(id string) []storedMsg {
	h.t.Helper()
	var out []storedMsg
	for _, m := range h.outputMsgs(h.cfg.WithDefaults().Prefix + ".events." + id) {
		out = append(out, storedMsg{ceID: headerFold(m.Header, "ce-id"), data: m.Data})
	}
	return out
}

func ceIDs(ms []storedMsg) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.ceID)
	}
	return out
}

// r22BatchTimeoutConf is a nats-server configuration whose fast batches are abandoned
// after 1s without a message (the default is 10s), so that a replica frozen for a few
// seconds in the middle of a batch finds it gone when it wakes up, as one frozen for
// longer than 10s would.
const r22BatchTimeoutConf = "jetstream {\n  limits {\n    batch {\n      timeout: \"1s\"\n    }\n  }\n}\n"

// zombieRun is one action whose owner, a hermes-bridge process, froze (SIGSTOP) at a
// point after it sent the call, was taken over by a second process, and was thawed.
type zombieRun struct {
	h              *harness
	zombie         *proc
	results, evnts *liveTap
}

// runZombie runs op with input under action id, with the owner process frozen at
// stopAt ("<point>:<n>:stop"), and thaws it once a second process has settled the
// action.
//
// The owner binds to a consumer whose ack wait is 1s (provisioned by an in-process
// replica first) but runs with an ack wait of 60s itself, so that its first heartbeat
// is due 20s after the action started: when it is thawed it goes on for a while before
// a heartbeat tells it that it lost the claim, as an owner whose heartbeat is not yet
// due does. The taker has the kill tests' fast recovery (ack wait 1s, lease 2s).
func runZombie(t *testing.T, id, op, input, stopAt string, opts ...harnessOption) *zombieRun {
	t.Helper()
	opts = append([]harnessOption{withoutBridge(), withConfig(func(c *bridge.Config) {
		c.AckWait = time.Second
		c.Heartbeat = 300 * time.Millisecond
	})}, opts...)
	h := newHarness(t, opts...)
	h.startBridge() // provisions streams, bucket and the consumer (ack wait 1s)
	h.stopBridge(0)
	prefix := h.cfg.WithDefaults().Prefix
	z := &zombieRun{h: h, results: h.tap(prefix + ".results." + id), evnts: h.tap(prefix + ".events." + id)}
	z.zombie = h.startProc(withEnv("HERMES_BRIDGE_ACK_WAIT", "60s"), withEnv("HERMES_BRIDGE_PROVISION", "false"),
		withEnv("HERMES_BRIDGE_CRASH_AT", stopAt))
	h.publish(op, events.Action{Input: mustJSON(t, input)}, client.WithActionID(id))
	point, _, _ := strings.Cut(stopAt, ":")
	z.zombie.waitLog(30*time.Second, "stopping the process at "+point)
	if n := h.fake.Calls(op); n != 1 {
		t.Fatalf("%s calls %d when the owner froze, want 1", op, n)
	}
	h.startProc(fastRecovery()) // the taker
	res, err := h.terminalWithin(id, 30*time.Second)
	requireOK(t, err, "the taker did not settle the frozen owner's action within 30s: %v")
	t.Logf("settled while the owner was frozen: %s", describeResult(res))
	requireOK(t, z.zombie.cmd.Process.Signal(syscall.SIGCONT))
	// The thawed owner ends its delivery with one "action" log line; wait for it (it is
	// only a hint of when the owner is done: no failure if it never comes).
	deadline := time.Now().Add(20 * time.Second)
	for len(z.zombie.actionLines(id)) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	h.waitIdle(20 * time.Second)
	h.quiet(z.results, time.Second, 10*time.Second)
	h.quiet(z.evnts, time.Second, 10*time.Second)
	if n := h.fake.Calls(op); n != 1 {
		t.Errorf("%s calls %d, want 1", op, n)
	}
	return z
}

// TestRegress22_ZombieOutputsNotLive (finding 6): a live subscriber of an action's
// results and events receives exactly what the output stream stores (schemas/README.md, "Results"), also
// when a replica that was frozen after it sent the call wakes up after another replica
// took the action over. Before the fix the woken owner published its "completed" result
// on hermes.results.<id>: the stream refused it (expected last subject sequence) but a
// core subscriber received it anyway, after the taker's outcome_unknown; and the events
// it published after waking went out to core subscribers whether or not the stream
// stored them (its batch had been abandoned while it was frozen: refused, then sent again
// in a new batch). The fix publishes to a subject only the output stream captures, and
// the stream's RePublish delivers what it stored.
//
// The owner is a hermes-bridge process built with the faulthooks tag (see proc_test.go;
// the test builds it itself: no tag is needed on the go test command line).
func TestRegress22_ZombieOutputsNotLive(t *testing.T) {
	t.Parallel()

	// Frozen right before it stores the result Hermes answered (bridge.PointStored).
	t.Run("result", func(t *testing.T) {
		t.Parallel()
		const id = "r22-zombie-result"
		z := runZombie(t, id, "chat", `{"prompt":"the zombie's answer"}`, "stored:1:stop")
		stored := terminalOnly(z.h.storedResults(id))
		if len(stored) != 1 {
			t.Fatalf("%d terminal results stored for %s, want 1: %s", len(stored), id, describeResults(stored))
		}
		live := z.h.liveResults(z.results)
		if len(terminalOnly(live)) != 1 {
			t.Fatalf("a live subscriber of %s.results.%s received %d terminal results %s; the stream stores one, %s: "+
				"the owner woken after the takeover published a result the stream refused",
				z.h.cfg.WithDefaults().Prefix, id, len(terminalOnly(live)), describeResults(live), describeResults(stored))
		}
		if string(live[0].data) != string(stored[0].data) || live[0].ceID != stored[0].ceID {
			t.Fatalf("the live subscriber received %s (%s), the stream stores %s (%s)",
				describeResult(live[0].res), live[0].ceID, describeResult(stored[0].res), stored[0].ceID)
		}
	})

	// Frozen in the middle of a stream, after it handed its third event to the
	// publisher (bridge.PointEvent); its batch is abandoned while it is frozen.
	t.Run("events", func(t *testing.T) {
		t.Parallel()
		const id = "r22-zombie-events"
		z := runZombie(t, id, "chat_stream", `{"prompt":"one two three four five six seven eight nine ten"}`, "event:3:stop",
			withNATS(func(o *natsembed.Options) {
				o.ConfigFile = filepath.Join(t.TempDir(), "nats.conf")
				requireOK(t, os.WriteFile(o.ConfigFile, []byte(r22BatchTimeoutConf), 0o600))
			}))
		stored := z.h.storedEventMsgs(id)
		live := z.h.liveEvents(z.evnts)
		storedData := map[string]string{}
		for _, m := range stored {
			storedData[m.ceID] = string(m.data)
		}
		seen := map[string]int{}
		var extra, twice []string
		for _, m := range live {
			seen[m.ceID]++
			if d, ok := storedData[m.ceID]; !ok || d != string(m.data) {
				extra = append(extra, m.ceID)
			} else if seen[m.ceID] == 2 {
				twice = append(twice, m.ceID)
			}
		}
		var missing []string
		for _, m := range stored {
			if seen[m.ceID] == 0 {
				missing = append(missing, m.ceID)
			}
		}
		if len(extra) > 0 || len(twice) > 0 || len(missing) > 0 {
			t.Fatalf("a live subscriber of the events of %s received %d messages %v; the stream stores %d %v: "+
				"received but not stored %v, received more than once %v, stored but not received %v",
				id, len(live), ceIDs(live), len(stored), ceIDs(stored), extra, twice, missing)
		}
	})
}
