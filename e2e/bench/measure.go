package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/e2e/owned"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// outcome is one terminal result as the bench's subscriber saw it.
type outcome struct {
	at     time.Time // when the subscriber received it
	status string
	replay bool
	err    error
}

// failure says why the action did not complete; nil when it did.
func (o outcome) failure() error {
	if o.err == nil && o.status == events.StatusCompleted {
		return nil
	}
	return fmt.Errorf("result %s: %v", o.status, o.err)
}

// pipeline is one path an action can take: the client that publishes it and the hub
// that receives its result.
type pipeline struct {
	client *client.Client
	hub    *hub
}

// roundTrip publishes action id through p and waits up to resultTimeout for its terminal
// result; t0 is taken just before the publish.
func (p pipeline) roundTrip(ctx context.Context, id, op string, in json.RawMessage, key string) (outcome, time.Time, error) {
	ch := make(chan outcome, 1)
	p.hub.expectFunc(id, func(o outcome) { ch <- o })
	t0 := time.Now()
	if _, err := p.client.Publish(ctx, endpointID, op, events.Action{Input: in, IdempotencyKey: key}, client.WithActionID(id)); err != nil {
		p.hub.forget(id)
		return outcome{}, t0, err
	}
	t := time.NewTimer(resultTimeout)
	defer t.Stop()
	select {
	case o := <-ch:
		return o, t0, nil
	case <-t.C:
		p.hub.forget(id)
		return outcome{}, t0, fmt.Errorf("no result for %s within %s", id, resultTimeout)
	case <-ctx.Done():
		p.hub.forget(id)
		return outcome{}, t0, ctx.Err()
	}
}

// hub is one core NATS subscription on <prefix>> that hands each terminal result to the
// waiter registered for its action id.
type hub struct {
	prefix string
	decode func(*nats.Msg) (outcome, bool)
	sub    *nats.Subscription

	mu      sync.Mutex
	waiters map[string]func(outcome)
	stray   atomic.Int64 // results nobody waited for
}

func newHub(nc *nats.Conn, prefix string, decode func(*nats.Msg) (outcome, bool)) (*hub, error) {
	h := &hub{prefix: prefix, decode: decode, waiters: map[string]func(outcome){}}
	sub, err := nc.Subscribe(prefix+">", h.deliver)
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	h.sub = sub
	return h, nc.Flush()
}

func (h *hub) deliver(m *nats.Msg) {
	at := time.Now()
	o, terminal := h.decode(m)
	if !terminal {
		return
	}
	o.at = at
	id := strings.TrimPrefix(m.Subject, h.prefix)
	h.mu.Lock()
	f := h.waiters[id]
	delete(h.waiters, id)
	h.mu.Unlock()
	if f == nil {
		h.stray.Add(1)
		return
	}
	f(o)
}

// expectFunc registers f for the result of id; it runs on the subscription's goroutine.
func (h *hub) expectFunc(id string, f func(outcome)) {
	h.mu.Lock()
	h.waiters[id] = f
	h.mu.Unlock()
}

func (h *hub) forget(id string) {
	h.mu.Lock()
	delete(h.waiters, id)
	h.mu.Unlock()
}

func decodeBridgeResult(m *nats.Msg) (outcome, bool) {
	r, err := events.DecodeResult(m.Header, m.Data)
	if err != nil {
		return outcome{err: err}, true
	}
	if !events.Terminal(r.Status) {
		return outcome{}, false
	}
	o := outcome{status: r.Status, replay: r.ReplayOf != nil}
	if r.Error != nil {
		o.err = fmt.Errorf("%s: %s", r.Error.Code, r.Error.Message)
	}
	return o, true
}

