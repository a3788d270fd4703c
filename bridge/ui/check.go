package ui

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// checkTimeout bounds one probe of a WebSocket server.
const checkTimeout = 5 * time.Second

// Results of a Check.
const (
	// CheckAccepted: the server completed the WebSocket handshake for the origin; a
	// page that still cannot connect fails later (credentials, TLS, the browser).
	CheckAccepted = "accepted"
	// CheckOriginRefused: the server refused the origin (HTTP 403 on the handshake:
	// its allowed_origins, or same_origin, does not admit it).
	CheckOriginRefused = "origin_refused"
	// CheckUnreachable: no connection to the server (not listening, wrong address, a
	// TLS failure).
	CheckUnreachable = "unreachable"
	// CheckFailed: the server answered the handshake with another status.
	CheckFailed = "failed"
)

// Check is what a probe found about one NATS WebSocket server and a page origin.
type Check struct {
	Server string `json:"server"`
	Origin string `json:"origin"`
	// Result is CheckAccepted, CheckOriginRefused, CheckUnreachable or CheckFailed.
	Result string `json:"result"`
	// Status is the HTTP status of the handshake's answer (0: none).
	Status int `json:"http_status,omitempty"`
	// Message says what was found and, when something is wrong, what to change.
	Message string `json:"message"`
}

// probeClient sends the probes: no proxy (the servers are the page's, often on
// loopback), no redirect, no connection kept.
var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, TLSHandshakeTimeout: checkTimeout,
		DialContext: (&net.Dialer{Timeout: checkTimeout}).DialContext},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// CheckOrigin opens a WebSocket handshake with server (a ws:// or wss:// URL) as a
// browser on a page from origin would, and says whether the server admits that origin:
// a browser hides why a handshake failed ("cannot connect"), and the server says it
// only in its own log. The probe runs from the bridge's host, which may reach the
// server differently than the browser does. It returns within checkTimeout, or when
// ctx ends.
func CheckOrigin(ctx context.Context, server, origin string) Check {
	c := Check{Server: server, Origin: origin}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		c.Result, c.Message = CheckFailed, "not a ws:// or wss:// URL: "+server
		return c
	}
	hu := *u
	hu.Scheme = map[string]string{"ws": "http", "wss": "https"}[u.Scheme]
	hu.User = nil
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hu.String(), nil)
	if err != nil {
		c.Result, c.Message = CheckFailed, "cannot build the handshake: "+err.Error()
		return c
	}
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(key))
	req.Header.Set("Origin", origin)
	resp, err := probeClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL
		}
		c.Result = CheckUnreachable
		c.Message = fmt.Sprintf("the bridge cannot reach the NATS WebSocket listener %s (%v): is the NATS server running "+
			"with a websocket block listening there? The page's server is HERMES_BRIDGE_UI_NATS_URL (or the embedded server's).", server, err)
		return c
	}
	_ = resp.Body.Close() // a 101's body is the connection: closing it ends the probe
	c.Status = resp.StatusCode
	switch resp.StatusCode {
	case http.StatusSwitchingProtocols:
		c.Result = CheckAccepted
		c.Message = fmt.Sprintf("the NATS WebSocket listener %s admits pages from %s; the connection failed after the "+
			"handshake: see the NATS server's log (a user or password it refused, permissions) and the browser's console.", server, origin)
	case http.StatusForbidden:
		c.Result = CheckOriginRefused
		c.Message = fmt.Sprintf("the NATS WebSocket listener %s refuses pages from %s (HTTP 403, origin not allowed): add %q to "+
			"allowed_origins in the websocket block of the NATS server's configuration, or open this page from an origin "+
			"listed there (HERMES_BRIDGE_HTTP_ADDR sets the port it is served on).", server, origin, origin)
	default:
		c.Result = CheckFailed
		c.Message = fmt.Sprintf("the NATS WebSocket listener %s answered the handshake with HTTP %d: is it a NATS "+
			"server's websocket listener?", server, resp.StatusCode)
	}
	return c
}

// pageOrigin returns origin if it is a page origin (http or https, a host, nothing
// else), for the Origin header of a probe.
func pageOrigin(origin string) (string, error) {
	u, err := url.Parse(origin)
	if err != nil || len(origin) > 256 || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("origin must be a page's origin, such as http://127.0.0.1:9464")
	}
	return u.Scheme + "://" + u.Host, nil
}

// serveCheck answers /ui/check?origin=<the page's origin>: a Check of each configured
// server (at most four), in order.
func (h *Handler) serveCheck(w http.ResponseWriter, r *http.Request, cfg *Config) {
	w.Header().Set("Cache-Control", "no-store")
	if cfg == nil {
		http.Error(w, "starting: the NATS WebSocket URL is not known yet", http.StatusServiceUnavailable)
		return
	}
	origin, err := pageOrigin(r.URL.Query().Get("origin"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	servers := cfg.Servers[:min(len(cfg.Servers), 4)]
	checks := make([]Check, 0, len(servers))
	for _, s := range servers {
		checks = append(checks, CheckOrigin(r.Context(), s, origin))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(checks)
}
