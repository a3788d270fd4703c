package bridge

import (
	"context"
	"sync"
	"time"
)

// heartbeats keeps long jobs alive: every job that has run for a Heartbeat is stepped
// with EvBeat, and again every Heartbeat after that; its job then sends InProgress to
// JetStream (so that its message is not redelivered) and renews its claim and key
// (so that no other replica takes it over and neither record expires). One ticker
// serves every job: most actions end well within a Heartbeat and cost nothing here
// beyond two map operations.
type heartbeats struct {
	every time.Duration

	mu   sync.Mutex
	jobs map[beater]*beat
	wg   sync.WaitGroup // beats in progress
}

// beat is the schedule of one job.
type beat struct {
	next    time.Time
	running bool // a beat is in progress; the next one waits for it
}

// beater is what heartbeats beat: a job's driver.
type beater interface{ beat() }

func newHeartbeats(every time.Duration) *heartbeats {
	return &heartbeats{every: every, jobs: map[beater]*beat{}}
}

// add schedules d's first beat a Heartbeat from now.
func (h *heartbeats) add(d beater) {
	h.mu.Lock()
	h.jobs[d] = &beat{next: time.Now().Add(h.every)}
	h.mu.Unlock()
}

// remove unschedules d; a beat already in progress may still finish after it returns
// (a finished job ignores it).
func (h *heartbeats) remove(d beater) {
	h.mu.Lock()
	delete(h.jobs, d)
	h.mu.Unlock()
}

// run beats the due jobs every quarter Heartbeat (so a job's beats are between one and
// one and a quarter Heartbeats apart) until ctx is done, then waits for the beats in
// progress.
func (h *heartbeats) run(ctx context.Context) {
	defer h.wg.Wait()
	t := time.NewTicker(max(h.every/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.tick(now)
		}
	}
}

func (h *heartbeats) tick(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for d, bt := range h.jobs {
		if bt.running || now.Before(bt.next) {
			continue
		}
		bt.running = true
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			d.beat()
			h.mu.Lock()
			bt.running, bt.next = false, time.Now().Add(h.every)
			h.mu.Unlock()
		}()
	}
}
