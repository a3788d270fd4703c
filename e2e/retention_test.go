package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
)

// tryBridge runs one bridge replica with cfg on its own connection. It returns Run's
// error when setup fails, or nil once the replica logged that it started; a started
// replica is stopped at cleanup (or by stopping it like any other, see stopBridge).
func (h *harness) tryBridge(cfg bridge.Config) error {
	h.t.Helper()
	nc, _ := natsembed.Connect(h.t, h.ns, h.bridgeNATS...)
	started := strings.Count(h.logs.String(), `"message":"bridge started"`)
	var w io.Writer = h.logs
	if testing.Verbose() {
		w = io.MultiWriter(h.logs, os.Stderr)
	}
	b, err := bridge.New(nc, cfg, zerolog.New(w).With().Timestamp().Logger())
	requireOK(h.t, err, "bridge.New: %v")
	ctx, cancel := context.WithCancel(context.Background())
	rb := &runningBridge{cancel: cancel, done: make(chan error, 1)}
	go func() { rb.done <- b.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-rb.done:
			cancel()
			if err == nil {
				h.t.Fatalf("bridge.Run returned nil before it started")
			}
			return err
		case <-deadline:
			cancel()
			h.t.Fatalf("the bridge neither started nor failed within 10s")
		case <-time.After(10 * time.Millisecond):
		}
		if strings.Count(h.logs.String(), `"message":"bridge started"`) > started {
			h.state.mu.Lock()
			h.state.bridges = append(h.state.bridges, rb)
			h.state.mu.Unlock()
			h.t.Cleanup(func() { rb.stop(h.t) })
			return nil
		}
	}
}

// retentions reads the max age of the three streams and the TTL of both buckets.
func (h *harness) retentions() map[string]time.Duration {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := h.cfg.WithDefaults()
	out := map[string]time.Duration{}
	for _, name := range []string{cfg.ActionsStream, cfg.OutputStream, cfg.DLQStream} {
		s, err := h.js.Stream(ctx, name)
		if err != nil {
			h.t.Fatalf("stream %s: %v", name, err)
		}
		out["stream "+name] = s.CachedInfo().Config.MaxAge
	}
	for _, b := range []string{cfg.Bucket, cfg.KeysBucket} {
		kv, err := h.js.KeyValue(ctx, b)
		if errors.Is(err, jetstream.ErrBucketNotFound) && b == cfg.KeysBucket {
			continue // the keys live in the records bucket
		}
		if err != nil {
			h.t.Fatalf("bucket %s: %v", b, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			h.t.Fatalf("bucket %s status: %v", b, err)
		}
		out["KV bucket "+b] = st.TTL()
	}
	obs, err := h.js.ObjectStore(ctx, cfg.ObjectBucket)
	if err != nil {
		h.t.Fatalf("object store %s: %v", cfg.ObjectBucket, err)
	}
	ost, err := obs.Status(ctx)
	if err != nil {
		h.t.Fatalf("object store %s status: %v", cfg.ObjectBucket, err)
	}
	out["object store "+cfg.ObjectBucket] = ost.TTL()
	return out
}

// retentionLogs returns the "retention changed" log lines by resource.
func (h *harness) retentionLogs() map[string]logLine {
	out := map[string]logLine{}
	for _, l := range h.logLines() {
		if l.str("message") == "retention changed" {
			out[l.str("resource")] = l
		}
	}
	return out
}

// checkRetentionLog checks the log line of one applied change: level, old and new value.
func checkRetentionLog(t *testing.T, logs map[string]logLine, resource, level, old, new string) {
	t.Helper()
	l, ok := logs[resource]
	if !ok {
		t.Errorf("no \"retention changed\" log line for %s; lines: %v", resource, logs)
		return
	}
	if l.str("level") != level || l.str("old") != old || l.str("new") != new {
		t.Errorf("%s: logged level %q old %q new %q, want %q %q %q", resource, l.str("level"), l.str("old"), l.str("new"), level, old, new)
	}
}

// TestRetentionShrinkRefused (issue 11, finding 13): a restart with a shorter
// HERMES_BRIDGE_IDEMPOTENCY_TTL (and output max age) used to rewrite the bucket's TTL
// (and the stream's max age) at once, deleting every record older than the new value.
// Without AllowRetentionShrink the bridge now refuses to start, names each resource
// that holds data with its current and requested value and the variable to set, and
// changes nothing (not even the empty object store); with it, the changes are applied
// and logged.
func TestRetentionShrinkRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	res := h.callOK("chat", `{"prompt":"kept for a day"}`, withKey("retention-key"))
	h.waitIdle(10 * time.Second)
	h.stopBridge(0)
	before := h.retentions()

	cfg := h.cfg
	cfg.IdempotencyTTL = time.Hour
	cfg.OutputMaxAge = 2 * time.Hour
	err := h.tryBridge(cfg)
	if err == nil {
		t.Fatalf("the bridge started with a shorter TTL and output max age; retention now %v (was %v)", h.retentions(), before)
	}
	t.Logf("refused: %v", err)
	if !errors.Is(err, bridge.ErrRetentionShrink) {
		t.Errorf("error does not match bridge.ErrRetentionShrink: %v", err)
	}
	for _, want := range []string{
		"KV bucket HERMES_IDEMPOTENCY", "HERMES_BRIDGE_OUTPUT_MAX_AGE=2h (plus 1h)", "TTL 25h",
		"stream HERMES_OUTPUT", "HERMES_BRIDGE_OUTPUT_MAX_AGE=2h", "max age 24h",
		"HERMES_BRIDGE_ALLOW_RETENTION_SHRINK=true",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "HERMES_OUTPUT_OBJECTS") {
		t.Errorf("error names the object store, which is empty:\n%v", err)
	}
	if after := h.retentions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a refused start changed retention: %v, was %v", after, before)
	}
	// The records survived: the key still replays.
	cfg.AllowRetentionShrink = true
	requireOK(t, h.tryBridge(cfg), "with AllowRetentionShrink: %v")
	got := h.retentions()
	for r, want := range map[string]time.Duration{
		"KV bucket HERMES_IDEMPOTENCY": 3 * time.Hour,
		"stream HERMES_OUTPUT":         2 * time.Hour, "object store HERMES_OUTPUT_OBJECTS": 2 * time.Hour,
		"stream HERMES_ACTIONS": 24 * time.Hour,
	} {
		if got[r] != want {
			t.Errorf("%s: retention %s after the allowed start, want %s", r, got[r], want)
		}
	}
	logs := h.retentionLogs()
	checkRetentionLog(t, logs, "KV bucket HERMES_IDEMPOTENCY", "warn", "25h", "3h")
	checkRetentionLog(t, logs, "stream HERMES_OUTPUT", "warn", "24h", "2h")
	checkRetentionLog(t, logs, "object store HERMES_OUTPUT_OBJECTS", "warn", "24h", "2h")
	if _, ok := logs["stream HERMES_ACTIONS"]; ok {
		t.Errorf("an unchanged stream is logged as changed: %v", logs["stream HERMES_ACTIONS"])
	}
	again, _ := h.call("chat", `{"prompt":"kept for a day"}`, withKey("retention-key"))
	if again.ReplayOf == nil || *again.ReplayOf != res.ActionID {
		t.Errorf("the key's record is gone after a 1h TTL was applied to a record seconds old: replay_of %v", again.ReplayOf)
	}
}

