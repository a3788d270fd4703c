package hermes

import (
	"cmp"
	v1json "encoding/json"
	"errors"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"golang.org/x/net/http/httpguts"
)

// Limits applied by Prepare.
const (
	// MaxRequestBody is the largest request body sent to Hermes (its MAX_REQUEST_BYTES).
	MaxRequestBody = 10_000_000
	// DefaultMaxEvents is the stream event limit when the input has no max_events.
	DefaultMaxEvents = 4096
	// MaxMaxEvents is the largest accepted max_events.
	MaxMaxEvents = 100_000

	maxPathIDBytes      = 512
	maxQueryValueBytes  = 4096
	maxHeaderValueBytes = 16 << 10
	defaultListLimit    = 50
	maxListLimit        = 200
	maxListOffset       = 1_000_000
	defaultModel        = "hermes-agent"
)

// Request is one call.
type Request struct {
	Operation string
	// Input is the decoded action input: objects are map[string]any, arrays []any, numbers
	// encoding/json.Number (float64 is accepted too), nil means {}. Prepare does not modify it.
	Input          map[string]any
	IdempotencyKey string      // sent as Idempotency-Key when non-empty
	Header         http.Header // extra headers (e.g. traceparent); may be nil
}

// Prepared is the mapped HTTP request, produced without any I/O.
type Prepared struct {
	Spec      Spec
	Method    string
	Path      string      // escaped path incl. query string
	Header    http.Header // without Authorization
	Body      []byte      // nil for GET/DELETE
	MaxEvents int         // streams: 1..100000, default 4096; 0 for JSON operations
}

