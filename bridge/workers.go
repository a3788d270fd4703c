package bridge

import (
	"sync"
	"sync/atomic"
)

// workerPool runs the dispatcher's deliveries on reused goroutines. A goroutine that
// finishes a delivery waits for the next one instead of exiting, so the handler runs
// on a stack that has already grown to its depth: a fresh goroutine per delivery
// starts small and is copied two or three times on every action (about 6 µs per
// action in scenario 1's profiles, with the garbage of the old stacks).
//
// It bounds nothing itself: the dispatcher's semaphore bounds the deliveries that
// hold a worker slot, and a job that yields its slot (a duplicate waiting for its
// original) keeps its goroutine, so the pool grows to the peak of running plus
// waiting jobs. After a burst at most maxIdle goroutines stay to wait; the others
// exit. stop ends the waiting ones; wg counts every goroutine of the pool.
type workerPool struct {
	work    chan func() // unbuffered: a send succeeds only when a goroutine waits
	quit    chan struct{}
	idle    atomic.Int64 // goroutines waiting on work, or about to
	maxIdle int64
	wg      *sync.WaitGroup
}

func newWorkerPool(maxIdle int, wg *sync.WaitGroup) *workerPool {
	return &workerPool{work: make(chan func()), quit: make(chan struct{}), maxIdle: int64(max(maxIdle, 1)), wg: wg}
}

// do runs f on a waiting goroutine, or on a new one when none waits. It never blocks.
// It must not be called after stop.
func (p *workerPool) do(f func()) {
	select {
	case p.work <- f:
	default:
		p.wg.Add(1)
		go p.loop(f)
	}
}

func (p *workerPool) loop(f func()) {
	defer p.wg.Done()
	for {
		f()
		f = nil // nothing of a finished delivery stays reachable while waiting
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		select {
		case f = <-p.work:
			p.idle.Add(-1)
		case <-p.quit:
			p.idle.Add(-1)
			return
		}
	}
}

// stop makes the waiting goroutines exit, and each busy one once its delivery ends.
func (p *workerPool) stop() { close(p.quit) }
