package hermes

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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
	maxSessionHeaderLen = 256 // characters, for X-Hermes-Session-Id/-Key
	maxSessionIDLen     = 256 // characters, for created/forked session ids
	maxMessageText      = 65_536
	maxContentParts     = 1_000
	maxQueryValueBytes  = 4096
	maxHeaderValueBytes = 16 << 10
	defaultListLimit    = 50
	maxListLimit        = 200
	maxListOffset       = 1_000_000
	defaultModel        = "hermes-agent"
)

// Request is one call.
type Request struct {
	Operation      string
	Input          json.RawMessage // the action input, verbatim; nil/`null` treated as {}
	IdempotencyKey string          // sent as Idempotency-Key when non-empty
	Header         http.Header     // extra headers (e.g. traceparent); may be nil
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

// obj is a decoded JSON object whose values stay verbatim.
type obj map[string]json.RawMessage

// Prepare validates the request with the seeds' rules and maps it to an HTTP request. It does no
// I/O. Invalid input gives an *InputError (errors.Is(err, ErrInvalidInput)); a body over
// MaxRequestBody gives an *Error with Code payload_too_large and NotStarted set.
//
// Mapping, per operation:
//
//   - health, health_detailed, models, capabilities, skills, toolsets: the input must be empty.
//
//   - chat, chat_stream: exactly one of prompt, query (non-empty strings) or messages (non-empty
//     array of objects); prompt/query become [{"role":"user","content":...}]; model defaults to
//     "hermes-agent"; stream is forced; session_id and session_key become X-Hermes-Session-Id and
//     X-Hermes-Session-Key; idempotency_key and max_events are removed; other fields pass through.
//
//   - responses, responses_stream: the body is input.body (a non-object is wrapped as {"input":…})
//     or the whole input minus session_key, idempotency_key and max_events; beside body only those
//     control fields are allowed; input is required; conversation excludes previous_response_id;
//     conversation_history entries need role and content; stream is forced.
//
//   - response_get, response_delete: response_id from the input or input.body.
//
//   - sessions_list: limit (default 50, clamped to 200), offset (default 0, clamped to 1000000),
//     source, include_children, at top level or in a query object (no unknown keys, no
//     conflicting duplicates); the query string is always "limit=&offset=" then the others.
//
//   - session_create: input.body or the whole input; the selected id (first non-empty of id and
//     session_id) must satisfy the create-id rules (see validSessionID).
//
//   - session_patch: only title and end_reason may remain in the body.
//
//   - session_fork: the path id comes from the top-level session_id only; the body (possibly {})
//     keeps id/session_id as the child id, checked with the create-id rules.
//
//   - session_chat, session_chat_stream: input.body or the input; message is set from prompt or
//     query when message and input are absent; session_id, session_key, idempotency_key,
//     max_events, prompt and query are removed; a visible message or input is required, each text
//     at most 65536 characters, at most 1000 content parts.
//
//   - run_start: input.body (a non-object is wrapped as {"input":…}) or the whole input minus
//     session_key, idempotency_key and max_events (beside body only those are allowed);
//     session_key becomes X-Hermes-Session-Key; input is required: a non-blank string or a
//     non-empty array of objects whose last element has a content; instructions, session_id,
//     previous_response_id and model must be strings when present (session_id at most 256
//     characters without control characters), conversation_history an array of objects with
//     role and content. Request.IdempotencyKey is required and must be 1–255 visible ASCII
//     characters (the rule of Hermes versions with durable run idempotency).
//
//   - run_status, run_events, run_stop: run_id from the input or input.body (a path id);
//     session_key becomes X-Hermes-Session-Key; run_stop sends no body.
//
//   - run_approval: run_id as above; choice (input or input.body) is one of once, session,
//     always, deny or the aliases approve, approved, allow (sent as given: Hermes maps them to
//     once); all or resolve_all (booleans) become "all": true. The body is {"choice", "all"?}.
//
// Every path id must be a string that is not blank, has no control character, is at most 512
// bytes and is not "." or ".."; it is percent-encoded as one path segment (see escapeSegment).
// Request.Header entries are copied except Authorization, Host, Content-Length, Content-Type,
// Accept, Transfer-Encoding, Connection, (X-)Idempotency-Key and X-Hermes-*, which the client owns.
func Prepare(req Request) (*Prepared, error) {
	spec, ok := lookupAny(req.Operation)
	if !ok {
		return nil, inputErr("operation", "unknown operation")
	}
	in, ierr := parseInput(req.Input)
	if ierr != nil {
		return nil, ierr
	}
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

	var body obj
	var err error
	switch spec.Name {
	case "health", "health_detailed", "models", "capabilities", "skills", "toolsets":
		err = requireEmpty(in)
	case "chat", "chat_stream":
		p.Body, err = prepChat(spec, in, pa)
	case "responses", "responses_stream":
		body, err = prepResponses(spec, in, pa)
	case "response_get", "response_delete":
		err = fillPath(p, in, "response_id", true)
	case "sessions_list":
		var q string
		q, err = prepSessionsList(in)
		p.Path += q
	case "session_create":
		body, err = prepSessionCreate(in)
	case "session_get", "session_delete", "session_messages":
		err = fillPath(p, in, "session_id", true)
	case "session_patch":
		if err = fillPath(p, in, "session_id", true); err == nil {
			body, err = prepSessionPatch(in)
		}
	case "session_fork":
		if err = fillPath(p, in, "session_id", false); err == nil {
			body, err = prepSessionFork(in)
		}
	case "session_chat", "session_chat_stream":
		if err = fillPath(p, in, "session_id", true); err == nil {
			body, err = prepSessionChat(in, pa)
		}
	case "run_start":
		if err = runIdempotencyKey(req.IdempotencyKey); err == nil {
			body, err = prepRunStart(in, pa)
		}
	case "run_status", "run_events", "run_stop":
		if err = fillPath(p, in, "run_id", true); err == nil {
			err = sessionHeader(pa, in, "session_key", "X-Hermes-Session-Key", "input.session_key")
		}
	case "run_approval":
		if err = fillPath(p, in, "run_id", true); err == nil {
			body, err = prepRunApproval(in)
		}
	}
	if err != nil {
		return nil, err
	}
	if spec.Stream {
		if p.MaxEvents, err = maxEvents(in); err != nil {
			return nil, err
		}
		pa.set("Accept", "text/event-stream")
	} else {
		pa.set("Accept", "application/json")
	}
	if body != nil {
		p.Body = encodeObject(body)
	}
	if p.Body != nil {
		if len(p.Body) > MaxRequestBody {
			e := newError(spec.Name, CodePayloadTooLarge, "request body exceeds 10000000 bytes")
			e.NotStarted = true
			e.Details = map[string]any{"limit_bytes": MaxRequestBody, "body_bytes": len(p.Body)}
			return nil, e
		}
		pa.set("Content-Type", "application/json")
	}
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

// --- JSON helpers -------------------------------------------------------------------------

func parseInput(raw json.RawMessage) (obj, *InputError) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return obj{}, nil
	}
	if t[0] != '{' {
		return nil, inputErr("input", "must be a JSON object")
	}
	if !json.Valid(t) {
		return nil, inputErr("input", "must be a valid JSON object")
	}
	return scanObject(t), nil
}

