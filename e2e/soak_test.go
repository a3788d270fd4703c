//go:build soak

package e2e_test

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSoak is `make soak` (not part of `make test`): the load scenario of
// TestLoadThreeReplicas for a configurable duration and rate, killing and restarting a
// replica at a fixed interval, with a status line every 10 s and a summary at the end.
// Any violated invariant fails the test (and make exits non-zero).
//
//	SOAK_DURATION    how long to publish (default 2m)
//	SOAK_RATE        actions per second (default 200)
//	SOAK_REPLICAS    bridge processes sharing the consumer (default 3)
//	SOAK_KILL_EVERY  SIGKILL and restart one replica this often; 0 never (default 30s)
func TestSoak(t *testing.T) {
	spec := loadSpec{
		Name:       "soak",
		Tag:        "sk",
		Duration:   soakDuration(t, "SOAK_DURATION", 2*time.Minute),
		Rate:       soakFloat(t, "SOAK_RATE", 200),
		Publishers: 16,
		Replicas:   int(soakFloat(t, "SOAK_REPLICAS", 3)),
		Workers:    16,
		Deltas:     8,
		Delay:      10 * time.Millisecond,
		KillEvery:  soakDuration(t, "SOAK_KILL_EVERY", 30*time.Second),
		Status:     10 * time.Second,
		Settle:     5 * time.Minute,
	}
	if spec.Duration <= 0 || spec.Rate <= 0 || spec.Replicas < 1 {
		t.Fatalf("SOAK_DURATION and SOAK_RATE must be positive and SOAK_REPLICAS at least 1")
	}
	if spec.KillEvery > 0 && spec.Replicas < 2 {
		t.Logf("one replica: every kill stops all processing until it restarts")
	}
	t.Logf("soak: %s at %.0f actions/s, %d replicas, a replica killed every %s", spec.Duration, spec.Rate, spec.Replicas, spec.KillEvery)
	runLoad(t, spec)
}

func soakDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	if v == "0" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: not a duration (for example 90s, 5m, 1h)", name, v)
	}
	return d
}

func soakFloat(t *testing.T, name string, def float64) float64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%q: not a number", name, v)
	}
	return f
}
