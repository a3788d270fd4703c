package hermes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Error codes reported in Error.Code. They match the result error codes of the bridge contract.
const (
	CodeAuthentication    = "authentication"
	CodeRemoteRejected    = "remote_rejected"
	CodeRemoteUnavailable = "remote_unavailable"
	CodeAgentIncomplete   = "agent_incomplete"
	CodeTransport         = "transport"
	CodeInvalidResponse   = "invalid_response"
	CodePayloadTooLarge   = "payload_too_large"
	CodeStreamTruncated   = "stream_truncated"
	CodeStreamIncomplete  = "stream_incomplete"
	CodeStreamFailed      = "stream_failed"
	CodeDeadlineExceeded  = "deadline_exceeded"
	CodeCancelled         = "cancelled"
	CodeUnhealthy         = "unhealthy"
)

// Error categories reported in Error.Category.
const (
	CategoryAuth      = "auth"
	CategoryPermanent = "permanent"
	CategoryTemporary = "temporary"
	CategoryTransport = "transport"
	CategoryConnector = "connector"
)

// Error is every failure the client reports, except *InputError.
//
// Message is safe to log: it never contains prompts, outputs, bearer tokens, Hermes session ids
// or keys, nor Hermes's own error message (which can echo ids, e.g. "Session not found: <id>").
type Error struct {
	Operation  string // operation name (an addition to the shared design; may be "")
	Code       string // see the Code* constants
	Category   string // see the Category* constants
	Message    string // safe text
	HTTPStatus int    // 0 when no HTTP response was read
	RemoteCode string // Hermes error.code, e.g. session_not_found, rate_limit_exceeded
	RetryAfter time.Duration
	NotStarted bool // certain that Hermes did not start the work
	Details    map[string]any
	Err        error // underlying cause (never an *url.Error, whose text holds the URL)
	// Partial is, for a stream operation cut off by its context (cancelled, deadline
	// exceeded) after its response began, the aggregate of the events read until then
	// (Output with terminal false, Stream, Usage; Status empty); nil otherwise.
	Partial *Result

	routeMissing bool // a 404/405 without a Hermes error envelope (aiohttp's text page)
}

// Sentinels matched with errors.Is against an *Error.
var (
	// ErrRunNotFound matches a 404 whose Hermes error code is run_not_found: the run is
	// unknown to this Hermes process, its status expired (1 h after it ended), its events
	// queue is gone (already consumed, subscriber disconnected, or swept 300 s after
	// creation without a subscriber), or, for stop, the run is no longer live.
	ErrRunNotFound = errors.New("hermes: run not found")
	// ErrRouteNotFound matches a 404 or 405 that carries no Hermes error envelope (aiohttp's
	// text/plain "404: Not Found"): the endpoint does not serve this route at all, e.g. a
	// Hermes without the runs API, or not a Hermes server.
	ErrRouteNotFound = errors.New("hermes: route not found")
)

// Is makes errors.Is(err, ErrRunNotFound) and errors.Is(err, ErrRouteNotFound) work.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrRunNotFound:
		return e.HTTPStatus == http.StatusNotFound && e.RemoteCode == "run_not_found"
	case ErrRouteNotFound:
		return e.routeMissing
	}
	return false
}

// Error returns "hermes: <op>: <code>: <message>" plus the status, remote code and cause.
func (e *Error) Error() string {
	s := "hermes: "
	if e.Operation != "" {
		s += e.Operation + ": "
	}
	s += e.Code
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether resending the request is safe. A failure that certainly did not start
// the work (NotStarted) and is temporary (429 concurrency gate, 503 draining, refused connection)
// is retryable for any operation; for safe (read-only) operations every transport failure, 429 and
// 5xx is retryable too. Deadlines, cancellations, rejections and invalid responses never are.
func (e *Error) Retryable(safe bool) bool {
	switch e.Code {
	case CodeRemoteUnavailable, CodeTransport:
		return e.NotStarted || safe
	case CodeAgentIncomplete: // a 502: retryable when re-running the read is harmless
		return safe
	}
	return false
}

// ErrInvalidInput is matched (errors.Is) by every *InputError.
var ErrInvalidInput = errors.New("hermes: invalid input")

// InputError reports action input that fails validation. Field is a JSON-pointer-ish path such as
// "input.messages" or "input.body.title"; Reason never contains the offending value.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string {
	return "hermes: invalid input: " + e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalidInput) true.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

func inputErr(field, reason string) *InputError { return &InputError{Field: field, Reason: reason} }

func categoryOf(code string) string {
	switch code {
	case CodeAuthentication:
		return CategoryAuth
	case CodeRemoteRejected, CodePayloadTooLarge:
		return CategoryPermanent
	case CodeTransport:
		return CategoryTransport
	case CodeInvalidResponse, CodeStreamTruncated, CodeStreamIncomplete, CodeStreamFailed:
		return CategoryConnector
	default: // remote_unavailable, agent_incomplete, deadline_exceeded, cancelled, unhealthy
		return CategoryTemporary
	}
}

