package bridge

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

func TestShorterAge(t *testing.T) {
	for _, tt := range []struct {
		current, requested time.Duration
		want               bool
	}{
		{24 * time.Hour, time.Hour, true},
		{time.Hour, time.Hour, false},
		{time.Hour, 24 * time.Hour, false},
		{0, time.Hour, true},  // unlimited -> a limit
		{time.Hour, 0, false}, // a limit -> unlimited
		{0, 0, false},
	} {
		if got := lowerLimit(int64(tt.current), int64(tt.requested)); got != tt.want {
			t.Errorf("lowerLimit(%s, %s) = %v, want %v", tt.current, tt.requested, got, tt.want)
		}
	}
}

func TestFmtAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "unlimited", 24 * time.Hour: "24h", 7 * 24 * time.Hour: "168h", 90 * time.Minute: "1h30m",
		time.Minute: "1m", 90 * time.Second: "1m30s", 10 * time.Second: "10s", 500 * time.Millisecond: "500ms",
		time.Hour + time.Second: "1h0m1s",
	} {
		if got := fmtAge(d); got != want {
			t.Errorf("fmtAge(%s) = %q, want %q", d, got, want)
		}
		if d > 0 {
			if back, err := time.ParseDuration(fmtAge(d)); err != nil || back != d {
				t.Errorf("fmtAge(%s) = %q does not parse back: %s, %v", d, fmtAge(d), back, err)
			}
		}
	}
}

// TestRetentionDecision: only shortening an existing resource that holds data is
// refused, and only without permission; every change of an existing resource counts as
// changed (and is logged). For a stream's max bytes (issue 13, the "size/" cases):
// lowering it below what the stream holds would delete its oldest messages at once, so
// it is refused without permission; lowering it above what the stream holds, or raising
// it, is applied (and logged as changed).
func TestRetentionDecision(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name                      string
		r                         retention
		changed, shrinks, refused bool
	}{
		{"new resource", retention{requested: int64(time.Hour)}, false, false, false},
		{"unchanged", retention{exists: true, current: int64(time.Hour), requested: int64(time.Hour), msgs: 5}, false, false, false},
		{"lengthened", retention{exists: true, current: int64(time.Hour), requested: int64(2 * time.Hour), msgs: 5}, true, false, false},
		{"to unlimited", retention{exists: true, current: int64(time.Hour), requested: 0, msgs: 5}, true, false, false},
		{"shortened, empty", retention{exists: true, current: int64(2 * time.Hour), requested: int64(time.Hour)}, true, true, false},
		{"shortened, with data", retention{exists: true, current: int64(2 * time.Hour), requested: int64(time.Hour), msgs: 1}, true, true, true},
		{"from unlimited, with data", retention{exists: true, current: 0, requested: int64(time.Hour), msgs: 1}, true, true, true},
		{"size/new stream", retention{size: true, requested: mib}, false, false, false},
		{"size/unchanged", retention{size: true, exists: true, current: mib, requested: mib, msgs: 5, bytes: mib}, false, false, false},
		{"size/raised", retention{size: true, exists: true, current: mib, requested: 2 * mib, msgs: 5, bytes: mib}, true, false, false},
		{"size/to unlimited", retention{size: true, exists: true, current: mib, requested: 0, msgs: 5, bytes: mib}, true, false, false},
		{"size/limited, above what it holds", retention{size: true, exists: true, current: 0, requested: mib, msgs: 5, bytes: 1000}, true, true, false},
		{"size/lowered below what it holds", retention{size: true, exists: true, current: 0, requested: 1000, msgs: 5, bytes: 5000}, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.changed(); got != tt.changed {
				t.Errorf("changed = %v, want %v", got, tt.changed)
			}
			if got := tt.r.shrinks(); got != tt.shrinks {
				t.Errorf("shrinks = %v, want %v", got, tt.shrinks)
			}
			if got := tt.r.refused(false); got != tt.refused {
				t.Errorf("refused without permission = %v, want %v", got, tt.refused)
			}
			if tt.r.refused(true) {
				t.Errorf("refused with permission")
			}
		})
	}
}

