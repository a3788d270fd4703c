package bridge

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// noErr fails the test at once on an error.
func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitGroup waits for wg, for at most 5 s.
func waitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestWorkerPoolReusesGoroutines: deliveries that follow each other run on the same
// goroutine, so the pool does not start one per delivery.
func TestWorkerPoolReusesGoroutines(t *testing.T) {
	var wg sync.WaitGroup
	p := newWorkerPool(4, &wg)
	var started atomic.Int64
	before := runtime.NumGoroutine()
	for range 1000 {
		done := make(chan struct{})
		p.do(func() { started.Add(1); close(done) })
		<-done
		// the goroutine is back to waiting before the next do, or do starts another
		waitFor(t, 5*time.Second, "the worker to wait again", func() bool { return p.idle.Load() >= 1 })
	}
	if got := started.Load(); got != 1000 {
		t.Fatalf("%d of 1000 functions ran", got)
	}
	if n := runtime.NumGoroutine() - before; n > 2 {
		t.Errorf("%d goroutines more after 1000 sequential deliveries, want at most 1 (plus noise)", n)
	}
	p.stop()
	wg.Wait()
}

// TestWorkerPoolBoundsIdle: after a burst of concurrent deliveries, at most maxIdle
// goroutines stay; stop ends them and wg sees every goroutine end.
func TestWorkerPoolBoundsIdle(t *testing.T) {
	var wg sync.WaitGroup
	const maxIdle, burst = 3, 50
	p := newWorkerPool(maxIdle, &wg)
	release := make(chan struct{})
	var running, ran atomic.Int64
	for range burst {
		p.do(func() { running.Add(1); <-release; ran.Add(1) })
	}
	waitFor(t, 5*time.Second, "the burst to run at once", func() bool { return running.Load() == burst })
	close(release)
	waitFor(t, 5*time.Second, "the burst to end", func() bool { return ran.Load() == burst })
	waitFor(t, 5*time.Second, "the surplus goroutines to exit", func() bool { return p.idle.Load() == maxIdle })
	// The idle ones take new work: no goroutine is started while one waits.
	done := make(chan struct{})
	p.do(func() { close(done) })
	<-done
	p.stop()
	waitGroup(t, &wg, "stop to end the pool's goroutines")
	if n := p.idle.Load(); n != 0 {
		t.Errorf("idle count %d after stop, want 0", n)
	}
}

// TestWorkerPoolStopLetsBusyFinish: a delivery running at stop finishes, then its
// goroutine exits.
func TestWorkerPoolStopLetsBusyFinish(t *testing.T) {
	var wg sync.WaitGroup
	p := newWorkerPool(2, &wg)
	release, finished := make(chan struct{}), make(chan struct{})
	p.do(func() { <-release; close(finished) })
	p.stop()
	close(release)
	<-finished
	waitGroup(t, &wg, "the busy goroutine to exit after its delivery")
}
