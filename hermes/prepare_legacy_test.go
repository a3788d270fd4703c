package hermes

// This file is a test-only copy of prepare.go as it was before the allocation work
// (commit 1a5a5d9), every function, type and variable renamed with a legacy prefix. The
// differential fuzz target FuzzPrepareLegacy checks that Prepare still accepts, rejects and
// produces exactly what this copy does. Do not edit it except to keep it compiling.
// A change that means to alter what these functions accept or produce deletes the copy
// and its differential target in the same commit, and says so.

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

// legacyObj is a decoded JSON object whose values stay verbatim.
type legacyObj map[string]json.RawMessage

// legacyPrepare is Prepare as it was (see the top of this file).
func legacyPrepare(req Request) (*Prepared, error) {
	spec, ok := lookupAny(req.Operation)
	if !ok {
		return nil, inputErr("operation", "unknown operation")
	}
	in, ierr := legacyParseInput(req.Input)
	if ierr != nil {
		return nil, ierr
	}
	p := &Prepared{Spec: spec, Method: spec.Method, Path: spec.Path, Header: make(http.Header)}
	if err := legacyCopyExtraHeaders(p.Header, req.Header); err != nil {
		return nil, err
	}
	if req.IdempotencyKey != "" {
		if !legacyValidHeaderValue(req.IdempotencyKey) {
			return nil, inputErr("idempotency_key", "must be a valid header value of at most 16 KiB")
		}
		p.Header.Set("Idempotency-Key", req.IdempotencyKey)
	}

	var body legacyObj
	var err error
	switch spec.Name {
	case "health", "health_detailed", "models", "capabilities", "skills", "toolsets":
		err = legacyRequireEmpty(in)
	case "chat", "chat_stream":
		body, err = legacyPrepChat(spec, in, p.Header)
	case "responses", "responses_stream":
		body, err = legacyPrepResponses(spec, in, p.Header)
	case "response_get", "response_delete":
		err = legacyFillPath(p, in, "response_id", true)
	case "sessions_list":
		var q string
		q, err = legacyPrepSessionsList(in)
		p.Path += q
	case "session_create":
		body, err = legacyPrepSessionCreate(in)
	case "session_get", "session_delete", "session_messages":
		err = legacyFillPath(p, in, "session_id", true)
	case "session_patch":
		if err = legacyFillPath(p, in, "session_id", true); err == nil {
			body, err = legacyPrepSessionPatch(in)
		}
	case "session_fork":
		if err = legacyFillPath(p, in, "session_id", false); err == nil {
			body, err = legacyPrepSessionFork(in)
		}
	case "session_chat", "session_chat_stream":
		if err = legacyFillPath(p, in, "session_id", true); err == nil {
			body, err = legacyPrepSessionChat(in, p.Header)
		}
	case "run_start":
		if err = legacyRunIdempotencyKey(req.IdempotencyKey); err == nil {
			body, err = legacyPrepRunStart(in, p.Header)
		}
	case "run_status", "run_events", "run_stop":
		if err = legacyFillPath(p, in, "run_id", true); err == nil {
			err = legacySessionHeader(p.Header, in, "session_key", "X-Hermes-Session-Key", "input.session_key")
		}
	case "run_approval":
		if err = legacyFillPath(p, in, "run_id", true); err == nil {
			body, err = legacyPrepRunApproval(in)
		}
	}
	if err != nil {
		return nil, err
	}
	if spec.Stream {
		if p.MaxEvents, err = legacyMaxEvents(in); err != nil {
			return nil, err
		}
		p.Header.Set("Accept", "text/event-stream")
	} else {
		p.Header.Set("Accept", "application/json")
	}
	if body != nil {
		p.Body = legacyEncodeObject(body)
		if len(p.Body) > MaxRequestBody {
			e := newError(spec.Name, CodePayloadTooLarge, "request body exceeds 10000000 bytes")
			e.NotStarted = true
			e.Details = map[string]any{"limit_bytes": MaxRequestBody, "body_bytes": len(p.Body)}
			return nil, e
		}
		p.Header.Set("Content-Type", "application/json")
	}
	return p, nil
}

