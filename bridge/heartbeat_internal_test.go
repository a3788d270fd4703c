package bridge

import (
	"context"
	"sync"
	"testing"
	"time"
)

// progressMsg counts beats.
type progressMsg struct {
	mu    sync.Mutex
	times []time.Time
}

func (m *progressMsg) beat() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.times = append(m.times, time.Now())
}

func (m *progressMsg) beats() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Time(nil), m.times...)
}

// TestHeartbeats: a job gets its first InProgress after one Heartbeat and then one every
// one to one and a quarter Heartbeats; a removed job gets none; run returns when its
// context ends.
func TestHeartbeats(t *testing.T) {
	const every = 40 * time.Millisecond
	h := newHeartbeats(every)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.run(ctx) }()

	long, short := &progressMsg{}, &progressMsg{}
	start := time.Now()
	h.add(long)
	h.add(short)
	h.remove(short) // removed at once: never beaten

	waitFor(t, 10*time.Second, "4 beats", func() bool { return len(long.beats()) >= 4 })
	h.remove(long)
	got := long.beats()
	if first := got[0].Sub(start); first < every {
		t.Errorf("first beat after %s, want at least %s", first, every)
	}
	for i := 1; i < len(got); i++ {
		if gap := got[i].Sub(got[i-1]); gap < every {
			t.Errorf("beat %d came %s after the previous one, want at least %s", i, gap, every)
		}
	}
	n := len(long.beats())
	time.Sleep(3 * every)
	if m := len(long.beats()); m > n+1 { // one beat may have been in progress at removal
		t.Errorf("%d beats after removal", m-n)
	}
	if len(short.beats()) != 0 {
		t.Errorf("a removed job was beaten %d times", len(short.beats()))
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}
