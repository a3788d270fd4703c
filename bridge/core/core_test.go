package core

import (
	"testing"
	"time"
)

func TestBackoffBounds(t *testing.T) {
	base, maxd := 100*time.Millisecond, 2*time.Second
	for attempt := 1; attempt <= 40; attempt++ {
		for i := 0; i < 50; i++ {
			d := Backoff(base, maxd, attempt, 0, float64(i)/50)
			ceil := min(base<<min(attempt-1, 20), maxd)
			if d < ceil/2 || d > ceil {
				t.Fatalf("attempt %d: %s outside [%s, %s]", attempt, d, ceil/2, ceil)
			}
		}
	}
	if d := Backoff(base, maxd, 1, 5*time.Second, 0.9); d != 5*time.Second {
		t.Errorf("Retry-After not honoured: %s", d)
	}
}
