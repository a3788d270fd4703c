package hermes

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"unicode/utf8"
)

// Default stream limits.
const (
	DefaultFrameLimit  = 1 << 20  // bytes in one SSE frame
	DefaultStreamLimit = 64 << 20 // bytes in one SSE stream
	DefaultBodyLimit   = 64 << 20 // bytes in one JSON response body
)

// errSSE is an invalid stream; its reason ends up in Error.Details.
type errSSE struct{ reason string }

func (e *errSSE) Error() string { return "invalid SSE stream: " + e.reason }

var (
	errFrameTooLarge  = &errSSE{"frame_too_large"}
	errStreamTooLarge = &errSSE{"stream_too_large"}
	errInvalidUTF8    = &errSSE{"invalid_utf8"}
)

// sseFrame is one dispatched frame. Its byte slices alias the reader's buffers and are valid
// only until the next call to next.
type sseFrame struct {
	event   []byte
	id      []byte
	hasID   bool
	data    []byte
	hasData bool
}

// sseReader parses text/event-stream framing from a bufio.Reader:
//   - lines end in LF or CRLF (one trailing CR is stripped);
//   - a blank line ends a frame; a frame with no event, id or data field is dropped;
//   - lines starting with ':' are comments (": keepalive", ": stream closed") and are skipped;
//   - a field is split at the first ':' and one leading space is removed from the value; a line
//     without ':' is a field with an empty value; only event, id and data are used (retry and
//     unknown fields are ignored); several data lines are joined with "\n";
//   - whatever remains at EOF is parsed as a last frame;
//   - every line must be valid UTF-8; a frame over frameLimit bytes or a stream over
//     streamLimit bytes is an error.
type sseReader struct {
	r           *bufio.Reader
	frameLimit  int
	streamLimit int64
	total       int64
	frameBytes  int
	line        []byte // spill buffer for lines longer than the bufio buffer
	f           sseFrame
	eof         bool
}

// sseBufferSize is the reader's buffer, the size of net/http's own connection buffer: a
// read of a chunked response body returns the chunks that buffer already holds (Hermes
// flushes every event as a small chunk), so a larger buffer reads no faster; and a
// stream holds its buffer for as long as it runs, which with thousands of streams in
// flight made it most of their memory. Lines longer than the buffer go to the spill
// buffer (sseReader.line).
const sseBufferSize = 4 << 10

func newSSEReader(r io.Reader, frameLimit int, streamLimit int64) *sseReader {
	if frameLimit <= 0 {
		frameLimit = DefaultFrameLimit
	}
	if streamLimit <= 0 {
		streamLimit = DefaultStreamLimit
	}
	return &sseReader{r: bufio.NewReaderSize(r, sseBufferSize), frameLimit: frameLimit, streamLimit: streamLimit}
}

// readLine returns the next line without its terminator. The slice is valid until the next call.
// At EOF with no pending bytes it returns io.EOF.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	spilled := false
	for {
		chunk, err := s.r.ReadSlice('\n')
		s.total += int64(len(chunk))
		if s.total > s.streamLimit {
			return nil, errStreamTooLarge
		}
		if s.frameBytes+len(s.line)+len(chunk) > s.frameLimit+2 { // +2: the line's own CRLF
			return nil, errFrameTooLarge
		}
		switch {
		case err == nil:
			var l []byte
			if spilled {
				s.line = append(s.line, chunk...)
				l = s.line
			} else {
				l = chunk
			}
			return trimEOL(l), nil
		case errors.Is(err, bufio.ErrBufferFull):
			s.line = append(s.line, chunk...)
			spilled = true
		case errors.Is(err, io.EOF):
			if spilled {
				s.line = append(s.line, chunk...)
				chunk = s.line
			}
			if len(chunk) == 0 {
				return nil, io.EOF
			}
			return trimEOL(chunk), nil // last line without terminator; next call gives io.EOF
		default:
			return nil, err
		}
	}
}

func trimEOL(l []byte) []byte {
	if n := len(l); n > 0 && l[n-1] == '\n' {
		l = l[:n-1]
	}
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l
}

// next returns the next non-empty frame, or io.EOF after the last one.
func (s *sseReader) next() (*sseFrame, error) {
	f := &s.f
	f.event, f.id, f.data = f.event[:0], f.id[:0], f.data[:0]
	f.hasID, f.hasData = false, false
	hasEvent := false
	s.frameBytes = 0
	if s.eof {
		return nil, io.EOF
	}
	for {
		line, err := s.readLine()
		if err == io.EOF {
			s.eof = true
			if hasEvent || f.hasID || f.hasData {
				return f, nil
			}
			return nil, io.EOF
		}
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(line) {
			return nil, errInvalidUTF8
		}
		if len(line) == 0 {
			if hasEvent || f.hasID || f.hasData {
				return f, nil
			}
			s.frameBytes = 0
			continue
		}
		s.frameBytes += len(line) + 1
		if line[0] == ':' {
			continue
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "data":
			if f.hasData {
				f.data = append(f.data, '\n')
			}
			f.data = append(f.data, value...)
			f.hasData = true
		case "event":
			f.event = append(f.event[:0], value...)
			hasEvent = true
		case "id":
			f.id = append(f.id[:0], value...)
			f.hasID = true
		}
	}
}