// scanObject decodes a JSON object that json.Valid accepted as json.Unmarshal into an obj
// would: member names unescaped, a repeated member keeps its last value, values are the
// exact bytes of each value. The values are sub-slices of t, not copies. The skip helpers
// are those of scan.go.
func scanObject(t []byte) obj {
	m := obj{}
	i := skipWS(t, 1)
	if t[i] == '}' {
		return m
	}
	for {
		i = skipWS(t, i)
		end := skipString(t, i)
		k := memberName(t[i:end])
		i = skipWS(t, end) + 1 // ':'
		i = skipWS(t, i)
		end = skipValue(t, i)
		m[k] = t[i:end:end]
		i = skipWS(t, end)
		if t[i] == '}' {
			return m
		}
		i++ // ','
	}
}

// memberName decodes a member name literal; the names Prepare looks up are returned
// without allocating.
func memberName(lit []byte) string {
	switch string(lit) {
	case `"prompt"`:
		return "prompt"
	case `"query"`:
		return "query"
	case `"messages"`:
		return "messages"
	case `"model"`:
		return "model"
	case `"stream"`:
		return "stream"
	case `"input"`:
		return "input"
	case `"body"`:
		return "body"
	case `"message"`:
		return "message"
	case `"session_id"`:
		return "session_id"
	case `"session_key"`:
		return "session_key"
	case `"idempotency_key"`:
		return "idempotency_key"
	case `"max_events"`:
		return "max_events"
	case `"instructions"`:
		return "instructions"
	case `"temperature"`:
		return "temperature"
	}
	s, _ := asString(lit)
	return s
}