// --- JSON helpers -------------------------------------------------------------------------

func legacyParseInput(raw json.RawMessage) (legacyObj, *InputError) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return legacyObj{}, nil
	}
	if t[0] != '{' {
		return nil, inputErr("input", "must be a JSON object")
	}
	var m legacyObj
	if err := json.Unmarshal(t, &m); err != nil {
		return nil, inputErr("input", "must be a valid JSON object")
	}
	if m == nil {
		m = legacyObj{}
	}
	return m, nil
}

// legacyKindOf returns the JSON kind of a raw value: '{', '[', '"', 'b' (bool), 'n' (null), '0'
// (number) or 0 for an empty value.
func legacyKindOf(raw json.RawMessage) byte {
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
func (m legacyObj) get(k string) (json.RawMessage, bool) {
	v, ok := m[k]
	if !ok || legacyKindOf(v) == 'n' || legacyKindOf(v) == 0 {
		return nil, false
	}
	return v, true
}

func (m legacyObj) without(keys ...string) legacyObj {
	out := make(legacyObj, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

func legacyAsString(raw json.RawMessage) (string, bool) {
	if legacyKindOf(raw) != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func legacyAsObject(raw json.RawMessage) (legacyObj, bool) {
	if legacyKindOf(raw) != '{' {
		return nil, false
	}
	var m legacyObj
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	if m == nil {
		m = legacyObj{}
	}
	return m, true
}

func legacyAsArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if legacyKindOf(raw) != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

// legacyAsInt accepts an integral JSON number (and, when allowString, a decimal string).
func legacyAsInt(raw json.RawMessage, allowString bool) (int64, bool) {
	var s string
	switch legacyKindOf(raw) {
	case '0':
		s = string(bytes.TrimSpace(raw))
	case '"':
		if !allowString {
			return 0, false
		}
		s, _ = legacyAsString(raw)
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

// JSON values legacyPrepChat writes into every chat body. Bodies share them: legacyEncodeObject
// only reads its values.
var (
	legacyJsonDefaultModel = legacyMustJSON(defaultModel)
	legacyJsonTrue         = json.RawMessage("true")
	legacyJsonFalse        = json.RawMessage("false")
)

// legacyUserMessages returns the messages array of a one-prompt chat, byte for byte what
// json.Marshal writes for []map[string]string{{"role": "user", "content": content}}
// (members sorted), without marshalling the map.
func legacyUserMessages(content string) json.RawMessage {
	c := legacyMustJSON(content)
	b := make([]byte, 0, len(c)+len(`[{"content":,"role":"user"}]`))
	b = append(b, `[{"content":`...)
	b = append(b, c...)
	return append(b, `,"role":"user"}]`...)
}

func legacyMustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with strings and simple values
	}
	return b
}

// legacyEncodeObject writes m with sorted keys and the values verbatim.
func legacyEncodeObject(m legacyObj) []byte {
	keys := make([]string, 0, len(m))
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
		b = append(b, legacyMustJSON(k)...)
		b = append(b, ':')
		b = append(b, bytes.TrimSpace(m[k])...)
	}
	return append(b, '}')
}

func legacySortedKeys(m legacyObj) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// --- validators -----------------------------------------------------------------------------

func legacyHasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

func legacyValidHeaderValue(s string) bool {
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

func legacyValidHeaderName(s string) bool {
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

var legacyReservedHeaders = []string{"Authorization", "Host", "Content-Length", "Content-Type", "Accept",
	"Transfer-Encoding", "Connection", "Idempotency-Key", "X-Idempotency-Key", "Te", "Trailer", "Upgrade"}

func legacyCopyExtraHeaders(dst, src http.Header) error {
	for name, vals := range src {
		cn := http.CanonicalHeaderKey(name)
		if slices.Contains(legacyReservedHeaders, cn) || strings.HasPrefix(cn, "X-Hermes-") {
			continue
		}
		if !legacyValidHeaderName(name) {
			return inputErr("header", "invalid header name")
		}
		for _, v := range vals {
			if !legacyValidHeaderValue(v) {
				return inputErr("header."+cn, "invalid header value")
			}
			dst.Add(cn, v)
		}
	}
	return nil
}

// legacySessionHeader maps an optional session_id/session_key member to its header.
func legacySessionHeader(h http.Header, m legacyObj, key, header, field string) error {
	raw, ok := m.get(key)
	if !ok {
		return nil
	}
	s, ok := legacyAsString(raw)
	if !ok {
		return inputErr(field, "must be a string")
	}
	if s == "" {
		return nil
	}
	if utf8.RuneCountInString(s) > maxSessionHeaderLen {
		return inputErr(field, "must be at most 256 characters")
	}
	if legacyHasControl(s) || !legacyValidHeaderValue(s) {
		return inputErr(field, "must not contain control characters")
	}
	h.Set(header, s)
	return nil
}

// legacyValidPathID checks an id that becomes one path segment.
func legacyValidPathID(field, s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return inputErr(field, "must not be blank")
	case legacyHasControl(s):
		return inputErr(field, "must not contain control characters")
	case len(s) > maxPathIDBytes:
		return inputErr(field, "must be at most 512 bytes")
	case s == "." || s == "..":
		return inputErr(field, "must not be a dot segment")
	}
	return nil
}

// legacyValidSessionID applies Hermes's create-id rules (used for create and, stricter than the
// provider, for fork): non-empty after trimming, at most 256 characters, no control characters,
// no "..", "/" or "\", and no leading Windows drive prefix such as "C:".
func legacyValidSessionID(field, s string) error {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return inputErr(field, "must not be blank")
	case utf8.RuneCountInString(s) > maxSessionIDLen:
		return inputErr(field, "must be at most 256 characters")
	case legacyHasControl(s):
		return inputErr(field, "must not contain control characters")
	case strings.Contains(s, "..") || strings.ContainsAny(s, `/\`):
		return inputErr(field, `must not contain "..", "/" or "\"`)
	case len(t) >= 2 && t[1] == ':' && (t[0] >= 'A' && t[0] <= 'Z' || t[0] >= 'a' && t[0] <= 'z'):
		return inputErr(field, "must not start with a drive prefix")
	}
	return nil
}

// legacyEscapeSegment percent-encodes s as one path segment. It keeps the RFC 3986 legacyUnreserved bytes
// A–Z a–z 0–9 - . _ ~ and writes every other byte as %XX with upper-case hex. This differs from
// the AIP connector's form_urlencoded serializer (which keeps '*' and writes a space as '+'):
// in a path '+' is a literal plus, so %20 is the correct encoding of a space, and '~' is
// legacyUnreserved. It is also used for query values, where the same encoding is valid.
func legacyEscapeSegment(s string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(s); i++ {
		if !legacyUnreserved(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if legacyUnreserved(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

func legacyUnreserved(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// legacyFillPath takes the path id from input[key] (or input.body[key] when allowBody) and substitutes it.
func legacyFillPath(p *Prepared, in legacyObj, key string, allowBody bool) error {
	field := "input." + key
	raw, ok := in.get(key)
	if !ok && allowBody {
		if b, okb := in.get("body"); okb {
			if bm, isObj := legacyAsObject(b); isObj {
				raw, ok = bm.get(key)
				field = "input.body." + key
			}
		}
	}
	if !ok {
		return inputErr(field, "is required")
	}
	s, isStr := legacyAsString(raw)
	if !isStr {
		return inputErr(field, "must be a string")
	}
	if err := legacyValidPathID(field, s); err != nil {
		return err
	}
	p.Path = strings.Replace(p.Path, "{"+key+"}", legacyEscapeSegment(s), 1)
	return nil
}

func legacyRequireEmpty(in legacyObj) error {
	if len(in) > 0 {
		return inputErr("input."+legacySortedKeys(in)[0], "unexpected property: the input must be an empty object")
	}
	return nil
}

func legacyMaxEvents(in legacyObj) (int, error) {
	raw, ok := in.get("max_events")
	if !ok {
		return DefaultMaxEvents, nil
	}
	n, ok := legacyAsInt(raw, false)
	if !ok || n < 1 || n > MaxMaxEvents {
		return 0, inputErr("input.max_events", "must be an integer from 1 to 100000")
	}
	return int(n), nil
}

// --- per-operation mapping ---------------------------------------------------------------------

func legacyPrepChat(spec Spec, in legacyObj, h http.Header) (legacyObj, error) {
	var messages json.RawMessage
	branches := 0
	for _, k := range []string{"prompt", "query", "messages"} {
		raw, ok := in.get(k)
		if !ok {
			continue
		}
		branches++
		field := "input." + k
		if k == "messages" {
			arr, isArr := legacyAsArray(raw)
			if !isArr || len(arr) == 0 {
				return nil, inputErr(field, "must be a non-empty array")
			}
			for i, m := range arr {
				if legacyKindOf(m) != '{' {
					return nil, inputErr(field+"["+strconv.Itoa(i)+"]", "must be an object")
				}
			}
			messages = raw
			continue
		}
		s, isStr := legacyAsString(raw)
		if !isStr || strings.TrimSpace(s) == "" {
			return nil, inputErr(field, "must be a non-empty string")
		}
		messages = legacyUserMessages(s)
	}
	if branches != 1 {
		return nil, inputErr("input", "exactly one of prompt, query or messages is required")
	}
	if err := legacySessionHeader(h, in, "session_id", "X-Hermes-Session-Id", "input.session_id"); err != nil {
		return nil, err
	}
	if err := legacySessionHeader(h, in, "session_key", "X-Hermes-Session-Key", "input.session_key"); err != nil {
		return nil, err
	}
	body := in.without("prompt", "query", "session_id", "session_key", "idempotency_key", "max_events")
	body["messages"] = messages
	if raw, ok := in.get("model"); ok {
		if s, isStr := legacyAsString(raw); !isStr || s == "" {
			return nil, inputErr("input.model", "must be a non-empty string")
		}
	} else {
		body["model"] = legacyJsonDefaultModel
	}
	body["stream"] = legacyJsonFalse
	if spec.Stream {
		body["stream"] = legacyJsonTrue
	}
	return body, nil
}

var legacyControlFields = []string{"session_key", "idempotency_key", "max_events"}

// legacyBodyOrInput returns input.body (an object) or the input minus the control fields; beside a
// body only the control fields (and extraSiblings) are allowed.
func legacyBodyOrInput(in legacyObj, wrapNonObject bool, strip []string, extraSiblings ...string) (legacyObj, string, error) {
	raw, ok := in.get("body")
	if !ok {
		return in.without(append([]string{"body"}, strip...)...), "input", nil
	}
	for _, k := range legacySortedKeys(in) {
		if k != "body" && !slices.Contains(legacyControlFields, k) && !slices.Contains(extraSiblings, k) {
			return nil, "", inputErr("input."+k, "is not allowed beside body")
		}
	}
	if m, isObj := legacyAsObject(raw); isObj {
		return m, "input.body", nil
	}
	if wrapNonObject {
		return legacyObj{"input": raw}, "input.body", nil
	}
	return nil, "", inputErr("input.body", "must be a JSON object")
}

func legacyPrepResponses(spec Spec, in legacyObj, h http.Header) (legacyObj, error) {
	body, prefix, err := legacyBodyOrInput(in, true, legacyControlFields)
	if err != nil {
		return nil, err
	}
	if err := legacySessionHeader(h, in, "session_key", "X-Hermes-Session-Key", "input.session_key"); err != nil {
		return nil, err
	}
	raw, ok := body.get("input")
	if !ok {
		return nil, inputErr(prefix+".input", "is required")
	}
	if k := legacyKindOf(raw); k != '"' && k != '[' {
		return nil, inputErr(prefix+".input", "must be a string or an array")
	}
	_, hasConv := body.get("conversation")
	_, hasPrev := body.get("previous_response_id")
	if hasConv && hasPrev {
		return nil, inputErr(prefix+".conversation", "cannot be combined with previous_response_id")
	}
	if err := legacyCheckHistory(body, prefix); err != nil {
		return nil, err
	}
	body["stream"] = legacyMustJSON(spec.Stream)
	return body, nil
}

// legacyListParam validates one sessions_list parameter and returns its normalised query value.
func legacyListParam(k string, raw json.RawMessage, field string, fromQuery bool) (string, error) {
	switch k {
	case "limit", "offset":
		n, ok := legacyAsInt(raw, fromQuery)
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
		s, ok := legacyAsString(raw)
		if !ok || strings.TrimSpace(s) == "" {
			return "", inputErr(field, "must be a non-empty string")
		}
		if legacyHasControl(s) || len(s) > maxQueryValueBytes {
			return "", inputErr(field, "must have no control characters and at most 4096 bytes")
		}
		return s, nil
	case "include_children":
		if legacyKindOf(raw) == 'b' {
			return strings.TrimSpace(string(raw)), nil
		}
		if s, ok := legacyAsString(raw); fromQuery && ok && (s == "true" || s == "false") {
			return s, nil
		}
		return "", inputErr(field, "must be a boolean")
	}
	return "", inputErr(field, "is not a sessions_list parameter")
}

var legacyListParams = []string{"limit", "offset", "source", "include_children"}

func legacyPrepSessionsList(in legacyObj) (string, error) {
	vals := map[string]string{}
	for _, k := range legacySortedKeys(in) {
		if k == "query" || k == "idempotency_key" {
			continue
		}
		if !slices.Contains(legacyListParams, k) {
			return "", inputErr("input."+k, "unexpected property")
		}
		raw, ok := in.get(k)
		if !ok {
			continue
		}
		v, err := legacyListParam(k, raw, "input."+k, false)
		if err != nil {
			return "", err
		}
		vals[k] = v
	}
	if raw, ok := in.get("query"); ok {
		q, isObj := legacyAsObject(raw)
		if !isObj {
			return "", inputErr("input.query", "must be an object")
		}
		for _, k := range legacySortedKeys(q) {
			field := "input.query." + k
			if !slices.Contains(legacyListParams, k) {
				return "", inputErr(field, "unknown query parameter")
			}
			switch legacyKindOf(q[k]) {
			case '"', '0', 'b':
			default:
				return "", inputErr(field, "must be a scalar")
			}
			v, err := legacyListParam(k, q[k], field, true)
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
	for _, k := range legacyListParams {
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
		b.WriteString(legacyEscapeSegment(v))
	}
	return b.String(), nil
}

// legacyChildID checks the first non-empty of id and session_id in a create or fork body.
func legacyChildID(body legacyObj, prefix string) error {
	for _, k := range []string{"id", "session_id"} {
		raw, ok := body.get(k)
		if !ok {
			continue
		}
		s, isStr := legacyAsString(raw)
		if !isStr {
			return inputErr(prefix+"."+k, "must be a string")
		}
		if s == "" {
			continue
		}
		return legacyValidSessionID(prefix+"."+k, s)
	}
	return nil
}

func legacyPrepSessionCreate(in legacyObj) (legacyObj, error) {
	body, prefix, err := legacyBodyOrInput(in, false, legacyControlFields)
	if err != nil {
		return nil, err
	}
	if err := legacyChildID(body, prefix); err != nil {
		return nil, err
	}
	if raw, ok := body.get("system_prompt"); ok && legacyKindOf(raw) != '"' {
		return nil, inputErr(prefix+".system_prompt", "must be a string")
	}
	return body, nil
}

func legacyPrepSessionPatch(in legacyObj) (legacyObj, error) {
	body, prefix, err := legacyBodyOrInput(in, false, append([]string{"session_id"}, legacyControlFields...), "session_id")
	if err != nil {
		return nil, err
	}
	body = body.without("session_id", "session_key", "idempotency_key")
	for _, k := range legacySortedKeys(body) {
		if k != "title" && k != "end_reason" {
			return nil, inputErr(prefix+"."+k, "unsupported session field: only title and end_reason can be patched")
		}
		if kd := legacyKindOf(body[k]); kd != '"' && kd != 'n' {
			return nil, inputErr(prefix+"."+k, "must be a string or null")
		}
	}
	return body, nil
}

func legacyPrepSessionFork(in legacyObj) (legacyObj, error) {
	body, prefix, err := legacyBodyOrInput(in, false, append([]string{"session_id"}, legacyControlFields...), "session_id")
	if err != nil {
		return nil, err
	}
	body = body.without("session_key", "idempotency_key")
	if err := legacyChildID(body, prefix); err != nil {
		return nil, err
	}
	if raw, ok := body.get("title"); ok && legacyKindOf(raw) != '"' {
		return nil, inputErr(prefix+".title", "must be a string")
	}
	return body, nil
}

func legacyPrepSessionChat(in legacyObj, h http.Header) (legacyObj, error) {
	src, prefix, err := legacyBodyOrInput(in, false, nil, "session_id")
	if err != nil {
		return nil, err
	}
	if err := legacySessionHeader(h, in, "session_key", "X-Hermes-Session-Key", "input.session_key"); err != nil {
		return nil, err
	}
	if h.Get("X-Hermes-Session-Key") == "" && prefix == "input.body" {
		if err := legacySessionHeader(h, src, "session_key", "X-Hermes-Session-Key", prefix+".session_key"); err != nil {
			return nil, err
		}
	}
	_, hasMsg := src.get("message")
	_, hasInput := src.get("input")
	body := src.without("session_id", "session_key", "idempotency_key", "max_events", "prompt", "query")
	if !hasMsg && !hasInput {
		for _, k := range []string{"prompt", "query"} {
			raw, ok := src.get(k)
			if !ok {
				continue
			}
			s, isStr := legacyAsString(raw)
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
		v, err := legacyCheckContent(prefix+"."+k, raw)
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

// legacyCheckContent validates a session-chat message: a string or a list of content parts. It reports
// whether the content is visible (non-blank text or at least one part).
func legacyCheckContent(field string, raw json.RawMessage) (bool, error) {
	switch legacyKindOf(raw) {
	case '"':
		s, _ := legacyAsString(raw)
		if utf8.RuneCountInString(s) > maxMessageText {
			return false, inputErr(field, "text exceeds 65536 characters")
		}
		return strings.TrimSpace(s) != "", nil
	case '[':
		parts, ok := legacyAsArray(raw)
		if !ok {
			return false, inputErr(field, "must be a string or an array of content parts")
		}
		if len(parts) > maxContentParts {
			return false, inputErr(field, "has more than 1000 content parts")
		}
		for i, p := range parts {
			pf := field + "[" + strconv.Itoa(i) + "]"
			switch legacyKindOf(p) {
			case '"':
				if s, _ := legacyAsString(p); utf8.RuneCountInString(s) > maxMessageText {
					return false, inputErr(pf, "text exceeds 65536 characters")
				}
			case '{':
				m, _ := legacyAsObject(p)
				if t, ok := m.get("text"); ok {
					s, isStr := legacyAsString(t)
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

// legacyRunIdempotencyKey checks the Idempotency-Key of run_start: required, 1–255 visible ASCII.
func legacyRunIdempotencyKey(k string) error {
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

func legacyPrepRunStart(in legacyObj, h http.Header) (legacyObj, error) {
	body, prefix, err := legacyBodyOrInput(in, true, legacyControlFields)
	if err != nil {
		return nil, err
	}
	if err := legacySessionHeader(h, in, "session_key", "X-Hermes-Session-Key", "input.session_key"); err != nil {
		return nil, err
	}
	raw, ok := body.get("input")
	if !ok {
		return nil, inputErr(prefix+".input", "is required")
	}
	switch legacyKindOf(raw) {
	case '"':
		s, _ := legacyAsString(raw)
		if strings.TrimSpace(s) == "" {
			return nil, inputErr(prefix+".input", "must not be blank")
		}
	case '[':
		arr, _ := legacyAsArray(raw)
		if len(arr) == 0 {
			return nil, inputErr(prefix+".input", "must not be empty")
		}
		for i, it := range arr {
			if _, isObj := legacyAsObject(it); !isObj {
				return nil, inputErr(prefix+".input["+strconv.Itoa(i)+"]", "must be an object")
			}
		}
		last, _ := legacyAsObject(arr[len(arr)-1])
		if _, ok := last.get("content"); !ok {
			return nil, inputErr(prefix+".input["+strconv.Itoa(len(arr)-1)+"].content", "is required")
		}
	default:
		return nil, inputErr(prefix+".input", "must be a string or an array")
	}
	for _, k := range []string{"instructions", "session_id", "previous_response_id", "model"} {
		if raw, ok := body.get(k); ok && legacyKindOf(raw) != '"' {
			return nil, inputErr(prefix+"."+k, "must be a string")
		}
	}
	if raw, ok := body.get("session_id"); ok {
		s, _ := legacyAsString(raw)
		if utf8.RuneCountInString(s) > maxSessionIDLen || legacyHasControl(s) {
			return nil, inputErr(prefix+".session_id", "must be at most 256 characters without control characters")
		}
	}
	if err := legacyCheckHistory(body, prefix); err != nil {
		return nil, err
	}
	return body, nil
}

// legacyRunChoices are the approval choices Hermes accepts (aliases included).
var legacyRunChoices = []string{"once", "session", "always", "deny", "approve", "approved", "allow"}

func legacyPrepRunApproval(in legacyObj) (legacyObj, error) {
	src, prefix := in, "input"
	if b, ok := in.get("body"); ok {
		m, isObj := legacyAsObject(b)
		if !isObj {
			return nil, inputErr("input.body", "must be a JSON object")
		}
		src, prefix = m, "input.body"
	}
	raw, ok := src.get("choice")
	if !ok {
		return nil, inputErr(prefix+".choice", "is required")
	}
	choice, isStr := legacyAsString(raw)
	if !isStr || !slices.Contains(legacyRunChoices, choice) {
		return nil, inputErr(prefix+".choice", "must be one of once, session, always, deny, approve, approved, allow")
	}
	body := legacyObj{"choice": raw}
	for _, k := range []string{"all", "resolve_all"} {
		for i, m := range []legacyObj{in, src} {
			v, ok := m.get(k)
			if !ok {
				continue
			}
			if legacyKindOf(v) != 'b' {
				return nil, inputErr([]string{"input.", prefix + "."}[i]+k, "must be a boolean")
			}
			if string(bytes.TrimSpace(v)) == "true" {
				body["all"] = json.RawMessage("true")
			}
		}
	}
	return body, nil
}

// legacyCheckHistory checks a body's conversation_history, when present: an array of objects
// that each have a role and a content.
func legacyCheckHistory(body legacyObj, prefix string) error {
	raw, ok := body.get("conversation_history")
	if !ok {
		return nil
	}
	arr, isArr := legacyAsArray(raw)
	if !isArr {
		return inputErr(prefix+".conversation_history", "must be an array")
	}
	for i, it := range arr {
		m, isObj := legacyAsObject(it)
		_, hasRole := m["role"]
		_, hasContent := m["content"]
		if !isObj || !hasRole || !hasContent {
			return inputErr(prefix+".conversation_history["+strconv.Itoa(i)+"]", "must be an object with role and content")
		}
	}
	return nil
}
