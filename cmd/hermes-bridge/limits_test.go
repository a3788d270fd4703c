package main

import (
	"strings"
	"testing"
	"time"
)

// TestByteSize: sizes take bytes, SI (KB, MB, GB, TB) or binary (KiB, MiB, GiB, TiB)
// units, or "unlimited" (also -1).
func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"unlimited": 0, "-1": 0, "1": 1, "1024": 1024, "512B": 512, "1KB": 1000, "1KiB": 1024,
		"10MB": 10_000_000, "10MiB": 10 << 20, "2GB": 2_000_000_000, "2GiB": 2 << 30, "1TiB": 1 << 40, "1tb": 1_000_000_000_000,
		"1.5GiB": 3 << 29, " 5 GB ": 5_000_000_000,
	} {
		var b byteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || int64(b) != want {
			t.Errorf("%q: %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "0", "-2", "ten", "5XB", "1.5", "0.1B", "9999999TB", "1e3"} {
		var b byteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q accepted as %d", in, b)
		}
	}
	for b, want := range map[byteSize]string{0: "unlimited", 1: "1B", 1000: "1KB", 1024: "1KiB", 10 << 30: "10GiB", 1_500_000: "1500KB", 1023: "1023B"} {
		if got := b.String(); got != want {
			t.Errorf("byteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
}

// TestStreamLimitSettings (issue 13): the size of the three streams and the age of the
// dead letters are settings, passed to the bridge; a bad value names its variable.
func TestStreamLimitSettings(t *testing.T) {
	cfg, err := LoadConfig(map[string]string{
		"HERMES_BRIDGE_ACTIONS_MAX_BYTES": "1GiB", "HERMES_BRIDGE_OUTPUT_MAX_BYTES": "10GB",
		"HERMES_BRIDGE_DLQ_MAX_BYTES": "512MiB", "HERMES_BRIDGE_DLQ_MAX_AGE": "720h",
	})
	noErr(t, err)
	bc := cfg.BridgeConfig(nil, "x")
	if bc.ActionsMaxBytes != 1<<30 || bc.OutputMaxBytes != 10_000_000_000 || bc.DLQMaxBytes != 512<<20 || bc.DLQMaxAge != 720*time.Hour {
		t.Errorf("bridge config actions %d output %d dlq %d dlq age %s", bc.ActionsMaxBytes, bc.OutputMaxBytes, bc.DLQMaxBytes, bc.DLQMaxAge)
	}
	def, _ := LoadConfig(map[string]string{})
	if bc := def.BridgeConfig(nil, "x"); bc.ActionsMaxBytes != 0 || bc.OutputMaxBytes != 0 || bc.DLQMaxBytes != 0 || bc.DLQMaxAge != 7*24*time.Hour {
		t.Errorf("defaults: %+v", bc)
	}
	_, err = LoadConfig(map[string]string{"HERMES_BRIDGE_OUTPUT_MAX_BYTES": "lots", "HERMES_BRIDGE_DLQ_MAX_AGE": "a week"})
	for _, want := range []string{
		"HERMES_BRIDGE_OUTPUT_MAX_BYTES=lots: must be a size such as 512MiB, 10GB or 1073741824 (bytes), or unlimited",
		"HERMES_BRIDGE_DLQ_MAX_AGE=a week: must be a duration",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	cfg, _ = LoadConfig(map[string]string{"HERMES_BRIDGE_DLQ_MAX_AGE": "-1h"})
	if err := cfg.ValidateRun(nil); err == nil || !strings.Contains(err.Error(), "HERMES_BRIDGE_DLQ_MAX_AGE=-1h") {
		t.Errorf("negative DLQ age: %v", err)
	}
}