func newError(op, code, msg string) *Error {
	return &Error{Operation: op, Code: code, Category: categoryOf(code), Message: msg}
}

// remoteError is the tolerant decoding of a Hermes error body.
type remoteError struct {
	code     string
	envelope bool // the body was a JSON object with an error member
}

// decodeRemoteError accepts {"error":{...code...}}, {"error":"text"}, any other JSON, or non-JSON.
// Only the code is kept, and only when it looks like an identifier.
func decodeRemoteError(body []byte) remoteError {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) != nil || len(env.Error) == 0 {
		return remoteError{}
	}
	r := remoteError{envelope: true}
	var obj struct {
		Code any `json:"code"`
	}
	if json.Unmarshal(env.Error, &obj) != nil {
		return r
	}
	s, _ := obj.Code.(string)
	r.code = sanitizeCode(s)
	return r
}

// sanitizeCode keeps a remote error code only if it is a short identifier: 1 to 64 of
// [A-Za-z0-9_.-].
func sanitizeCode(s string) string {
	const ident = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
	if s == "" || len(s) > 64 || strings.Trim(s, ident) != "" {
		return ""
	}
	return s
}

// statusError classifies a non-2xx response.
func statusError(spec Spec, status int, header http.Header, body []byte) *Error {
	re := decodeRemoteError(body)
	rc := re.code
	msg := "Hermes returned HTTP " + strconv.Itoa(status)
	if rc != "" {
		msg += " (" + rc + ")"
	}
	var e *Error
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e = newError(spec.Name, CodeAuthentication, msg)
		e.NotStarted = true
	case status == http.StatusRequestEntityTooLarge:
		e = newError(spec.Name, CodePayloadTooLarge, msg)
		e.NotStarted = true
	case status == http.StatusTooManyRequests:
		e = newError(spec.Name, CodeRemoteUnavailable, msg)
		e.NotStarted = rc == "rate_limit_exceeded"
	case status == http.StatusServiceUnavailable && rc == "gateway_draining":
		e = newError(spec.Name, CodeRemoteUnavailable, msg)
		e.NotStarted = true
	case status == http.StatusBadGateway && rc == "agent_incomplete":
		e = newError(spec.Name, CodeAgentIncomplete, msg)
	case status >= 500:
		e = newError(spec.Name, CodeRemoteUnavailable, msg)
	default: // other 4xx (and 1xx/3xx, as redirects are not followed)
		e = newError(spec.Name, CodeRemoteRejected, msg)
		// The provider's fork is not atomic: it ends the source, creates the child and copies
		// messages before validating the title, so invalid_title may follow durable changes.
		e.NotStarted = !(spec.Name == "session_fork" && rc == "invalid_title")
	}
	if e.Code == CodeRemoteUnavailable { // 429, a draining 503, other 5xx but agent_incomplete
		e.RetryAfter = parseRetryAfter(header.Get("Retry-After"), time.Now())
	}
	e.HTTPStatus = status
	e.RemoteCode = rc
	e.routeMissing = (status == http.StatusNotFound || status == http.StatusMethodNotAllowed) && !re.envelope
	return e
}

// parseRetryAfter reads delay-seconds or an HTTP date; it returns 0 when absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(min(max(n, 0), 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), 24*time.Hour)
	}
	return 0
}

// transportError classifies a failure to send the request or read its response. ctx is the
// context the request ran under.
func transportError(ctx context.Context, op string, err error, status int) *Error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the url.Error text contains the URL, and so maybe a session id
	}
	e := ctxEnded(ctx, op, "")
	if e == nil {
		e = newError(op, CodeTransport, "transport failure")
		e.Err = err
	}
	e.HTTPStatus = status
	e.NotStarted = isDialError(err) && status == 0
	return e
}

// isDialError reports a failure to connect, before any request byte was written.
func isDialError(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// ctxError reports a context that ended before the request was sent.
func ctxError(ctx context.Context, op string) *Error {
	e := ctxEnded(ctx, op, " before the request was sent")
	e.NotStarted = true
	return e
}

// ctxEnded returns the deadline_exceeded or cancelled *Error of a ctx that ended, its
// message followed by when; nil while ctx is live.
func ctxEnded(ctx context.Context, op, when string) *Error {
	var e *Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		e = newError(op, CodeDeadlineExceeded, "deadline exceeded"+when)
		e.Err = context.DeadlineExceeded
	case ctx.Err() != nil:
		e = newError(op, CodeCancelled, "cancelled"+when)
		e.Err = context.Canceled
	}
	return e
}

func invalidResponse(op, reason string, status int) *Error {
	e := newError(op, CodeInvalidResponse, fmt.Sprintf("invalid response from Hermes: %s", reason))
	e.HTTPStatus = status
	e.Details = map[string]any{"reason": reason}
	return e
}