// kindOf returns the JSON kind of a raw value: '{', '[', '"', 'b' (bool), 'n' (null), '0'
// (number) or 0 for an empty value.
func kindOf(raw json.RawMessage) byte {
	t := bytes.TrimLeft(raw, " \t\r\n")
	if len(t) == 0 {
		return 0
	}
	switch t[0] {
	case '{', '[', '"':
		return t[0]
	case 't', 'f':
		return 'b'
	case 'n':
		return 'n'
	default:
		return '0'
	}
}

// get returns a member that is present and not null.
func (m obj) get(k string) (json.RawMessage, bool) {
	v, ok := m[k]
	if !ok || kindOf(v) == 'n' || kindOf(v) == 0 {
		return nil, false
	}
	return v, true
}

func (m obj) without(keys ...string) obj {
	out := make(obj, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

func asString(raw json.RawMessage) (string, bool) {
	if kindOf(raw) != '"' {
		return "", false
	}
	if plainLiteral(raw) {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// asObject decodes a JSON object as json.Unmarshal into an obj would; its values are
// sub-slices of raw.
func asObject(raw json.RawMessage) (obj, bool) {
	if kindOf(raw) != '{' || !json.Valid(raw) {
		return nil, false
	}
	return scanObject(bytes.TrimSpace(raw)), true
}

func asArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if kindOf(raw) != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

// asInt accepts an integral JSON number (and, when allowString, a decimal string).
func asInt(raw json.RawMessage, allowString bool) (int64, bool) {
	var s string
	switch kindOf(raw) {
	case '0':
		s = string(bytes.TrimSpace(raw))
	case '"':
		if !allowString {
			return 0, false
		}
		s, _ = asString(raw)
		s = strings.TrimSpace(s)
	default:
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1e15 {
		return 0, false
	}
	return int64(f), true
}

// JSON values prepChat writes into every chat body. Bodies share them: encodeObject
// only reads its values.
var (
	jsonDefaultModel = mustJSON(defaultModel)
	jsonTrue         = json.RawMessage("true")
	jsonFalse        = json.RawMessage("false")
)

// plainLiteral reports whether raw is exactly a JSON string literal without escapes whose
// content is valid UTF-8: its value is then the bytes between the quotes.
func plainLiteral(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	c := raw[1 : len(raw)-1]
	ascii := true
	for _, b := range c {
		if b < 0x20 || b == '"' || b == '\\' {
			return false
		}
		if b >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.Valid(c)
}

// appendJSONString appends the string s as json.Marshal writes it (HTML characters escaped).
func appendJSONString[T string | []byte](b []byte, s T) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return append(b, mustJSON(string(s))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with strings and simple values
	}
	return b
}

// encodeObject writes m with sorted keys and the values verbatim.
func encodeObject(m obj) []byte {
	var buf [16]string
	keys := buf[:0]
	n := 2
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 4
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = append(b, bytes.TrimSpace(m[k])...)
	}
	return append(b, '}')
}

func sortedKeys(m obj) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// --- validators -----------------------------------------------------------------------------

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

func validHeaderValue(s string) bool {
	if len(s) > maxHeaderValueBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

var reservedHeaders = []string{"Authorization", "Host", "Content-Length", "Content-Type", "Accept",
	"Transfer-Encoding", "Connection", "Idempotency-Key", "X-Idempotency-Key", "Te", "Trailer", "Upgrade"}

func copyExtraHeaders(dst, src http.Header) error {
	for name, vals := range src {
		cn := http.CanonicalHeaderKey(name)
		if slices.Contains(reservedHeaders, cn) || strings.HasPrefix(cn, "X-Hermes-") {
			continue
		}
		if !validHeaderName(name) {
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

// sessionHeader maps an optional session_id/session_key member to its header.
func sessionHeader(h *prepared, m obj, key, header, field string) error {
	raw, ok := m.get(key)
	if !ok {
		return nil
	}
	s, ok := asString(raw)
	if !ok {
		return inputErr(field, "must be a string")
	}
	if s == "" {
		return nil
	}
	if utf8.RuneCountInString(s) > maxSessionHeaderLen {
		return inputErr(field, "must be at most 256 characters")
	}
	if hasControl(s) || !validHeaderValue(s) {
		return inputErr(field, "must not contain control characters")
	}
	h.set(header, s)
	return nil
}

// pathIDProblem checks an id that becomes one path segment: it returns the reason it is
// invalid, or "".
func pathIDProblem(s string) string {
	switch {
	case strings.TrimSpace(s) == "":
		return "must not be blank"
	case hasControl(s):
		return "must not contain control characters"
	case len(s) > maxPathIDBytes:
		return "must be at most 512 bytes"
	case s == "." || s == "..":
		return "must not be a dot segment"
	}
	return ""
}

// validSessionID applies Hermes's create-id rules (used for create and, stricter than the
// provider, for fork): non-empty after trimming, at most 256 characters, no control characters,
// no "..", "/" or "\", and no leading Windows drive prefix such as "C:".
func validSessionID(field, s string) error {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return inputErr(field, "must not be blank")
	case utf8.RuneCountInString(s) > maxSessionIDLen:
		return inputErr(field, "must be at most 256 characters")
	case hasControl(s):
		return inputErr(field, "must not contain control characters")
	case strings.Contains(s, "..") || strings.ContainsAny(s, `/\`):
		return inputErr(field, `must not contain "..", "/" or "\"`)
	case len(t) >= 2 && t[1] == ':' && (t[0] >= 'A' && t[0] <= 'Z' || t[0] >= 'a' && t[0] <= 'z'):
		return inputErr(field, "must not start with a drive prefix")
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

// fillPath takes the path id from input[key] (or input.body[key] when allowBody) and substitutes it.
func fillPath(p *Prepared, in obj, key string, allowBody bool) error {
	prefix := "input." // the field is prefix + key, built only for an error
	raw, ok := in.get(key)
	if !ok && allowBody {
		if b, okb := in.get("body"); okb {
			if bm, isObj := asObject(b); isObj {
				raw, ok = bm.get(key)
				prefix = "input.body."
			}
		}
	}
	if !ok {
		return inputErr(prefix+key, "is required")
	}
	s, isStr := asString(raw)
	if !isStr {
		return inputErr(prefix+key, "must be a string")
	}
	if reason := pathIDProblem(s); reason != "" {
		return inputErr(prefix+key, reason)
	}
	p.Path = strings.Replace(p.Path, "{"+key+"}", escapeSegment(s), 1)
	return nil
}

func requireEmpty(in obj) error {
	if len(in) > 0 {
		return inputErr("input."+sortedKeys(in)[0], "unexpected property: the input must be an empty object")
	}
	return nil
}

func maxEvents(in obj) (int, error) {
	raw, ok := in.get("max_events")
	if !ok {
		return DefaultMaxEvents, nil
	}
	n, ok := asInt(raw, false)
	if !ok || n < 1 || n > MaxMaxEvents {
		return 0, inputErr("input.max_events", "must be an integer from 1 to 100000")
	}
	return int(n), nil
}

// --- per-operation mapping ---------------------------------------------------------------------

// prepChat checks a chat input, sets its session headers and returns the body: the input
// minus prompt, query, session_id, session_key, idempotency_key and max_events, with messages,
// model (when absent) and stream set, written as encodeObject writes the same object.
func prepChat(spec Spec, in obj, h *prepared) ([]byte, error) {
	var messages json.RawMessage // the messages member, or nil for a prompt or query
	var prompt []byte            // the prompt or query text
	branches := 0
	for _, k := range []string{"prompt", "query", "messages"} {
		raw, ok := in.get(k)
		if !ok {
			continue
		}
		branches++
		if k == "messages" {
			n, notObj := objectElements(raw)
			if n == 0 {
				return nil, inputErr("input."+k, "must be a non-empty array")
			}
			if notObj >= 0 {
				return nil, inputErr("input."+k+"["+strconv.Itoa(notObj)+"]", "must be an object")
			}
			messages = raw
			continue
		}
		if plainLiteral(raw) { // the text is the literal's content: no need to decode a copy
			prompt = raw[1 : len(raw)-1]
			if len(bytes.TrimSpace(prompt)) == 0 {
				return nil, inputErr("input."+k, "must be a non-empty string")
			}
		} else {
			s, isStr := asString(raw)
			if !isStr || strings.TrimSpace(s) == "" {
				return nil, inputErr("input."+k, "must be a non-empty string")
			}
			prompt = []byte(s)
		}
		messages = nil
	}
	if branches != 1 {
		return nil, inputErr("input", "exactly one of prompt, query or messages is required")
	}
	if err := sessionHeader(h, in, "session_id", "X-Hermes-Session-Id", "input.session_id"); err != nil {
		return nil, err
	}
	if err := sessionHeader(h, in, "session_key", "X-Hermes-Session-Key", "input.session_key"); err != nil {
		return nil, err
	}
	var buf [8]member
	ms := buf[:0]
	n := 2 + len(prompt) + len(`"messages":[{"content":"","role":"user"}],"model":"hermes-agent","stream":false`)
	for k, v := range in {
		switch k {
		case "prompt", "query", "session_id", "session_key", "idempotency_key", "max_events", "messages", "model", "stream":
			continue
		}
		ms = append(ms, member{k, v})
		n += len(k) + len(v) + 4
	}
	if raw, ok := in.get("model"); ok {
		if s, isStr := asString(raw); !isStr || s == "" {
			return nil, inputErr("input.model", "must be a non-empty string")
		}
		ms = append(ms, member{"model", raw})
		n += len(raw)
	} else {
		ms = append(ms, member{"model", jsonDefaultModel})
	}
	stream := jsonFalse
	if spec.Stream {
		stream = jsonTrue
	}
	ms = append(ms, member{"stream", stream}, member{"messages", messages})
	n += len(messages)
	slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.k, b.k) })
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, m.k)
		b = append(b, ':')
		if m.k == "messages" && m.v == nil {
			b = append(b, `[{"content":`...)
			b = appendJSONString(b, prompt)
			b = append(b, `,"role":"user"}]`...)
			continue
		}
		b = append(b, bytes.TrimSpace(m.v)...)
	}
	return append(b, '}'), nil
}

// member is one member of an object being written.
type member struct {
	k string
	v json.RawMessage
}

// objectElements returns the number of elements of raw, a valid JSON value, and the index
// of the first that is not an object (-1 when all are); 0, -1 when raw is not an array.
func objectElements(raw json.RawMessage) (n, notObj int) {
	notObj = -1
	if kindOf(raw) != '[' {
		return 0, -1
	}
	i := skipWS(raw, 0) + 1 // '['
	for {
		i = skipWS(raw, i)
		if raw[i] == ']' {
			return n, notObj
		}
		if raw[i] != '{' && notObj < 0 {
			notObj = n
		}
		n++
		i = skipWS(raw, skipValue(raw, i))
		if raw[i] == ',' {
			i++
		}
	}
}

var controlFields = []string{"session_key", "idempotency_key", "max_events"}

// bodyOrInput returns input.body (an object) or the input minus the control fields; beside a
// body only the control fields (and extraSiblings) are allowed.
func bodyOrInput(in obj, wrapNonObject bool, strip []string, extraSiblings ...string) (obj, string, error) {
	raw, ok := in.get("body")
	if !ok {
		out := in.without(strip...)
		delete(out, "body")
		return out, "input", nil
	}
	for _, k := range sortedKeys(in) {
		if k != "body" && !slices.Contains(controlFields, k) && !slices.Contains(extraSiblings, k) {
			return nil, "", inputErr("input."+k, "is not allowed beside body")
		}
	}
	if m, isObj := asObject(raw); isObj {
		return m, "input.body", nil
	}
	if wrapNonObject {
		return obj{"input": raw}, "input.body", nil
	}
	return nil, "", inputErr("input.body", "must be a JSON object")
}

func prepResponses(spec Spec, in obj, h *prepared) (obj, error) {
	body, prefix, err := bodyOrInput(in, true, controlFields)
	if err != nil {
		return nil, err
	}
	if err := sessionHeader(h, in, "session_key", "X-Hermes-Session-Key", "input.session_key"); err != nil {
		return nil, err
	}
	raw, ok := body.get("input")
	if !ok {
		return nil, inputErr(prefix+".input", "is required")
	}
	if k := kindOf(raw); k != '"' && k != '[' {
		return nil, inputErr(prefix+".input", "must be a string or an array")
	}
	_, hasConv := body.get("conversation")
	_, hasPrev := body.get("previous_response_id")
	if hasConv && hasPrev {
		return nil, inputErr(prefix+".conversation", "cannot be combined with previous_response_id")
	}
	if err := checkHistory(body, prefix); err != nil {
		return nil, err
	}
	body["stream"] = jsonFalse
	if spec.Stream {
		body["stream"] = jsonTrue
	}
	return body, nil
}

// listParam validates one sessions_list parameter and returns its normalised query value.
func listParam(k string, raw json.RawMessage, field string, fromQuery bool) (string, error) {
	switch k {
	case "limit", "offset":
		n, ok := asInt(raw, fromQuery)
		if !ok || n < 0 {
			return "", inputErr(field, "must be a non-negative integer")
		}
		if k == "limit" && n > maxListLimit {
			n = maxListLimit
		}
		if k == "offset" && n > maxListOffset {
			n = maxListOffset
		}
		return strconv.FormatInt(n, 10), nil
	case "source":
		s, ok := asString(raw)
		if !ok || strings.TrimSpace(s) == "" {
			return "", inputErr(field, "must be a non-empty string")
		}
		if hasControl(s) || len(s) > maxQueryValueBytes {
			return "", inputErr(field, "must have no control characters and at most 4096 bytes")
		}
		return s, nil
	case "include_children":
		if kindOf(raw) == 'b' {
			return strings.TrimSpace(string(raw)), nil
		}
		if s, ok := asString(raw); fromQuery && ok && (s == "true" || s == "false") {
			return s, nil
		}
		return "", inputErr(field, "must be a boolean")
	}
	return "", inputErr(field, "is not a sessions_list parameter")
}

var listParams = []string{"limit", "offset", "source", "include_children"}

func prepSessionsList(in obj) (string, error) {
	vals := map[string]string{}
	for _, k := range sortedKeys(in) {
		if k == "query" || k == "idempotency_key" {
			continue
		}
		if !slices.Contains(listParams, k) {
			return "", inputErr("input."+k, "unexpected property")
		}
		raw, ok := in.get(k)
		if !ok {
			continue
		}
		v, err := listParam(k, raw, "input."+k, false)
		if err != nil {
			return "", err
		}
		vals[k] = v
	}
	if raw, ok := in.get("query"); ok {
		q, isObj := asObject(raw)
		if !isObj {
			return "", inputErr("input.query", "must be an object")
		}
		for _, k := range sortedKeys(q) {
			field := "input.query." + k
			if !slices.Contains(listParams, k) {
				return "", inputErr(field, "unknown query parameter")
			}
			switch kindOf(q[k]) {
			case '"', '0', 'b':
			default:
				return "", inputErr(field, "must be a scalar")
			}
			v, err := listParam(k, q[k], field, true)
			if err != nil {
				return "", err
			}
			if prev, dup := vals[k]; dup && prev != v {
				return "", inputErr(field, "conflicts with input."+k)
			}
			vals[k] = v
		}
	}
	if _, ok := vals["limit"]; !ok {
		vals["limit"] = strconv.Itoa(defaultListLimit)
	}
	if _, ok := vals["offset"]; !ok {
		vals["offset"] = "0"
	}
	var b strings.Builder
	for _, k := range listParams {
		v, ok := vals[k]
		if !ok {
			continue
		}
		if b.Len() == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(escapeSegment(v))
	}
	return b.String(), nil
}

// childID checks the first non-empty of id and session_id in a create or fork body.
func childID(body obj, prefix string) error {
	for _, k := range []string{"id", "session_id"} {
		raw, ok := body.get(k)
		if !ok {
			continue
		}
		s, isStr := asString(raw)
		if !isStr {
			return inputErr(prefix+"."+k, "must be a string")
		}
		if s == "" {
			continue
		}
		return validSessionID(prefix+"."+k, s)
	}
	return nil
}

func prepSessionCreate(in obj) (obj, error) {
	body, prefix, err := bodyOrInput(in, false, controlFields)
	if err != nil {
		return nil, err
	}
	if err := childID(body, prefix); err != nil {
		return nil, err
	}
	if raw, ok := body.get("system_prompt"); ok && kindOf(raw) != '"' {
		return nil, inputErr(prefix+".system_prompt", "must be a string")
	}
	return body, nil
}

func prepSessionPatch(in obj) (obj, error) {
	body, prefix, err := bodyOrInput(in, false, append([]string{"session_id"}, controlFields...), "session_id")
	if err != nil {
		return nil, err
	}
	body = body.without("session_id", "session_key", "idempotency_key")
	for _, k := range sortedKeys(body) {
		if k != "title" && k != "end_reason" {
			return nil, inputErr(prefix+"."+k, "unsupported session field: only title and end_reason can be patched")
		}
		if kd := kindOf(body[k]); kd != '"' && kd != 'n' {
			return nil, inputErr(prefix+"."+k, "must be a string or null")
		}
	}
	return body, nil
}

func prepSessionFork(in obj) (obj, error) {
	body, prefix, err := bodyOrInput(in, false, append([]string{"session_id"}, controlFields...), "session_id")
	if err != nil {
		return nil, err
	}
	body = body.without("session_key", "idempotency_key")
	if err := childID(body, prefix); err != nil {
		return nil, err
	}
	if raw, ok := body.get("title"); ok && kindOf(raw) != '"' {
		return nil, inputErr(prefix+".title", "must be a string")
	}
	return body, nil
}

func prepSessionChat(in obj, h *prepared) (obj, error) {
	// Without a body, src is the input itself rather than bodyOrInput's copy of it minus
	// body: src is only read, and body is removed from the copy made below.
	src, prefix := in, "input"
	if _, ok := in.get("body"); ok {
		var err error
		if src, prefix, err = bodyOrInput(in, false, nil, "session_id"); err != nil {
			return nil, err
		}
	}
	if err := sessionHeader(h, in, "session_key", "X-Hermes-Session-Key", "input.session_key"); err != nil {
		return nil, err
	}
	if h.Header.Get("X-Hermes-Session-Key") == "" && prefix == "input.body" {
		if err := sessionHeader(h, src, "session_key", "X-Hermes-Session-Key", prefix+".session_key"); err != nil {
			return nil, err
		}
	}
	_, hasMsg := src.get("message")
	_, hasInput := src.get("input")
	body := src.without("session_id", "session_key", "idempotency_key", "max_events", "prompt", "query")
	if prefix == "input" {
		delete(body, "body")
	}
	if !hasMsg && !hasInput {
		for _, k := range []string{"prompt", "query"} {
			raw, ok := src.get(k)
			if !ok {
				continue
			}
			s, isStr := asString(raw)
			if !isStr {
				return nil, inputErr(prefix+"."+k, "must be a string")
			}
			if strings.TrimSpace(s) != "" {
				body["message"] = raw
				break
			}
		}
	}
	visible := false
	for _, k := range []string{"message", "input"} {
		raw, ok := body.get(k)
		if !ok {
			continue
		}
		v, err := checkContent(prefix+"."+k, raw)
		if err != nil {
			return nil, err
		}
		visible = visible || v
	}
	if !visible {
		return nil, inputErr(prefix+".message", "a non-empty message or input is required")
	}
	return body, nil
}

// checkContent validates a session-chat message: a string or a list of content parts. It reports
// whether the content is visible (non-blank text or at least one part).
func checkContent(field string, raw json.RawMessage) (bool, error) {
	switch kindOf(raw) {
	case '"':
		s, _ := asString(raw)
		if utf8.RuneCountInString(s) > maxMessageText {
			return false, inputErr(field, "text exceeds 65536 characters")
		}
		return strings.TrimSpace(s) != "", nil
	case '[':
		parts, ok := asArray(raw)
		if !ok {
			return false, inputErr(field, "must be a string or an array of content parts")
		}
		if len(parts) > maxContentParts {
			return false, inputErr(field, "has more than 1000 content parts")
		}
		for i, p := range parts {
			pf := field + "[" + strconv.Itoa(i) + "]"
			switch kindOf(p) {
			case '"':
				if s, _ := asString(p); utf8.RuneCountInString(s) > maxMessageText {
					return false, inputErr(pf, "text exceeds 65536 characters")
				}
			case '{':
				m, _ := asObject(p)
				if t, ok := m.get("text"); ok {
					s, isStr := asString(t)
					if !isStr {
						return false, inputErr(pf+".text", "must be a string")
					}
					if utf8.RuneCountInString(s) > maxMessageText {
						return false, inputErr(pf+".text", "text exceeds 65536 characters")
					}
				}
			default:
				return false, inputErr(pf, "must be a string or an object")
			}
		}
		return len(parts) > 0, nil
	}
	return false, inputErr(field, "must be a string or an array of content parts")
}

// --- runs ---------------------------------------------------------------------------------------

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

func prepRunStart(in obj, h *prepared) (obj, error) {
	body, prefix, err := bodyOrInput(in, true, controlFields)
	if err != nil {
		return nil, err
	}
	if err := sessionHeader(h, in, "session_key", "X-Hermes-Session-Key", "input.session_key"); err != nil {
		return nil, err
	}
	raw, ok := body.get("input")
	if !ok {
		return nil, inputErr(prefix+".input", "is required")
	}
	switch kindOf(raw) {
	case '"':
		s, _ := asString(raw)
		if strings.TrimSpace(s) == "" {
			return nil, inputErr(prefix+".input", "must not be blank")
		}
	case '[':
		arr, _ := asArray(raw)
		if len(arr) == 0 {
			return nil, inputErr(prefix+".input", "must not be empty")
		}
		for i, it := range arr {
			if _, isObj := asObject(it); !isObj {
				return nil, inputErr(prefix+".input["+strconv.Itoa(i)+"]", "must be an object")
			}
		}
		last, _ := asObject(arr[len(arr)-1])
		if _, ok := last.get("content"); !ok {
			return nil, inputErr(prefix+".input["+strconv.Itoa(len(arr)-1)+"].content", "is required")
		}
	default:
		return nil, inputErr(prefix+".input", "must be a string or an array")
	}
	for _, k := range []string{"instructions", "session_id", "previous_response_id", "model"} {
		if raw, ok := body.get(k); ok && kindOf(raw) != '"' {
			return nil, inputErr(prefix+"."+k, "must be a string")
		}
	}
	if raw, ok := body.get("session_id"); ok {
		s, _ := asString(raw)
		if utf8.RuneCountInString(s) > maxSessionIDLen || hasControl(s) {
			return nil, inputErr(prefix+".session_id", "must be at most 256 characters without control characters")
		}
	}
	if err := checkHistory(body, prefix); err != nil {
		return nil, err
	}
	return body, nil
}

// runChoices are the approval choices Hermes accepts (aliases included).
var runChoices = []string{"once", "session", "always", "deny", "approve", "approved", "allow"}

func prepRunApproval(in obj) (obj, error) {
	src, prefix := in, "input"
	if b, ok := in.get("body"); ok {
		m, isObj := asObject(b)
		if !isObj {
			return nil, inputErr("input.body", "must be a JSON object")
		}
		src, prefix = m, "input.body"
	}
	raw, ok := src.get("choice")
	if !ok {
		return nil, inputErr(prefix+".choice", "is required")
	}
	choice, isStr := asString(raw)
	if !isStr || !slices.Contains(runChoices, choice) {
		return nil, inputErr(prefix+".choice", "must be one of once, session, always, deny, approve, approved, allow")
	}
	body := obj{"choice": raw}
	for _, k := range []string{"all", "resolve_all"} {
		for i, m := range []obj{in, src} {
			v, ok := m.get(k)
			if !ok {
				continue
			}
			if kindOf(v) != 'b' {
				return nil, inputErr([]string{"input.", prefix + "."}[i]+k, "must be a boolean")
			}
			if string(bytes.TrimSpace(v)) == "true" {
				body["all"] = json.RawMessage("true")
			}
		}
	}
	return body, nil
}

// checkHistory checks a body's conversation_history, when present: an array of objects
// that each have a role and a content.
func checkHistory(body obj, prefix string) error {
	raw, ok := body.get("conversation_history")
	if !ok {
		return nil
	}
	arr, isArr := asArray(raw)
	if !isArr {
		return inputErr(prefix+".conversation_history", "must be an array")
	}
	for i, it := range arr {
		m, isObj := asObject(it)
		_, hasRole := m["role"]
		_, hasContent := m["content"]
		if !isObj || !hasRole || !hasContent {
			return inputErr(prefix+".conversation_history["+strconv.Itoa(i)+"]", "must be an object with role and content")
		}
	}
	return nil
}
