package opshttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The three paths answer as documented, / links them, other paths are 404, and Shutdown stops the
// listener and its goroutine.
func TestHandler(t *testing.T) {
	var notReady atomic.Pointer[error]
	e := errors.New("starting")
	notReady.Store(&e)
	ready := func(context.Context) error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}
	srv, err := opshttp.Listen("127.0.0.1:0", opshttp.Handler(opshttp.NewRegistry(), ready))
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr()
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || body != "not ready: starting\n" {
		t.Errorf("/readyz %d %q", code, body)
	}
	notReady.Store(nil)
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz %d %q", code, body)
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_") {
		t.Errorf("/metrics %d without the Go and process collectors:\n%.300s", code, body)
	}
	if code, body := get(t, base+"/"); code != 200 || !strings.Contains(body, `href="/metrics"`) || !strings.Contains(body, `href="/ui/"`) {
		t.Errorf("/ %d, want a page linking the endpoints and the dashboard:\n%s", code, body)
	}
	if code, _ := get(t, base+"/other"); code != 404 {
		t.Errorf("/other %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the listener still answers after Shutdown")
	}
}
