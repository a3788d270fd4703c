package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
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

// TestOpsDefaultAddressTaken: a bridge that finds the default operations address taken
// (another bridge on this machine) runs without the listener, and says so on the
// terminal, naming the dashboard it goes without and the variable to set.
func TestOpsDefaultAddressTaken(t *testing.T) {
	ln, err := net.Listen("tcp", DefaultHTTPAddr)
	if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen on %s: %v", DefaultHTTPAddr, err)
	}
	if ln != nil {
		defer ln.Close()
	} // else another process holds it: taken all the same
	var running atomic.Pointer[bridge.Bridge]
	var stderr bytes.Buffer
	ops, err := startOps(DefaultHTTPAddr, opshttp.NewRegistry(), &running, ui.New(), zerolog.Nop(), &stderr)
	if ops != nil || err != nil {
		t.Fatalf("startOps on a taken default address: %v, %v; want neither a listener nor an error", ops, err)
	}
	for _, want := range []string{"NO operations HTTP listener", DefaultHTTPAddr + " is in use", "without the dashboard", "HERMES_BRIDGE_HTTP_ADDR=127.0.0.1:9465", "allowed_origins"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}