// TestRetentionGrowLogged: lengthening a retention setting is applied without the
// opt-in and logged at info with the old and new value; shortening an empty stream (the
// DLQ) is applied without the opt-in too, and logged at warn.
func TestRetentionGrowLogged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *bridge.Config) {
		c.IdempotencyTTL = time.Hour
		c.OutputMaxAge = 2 * time.Hour
	}))
	h.callOK("chat", `{"prompt":"grow"}`, withKey("grow-key"))
	h.waitIdle(10 * time.Second)
	h.stopBridge(0)

	cfg := h.cfg
	cfg.IdempotencyTTL, cfg.OutputMaxAge = 0, 0 // the defaults: 24h
	cfg.DLQMaxAge = time.Hour                   // from 7 days, on an empty stream
	requireOK(t, h.tryBridge(cfg), "lengthening retention (and shortening an empty stream) refused: %v")
	got := h.retentions()
	for r, want := range map[string]time.Duration{
		"KV bucket HERMES_IDEMPOTENCY": 25 * time.Hour,
		"stream HERMES_OUTPUT":         24 * time.Hour, "object store HERMES_OUTPUT_OBJECTS": 24 * time.Hour,
		"stream HERMES_DLQ": time.Hour,
	} {
		if got[r] != want {
			t.Errorf("%s: retention %s, want %s", r, got[r], want)
		}
	}
	logs := h.retentionLogs()
	checkRetentionLog(t, logs, "KV bucket HERMES_IDEMPOTENCY", "info", "3h", "25h")
	checkRetentionLog(t, logs, "stream HERMES_OUTPUT", "info", "2h", "24h")
	checkRetentionLog(t, logs, "object store HERMES_OUTPUT_OBJECTS", "info", "2h", "24h")
	checkRetentionLog(t, logs, "stream HERMES_DLQ", "warn", "168h", "1h")
	if len(logs) != 4 {
		t.Errorf("%d resources logged as changed, want 4: %v", len(logs), logs)
	}
}

