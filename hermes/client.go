package hermes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
)

// Client calls one Hermes API server. It is safe for concurrent use.
type Client struct {
	base string // scheme://host[:port][/prefix], no trailing slash
	hc   *http.Client
	rt   http.RoundTripper // hc's transport when the Client built hc itself (see send)
	o    options
	caps *capsCache
	auth atomic.Pointer[authHeader] // the Authorization header of the last key sent
}

// authHeader is the Authorization header value of one valid API key.
type authHeader struct {
	key   string
	value []string
}

type options struct {
	apiKey      string
	keyFunc     func() string
	hc          *http.Client
	endpointID  string
	frameLimit  int
	streamLimit int64
	bodyLimit   int64
	idleConns   int
	capsTTL     time.Duration
}

// Option configures a Client.
type Option func(*options) error

var errOption = errors.New("hermes: invalid option")

// WithAPIKey sets the bearer token sent on every route but /health. The key must be non-empty,
// at most 16 KiB, without whitespace or control characters.
func WithAPIKey(key string) Option {
	return func(o *options) error {
		if !validAPIKey(key) {
			return errors.Join(errOption, errors.New("API key must be non-empty, at most 16 KiB, without whitespace or control characters"))
		}
		o.apiKey, o.keyFunc = key, nil
		return nil
	}
}

// WithKeyFunc sets a function that returns the bearer token; it is called on each request, so a
// reloaded key takes effect at once. An empty or invalid key fails the call with authentication.
func WithKeyFunc(f func() string) Option {
	return func(o *options) error {
		if f == nil {
			return errors.Join(errOption, errors.New("nil key func"))
		}
		o.keyFunc, o.apiKey = f, ""
		return nil
	}
}

// WithHTTPClient sets the HTTP client. The Client uses a shallow copy whose CheckRedirect refuses
// redirects. Its Timeout, if any, also bounds streams; leave it 0 and rely on ctx.
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) error {
		if hc == nil {
			return errors.Join(errOption, errors.New("nil http client"))
		}
		o.hc = hc
		return nil
	}
}

// WithEndpointID sets the endpoint id used in health's normalized output and the stream aggregate.
func WithEndpointID(id string) Option {
	return func(o *options) error { o.endpointID = id; return nil }
}

// WithFrameLimit sets the largest SSE frame in bytes (default 1 MiB).
func WithFrameLimit(n int) Option {
	return positiveLimit(n, "frame limit", func(o *options) *int { return &o.frameLimit })
}

// WithStreamLimit sets the largest SSE stream in bytes (default 64 MiB).
func WithStreamLimit(n int64) Option {
	return positiveLimit(n, "stream limit", func(o *options) *int64 { return &o.streamLimit })
}

// WithBodyLimit sets the largest JSON response body in bytes (default 64 MiB).
func WithBodyLimit(n int64) Option {
	return positiveLimit(n, "body limit", func(o *options) *int64 { return &o.bodyLimit })
}

// positiveLimit is an Option that sets the limit field returns to n, which must be
// positive.
func positiveLimit[T int | int64 | time.Duration](n T, what string, field func(*options) *T) Option {
	return func(o *options) error {
		if n <= 0 {
			return errors.Join(errOption, errors.New(what+" must be positive"))
		}
		*field(o) = n
		return nil
	}
}

// WithCapabilitiesTTL sets how long Capabilities reuses the answer it read (default
// DefaultCapabilitiesTTL): an endpoint upgraded under a running client is noticed at most
// this long after its upgrade.
func WithCapabilitiesTTL(d time.Duration) Option {
	return positiveLimit(d, "capabilities TTL", func(o *options) *time.Duration { return &o.capsTTL })
}

// WithIdleConns keeps up to n idle connections to the endpoint for reuse (default 2, as
// net/http). Set it to the number of calls expected in flight at once; without it a busy
// client opens a new connection for most calls. Ignored with WithHTTPClient.
func WithIdleConns(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return errors.Join(errOption, errors.New("idle connections must be at least 1"))
		}
		o.idleConns = n
		return nil
	}
}