// Prepare maps an input that schemas/action.schema.json ($defs/<operation>) accepts to an HTTP
// request. It does no I/O and does not re-check what the schema says: an input the schema
// rejects gives an *InputError or some well-formed request, never a panic. It refuses what it
// cannot map, and the few rules the schema cannot say, with an *InputError
// (errors.Is(err, ErrInvalidInput)):
//
//   - an unknown operation;
//   - a path id that is missing, not a non-empty string, longer than 512 bytes (the schema counts
//     characters) or a dot segment;
//   - a header value with control characters or over 16 KiB (session_id, session_key,
//     Request.IdempotencyKey, Request.Header), or an invalid Request.Header name;
//   - a sessions_list limit or offset that is not a non-negative integer, a source over 4096
//     bytes, or a parameter given at top level and in query with different values;
//   - an input.body that is not an object where no other form exists (session_create,
//     session_patch, session_fork, session_chat);
//   - run_start without a valid Request.IdempotencyKey, or whose input array's last element has
//     no content;
//   - a value that cannot be encoded as JSON (e.g. a string that is not valid UTF-8).
//
// A body over MaxRequestBody gives an *Error with Code payload_too_large and NotStarted set.
//
// Bodies are the JSON encoding of the mapped object with sorted keys; numbers are written as
// given. Mapping, per operation:
//
//   - health, health_detailed, models, capabilities, skills, toolsets: no body.
//
//   - chat, chat_stream: prompt or query (the first non-empty string) becomes
//     messages [{"role":"user","content":...}]; model defaults to "hermes-agent"; stream is
//     forced; session_id and session_key become X-Hermes-Session-Id and X-Hermes-Session-Key;
//     idempotency_key and max_events are removed; other fields pass through.
//
//   - responses, responses_stream: the body is input.body (a non-object is wrapped as
//     {"input":…}) or the whole input minus session_key, idempotency_key and max_events;
//     session_key becomes X-Hermes-Session-Key; stream is forced.
//
//   - response_get, response_delete: response_id from the input or input.body.
//
//   - sessions_list: limit (default 50, clamped to 200), offset (default 0, clamped to 1000000),
//     source, include_children, at top level or in a query object (numbers may be decimal
//     strings and booleans "true"/"false" there); the query string is always "limit=&offset="
//     then the others.
//
//   - session_create: input.body or the whole input minus the control fields.
//
//   - session_patch: path id session_id (input or input.body); the body is input.body or the
//     input, without session_id, session_key, idempotency_key and max_events.
//
//   - session_fork: the path id comes from the top-level session_id only; the body (possibly
//     {}) is input.body or the rest of the input, without session_key and idempotency_key.
//
//   - session_chat, session_chat_stream: path id session_id (input or input.body); the body is
//     input.body or the input without session_id, session_key, idempotency_key, max_events,
//     prompt and query; message is set from prompt or query (the first non-blank string) when
//     message and input are absent; session_key (input, else input.body) becomes
//     X-Hermes-Session-Key.
//
//   - run_start: as responses (without stream); Request.IdempotencyKey is required and must be
//     1–255 visible ASCII characters (the rule of Hermes versions with durable run
//     idempotency); an input array's last element must have a content.
//
//   - run_status, run_events, run_stop: run_id from the input or input.body; session_key becomes
//     X-Hermes-Session-Key; run_stop sends no body.
//
//   - run_approval: run_id as above; the body is {"choice"} from the input or input.body, with
//     "all": true when all or resolve_all is true in either, and its non-empty string
//     request_id (Hermes 0.21 answers that approval request, not the oldest).
//
//   - run_steer: run_id as above; the body is {"input"} from the input's input.
//
// Streams take max_events (an integer from 1 to 100000, else the default). Path ids are
// percent-encoded as one path segment (see escapeSegment). Request.Header entries are copied
// except Authorization, Host, Content-Length, Content-Type, Accept, Transfer-Encoding,
// Connection, (X-)Idempotency-Key and X-Hermes-*, which the client owns.
func Prepare(req Request) (*Prepared, error) {
	spec, ok := lookupAny(req.Operation)
	if !ok {
		return nil, inputErr("operation", "unknown operation")
	}
	in := req.Input
	pa := &prepared{Prepared: Prepared{Spec: spec, Method: spec.Method, Path: spec.Path, Header: make(http.Header)}}
	p := &pa.Prepared
	if err := copyExtraHeaders(p.Header, req.Header); err != nil {
		return nil, err
	}
	if req.IdempotencyKey != "" {
		if !validHeaderValue(req.IdempotencyKey) {
			return nil, inputErr("idempotency_key", "must be a valid header value of at most 16 KiB")
		}
		pa.set("Idempotency-Key", req.IdempotencyKey)
	}

	var body map[string]any
	var err error
	switch spec.Name {
	case "chat", "chat_stream":
		p.Body, err = chatBody(spec, in)
		if err != nil {
			return nil, inputErr("input", "cannot be encoded as JSON")
		}
		if err = pa.header(in, "session_id", "X-Hermes-Session-Id", "input."); err == nil {
			err = pa.header(in, "session_key", "X-Hermes-Session-Key", "input.")
		}
	case "responses", "responses_stream":
		if body, _, err = bodyOrInput(in, true, controlFields...); err == nil {
			body["stream"] = spec.Stream
			err = pa.header(in, "session_key", "X-Hermes-Session-Key", "input.")
		}
	case "response_get", "response_delete":
		err = fillPath(p, in, "response_id", true)
	case "sessions_list":
		var q string
		q, err = listQuery(in)
		p.Path += q
	case "session_create":
		body, _, err = bodyOrInput(in, false, controlFields...)
	case "session_get", "session_delete", "session_messages":
		err = fillPath(p, in, "session_id", true)
	case "session_patch", "session_fork":
		if err = fillPath(p, in, "session_id", spec.Name == "session_patch"); err == nil {
			body, _, err = bodyOrInput(in, false, append([]string{"session_id"}, controlFields...)...)
		}
		if body != nil {
			delete(body, "session_key")
			delete(body, "idempotency_key")
			if spec.Name == "session_patch" {
				delete(body, "session_id") // the path id; in a fork body it is the child's id
			}
		}
	case "session_chat", "session_chat_stream":
		if err = fillPath(p, in, "session_id", true); err == nil {
			body, err = sessionChatBody(in, pa)
		}
	case "run_start":
		if err = runIdempotencyKey(req.IdempotencyKey); err == nil {
			body, err = runStartBody(in, pa)
		}
	case "run_status", "run_events", "run_stop":
		if err = fillPath(p, in, "run_id", true); err == nil {
			err = pa.header(in, "session_key", "X-Hermes-Session-Key", "input.")
		}
	case "run_approval":
		if err = fillPath(p, in, "run_id", true); err == nil {
			body = approvalBody(in)
		}
	case "run_steer":
		if err = fillPath(p, in, "run_id", true); err == nil {
			body = map[string]any{"input": in["input"]}
		}
	}
	if err != nil {
		return nil, err
	}
	if spec.Stream {
		p.MaxEvents = DefaultMaxEvents
		if n, ok := integer(in["max_events"]); ok && n >= 1 && n <= MaxMaxEvents {
			p.MaxEvents = int(n)
		}
		pa.set("Accept", "text/event-stream")
	} else {
		pa.set("Accept", "application/json")
	}
	if body != nil {
		if p.Body, err = encodeBody(body); err != nil {
			return nil, inputErr("input", "cannot be encoded as JSON")
		}
	}
	if p.Body == nil {
		return p, nil
	}
	if len(p.Body) > MaxRequestBody {
		e := newError(spec.Name, CodePayloadTooLarge, "request body exceeds 10000000 bytes")
		e.NotStarted = true
		e.Details = map[string]any{"limit_bytes": MaxRequestBody, "body_bytes": len(p.Body)}
		return nil, e
	}
	pa.set("Content-Type", "application/json")
	return p, nil
}

