package bridge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// heartbeats keeps long jobs alive: every job that has run for a Heartbeat gets an
// InProgress (so JetStream does not redeliver its message) and a renewal of its claim
// (kvstore.Claim.Renew moves the record's revision, so no other replica takes it over,
// and rewrites its key record, so that it does not expire), and again every Heartbeat
// after that. One ticker
// serves every job: most actions end well within a Heartbeat and cost nothing here
// beyond two map operations.
type heartbeats struct {
	every time.Duration

	mu   sync.Mutex
	jobs map[*job]*beat
	wg   sync.WaitGroup // beats in progress
}

// beat is the schedule of one job.
type beat struct {
	next    time.Time
	running bool // a beat is in progress; the next one waits for it
}

func newHeartbeats(every time.Duration) *heartbeats {
	return &heartbeats{every: every, jobs: map[*job]*beat{}}
}

// add schedules j's first beat a Heartbeat from now. The returned function removes j;
// a beat already in progress may still finish after it returns (renew and InProgress
// are harmless once the job has settled or acknowledged).
func (h *heartbeats) add(j *job) (remove func()) {
	h.mu.Lock()
	h.jobs[j] = &beat{next: time.Now().Add(h.every)}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.jobs, j)
		h.mu.Unlock()
	}
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
			h.tick(ctx, now)
		}
	}
}

func (h *heartbeats) tick(ctx context.Context, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for j, bt := range h.jobs {
		if bt.running || now.Before(bt.next) {
			continue
		}
		bt.running = true
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			if j.msg != nil {
				_ = j.msg.InProgress()
			}
			j.renew(ctx)
			h.mu.Lock()
			bt.running, bt.next = false, time.Now().Add(h.every)
			h.mu.Unlock()
		}()
	}
}

// renew renews the job's claim (see heartbeats). A claim that was taken over, or that
// a cancel request flagged, cancels the job's context with that cause.
func (j *job) renew(ctx context.Context) {
	c := j.claim.Load()
	if c == nil {
		return
	}
	switch err := c.Renew(ctx); {
	case errors.Is(err, kvstore.ErrCancelRequested):
		if j.cancel != nil {
			j.cancel(errCancelRequested)
		}
	case errors.Is(err, kvstore.ErrLostClaim):
		if j.cancel != nil {
			j.cancel(errLostClaim)
		}
	}
}