func validAPIKey(k string) bool {
	if k == "" || len(k) > maxHeaderValueBytes {
		return false
	}
	for _, r := range k {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r > unicode.MaxASCII {
			return false
		}
	}
	return true
}

// New returns a Client for baseURL: an http or https origin with an optional path prefix and no
// userinfo, query or fragment. Without WithHTTPClient it uses a clone of http.DefaultTransport.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, errors.Join(errOption, errors.New("base URL does not parse"))
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "" {
		return nil, errors.Join(errOption, errors.New("base URL must be an http(s) origin"))
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "" {
		return nil, errors.Join(errOption, errors.New("base URL must not have userinfo, query or fragment"))
	}
	o := options{frameLimit: DefaultFrameLimit, streamLimit: DefaultStreamLimit, bodyLimit: DefaultBodyLimit,
		capsTTL: DefaultCapabilitiesTTL}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	var hc http.Client
	var rt http.RoundTripper
	if o.hc != nil {
		hc = *o.hc
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if o.idleConns > 0 {
			tr.MaxIdleConnsPerHost = o.idleConns
			tr.MaxIdleConns = max(tr.MaxIdleConns, o.idleConns)
		}
		hc.Transport, rt = tr, tr
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{
		base: u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"),
		hc:   &hc,
		rt:   rt,
		o:    o,
		caps: &capsCache{},
	}, nil
}

// Result of a completed HTTP exchange.
type Result struct {
	Operation  string
	HTTPStatus int
	// Output: for JSON operations the body (non-JSON -> {"text":...}, empty -> null; health:
	// normalized {endpoint_id,status,platform,version,http_status,raw}); for stream operations
	// the aggregate {endpoint_id,operation,http_status,event_count,text,terminal,truncated}.
	Output json.RawMessage
	Stream *StreamSummary // nil for JSON operations
	Status string         // "completed" | "failed" | "cancelled"
	// Usage is the token usage (and cost) Hermes reported for the agent work of this call,
	// nil when it reported none: the body's usage for chat, responses and session_chat; for
	// a stream, the usage of its final event (a chat finish chunk, response.completed or
	// response.failed, a session's or a run's run.completed), with, for a run's events, the
	// sum of the subagent.complete events' cost_usd as CostUSD. Reads of earlier work
	// (response_get, run_status, session_get, ...) have none.
	Usage *Usage
}

// Call runs one operation: Prepare, then one HTTP exchange (never retried here; Go's transport
// is also kept from silently resending unsafe requests).
//
// For stream operations onEvent is called for each event in order, on the calling goroutine,
// while the HTTP stream is open; an error from it aborts the stream and is returned wrapped
// (errors.Is/As reach it). Cancelling ctx closes the HTTP stream. JSON operations are bounded by
// the operation's HTTP timeout (Spec.Timeout) as well as ctx.
//
// It returns (*Result, nil) on success, including a stream that ended with run.cancelled
// (Status "cancelled"); (*Result, *Error) when the exchange finished but the outcome is a
// failure (health not ok: unhealthy; stream truncated, incomplete or failed: stream_*), with
// Result.Status "failed"; and (nil, err) otherwise, where err is an *InputError, an *Error or a
// wrapped callback error. A stream cut off by ctx keeps the aggregate of the events read so far
// in the *Error's Partial.
func (c *Client) Call(ctx context.Context, req Request, onEvent func(Event) error) (*Result, error) {
	p, err := Prepare(req)
	if err != nil {
		return nil, err
	}
	return c.Send(ctx, p, onEvent)
}

func (c *Client) key() string {
	if c.o.keyFunc != nil {
		return c.o.keyFunc()
	}
	return c.o.apiKey
}

// userAgent is the User-Agent header value of every request.
var userAgent = []string{"hermes-bridge"}

// authorization returns the Authorization header value of the current API key, or false
// when there is no valid key. The value is built (and the key checked) once per key.
func (c *Client) authorization() ([]string, bool) {
	k := c.key()
	if a := c.auth.Load(); a != nil && a.key == k {
		return a.value, true
	}
	if !validAPIKey(k) {
		return nil, false
	}
	a := &authHeader{key: k, value: []string{"Bearer " + k}}
	c.auth.Store(a)
	return a.value, true
}

// send sends hreq. A Client that built its HTTP client itself sends through the
// transport directly: with no redirect followed, no cookie jar and no timeout,
// http.Client.Do would only add a copy of the headers (kept for redirects) and wrap
// errors in a *url.Error, which transportError takes off again.
func (c *Client) send(hreq *http.Request) (*http.Response, error) {
	if c.rt != nil {
		return c.rt.RoundTrip(hreq)
	}
	return c.hc.Do(hreq)
}

// readBody reads a response body of at most limit bytes, or limit+1 bytes of a larger
// one: in one buffer of the announced length when the response has one.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= limit {
		b := make([]byte, n)
		_, err := io.ReadFull(resp.Body, b)
		return b, err
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit+1))
}