// prepared is a Prepared allocated together with the backing store of the header values
// that Prepare sets (at most five: Idempotency-Key, the two session headers, Accept and
// Content-Type), so that setting them does not allocate.
type prepared struct {
	Prepared
	vals [5]string
	n    int // vals in use
}

// set is p.Header.Set(name, v) for a canonical name. The value is a one-element slice of
// vals with its capacity limited to 1, so that appending to it copies; once vals is used
// up a value gets its own slice.
func (p *prepared) set(name, v string) {
	if p.n == len(p.vals) {
		p.Header[name] = []string{v}
		return
	}
	p.vals[p.n] = v
	p.Header[name] = p.vals[p.n : p.n+1 : p.n+1]
	p.n++
}

// header sets header from the non-empty string m[key]; a value that is not a valid header
// value is an error at prefix+key.
func (p *prepared) header(m map[string]any, key, header, prefix string) error {
	s, _ := m[key].(string)
	if s == "" {
		return nil
	}
	if !validHeaderValue(s) {
		return inputErr(prefix+key, "must not contain control characters")
	}
	p.set(header, s)
	return nil
}

// --- JSON ---------------------------------------------------------------------------------

// bodyOptions encode a body: keys sorted, encoding/json.Number written verbatim (a literal
// that is not a JSON number fails).
var bodyOptions = json.JoinOptions(json.Deterministic(true),
	json.WithMarshalers(json.MarshalToFunc(func(enc *jsontext.Encoder, n v1json.Number) error {
		return enc.WriteValue(jsontext.Value(n))
	})))

func encodeBody(body map[string]any) ([]byte, error) { return json.Marshal(body, bodyOptions) }