func TestCheckRetentionMessage(t *testing.T) {
	plan := []retention{
		{resource: "stream HERMES_ACTIONS", setting: "max age", field: "ActionsMaxAge", exists: true,
			current: int64(7 * 24 * time.Hour), requested: int64(24 * time.Hour), msgs: 3},
		{resource: "stream HERMES_DLQ", setting: "max age", field: "DLQMaxAge", exists: true,
			current: int64(7 * 24 * time.Hour), requested: int64(time.Hour)}, // empty: applied
		{resource: "KV bucket B", setting: "TTL", variable: "HERMES_BRIDGE_IDEMPOTENCY_TTL", field: "IdempotencyTTL",
			exists: true, current: 0, requested: int64(time.Hour), msgs: 1},
	}
	if err := checkRetention(plan, true); err != nil {
		t.Fatalf("allowed: %v", err)
	}
	err := checkRetention(plan, false)
	if !errors.Is(err, ErrRetentionShrink) {
		t.Fatalf("got %v, want ErrRetentionShrink", err)
	}
	for _, want := range []string{
		"stream HERMES_ACTIONS holds 3 messages with max age 168h; the configured max age 24h (Config.ActionsMaxAge) would shorten it",
		"KV bucket B holds 1 message with TTL unlimited; HERMES_BRIDGE_IDEMPOTENCY_TTL=1h would shorten it",
		"set HERMES_BRIDGE_ALLOW_RETENTION_SHRINK=true",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "HERMES_DLQ") {
		t.Errorf("the empty stream is refused:\n%v", err)
	}
}

// kvstore's own refusal (the bucket filled between the plan and Open) reads like the
// bridge's, naming the variable that sets that bucket's TTL: the keys bucket's is
// HERMES_BRIDGE_IDEMPOTENCY_TTL, the records bucket's follows HERMES_BRIDGE_OUTPUT_MAX_AGE.
func TestBucketShrinkError(t *testing.T) {
	cfg := validConfig().WithDefaults()
	if bucketShrinkError(cfg, errors.New("other")) != nil {
		t.Fatal("an unrelated error was mapped")
	}
	for bucket, want := range map[string]string{
		cfg.KeysBucket: "KV bucket " + cfg.KeysBucket + " holds 4 messages with TTL 24h; HERMES_BRIDGE_IDEMPOTENCY_TTL=2h would shorten it",
		cfg.Bucket:     "KV bucket " + cfg.Bucket + " holds 4 messages with TTL 24h; HERMES_BRIDGE_OUTPUT_MAX_AGE=1h (plus 1h) would shorten it",
	} {
		kerr := fmt.Errorf("wrapped: %w", &kvstore.TTLShrinkError{Bucket: bucket, Current: 24 * time.Hour, Requested: 2 * time.Hour, Values: 4})
		err := bucketShrinkError(cfg, kerr)
		if !errors.Is(err, ErrRetentionShrink) {
			t.Fatalf("got %v, want ErrRetentionShrink", err)
		}
		for _, want := range []string{want, "HERMES_BRIDGE_ALLOW_RETENTION_SHRINK=true"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not contain %q:\n%v", want, err)
			}
		}
	}
}

// TestSizeRetentionMessage: the refusal of a lower max bytes says what the stream holds.
func TestSizeRetentionMessage(t *testing.T) {
	err := checkRetention([]retention{{resource: "stream HERMES_OUTPUT", setting: "max bytes", size: true,
		variable: "HERMES_BRIDGE_OUTPUT_MAX_BYTES", field: "OutputMaxBytes", exists: true, current: 0, requested: 1024, msgs: 3, bytes: 4096}}, false)
	want := "stream HERMES_OUTPUT holds 3 messages (4KiB) with max bytes unlimited; HERMES_BRIDGE_OUTPUT_MAX_BYTES=1KiB would delete the oldest of them"
	if !errors.Is(err, ErrRetentionShrink) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v\nwant it to contain %q", err, want)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "unlimited", -1: "unlimited", 1: "1B", 1000: "1KB", 1024: "1KiB",
		10 << 30: "10GiB", 1_500_000: "1500KB", 1023: "1023B", 5_000_000_000_000: "5TB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
