package hermestest

import (
	"cmp"
	"maps"
	"net/http"
	"strings"
	"time"
)

// Fault is one injected misbehaviour. Queued faults are consumed FIFO by the
// first matching requests (after routing, before auth), Times requests each.
// Several effects can be combined: Delay first, then Reset or Status, else
// the stream effects apply to the normal response.
type Fault struct {
	// Route is a route key ("chat_stream", "session_get", ...); "" matches
	// every routed request.
	Route string
	// Times is how many matching requests consume this fault (0 means 1).
	Times int

	// Delay sleeps before handling the request (cancelled by client
	// disconnect or Close).
	Delay time.Duration

	// Status answers immediately with this status, Body and Header instead
	// of running the handler. Body "" gives a Hermes-style JSON envelope: 429
	// rate_limit_exceeded and 503 gateway_draining (both with Retry-After: 1
	// unless Header sets it), 401 per version, else an OpenAI-style error.
	// A Body that does not start with '{' is sent as text/plain unless Header
	// sets Content-Type.
	Status int
	Body   string
	Header http.Header

	// Reset closes the connection without any response, before the agent runs.
	Reset bool

	// The stream effects trigger once AfterEvents SSE frames have been
	// written (keepalive comments do not count). On JSON routes they trigger
	// after the agent ran and the work was persisted, before the response is
	// written: Drop aborts the connection; Stall hangs; Malformed and
	// Oversized write a broken/huge body instead.
	AfterEvents int
	// Drop aborts the connection (no terminating chunk).
	Drop bool
	// Stall stops writing and holds the connection open until the client
	// goes away or the server is closed.
	Stall bool
	// Malformed writes one broken frame (invalid UTF-8 in data, plus a line
	// that is not a valid SSE field) and continues normally.
	Malformed bool
	// Oversized writes one data frame whose data is a JSON string of this many
	// bytes (plus quotes) and continues normally.
	Oversized int
}

// InjectFault queues f.
func (s *Server) InjectFault(f Fault) {
	if f.Times <= 0 {
		f.Times = 1
	}
	s.update(&s.mu, func() { s.faults = append(s.faults, &f) })
}

// ClearFaults drops all queued faults.
func (s *Server) ClearFaults() {
	s.update(&s.mu, func() { s.faults = nil })
}

// PendingFaults returns how many queued faults are not fully consumed.
func (s *Server) PendingFaults() int {
	return locked(&s.mu, func() int { return len(s.faults) })
}

// takeFault consumes one use of the first fault matching key.
func (s *Server) takeFault(key string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Route != "" && f.Route != key {
			continue
		}
		f.Times--
		if f.Times <= 0 {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
		}
		cp := *f
		return &cp
	}
	return nil
}

func (f *Fault) streamEffect() bool {
	return f != nil && (f.Drop || f.Stall || f.Malformed || f.Oversized > 0)
}

func (s *Server) writeFault(w http.ResponseWriter, f *Fault) {
	hdr := w.Header()
	maps.Copy(hdr, f.Header)
	if f.Body != "" {
		if hdr.Get("Content-Type") == "" && !strings.HasPrefix(strings.TrimSpace(f.Body), "{") {
			hdr.Set("Content-Type", "text/plain; charset=utf-8")
		}
		writeRaw(w, f.Status, []byte(f.Body))
		return
	}
	if (f.Status == http.StatusTooManyRequests || f.Status == http.StatusServiceUnavailable) && hdr.Get("Retry-After") == "" {
		hdr.Set("Retry-After", "1")
	}
	var body obj
	switch f.Status {
	case http.StatusTooManyRequests:
		body = tooManyRuns(cmp.Or(s.cfg.maxRuns, 10), "rate_limit_error")
	case http.StatusServiceUnavailable:
		body = drainingError()
	case http.StatusUnauthorized:
		s.authError(w)
		return
	default:
		typ := "invalid_request_error"
		if f.Status >= 500 {
			typ = "server_error"
		}
		body = openaiError(http.StatusText(f.Status), typ, nil)
	}
	writeJSON(w, f.Status, nil, body)
}