// Send runs one exchange for a request that Prepare already mapped, with the same
// contract as Call. It lets a caller validate input once and reuse the result.
func (c *Client) Send(ctx context.Context, p *Prepared, onEvent func(Event) error) (*Result, error) {
	spec := p.Spec
	op := spec.Name
	if dl, ok := ctx.Deadline(); spec.Timeout > 0 && (!ok || time.Until(dl) > spec.Timeout) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	resp, err := c.open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	status := resp.StatusCode

	if spec.Stream {
		return c.stream(ctx, p, resp, onEvent)
	}

	if resp.ContentLength > c.o.bodyLimit {
		return nil, invalidResponse(op, "body_too_large", status)
	}
	b, err := readBody(resp, c.o.bodyLimit)
	if err != nil {
		return nil, transportError(ctx, op, err, status)
	}
	if int64(len(b)) > c.o.bodyLimit {
		return nil, invalidResponse(op, "body_too_large", status)
	}
	out := normalizeBody(b)
	if op == "health" {
		return c.health(out, status)
	}
	res := &Result{Operation: op, HTTPStatus: status, Output: out, Status: "completed"}
	if usageOp(op) {
		res.Usage = bodyUsage(out)
	}
	return res, nil
}

// open sends the prepared request and returns a 2xx response, whose body the caller closes;
// a non-2xx answer is read (at most 64 KiB) and returned as a classified *Error.
func (c *Client) open(ctx context.Context, p *Prepared) (*http.Response, error) {
	spec := p.Spec
	op := spec.Name
	if ctx.Err() != nil {
		return nil, ctxError(ctx, op)
	}
	var body io.Reader
	if p.Body != nil {
		body = bytes.NewReader(p.Body)
	}
	hreq, err := http.NewRequestWithContext(ctx, p.Method, c.base+p.Path, body)
	if err != nil {
		e := newError(op, CodeTransport, "cannot build the request")
		e.NotStarted = true
		return nil, e
	}
	if !spec.Safe {
		// Keep net/http from replaying the request on a reused connection: without GetBody a
		// request with a body is not replayable, and the transport's check for the
		// Idempotency-Key header looks up the canonical key only.
		hreq.GetBody = nil
	}
	// The values are shared with p and the Client, not copied: nothing appends to them
	// or writes into them (net/http only reads a request's headers).
	for k, vs := range p.Header {
		if k == "Idempotency-Key" && !spec.Safe {
			hreq.Header["idempotency-key"] = vs
			continue
		}
		hreq.Header[k] = vs
	}
	hreq.Header["User-Agent"] = userAgent
	if spec.Auth {
		auth, ok := c.authorization()
		if !ok {
			e := newError(op, CodeAuthentication, "no valid API key configured")
			e.NotStarted = true
			return nil, e
		}
		hreq.Header["Authorization"] = auth
	}

	resp, err := c.send(hreq)
	if err != nil {
		return nil, transportError(ctx, op, err, 0)
	}
	if status := resp.StatusCode; status < 200 || status > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, statusError(spec, status, resp.Header, b)
	}
	return resp, nil
}

