package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// The fake Hermes runs in this process (the same hermestest server cmd/fake-hermes
// serves) so that every call can be attributed: a middleware records, per request, the
// route, the Idempotency-Key header, the action id named in the prompt, when it started
// and ended, and which bridge process sent it (resolved from the connection's source
// port through /proc). It is never a fault target.

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

type connKey struct{}

// startFake serves the fake on a loopback port behind the recording middleware.
func (w *world) startFake() error {
	agent := func(_ context.Context, turn hermestest.Turn) hermestest.Reply {
		return hermestest.Reply{Text: "chaos reply: " + turn.UserText + " and a few more words to stream",
			Deltas: w.opt.deltas, DeltaDelay: 40 * time.Millisecond, Delay: 60 * time.Millisecond}
	}
	w.fake = hermestest.NewUnstartedServer(hermestest.WithAgent(agent), hermestest.WithMaxConcurrentRuns(0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	w.fakeURL = "http://" + ln.Addr().String()
	next := w.fake.Handler()
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		c := &hermesCall{route: r.URL.Path, key: r.Header.Get("Idempotency-Key"), start: time.Now(), instance: "?"}
		if s, ok := r.Context().Value(connKey{}).(string); ok {
			c.instance = s
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
	w.httpSrv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, w.peerInstance(c))
		},
	}
	w.httpDone = make(chan struct{})
	go func() {
		defer close(w.httpDone)
		_ = w.httpSrv.Serve(ln)
	}()
	return nil
}

func (w *world) stopFake() {
	if w.httpSrv == nil {
		return
	}
	w.fake.Close() // releases stalled streams and agent goroutines first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.httpSrv.Shutdown(ctx)
	<-w.httpDone
}

// peerInstance names the bridge process holding the other end of c: the socket whose
// local address is c's remote address (/proc/net/tcp) is owned by one of the live
// bridge processes (/proc/<pid>/fd).
func (w *world) peerInstance(c net.Conn) string {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return "?"
	}
	la, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return "?"
	}
	inode := socketInode(ra, la)
	if inode == "" {
		return "?"
	}
	want := "socket:[" + inode + "]"
	for pid, name := range w.inst.livePIDs() {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && l == want {
				return name
			}
		}
	}
	return "?"
}

// socketInode returns the inode of the open IPv4 TCP socket from local to remote (""
// if none; sockets in TIME_WAIT, which have inode 0, are skipped).
func socketInode(local, remote *net.TCPAddr) string {
	hex := func(a *net.TCPAddr) string {
		ip := a.IP.To4()
		if ip == nil {
			return ""
		}
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], a.Port)
	}
	l, r := hex(local), hex(remote)
	if l == "" || r == "" {
		return ""
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 9 && fs[1] == l && fs[2] == r && fs[9] != "0" {
			if _, err := strconv.Atoi(fs[9]); err == nil {
				return fs[9]
			}
		}
	}
	return ""
}