// integer returns an integral number: a json.Number, a float64 or a decimal string (beyond
// float64's range, ±Inf).
func integer(v any) (float64, bool) {
	var s string
	switch v := v.(type) {
	case v1json.Number:
		s = string(v)
	case float64:
		return v, v == math.Trunc(v)
	case string:
		s = strings.TrimSpace(v)
	default:
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, f == math.Trunc(f)
}

// without returns a copy of m without keys.
func without(m map[string]any, keys ...string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// --- headers and paths ----------------------------------------------------------------------

// validHeaderValue reports whether s is a header value (no control characters but tab) of
// at most 16 KiB.
func validHeaderValue(s string) bool {
	return len(s) <= maxHeaderValueBytes && httpguts.ValidHeaderFieldValue(s)
}

var reservedHeaders = []string{"Authorization", "Host", "Content-Length", "Content-Type", "Accept",
	"Transfer-Encoding", "Connection", "Idempotency-Key", "X-Idempotency-Key", "Te", "Trailer", "Upgrade"}

func copyExtraHeaders(dst, src http.Header) error {
	for name, vals := range src {
		cn := http.CanonicalHeaderKey(name)
		if slices.Contains(reservedHeaders, cn) || strings.HasPrefix(cn, "X-Hermes-") {
			continue
		}
		if !httpguts.ValidHeaderFieldName(name) {
			return inputErr("header", "invalid header name")
		}
		for _, v := range vals {
			if !validHeaderValue(v) {
				return inputErr("header."+cn, "invalid header value")
			}
			dst.Add(cn, v)
		}
	}
	return nil
}

// escapeSegment percent-encodes s as one path segment. It keeps the RFC 3986 unreserved bytes
// A–Z a–z 0–9 - . _ ~ and writes every other byte as %XX with upper-case hex. This differs from
// the AIP connector's form_urlencoded serializer (which keeps '*' and writes a space as '+'):
// in a path '+' is a literal plus, so %20 is the correct encoding of a space, and '~' is
// unreserved. It is also used for query values, where the same encoding is valid.
func escapeSegment(s string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

func unreserved(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// fillPath takes the path id from input[key] (or input.body[key] when allowBody) and
// substitutes it as one escaped path segment. The id must be a non-empty string of at most
// 512 bytes that is not a dot segment.
func fillPath(p *Prepared, in map[string]any, key string, allowBody bool) error {
	prefix := "input." // the field is prefix + key, built only for an error
	v, ok := in[key]
	if b, isObj := in["body"].(map[string]any); v == nil && allowBody && isObj {
		v, ok = b[key]
		prefix = "input.body."
	}
	s, isStr := v.(string)
	switch {
	case !ok || v == nil:
		return inputErr(prefix+key, "is required")
	case !isStr || s == "":
		return inputErr(prefix+key, "must be a non-empty string")
	case len(s) > maxPathIDBytes:
		return inputErr(prefix+key, "must be at most 512 bytes")
	case s == "." || s == "..":
		return inputErr(prefix+key, "must not be a dot segment")
	}
	p.Path = strings.Replace(p.Path, "{"+key+"}", escapeSegment(s), 1)
	return nil
}

// --- per-operation mapping ---------------------------------------------------------------------

var controlFields = []string{"session_key", "idempotency_key", "max_events"}

// bodyOrInput returns a copy of input.body (an object; another value is wrapped as
// {"input": body} when wrapNonObject, else an error) or of the input minus strip and body.
// prefix is the field prefix of the body's members.
func bodyOrInput(in map[string]any, wrapNonObject bool, strip ...string) (body map[string]any, prefix string, err error) {
	switch b := in["body"].(type) {
	case nil:
		body = without(in, strip...)
		delete(body, "body")
		return body, "input.", nil
	case map[string]any:
		return maps.Clone(b), "input.body.", nil
	default:
		if wrapNonObject {
			return map[string]any{"input": b}, "input.body.", nil
		}
		return nil, "", inputErr("input.body", "must be a JSON object")
	}
}

// chatBody encodes the chat input minus prompt, query, session_id, session_key,
// idempotency_key and max_events, with messages (from prompt or query), model (when absent)
// and stream set.
func chatBody(spec Spec, in map[string]any) ([]byte, error) {
	prompt := ""
	for _, k := range []string{"prompt", "query"} {
		if s, ok := in[k].(string); ok && s != "" {
			prompt = s
			break
		}
	}
	model, _ := in["model"].(string)
	model = cmp.Or(model, defaultModel)
	onlyPrompt := prompt != ""
	for k := range in {
		switch k {
		case "prompt", "query", "session_id", "session_key", "idempotency_key", "max_events", "model", "stream":
		default:
			onlyPrompt = false
		}
	}
	if onlyPrompt {
		return json.Marshal(&promptBody{Messages: [1]userMessage{{Content: prompt, Role: "user"}}, Model: model, Stream: spec.Stream}, bodyOptions)
	}
	body := without(in, "prompt", "query", "session_id", "session_key", "idempotency_key", "max_events")
	if prompt != "" {
		body["messages"] = []any{map[string]any{"role": "user", "content": prompt}}
	}
	body["model"] = model
	body["stream"] = spec.Stream
	return encodeBody(body)
}

// promptBody is the body of a chat input with nothing to pass through: it encodes exactly
// as the same object as a map (fields in sorted order), at a fraction of the cost.
type promptBody struct {
	Messages [1]userMessage `json:"messages"`
	Model    string         `json:"model"`
	Stream   bool           `json:"stream"`
}

type userMessage struct {
	Content string `json:"content"`
	Role    string `json:"role"`
}

// listParams are the sessions_list parameters, in the order of the query string;
// listDefaults the values of those always sent.
var (
	listParams   = []string{"limit", "offset", "source", "include_children"}
	listDefaults = map[string]string{"limit": strconv.Itoa(defaultListLimit), "offset": "0"}
)

// listValue maps one sessions_list parameter to its query value.
func listValue(k string, v any, field string) (string, error) {
	switch k {
	case "limit", "offset":
		n, ok := integer(v)
		if !ok || n < 0 {
			return "", inputErr(field, "must be a non-negative integer")
		}
		limit := float64(maxListLimit)
		if k == "offset" {
			limit = maxListOffset
		}
		return strconv.FormatFloat(min(n, limit)+0, 'f', -1, 64), nil // +0: -0 becomes 0
	case "source":
		s, _ := v.(string)
		if len(s) > maxQueryValueBytes {
			return "", inputErr(field, "must have at most 4096 bytes")
		}
		return s, nil
	}
	if b, ok := v.(bool); ok {
		return strconv.FormatBool(b), nil
	}
	s, _ := v.(string)
	return s, nil
}

// listQuery maps a sessions_list input to its query string. A parameter given both at top
// level and in query must map to the same value.
func listQuery(in map[string]any) (string, error) {
	q, _ := in["query"].(map[string]any)
	var b strings.Builder
	for _, k := range listParams {
		val, found := "", false
		for i, m := range []map[string]any{in, q} {
			v := m[k]
			if v == nil {
				continue
			}
			field := []string{"input.", "input.query."}[i] + k
			s, err := listValue(k, v, field)
			if err != nil {
				return "", err
			}
			if found && s != val {
				return "", inputErr(field, "conflicts with input."+k)
			}
			val, found = s, true
		}
		if d, ok := listDefaults[k]; !found && ok {
			val, found = d, true
		}
		if found {
			b.WriteString("&" + k + "=" + escapeSegment(val))
		}
	}
	return "?" + b.String()[1:], nil
}

// sessionChatBody maps a session chat: input.body or the input minus the path and control
// fields, with message set from prompt or query when neither message nor input is present.
func sessionChatBody(in map[string]any, h *prepared) (map[string]any, error) {
	body, prefix, err := bodyOrInput(in, false)
	if err != nil {
		return nil, err
	}
	src := in
	if prefix != "input." {
		src = in["body"].(map[string]any)
	}
	if err := h.header(in, "session_key", "X-Hermes-Session-Key", "input."); err != nil {
		return nil, err
	}
	if h.Header.Get("X-Hermes-Session-Key") == "" && prefix != "input." {
		if err := h.header(src, "session_key", "X-Hermes-Session-Key", prefix); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{"session_id", "session_key", "idempotency_key", "max_events", "prompt", "query"} {
		delete(body, k)
	}
	if src["message"] == nil && src["input"] == nil {
		for _, k := range []string{"prompt", "query"} {
			if s, ok := src[k].(string); ok && strings.TrimSpace(s) != "" {
				body["message"] = s
				break
			}
		}
	}
	return body, nil
}

// runIdempotencyKey checks the Idempotency-Key of run_start: required, 1–255 visible ASCII.
func runIdempotencyKey(k string) error {
	if k == "" {
		return inputErr("idempotency_key", "is required for run_start")
	}
	if len(k) > 255 {
		return inputErr("idempotency_key", "must be at most 255 characters for run_start")
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return inputErr("idempotency_key", "must be visible ASCII for run_start")
		}
	}
	return nil
}

// runStartBody maps a run_start input; an input array's last element must have a content
// (a rule the schema cannot say).
func runStartBody(in map[string]any, h *prepared) (map[string]any, error) {
	body, prefix, err := bodyOrInput(in, true, controlFields...)
	if err != nil {
		return nil, err
	}
	if err := h.header(in, "session_key", "X-Hermes-Session-Key", "input."); err != nil {
		return nil, err
	}
	if arr, ok := body["input"].([]any); ok && len(arr) > 0 {
		last, _ := arr[len(arr)-1].(map[string]any)
		if last["content"] == nil {
			return nil, inputErr(prefix+"input["+strconv.Itoa(len(arr)-1)+"].content", "is required")
		}
	}
	return body, nil
}

// approvalBody is {"choice"} from the input or input.body, with "all": true when all or
// resolve_all is true in either.
func approvalBody(in map[string]any) map[string]any {
	src := in
	if b, ok := in["body"].(map[string]any); ok {
		src = b
	}
	body := map[string]any{"choice": src["choice"]}
	if rid, ok := src["request_id"].(string); ok && rid != "" {
		body["request_id"] = rid
	}
	for _, k := range []string{"all", "resolve_all"} {
		if in[k] == true || src[k] == true {
			body["all"] = true
		}
	}
	return body
}
