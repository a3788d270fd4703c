package hermestest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

type result struct {
	status int
	header http.Header
	body   string
	err    error
}

func (r result) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %q", err, r.body)
	}
	return m
}

// errCode returns error.code of an error envelope.
func (r result) errCode(t *testing.T) any {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	return e["code"]
}

func do(t *testing.T, srv *hermestest.Server, method, path, body string, hdr ...string) result {
	t.Helper()
	return doCtx(t, context.Background(), srv, method, path, body, hdr...)
}

func doCtx(t *testing.T, ctx context.Context, srv *hermestest.Server, method, path, body string, hdr ...string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.APIKey())
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

func must(t *testing.T, r result, status int) result {
	t.Helper()
	if r.err != nil {
		t.Fatalf("request failed: %v", r.err)
	}
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	return r
}

// noErr fails the test at once on an error.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newServer(t *testing.T, opts ...hermestest.Option) *hermestest.Server {
	srv := hermestest.NewServer(opts...)
	t.Cleanup(srv.Close)
	return srv
}

func agentReply(r hermestest.Reply) hermestest.Option {
	return hermestest.WithAgent(func(context.Context, hermestest.Turn) hermestest.Reply { return r })
}

// blockingAgent blocks until release is closed or ctx is done.
func blockingAgent(release <-chan struct{}) hermestest.Option {
	return hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return hermestest.StubAgent(ctx, tu)
	})
}

// turnLog records the turns the stub agent saw.
type turnLog struct {
	mu    sync.Mutex
	turns []hermestest.Turn
}

func (l *turnLog) agent() hermestest.Option {
	return hermestest.WithAgent(func(ctx context.Context, tu hermestest.Turn) hermestest.Reply {
		l.mu.Lock()
		l.turns = append(l.turns, tu)
		l.mu.Unlock()
		return hermestest.StubAgent(ctx, tu)
	})
}

func (l *turnLog) get() []hermestest.Turn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]hermestest.Turn(nil), l.turns...)
}

// waitGoroutines polls until no more than base goroutines run, or fails with their stacks
// when ctx ends.
func waitGoroutines(t *testing.T, ctx context.Context, base int) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for runtime.NumGoroutine() > base {
		select {
		case <-tick.C:
		case <-ctx.Done():
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines %d > %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
	}
}
