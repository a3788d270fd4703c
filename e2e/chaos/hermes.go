package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// The fake Hermes runs in this process (the same hermestest server cmd/fake-hermes
// serves) so that every call can be attributed: each bridge process is given its own
// loopback port of the fake, and a middleware records, per request, the route, the
// Idempotency-Key header, the action id named in the prompt, when it started and ended,
// and the bridge process the port it arrived on belongs to. It is never a fault target.

// hermesCall is one request the fake received.
type hermesCall struct {
	route      string // chat, chat_stream, models, run (POST /v1/runs), or the path
	key        string // Idempotency-Key
	owner      string // the action id named in the prompt ("" for models)
	instance   string // bridge process (b1#2), "?" when unresolved
	start, end time.Time
}

type callLog struct {
	mu    sync.Mutex
	calls []*hermesCall
}

func (l *callLog) snapshot() []hermesCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]hermesCall, len(l.calls))
	for i, c := range l.calls {
		out[i] = *c
	}
	return out
}

// inFlight counts the calls that have started and not ended, in all and those of one
// bridge process by route.
func (l *callLog) inFlight(instance string) (all int, on map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	on = map[string]int{}
	for _, c := range l.calls {
		if c.end.IsZero() {
			all++
			if c.instance == instance {
				on[c.route]++
			}
		}
	}
	return all, on
}

var ownerRE = regexp.MustCompile(`r[0-9]+-[0-9]{6}`)

// startFake creates the fake and the server that serves it behind the recording
// middleware; fakeURL gives the server a port for each bridge process.
func (w *world) startFake() {
	agent := func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		return hermestest.Reply{Text: "chaos reply: " + turn.UserText + " and a few more words to stream",
			Deltas: w.opt.deltas, DeltaDelay: 40 * time.Millisecond, Delay: 60 * time.Millisecond}
	}
	w.fake = hermestest.NewUnstartedServer(hermestest.WithAgent(agent), hermestest.WithMaxConcurrentRuns(0))
	next := w.fake.Handler()
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		c := &hermesCall{route: r.URL.Path, key: r.Header.Get("Idempotency-Key"), start: time.Now(), instance: "?"}
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
			if name, ok := w.fakePorts.Load(a.Port); ok {
				c.instance = name.(string)
			}
		}
		switch r.URL.Path {
		case "/v1/chat/completions":
			var b struct {
				Stream bool `json:"stream"`
			}
			_ = json.Unmarshal(body, &b)
			c.route = "chat"
			if b.Stream {
				c.route = "chat_stream"
			}
			c.owner = ownerRE.FindString(string(body))
		case "/v1/models":
			c.route = "models"
		case "/v1/runs":
			c.route = "run" // a run's start: the call that may not be repeated
			c.owner = ownerRE.FindString(string(body))
		}
		w.calls.mu.Lock()
		w.calls.calls = append(w.calls.calls, c)
		w.calls.mu.Unlock()
		defer func() {
			w.calls.mu.Lock()
			c.end = time.Now()
			w.calls.mu.Unlock()
		}()
		next.ServeHTTP(rw, r)
	})
	w.httpSrv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
}

// fakeURL serves the fake on a new loopback port that belongs to the bridge process
// name: every call arriving on it is attributed to that process.
func (w *world) fakeURL(name string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	w.fakePorts.Store(ln.Addr().(*net.TCPAddr).Port, name)
	w.fakeServing.Go(func() { _ = w.httpSrv.Serve(ln) })
	return "http://" + ln.Addr().String(), nil
}

func (w *world) stopFake() {
	if w.httpSrv == nil {
		return
	}
	w.fake.Close() // releases stalled streams and agent goroutines first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.httpSrv.Shutdown(ctx)
	w.fakeServing.Wait()
}
