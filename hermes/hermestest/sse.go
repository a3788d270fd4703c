package hermestest

import (
	"bufio"
	"maps"
	"net/http"
	"strings"
	"time"
)

// sseWriter writes SSE frames through a buffered writer, flushing only
// before waits and at the end, and emits ": keepalive" comments while idle.
type sseWriter struct {
	c     *call
	rc    *http.ResponseController
	bw    *bufio.Writer
	ka    time.Duration
	last  time.Time // of the last flush
	n     int       // frames written
	fault *Fault    // the stream effect still to apply, nil when none
	err   error
}

// startSSE writes the SSE response headers (no security headers, as in Hermes).
func (s *Server) startSSE(c *call, extra http.Header) *sseWriter {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	maps.Copy(h, extra)
	c.w.WriteHeader(http.StatusOK)
	sw := &sseWriter{c: c, rc: http.NewResponseController(c.w), bw: bufio.NewWriterSize(c.w, 32<<10), ka: s.cfg.keepalive, last: time.Now()}
	if c.fault.streamEffect() {
		sw.fault = c.fault
	}
	_ = sw.flush()
	return sw
}

func (sw *sseWriter) flush() error {
	if sw.err != nil {
		return sw.err
	}
	if err := sw.bw.Flush(); err != nil {
		sw.err = err
		return err
	}
	if err := sw.rc.Flush(); err != nil {
		sw.err = err
		return err
	}
	sw.last = time.Now()
	return nil
}

// frame writes one SSE frame; event "" omits the event: line.
func (sw *sseWriter) frame(event string, data []byte) error {
	if sw.err != nil {
		return sw.err
	}
	if f := sw.fault; f != nil && sw.n >= f.AfterEvents {
		sw.fault = nil
		if err := sw.applyFault(f); err != nil {
			return err
		}
	}
	if event != "" {
		_, _ = sw.bw.WriteString("event: " + event + "\n")
	}
	_, _ = sw.bw.WriteString("data: ")
	_, _ = sw.bw.Write(data)
	_, err := sw.bw.WriteString("\n\n")
	sw.n++
	if err != nil {
		sw.err = err
	}
	return sw.err
}

// applyFault applies f's stream effect before the next frame.
func (sw *sseWriter) applyFault(f *Fault) error {
	switch {
	case f.Drop:
		_ = sw.flush()
		panic(http.ErrAbortHandler)
	case f.Stall:
		_ = sw.flush()
		<-sw.c.ctx.Done()
		sw.err = sw.c.ctx.Err() // the stream is gone
		return sw.err
	}
	if f.Malformed {
		_, _ = sw.bw.WriteString("data: {\"type\": \"\xff\xfe\xfd broken\n")
		_, _ = sw.bw.WriteString("this line is not an SSE field \xc3\x28\n\n")
	}
	if f.Oversized > 0 {
		_, _ = sw.bw.WriteString("data: \"" + strings.Repeat("x", f.Oversized) + "\"\n\n")
	}
	return nil
}

// comment writes an SSE comment line (": text").
func (sw *sseWriter) comment(text string) error {
	if sw.err != nil {
		return sw.err
	}
	_, _ = sw.bw.WriteString(": " + text + "\n\n")
	return sw.flush()
}

// wait flushes, then idles for d sending keepalives; false when the stream
// is gone (client disconnect, Close, write error).
func (sw *sseWriter) wait(d time.Duration) bool {
	if d <= 0 {
		return sw.err == nil && sw.c.ctx.Err() == nil
	}
	_, ok := idle(sw, time.After(d))
	return ok
}

// idle flushes, then waits for a value on ch, writing ": keepalive" whenever
// the stream has been quiet for the keepalive interval; ok is false when the
// stream is gone (client disconnect, Close, write error).
func idle[T any](sw *sseWriter, ch <-chan T) (v T, ok bool) {
	if sw.flush() != nil {
		return v, false
	}
	for {
		var keepalive <-chan time.Time
		if sw.ka > 0 {
			keepalive = time.After(time.Until(sw.last.Add(sw.ka)))
		}
		select {
		case v = <-ch:
			return v, true
		case <-sw.c.ctx.Done():
			return v, false
		case <-keepalive:
			if sw.comment("keepalive") != nil {
				return v, false
			}
		}
	}
}

// ---- JSON-route fault effects ----

// jsonFault applies stream-style fault effects on a JSON route after the work
// is done; it returns true when it handled (or ruined) the response.
func (s *Server) jsonFault(c *call) bool {
	f := c.fault
	if !f.streamEffect() {
		return false
	}
	switch {
	case f.Drop:
		resetConn(c.w)
	case f.Stall:
		c.w.Header().Set("Content-Type", "application/json; charset=utf-8")
		c.w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(c.w).Flush()
		<-c.ctx.Done()
	case f.Malformed:
		writeRaw(c.w, http.StatusOK, []byte("{\"id\": \"\xff\xfe\", garbage"))
	case f.Oversized > 0:
		writeRaw(c.w, http.StatusOK, []byte(`"`+strings.Repeat("x", f.Oversized)+`"`))
	}
	return true
}
