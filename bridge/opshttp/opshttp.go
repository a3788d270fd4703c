// Package opshttp serves the operations endpoints of a hermes-bridge process:
// /metrics (Prometheus text exposition of one registry), /healthz (the process is
// alive), /readyz (the bridge can take actions), and at / a page linking them.
package opshttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyTimeout bounds one readiness check.
const readyTimeout = 2 * time.Second

// NewRegistry returns a private registry holding the Go runtime and process collectors,
// for the bridge's own metrics (bridge.Config.Metrics) to be added to.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// index is the page at /: what the listener serves.
const index = `<!doctype html>
<meta charset="utf-8">
<title>hermes-bridge operations</title>
<h1>hermes-bridge operations</h1>
<ul>
<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="/healthz">/healthz</a>: the process is alive</li>
<li><a href="/readyz">/readyz</a>: the bridge can take actions</li>
</ul>
<p>The dashboard, when served, is at <a href="/ui/">/ui/</a> (HERMES_BRIDGE_UI).</p>
`

// Handler serves /metrics from g, /healthz (always 200 "ok") and /readyz: 200 "ready"
// when ready returns nil, 503 with the reason otherwise; / is a page linking them.
// Other paths are 404.
func Handler(g prometheus.Gatherer, ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'")
		fmt.Fprint(w, index)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// Server is a running operations listener.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	err  error // of Serve, set before done is closed
}

// Listen binds addr and serves h on it in a goroutine that Shutdown stops.
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, done: make(chan struct{}), srv: &http.Server{Handler: h,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 60 * time.Second}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

// Addr is the address the server listens on (the port chosen for ":0").
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting connections, waits for the requests being served until ctx
// is done, then closes the rest; it returns once the serving goroutine has ended, with
// the error Serve failed with, if any, or ctx's.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	if s.err != nil {
		return s.err
	}
	return err
}