func (c *Client) stream(ctx context.Context, p *Prepared, resp *http.Response, onEvent func(Event) error) (*Result, error) {
	op, status := p.Spec.Name, resp.StatusCode
	sum, failedChunk, err := consumeStream(resp.Body, c.o.frameLimit, c.o.streamLimit, p.MaxEvents, onEvent)
	if err != nil {
		var ce *callbackError
		var se *errSSE
		switch {
		case errors.As(err, &ce):
			ce.op = op
			return nil, ce
		case errors.As(err, &se):
			return nil, invalidResponse(op, se.reason, status)
		case ctx.Err() != nil:
			// Cancelled or out of time mid-stream: what was streamed is kept.
			e := transportError(ctx, op, err, status)
			e.Partial = c.aggregate(op, status, sum)
			return nil, e
		}
		// The connection broke after the stream started: the stream closed without a
		// terminal event (schemas/README.md, "Hermes faults: what each one ends with"), and the events read so far are in the aggregate.
		res := c.aggregate(op, status, sum)
		e := newError(op, CodeStreamIncomplete, "stream broke before a terminal event")
		e.HTTPStatus = status
		e.Details = map[string]any{"operation": op, "cause": "transport"}
		e.Err = err
		res.Status = "failed"
		return res, e
	}
	res := c.aggregate(op, status, sum)
	var e *Error
	res.Status, e = streamOutcome(op, sum, failedChunk, p.MaxEvents, status)
	if e != nil {
		return res, e
	}
	return res, nil
}

// aggregate is the result of a stream operation: the stream summary as JSON output.
func (c *Client) aggregate(op string, status int, sum StreamSummary) *Result {
	agg := struct {
		EndpointID string `json:"endpoint_id"`
		Operation  string `json:"operation"`
		HTTPStatus int    `json:"http_status"`
		EventCount int    `json:"event_count"`
		Text       string `json:"text"`
		Terminal   bool   `json:"terminal"`
		Truncated  bool   `json:"truncated"`
	}{c.o.endpointID, op, status, sum.EventCount, sum.Text, sum.Terminal, sum.Truncated}
	return &Result{Operation: op, HTTPStatus: status, Output: marshalNoEscape(agg), Stream: &sum, Usage: sum.Usage}
}

func (c *Client) health(raw json.RawMessage, status int) (*Result, error) {
	var fields struct{ Status, Platform, Version any } // members matched by name, any case
	_ = json.Unmarshal(raw, &fields)                   // non-objects leave the fields nil
	str := func(v any) any {
		if s, ok := v.(string); ok {
			return s
		}
		return nil
	}
	out := struct {
		EndpointID string          `json:"endpoint_id"`
		Status     any             `json:"status"`
		Platform   any             `json:"platform"`
		Version    any             `json:"version"`
		HTTPStatus int             `json:"http_status"`
		Raw        json.RawMessage `json:"raw"`
	}{c.o.endpointID, str(fields.Status), str(fields.Platform), str(fields.Version), status, raw}
	res := &Result{Operation: "health", HTTPStatus: status, Output: marshalNoEscape(out), Status: "completed"}
	if s, _ := fields.Status.(string); s != "ok" {
		res.Status = "failed"
		e := newError("health", CodeUnhealthy, "Hermes endpoint health is not ok")
		e.HTTPStatus = status
		return res, e
	}
	return res, nil
}

// normalizeBody maps a response body to JSON: empty or blank -> null, JSON -> itself (trimmed),
// anything else -> {"text": <lossy UTF-8>}. A JSON result shares b's memory.
func normalizeBody(b []byte) json.RawMessage {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return jsonNull
	}
	if json.Valid(t) {
		return t // b is the caller's own fresh buffer
	}
	return marshalNoEscape(map[string]string{"text": strings.ToValidUTF8(string(b), "\uFFFD")})
}

func marshalNoEscape(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only called with plain structs, maps and valid RawMessages
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}
