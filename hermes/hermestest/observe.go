package hermestest

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Recorded is one request the fake received.
type Recorded struct {
	Time   time.Time
	Method string
	Path   string // escaped path
	Query  string // raw query
	Route  string // route key ("" for 404/405/413)
	// Header is a copy of the request headers with Authorization replaced by
	// "Bearer <redacted>" (or "<redacted>" when not a Bearer header).
	Header    http.Header
	AuthValid bool // the bearer key matched
	Body      []byte
	// Convenience copies of headers the bridge sets.
	IdempotencyKey string
	SessionID      string // X-Hermes-Session-Id
	SessionKey     string // X-Hermes-Session-Key
}

func (s *Server) record(r *http.Request, key string, body []byte, authOK bool) {
	h := r.Header.Clone()
	if a := h.Get("Authorization"); a != "" {
		if strings.HasPrefix(a, "Bearer ") {
			h.Set("Authorization", "Bearer <redacted>")
		} else {
			h.Set("Authorization", "<redacted>")
		}
	}
	rec := Recorded{
		Time:           s.now(),
		Method:         r.Method,
		Path:           r.URL.EscapedPath(),
		Query:          r.URL.RawQuery,
		Route:          key,
		Header:         h,
		AuthValid:      authOK,
		Body:           append([]byte(nil), body...),
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		SessionID:      r.Header.Get("X-Hermes-Session-Id"),
		SessionKey:     r.Header.Get("X-Hermes-Session-Key"),
	}
	s.update(&s.mu, func() {
		s.calls[key]++
		s.requests = append(s.requests, rec)
	})
}

// update calls f with mu held, then wakes waiters (notify).
func (s *Server) update(mu *sync.Mutex, f func()) {
	mu.Lock()
	f()
	mu.Unlock()
	s.notify()
}

// notify wakes WaitCalls/WaitInFlight waiters.
func (s *Server) notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Calls returns how many requests the route key received (see package doc).
func (s *Server) Calls(route string) int {
	return locked(&s.mu, func() int { return s.calls[route] })
}

// Requests returns a copy of every recorded request, in arrival order.
func (s *Server) Requests() []Recorded {
	return locked(&s.mu, func() []Recorded { return slices.Clone(s.requests) })
}

// ResetCounters clears Calls and Requests (not sessions, responses or faults).
func (s *Server) ResetCounters() {
	s.update(&s.mu, func() { s.calls, s.requests = map[string]int{}, nil })
}

// ForgetSessions drops every stored session, message and stored response, as if the
// server had just started; calls, requests, faults and the id sequence are kept.
// Benchmarks call it between passes, so that the chats one pass persisted (the fake,
// like Hermes, stores every chat) do not weigh on the next one's memory and GC.
func (s *Server) ForgetSessions() {
	db, rs := s.sessions, s.responses
	s.update(&db.mu, func() { db.rows, db.order, db.msgs = map[string]*session{}, nil, map[string][]*message{} })
	s.update(&rs.mu, func() { rs.m, rs.lru, rs.conv = map[string]*storedResponse{}, nil, map[string]string{} })
}

// WaitCalls blocks until Calls(route) >= n or ctx is done.
func (s *Server) WaitCalls(ctx context.Context, route string, n int) error {
	return s.waitFor(ctx, func() bool { return s.Calls(route) >= n })
}

// WaitInFlight blocks until InFlight() == n or ctx is done.
func (s *Server) WaitInFlight(ctx context.Context, n int) error {
	return s.waitFor(ctx, func() bool { return s.InFlight() == n })
}

// waitFor blocks until cond (called without s.mu held) holds, checking it
// again on every change of the fake, or until ctx is done or the fake closes.
func (s *Server) waitFor(ctx context.Context, cond func() bool) error {
	for {
		ch := locked(&s.mu, func() chan struct{} { return s.changed })
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return context.Canceled
		}
	}
}

// ---- response helpers ----

var securityHeaders = [][2]string{
	{"Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"},
	{"Permissions-Policy", "camera=(), microphone=(), geolocation=()"},
	{"Strict-Transport-Security", "max-age=31536000; includeSubDomains"},
	{"X-Content-Type-Options", "nosniff"},
	{"X-Frame-Options", "DENY"},
	{"X-XSS-Protection", "0"},
	{"Referrer-Policy", "no-referrer"},
}

// writeJSON writes a JSON response with the security headers.
func writeJSON(w http.ResponseWriter, status int, extra http.Header, body any) {
	hdr := w.Header()
	maps.Copy(hdr, extra)
	for _, kv := range securityHeaders {
		if hdr.Get(kv[0]) == "" {
			hdr.Set(kv[0], kv[1])
		}
	}
	writeRaw(w, status, dumps(body, true))
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	hdr := w.Header()
	if hdr.Get("Content-Type") == "" {
		hdr.Set("Content-Type", "application/json; charset=utf-8")
	}
	hdr.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	writeRaw(w, status, []byte(text))
}

// writeFound answers 200 with body when found, else 404 with notFound(c.id).
func writeFound(c *call, found bool, body any, notFound func(id string) obj) {
	if !found {
		writeJSON(c.w, http.StatusNotFound, nil, notFound(c.id))
		return
	}
	writeJSON(c.w, http.StatusOK, nil, body)
}

// openaiError is the _openai_error envelope (with param null).
func openaiError(msg, typ string, code any) obj {
	return obj{{"error", obj{{"message", msg}, {"type", typ}, {"param", nil}, {"code", code}}}}
}

// openaiParamError is _openai_error with a param.
func openaiParamError(msg, typ, param string, code any) obj {
	return obj{{"error", obj{{"message", msg}, {"type", typ}, {"param", param}, {"code", code}}}}
}

// adhocError is the {"error":{"message","type"}} shape without param/code.
func adhocError(msg string) obj {
	return obj{{"error", obj{{"message", msg}, {"type", "invalid_request_error"}}}}
}

// resetConn closes the client connection without a response (RST when possible).
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
