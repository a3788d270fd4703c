package bridge

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendMillis: duration_ms is a JSON number equal to the duration's milliseconds
// to the microsecond.
func TestAppendMillis(t *testing.T) {
	cases := []time.Duration{0, time.Microsecond, 7 * time.Microsecond, 999 * time.Microsecond, time.Millisecond,
		12345 * time.Microsecond, time.Hour, -1500 * time.Microsecond, 1234567 * time.Nanosecond}
	for range 1000 {
		cases = append(cases, time.Duration(rand.Int64N(int64(48*time.Hour)))-time.Hour)
	}
	for _, d := range cases {
		b := appendMillis(nil, d)
		var got float64
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("appendMillis(%s) = %q, not a JSON number: %v", d, b, err)
		}
		if want := float64(d.Microseconds()) / 1000; got != want {
			t.Fatalf("appendMillis(%s) = %q (%v), want %v", d, b, got, want)
		}
	}
}
