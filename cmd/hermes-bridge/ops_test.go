package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
	"github.com/hermes-bridge/hermes-bridge/bridge/ui"
)

// TestOpsRoot: GET / on the operations listener sends a browser to the dashboard when
// it is served, and is otherwise a page linking the endpoints; never a 404.
func TestOpsRoot(t *testing.T) {
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		name     string
		page     *ui.Handler
		code     int
		location string
	}{
		{"with the dashboard", ui.New(), http.StatusFound, "/ui/"},
		{"without", nil, http.StatusOK, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var running atomic.Pointer[bridge.Bridge]
			ops, err := startOps("127.0.0.1:0", opshttp.NewRegistry(), &running, c.page, zerolog.Nop(), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = ops.Shutdown(ctx)
			}()
			resp, err := noRedirect.Get("http://" + ops.Addr() + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code || resp.Header.Get("Location") != c.location {
				t.Fatalf("GET / = %d, Location %q; want %d, %q", resp.StatusCode, resp.Header.Get("Location"), c.code, c.location)
			}
			if c.code == http.StatusOK && !strings.Contains(string(body), `href="/metrics"`) {
				t.Fatalf("GET / without the dashboard does not link the endpoints:\n%s", body)
			}
		})
	}
}