// decodeFloorResult checks the minimal loop's result: the fake's chat completion body.
func decodeFloorResult(m *nats.Msg) (outcome, bool) {
	var r struct {
		Object string `json:"object"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Object != "chat.completion" {
		return outcome{err: errors.New("floor result is not a chat completion")}, true
	}
	return outcome{status: events.StatusCompleted}, true
}

// countSSE counts the SSE events (data: lines) of a stream with a line reader.
func countSSE(r io.Reader) (int, error) { return forSSE(r, nil) }

// forSSE is countSSE that also hands each data line's payload to f (when f is not nil;
// the slice is valid during the call only).
func forSSE(r io.Reader, f func(data []byte)) (int, error) {
	br := bufio.NewReader(r)
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			n++
			if f != nil {
				f(bytes.TrimSpace(d))
			}
		}
		if err == bufio.ErrBufferFull {
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// loopStats are the figures of one closed-loop run.
type loopStats struct {
	window time.Duration   // measured window
	cpu    time.Duration   // process CPU time spent inside the window
	alloc  uint64          // bytes the process allocated on the heap inside the window
	allocs uint64          // heap objects the process allocated inside the window
	lat    []time.Duration // latencies of the operations that completed inside the window
	errs   int             // operations that failed inside the window
	errMsg string          // the first failure
}

func (s *loopStats) add(o loopStats) {
	s.window += o.window
	s.cpu += o.cpu
	s.alloc += o.alloc
	s.allocs += o.allocs
	s.lat = append(s.lat, o.lat...)
	s.errs += o.errs
	if s.errMsg == "" {
		s.errMsg = o.errMsg
	}
}

// per is a / b, or 0 when b is not positive (nothing was measured).
func per(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func (s loopStats) rate() float64 { return per(float64(len(s.lat)), s.window.Seconds()) }

// cpuPerOp is the process CPU time per completed operation, in microseconds.
func (s loopStats) cpuPerOp() float64 {
	return per(float64(s.cpu)/float64(time.Microsecond), float64(len(s.lat)))
}

// allocPerOp is the heap the whole process allocated per completed operation, in KiB.
func (s loopStats) allocPerOp() float64 { return per(float64(s.alloc)/1024, float64(len(s.lat))) }

// allocsPerOp is the number of heap objects the whole process allocated per completed operation.
func (s loopStats) allocsPerOp() float64 { return per(float64(s.allocs), float64(len(s.lat))) }

func (s loopStats) pct(p float64) time.Duration { return percentile(s.lat, p) }

// closedLoop runs c workers, each repeating op back to back, for warm+window. Operations
// that complete inside the window count; onStart and onEnd (may be nil) mark the window.
func closedLoop(ctx context.Context, c int, warm, window time.Duration, onStart, onEnd func(),
	op func(ctx context.Context, worker int) (time.Duration, error)) loopStats {
	w0 := time.Now().Add(warm)
	w1 := w0.Add(window)
	// onStart runs at w0 and onEnd at w1 (only if onStart ran); mu orders them.
	var mu sync.Mutex
	started := false
	var cpu0, cpu1 time.Duration
	var alloc0, alloc1, objs0, objs1 uint64
	startTimer := time.AfterFunc(warm, func() {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() == nil {
			if onStart != nil {
				onStart()
			}
			started = true
			cpu0 = cpuTime()
			alloc0, objs0 = heapAllocated()
		}
	})
	per := make([]loopStats, c)
	var wg sync.WaitGroup
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &per[w]
			for ctx.Err() == nil && time.Now().Before(w1) {
				lat, err := op(ctx, w)
				done := time.Now()
				if done.Before(w0) || !done.Before(w1) {
					continue
				}
				if err != nil {
					st.errs++
					if st.errMsg == "" {
						st.errMsg = err.Error()
					}
					continue
				}
				st.lat = append(st.lat, lat)
			}
		}()
	}
	// The window closes at w1 whatever the workers do; onEnd runs then.
	select {
	case <-time.After(time.Until(w1)):
	case <-ctx.Done():
	}
	startTimer.Stop()
	mu.Lock()
	if started {
		cpu1 = cpuTime()
		alloc1, objs1 = heapAllocated()
		if onEnd != nil {
			onEnd()
		}
	}
	mu.Unlock()
	wg.Wait()
	out := loopStats{window: window, cpu: max(cpu1-cpu0, 0)}
	if alloc1 > alloc0 {
		out.alloc, out.allocs = alloc1-alloc0, objs1-objs0
	}
	for _, s := range per {
		out.lat = append(out.lat, s.lat...)
		out.errs += s.errs
		if out.errMsg == "" {
			out.errMsg = s.errMsg
		}
	}
	return out
}

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(p/100*float64(len(s)) + 0.5)
	i = min(max(i-1, 0), len(s)-1)
	return s[i]
}

// memSample is one reading of the process' memory.
type memSample struct {
	heapInuse, heapAlloc uint64 // bytes
	rss                  uint64 // bytes (VmRSS)
	goroutines           int
}

// ownerLabel is the pprof label of the goroutines the bench starts for a path of
// scenario 3: the bridge runs under ownerBridge, the floor's callers under ownerClient.
// Goroutines inherit their creator's labels, so the workers the bridge starts and the
// HTTP transports' connection goroutines carry the label of whoever made them.
const (
	ownerLabel  = "bench.owner"
	ownerBridge = "bridge"
	ownerClient = "http-client"
)

// ownedGoroutines counts the goroutines alive now that carry the owner label owner.
func ownedGoroutines(owner string) int {
	n, _ := owned.Goroutines(ownerLabel, owner)
	return n
}

func readMem() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heapInuse: ms.HeapInuse, heapAlloc: ms.HeapAlloc, rss: vmRSS(), goroutines: runtime.NumGoroutine()}
}

// baselineMem collects garbage, returns freed memory to the OS, lets things settle and reads
// the process' memory: the idle baseline (NATS server, fake, bridge, client all idle).
func baselineMem() memSample {
	runtime.GC()
	debug.FreeOSMemory()
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	return readMem()
}

// countGoroutines reads the goroutines again: the bench's own for a pass (its sampler,
// subscription) are then part of the baseline.
func (m *memSample) countGoroutines() { m.goroutines = runtime.NumGoroutine() }

func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	v, _ := statusField(string(b), "VmRSS")
	return v
}

// sampler reads memory and the in-flight count every interval and keeps the peaks.
type sampler struct {
	stop     chan struct{}
	done     chan struct{}
	peak     memSample
	peakFly  int64
	onSample func(inflight int64)
}

func startSampler(interval time.Duration, inflight func() int64, onSample func(int64)) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), onSample: onSample}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.take(inflight())
			select {
			case <-s.stop:
				s.take(inflight())
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) take(fly int64) {
	m := readMem()
	s.peak.heapInuse = max(s.peak.heapInuse, m.heapInuse)
	s.peak.heapAlloc = max(s.peak.heapAlloc, m.heapAlloc)
	s.peak.rss = max(s.peak.rss, m.rss)
	s.peak.goroutines = max(s.peak.goroutines, m.goroutines)
	s.peakFly = max(s.peakFly, fly)
	if s.onSample != nil {
		s.onSample(fly)
	}
}

func (s *sampler) finish() { close(s.stop); <-s.done }

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// heapAllocated is the cumulative count of bytes and of objects the process has allocated
// on the heap (runtime/metrics /gc/heap/allocs:bytes and :objects; cheap to read, no
// stop-the-world).
func heapAllocated() (bytes, objects uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0, 0
	}
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// cpuTime is the process' user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverTraffic is what the NATS server received and sent: messages and bytes, from its
// varz counters (every client, system and JetStream-internal traffic included).
type serverTraffic struct {
	inMsgs, outMsgs, inBytes, outBytes int64
}

// traffic reads the server's counters now.
func (e *env) traffic() serverTraffic {
	v, err := e.ns.NATS().Varz(nil)
	if err != nil {
		return serverTraffic{}
	}
	return serverTraffic{v.InMsgs, v.OutMsgs, v.InBytes, v.OutBytes}
}

// countTraffic wraps a window's onStart and onEnd (either may be nil) so that the
// server's traffic inside the window is added to sum; v0 holds the start's reading.
func (e *env) countTraffic(onStart, onEnd func(), v0, sum *serverTraffic) (func(), func()) {
	return func() {
			if onStart != nil {
				onStart()
			}
			*v0 = e.traffic()
		}, func() {
			v1 := e.traffic()
			sum.inMsgs += v1.inMsgs - v0.inMsgs
			sum.outMsgs += v1.outMsgs - v0.outMsgs
			sum.inBytes += v1.inBytes - v0.inBytes
			sum.outBytes += v1.outBytes - v0.outBytes
			if onEnd != nil {
				onEnd()
			}
		}
}
