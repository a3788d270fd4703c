// Package ui serves the dashboard page of a hermes-bridge process at /ui on the
// operations listener: static files embedded in the binary (assets/), the page's
// connection settings (/ui/config.json), and /ui/check, which tells a page that cannot
// connect why (its origin refused by the NATS WebSocket listener, the listener
// unreachable: a browser does not say).
//
// The page reads only through NATS, over WebSocket, with the official NATS JavaScript
// client (assets/nats.js, vendored: see README.md in this directory). It subscribes to
// <prefix>.events.> and <prefix>.results.> and replays from the output stream with
// ordered consumers, and reads the dead letters' headers from the DLQ stream: what the
// deploy/ dashboard role may do. It publishes nothing.
//
// config.json carries the WebSocket URL(s), the inbox prefix, the subject prefix, the
// output and DLQ stream names, and a user and password only when the operator configured a
// dashboard credential for the page (Config.User): that credential is handed to every
// browser that can reach /ui. The bridge's own NATS credentials and the Hermes keys are
// never part of it.
package ui

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"time"
)

//go:embed assets
var assets embed.FS

// Config is what the page is told at /ui/config.json.
type Config struct {
	// Servers are the NATS WebSocket URLs the browser connects to (ws:// or wss://).
	Servers []string `json:"servers"`
	// InboxPrefix is the page's inbox prefix (the dashboard role allows _INBOX_dashboard.>).
	InboxPrefix string `json:"inboxPrefix"`
	// Prefix is the first subject token (hermes).
	Prefix string `json:"prefix"`
	// OutputStream is the stream capturing events and results (HERMES_OUTPUT).
	OutputStream string `json:"outputStream"`
	// DLQStream is the stream capturing <prefix>.dlq (HERMES_DLQ): the page shows the
	// dead letters of its history window, headers only.
	DLQStream string `json:"dlqStream"`
	// MaxActions bounds the actions the page keeps (the oldest are evicted).
	MaxActions int `json:"maxActions"`
	// HistoryMinutes is how far back the page replays results when it opens.
	HistoryMinutes int `json:"historyMinutes"`
	// User and Password are the dashboard credential handed to the browser; empty
	// unless the operator configured one for the page.
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
}

// Defaults of Config's limits.
const (
	DefaultMaxActions     = 2000
	DefaultHistoryMinutes = 60
	DefaultInboxPrefix    = "_INBOX_dashboard"
	DefaultDLQStream      = "HERMES_DLQ"
)

// Handler serves the page under /ui/. Its configuration is set with Set once it is
// known (the embedded server's WebSocket port is chosen after the operations listener
// starts); until then config.json answers 503.
type Handler struct {
	cfg   atomic.Pointer[Config]
	files map[string]file
}

type file struct {
	body  []byte
	ctype string
	etag  string
}

// New returns a Handler serving the embedded assets.
func New() *Handler {
	h := &Handler{files: map[string]file{}}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		h.files[p] = file{body: b, ctype: contentType(p), etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return h
}

func contentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".png":
		return "image/png"
	case ".svg":
		return "image/svg+xml"
	}
	return "application/octet-stream"
}

// Set publishes the page's configuration (defaults filled in for zero limits).
func (h *Handler) Set(c Config) {
	if c.MaxActions <= 0 {
		c.MaxActions = DefaultMaxActions
	}
	if c.HistoryMinutes <= 0 {
		c.HistoryMinutes = DefaultHistoryMinutes
	}
	c.InboxPrefix = cmp.Or(c.InboxPrefix, DefaultInboxPrefix)
	c.DLQStream = cmp.Or(c.DLQStream, DefaultDLQStream)
	c.Servers = append([]string(nil), c.Servers...)
	h.cfg.Store(&c)
}

// CSP is the Content-Security-Policy of every /ui response for the configured servers:
// everything from this origin only, and WebSocket connections to those servers.
func CSP(servers []string) string {
	connect := []string{"'self'"}
	for _, s := range servers {
		if u, err := url.Parse(s); err == nil && (u.Scheme == "ws" || u.Scheme == "wss") && u.Host != "" {
			connect = append(connect, u.Scheme+"://"+u.Host)
		}
	}
	return "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " +
		strings.Join(connect, " ") + "; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"
}

// ServeHTTP serves /ui (a redirect to /ui/), /ui/ (the page), /ui/config.json,
// /ui/check (why the page cannot connect: see CheckOrigin) and the assets. Every
// response carries a strict CSP, nosniff, no referrer and no framing.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := h.cfg.Load()
	var servers []string
	if cfg != nil {
		servers = cfg.Servers
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP(servers))
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/ui/")
	if !ok {
		if r.URL.Path == "/ui" {
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
			return
		}
		http.NotFound(w, r)
		return
	}
	if name == "" {
		name = "index.html"
	}
	if name == "check" {
		h.serveCheck(w, r, cfg)
		return
	}
	if name == "config.json" {
		hd.Set("Cache-Control", "no-store")
		if cfg == nil {
			http.Error(w, "starting: the NATS WebSocket URL is not known yet", http.StatusServiceUnavailable)
			return
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		hd.Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return
	}
	f, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	// The assets change with the binary only: revalidated on every load (cheap, by
	// ETag), so an upgraded bridge never serves a page mixed with stale scripts.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Type", f.ctype)
	hd.Set("ETag", f.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}