// streamSizes reads the max bytes of the three streams (0: unlimited).
func (h *harness) streamSizes() map[string]int64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := h.cfg.WithDefaults()
	out := map[string]int64{}
	for _, name := range []string{cfg.ActionsStream, cfg.OutputStream, cfg.DLQStream} {
		s, err := h.js.Stream(ctx, name)
		if err != nil {
			h.t.Fatalf("stream %s: %v", name, err)
		}
		out["stream "+name] = max(s.CachedInfo().Config.MaxBytes, 0)
	}
	return out
}

// TestStreamSizeLimits (issue 13): the max bytes of HERMES_ACTIONS, HERMES_OUTPUT and
// HERMES_DLQ (and the DLQ's max age) are applied at provisioning, also to streams that
// exist. A limit below what a stream holds would delete its oldest messages at once:
// refused without AllowRetentionShrink, naming the stream, what it holds and the
// variable; applied and logged at warn with it. A limit above what it holds is applied
// without it (and logged at warn too, as every lower limit).
func TestStreamSizeLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.callOK("chat", `{"prompt":"some output to keep"}`)
	h.waitIdle(10 * time.Second)
	h.stopBridge(0)
	if got := h.streamSizes(); got["stream HERMES_OUTPUT"] != 0 || got["stream HERMES_ACTIONS"] != 0 {
		t.Fatalf("default sizes %v, want unlimited", got)
	}

	cfg := h.cfg
	cfg.ActionsMaxBytes = 1 << 30 // far above what it holds: no permission needed
	cfg.DLQMaxBytes = 1 << 20     // empty
	cfg.OutputMaxBytes = 64       // below what it holds
	cfg.DLQMaxAge = 30 * 24 * time.Hour
	err := h.tryBridge(cfg)
	if err == nil {
		t.Fatalf("the bridge started with an output stream limit below what it holds; sizes now %v", h.streamSizes())
	}
	t.Logf("refused: %v", err)
	if !errors.Is(err, bridge.ErrRetentionShrink) {
		t.Errorf("error does not match bridge.ErrRetentionShrink: %v", err)
	}
	for _, want := range []string{"stream HERMES_OUTPUT holds", "with max bytes unlimited", "HERMES_BRIDGE_OUTPUT_MAX_BYTES=64B", "HERMES_BRIDGE_ALLOW_RETENTION_SHRINK=true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "HERMES_ACTIONS") || strings.Contains(err.Error(), "HERMES_DLQ") {
		t.Errorf("error names a stream whose new limit deletes nothing:\n%v", err)
	}
	if got := h.streamSizes(); got["stream HERMES_ACTIONS"] != 0 {
		t.Errorf("a refused start changed a stream: %v", got)
	}

	cfg.OutputMaxBytes = 1 << 30
	requireOK(t, h.tryBridge(cfg), "limits above what the streams hold: %v")
	for s, want := range map[string]int64{"stream HERMES_ACTIONS": 1 << 30, "stream HERMES_OUTPUT": 1 << 30, "stream HERMES_DLQ": 1 << 20} {
		if got := h.streamSizes()[s]; got != want {
			t.Errorf("%s: max bytes %d, want %d", s, got, want)
		}
	}
	wantEq(t, h.retentions()["stream HERMES_DLQ"], 30*24*time.Hour, "DLQ max age %s, want 720h")
	var sizeLines int
	for _, l := range h.logLines() {
		if l.str("message") == "retention changed" && l.str("setting") == "max bytes" {
			sizeLines++
			// A lower limit is logged at warn like any shrink, also when it deletes nothing.
			if l.str("level") != "warn" || l.str("old") != "unlimited" {
				t.Errorf("limiting an unlimited stream above what it holds: %v", l)
			}
		}
	}
	if sizeLines != 3 {
		t.Errorf("%d \"retention changed\" lines for max bytes, want 3", sizeLines)
	}
	h.stopBridge(1)

	cfg.OutputMaxBytes = 64
	cfg.AllowRetentionShrink = true
	requireOK(t, h.tryBridge(cfg), "with AllowRetentionShrink: %v")
	wantEq(t, h.streamSizes()["stream HERMES_OUTPUT"], 64, "output max bytes %d, want 64")
	shrunk := false
	for _, l := range h.logLines() {
		if l.str("message") == "retention changed" && l.str("resource") == "stream HERMES_OUTPUT" && l.str("new") == "64B" {
			shrunk = l.str("level") == "warn" && l.str("old") == "1GiB"
		}
	}
	if !shrunk {
		t.Errorf("the shrink of the output stream is not logged at warn with old 1GiB, new 64B")
	}
}
