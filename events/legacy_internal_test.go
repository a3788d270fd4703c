package events

// Verbatim copies of the hot-path functions as they were before they were
// optimized (commit 3e75199), renamed legacy*. The differential fuzz targets in
// differential_internal_test.go check that the current functions agree with
// them exactly; keep these copies unchanged.
// A change that means to alter what these functions accept or produce deletes the copy
// and its differential target in the same commit, and says so.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"mime"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
)

func legacyDecodeAction(data []byte) (*Action, error) {
	members, err := legacyObjectMembers(data, "action")
	if err != nil {
		return nil, err
	}
	if k := legacyFirstUnknown(members, actionFields); k != "" {
		return nil, &ActionError{Field: safeFieldName(k), Reason: "unknown field"}
	}
	a := &Action{Input: emptyObject}
	for _, k := range actionFields {
		v, ok := members[k]
		if !ok || legacyIsNull(v) {
			continue
		}
		switch k {
		case "capability_id":
			if a.CapabilityID, err = legacyJSONString(k, v); err != nil {
				return nil, err
			}
		case "input":
			if legacyFirstByte(v) != '{' {
				return nil, &ActionError{Field: k, Reason: "must be a JSON object"}
			}
			a.Input = v
		case "idempotency_key":
			s, err := legacyJSONString(k, v)
			if err != nil {
				return nil, err
			}
			if reason := legacyCheckText(s, 1, MaxIdempotencyKeyLen); reason != "" {
				return nil, &ActionError{Field: k, Reason: reason}
			}
			a.IdempotencyKey = s
		case "timeout_ms":
			n, ok := legacyJSONInteger(v)
			if !ok || n <= 0 || n > MaxTimeoutMS {
				return nil, &ActionError{Field: k, Reason: "must be a positive integer no greater than 86400000"}
			}
			a.TimeoutMS = &n
		case "tenant_id":
			s, err := legacyJSONString(k, v)
			if err != nil {
				return nil, err
			}
			if reason := legacyCheckText(s, 0, MaxTenantIDLen); reason != "" {
				return nil, &ActionError{Field: k, Reason: reason}
			}
			a.TenantID = s
		case "approval":
			ap, err := legacyDecodeApproval(v, "approval.", true)
			if err != nil {
				return nil, err
			}
			a.Approval = ap
		}
	}
	return a, nil
}

func legacyDecodeApproval(data []byte, prefix string, pre bool) (*Approval, error) {
	members, err := legacyObjectMembers(data, "approval")
	if err != nil {
		if prefix != "" {
			return nil, &ActionError{Field: "approval", Reason: "must be a JSON object"}
		}
		return nil, err
	}
	if k := legacyFirstUnknown(members, approvalFields); k != "" {
		return nil, &ActionError{Field: prefix + safeFieldName(k), Reason: "unknown field"}
	}
	ap := &Approval{}
	for _, k := range approvalFields {
		v, ok := members[k]
		if !ok || legacyIsNull(v) {
			continue
		}
		f := prefix + k
		switch k {
		case "decision":
			s, err := legacyJSONString(f, v)
			if err != nil {
				return nil, err
			}
			if s != DecisionApprove && s != DecisionDeny {
				return nil, &ActionError{Field: f, Reason: "must be approve or deny"}
			}
			ap.Decision = s
		case "approver", "reason":
			s, err := legacyJSONString(f, v)
			if err != nil {
				return nil, err
			}
			if k == "approver" {
				ap.Approver = s
			} else {
				ap.Reason = s
			}
		case "choice":
			s, err := legacyJSONString(f, v)
			if err != nil {
				return nil, err
			}
			if s != ChoiceOnce && s != ChoiceSession && s != ChoiceAlways && s != ChoiceDeny {
				return nil, &ActionError{Field: f, Reason: "must be once, session, always or deny"}
			}
			ap.Choice = s
		case "input_sha256":
			s, err := legacyJSONString(f, v)
			if err != nil {
				return nil, err
			}
			if !validSHA256Hex(s) {
				return nil, &ActionError{Field: f, Reason: "must be 64 lowercase hexadecimal digits"}
			}
			ap.InputSHA256 = s
		case "decided_at":
			s, err := legacyJSONString(f, v)
			if err != nil {
				return nil, err
			}
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return nil, &ActionError{Field: f, Reason: "must be an RFC 3339 timestamp"}
			}
			ap.DecidedAt = &t
		}
	}
	if ap.Decision == "" {
		return nil, &ActionError{Field: prefix + "decision", Reason: "is required"}
	}
	if ap.Choice != "" && (ap.Choice == ChoiceDeny) != (ap.Decision == DecisionDeny) {
		return nil, &ActionError{Field: prefix + "choice", Reason: "must be deny with decision deny, and once, session or always with decision approve"}
	}
	if pre && ap.InputSHA256 == "" {
		return nil, &ActionError{Field: prefix + "input_sha256", Reason: "is required"}
	}
	if pre && ap.DecidedAt == nil {
		return nil, &ActionError{Field: prefix + "decided_at", Reason: "is required"}
	}
	return ap, nil
}

func legacyFirstUnknown(m map[string]json.RawMessage, known []string) string {
	first, found := "", false
	for k := range m {
		if !slices.Contains(known, k) && (!found || k < first) {
			first, found = k, true
		}
	}
	if found && first == "" {
		return "(unnamed field)"
	}
	return first
}

func legacyObjectMembers(data []byte, what string) (map[string]json.RawMessage, error) {
	if legacyFirstByte(data) != '{' {
		if !json.Valid(data) {
			return nil, &ActionError{Reason: what + " is not valid JSON"}
		}
		return nil, &ActionError{Reason: what + " must be a JSON object"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, &ActionError{Reason: what + " is not valid JSON"}
	}
	return m, nil
}

func legacyFirstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func legacyIsNull(v json.RawMessage) bool {
	return string(bytes.TrimSpace(v)) == "null"
}

func legacyJSONString(field string, v json.RawMessage) (string, error) {
	var s string
	if legacyFirstByte(v) != '"' || json.Unmarshal(v, &s) != nil {
		return "", &ActionError{Field: field, Reason: "must be a string"}
	}
	return s, nil
}

func legacyJSONInteger(v json.RawMessage) (int64, bool) {
	s := string(bytes.TrimSpace(v))
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

func legacyCheckText(s string, minLen, maxLen int) string {
	n := utf8.RuneCountInString(s)
	if n < minLen || n > maxLen {
		return "must have " + strconv.Itoa(minLen) + " to " + strconv.Itoa(maxLen) + " characters"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "must not contain control characters"
		}
	}
	return ""
}

func legacyResultAppendJSON(r *Result, dst []byte) ([]byte, error) {
	dst = append(dst, `{"action_id":`...)
	dst = appendJSONString(dst, r.ActionID)
	dst = append(dst, `,"capability_id":`...)
	dst = appendJSONString(dst, r.CapabilityID)
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, r.Status)
	dst = append(dst, `,"output":`...)
	dst = appendRaw(dst, r.Output)
	dst = append(dst, `,"error":`...)
	if r.Error == nil {
		dst = append(dst, "null"...)
	} else {
		var err error
		if dst, err = legacyErrorInfoAppendJSON(r.Error, dst); err != nil {
			return nil, err
		}
	}
	dst = append(dst, `,"replay_of":`...)
	if r.ReplayOf == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, *r.ReplayOf)
	}
	return append(dst, '}'), nil
}

func legacyErrorInfoAppendJSON(e *ErrorInfo, dst []byte) ([]byte, error) {
	dst = append(dst, `{"code":`...)
	dst = appendJSONString(dst, e.Code)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, e.Message)
	dst = append(dst, `,"category":`...)
	dst = appendJSONString(dst, e.Category)
	dst = append(dst, `,"retryable":`...)
	dst = strconv.AppendBool(dst, e.Retryable)
	dst = append(dst, `,"uncertain_outcome":`...)
	dst = strconv.AppendBool(dst, e.UncertainOutcome)
	dst = append(dst, `,"http_status":`...)
	if e.HTTPStatus == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, int64(e.HTTPStatus), 10)
	}
	dst = append(dst, `,"retry_after_ms":`...)
	if e.RetryAfterMS == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, e.RetryAfterMS, 10)
	}
	dst = append(dst, `,"details":`...)
	if len(e.Details) == 0 {
		dst = append(dst, "null"...)
	} else {
		b, err := json.Marshal(e.Details)
		if err != nil {
			return nil, outputErr("error details are not JSON-encodable")
		}
		dst = append(dst, b...)
	}
	return append(dst, '}'), nil
}

func legacyBinaryHeader(src, typ, id, subject string, trace TraceContext) nats.Header {
	n := 7
	if subject != "" {
		n++
	}
	if trace.Traceparent != "" {
		n += 2
	}
	if trace.Tracestate != "" {
		n += 2
	}
	vals := make([]string, 0, n)
	h := make(nats.Header, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HeaderSpecVersion, SpecVersion)
	set(HeaderID, id) // ids are [A-Za-z0-9_:-]: never need encoding
	set(HeaderSource, PercentEncodeHeader(src))
	set(HeaderType, typ)
	var tb [40]byte
	set(HeaderTime, string(time.Now().UTC().AppendFormat(tb[:0], time.RFC3339Nano)))
	set(HeaderContentType, ContentTypeJSON)
	set(HeaderMsgID, id)
	if subject != "" {
		set(HeaderSubject, PercentEncodeHeader(subject))
	}
	if trace.Traceparent != "" {
		tp := PercentEncodeHeader(trace.Traceparent)
		set(HeaderTraceparent, tp)
		set(HeaderW3CTraceparent, tp)
	}
	if trace.Tracestate != "" {
		ts := PercentEncodeHeader(trace.Tracestate)
		set(HeaderTracestate, ts)
		set(HeaderW3CTracestate, ts)
	}
	return h
}

func legacyEncodeResult(src string, r *Result, trace TraceContext) (nats.Header, []byte, error) {
	if !ValidActionID(r.ActionID) {
		return nil, nil, outputErr("action id is not a valid action id token")
	}
	if !Terminal(r.Status) && r.Status != StatusPendingApproval {
		return nil, nil, outputErr("status must be completed, failed, cancelled or pending_approval")
	}
	if len(r.Output) > 0 && !json.Valid(r.Output) {
		return nil, nil, outputErr("result output is not valid JSON")
	}
	body, err := legacyResultAppendJSON(r, make([]byte, 0, 256+len(r.Output)))
	if err != nil {
		return nil, nil, err
	}
	return legacyBinaryHeader(src, TypeResult, ResultID(r.ActionID, r.Status), r.CapabilityID, trace), body, nil
}

func legacyHeaderGetFold(h nats.Header, name string) string {
	if vs, ok := h[name]; ok && len(vs) > 0 {
		v, bad := decodeHeaderValue(vs[0])
		if bad == "" {
			return v
		}
		return ""
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			v, bad := decodeHeaderValue(vs[0])
			if bad == "" {
				return v
			}
			return ""
		}
	}
	return ""
}

func legacyCheckOutputType(h nats.Header, want string) error {
	if h == nil {
		return nil
	}
	if t := legacyHeaderGetFold(h, HeaderType); t != "" && t != want {
		return outputErr("CloudEvent type is not " + want)
	}
	return nil
}

func legacyDecodeResult(h nats.Header, data []byte) (*Result, error) {
	if err := legacyCheckOutputType(h, TypeResult); err != nil {
		return nil, err
	}
	var r Result
	if legacyFirstByte(data) != '{' || json.Unmarshal(data, &r) != nil {
		return nil, outputErr("result data is not a JSON object of the result shape")
	}
	if !ValidActionID(r.ActionID) {
		return nil, outputErr("action id is not a valid action id token")
	}
	if !Terminal(r.Status) && r.Status != StatusPendingApproval {
		return nil, outputErr("unknown result status")
	}
	if len(r.Output) == 0 {
		r.Output = json.RawMessage("null")
	}
	return &r, nil
}

func legacyDecodeEnvelope(h nats.Header, data []byte, rules *envelopeRules) (*Envelope, error) {
	var hv headerView
	for k, vs := range h {
		hv.add(k, vs)
	}
	if hv.conflict == "id" {
		return nil, &DecodeError{Reason: "conflicting ce-id headers"}
	}
	switch {
	case hasPrefixFold(strings.TrimSpace(hv.contentType), "application/cloudevents"):
		ct := strings.ToLower(strings.TrimSpace(hv.contentType))
		if strings.HasPrefix(ct, "application/cloudevents-batch") {
			return nil, &DecodeError{Reason: "batched CloudEvents are not supported"}
		}
		return decodeStructured(&hv, data, rules)
	case hv.has[attrSpecVersion]:
		return legacyDecodeBinary(&hv, data, rules)
	case looksStructured(data):
		return decodeStructured(&hv, data, rules)
	default:
		return nil, &DecodeError{Reason: "no ce-specversion header and no structured CloudEvent payload"}
	}
}

func legacyDecodeBinary(hv *headerView, data []byte, rules *envelopeRules) (*Envelope, error) {
	var vals [numAttrs]string
	var bad [numAttrs]string
	for i := range vals {
		if hv.has[i] {
			vals[i], bad[i] = decodeHeaderValue(hv.raw[i])
		}
	}
	if !hv.has[attrID] {
		return nil, &DecodeError{Reason: "missing ce-id header"}
	}
	if bad[attrID] != "" {
		return nil, &DecodeError{Reason: "ce-id header " + bad[attrID]}
	}
	if !rules.validID(vals[attrID]) {
		return nil, &DecodeError{Reason: rules.idReason}
	}
	env := &Envelope{ID: vals[attrID], Mode: ModeBinary, Data: data}
	if bad[attrSpecVersion] == "" {
		env.SpecVersion = vals[attrSpecVersion]
	}
	if bad[attrSource] == "" {
		env.Source = vals[attrSource]
	}
	if bad[attrType] == "" {
		env.Type = vals[attrType]
	}
	if bad[attrSubject] == "" {
		env.Subject = vals[attrSubject]
	}
	env.Traceparent, env.Tracestate = vals[attrTraceparent], vals[attrTracestate]
	if !hv.has[attrTraceparent] || bad[attrTraceparent] != "" {
		env.Traceparent = plainTrace(hv.traceparent)
	}
	if !hv.has[attrTracestate] || bad[attrTracestate] != "" {
		env.Tracestate = plainTrace(hv.tracestate)
	}
	if hv.conflict != "" {
		return env, &AttributeError{Attribute: hv.conflict, Reason: "conflicting ce-" + hv.conflict + " headers"}
	}
	for i, reason := range bad {
		if reason != "" {
			return env, &AttributeError{Attribute: attrNames[i], Reason: "ce-" + attrNames[i] + " header " + reason}
		}
	}
	if env.SpecVersion != SpecVersion {
		return env, &AttributeError{Attribute: "specversion", Reason: "specversion must be 1.0"}
	}

	if hv.has[attrSource] {
		if _, err := url.Parse(env.Source); err != nil {
			return env, &AttributeError{Attribute: "source", Reason: "source must be a URI-reference"}
		}
	}
	if hv.has[attrTime] {
		ts, err := types.ParseTimestamp(vals[attrTime])
		if err != nil || ts == nil {
			return env, &AttributeError{Attribute: "time", Reason: "time must be an RFC 3339 timestamp"}
		}
		env.Time = ts.Time
	}
	ct := strings.TrimSpace(hv.contentType)
	if ct != "" {
		if reason := legacyCheckJSONContentType(ct); reason != "" {
			return env, &AttributeError{Attribute: "datacontenttype", Reason: reason}
		}
	}
	if err := validateBinary(env, hv, &vals, ct); err != nil {
		return env, err
	}
	return env, rules.checkType(env)
}

func legacyCanonicalize(v json.RawMessage) ([]byte, error) {
	p := legacyJCSParser{src: v}
	p.skipWS()
	out, err := p.value(make([]byte, 0, len(v)), 0)
	if err != nil {
		return nil, err
	}
	p.skipWS()
	if p.pos != len(p.src) {
		return nil, p.fail("unexpected data after the JSON value")
	}
	return out, nil
}

// InputSHA256 returns the lowercase hex SHA-256 of the canonical JSON
// ([Canonicalize]) of an action input. An absent (empty) or null input hashes
// as {}, matching DecodeAction's default.
func legacyInputSHA256(input json.RawMessage) (string, error) {
	trimmed := bytes.TrimSpace(input)
	var canon []byte
	if len(trimmed) == 0 || string(trimmed) == "null" {
		canon = []byte("{}")
	} else {
		var err error
		if canon, err = legacyCanonicalize(trimmed); err != nil {
			return "", err
		}
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

type legacyJCSParser struct {
	src []byte
	pos int
}

func (p *legacyJCSParser) fail(reason string) error {
	return &jcsError{reason: reason + " at offset " + strconv.Itoa(p.pos)}
}

func (p *legacyJCSParser) skipWS() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *legacyJCSParser) value(dst []byte, depth int) ([]byte, error) {
	if p.pos >= len(p.src) {
		return nil, p.fail("unexpected end of input")
	}
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object(dst, depth+1)
	case c == '[':
		return p.array(dst, depth+1)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return legacyAppendJCSString(dst, s), nil
	case c == '-' || '0' <= c && c <= '9':
		return p.number(dst)
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if bytes.HasPrefix(p.src[p.pos:], []byte(lit)) {
				p.pos += len(lit)
				return append(dst, lit...), nil
			}
		}
		return nil, p.fail("invalid character")
	}
}

type legacyJCSMember struct {
	key   []uint16
	value []byte
}

func (p *legacyJCSParser) object(dst []byte, depth int) ([]byte, error) {
	if depth > maxJCSDepth {
		return nil, p.fail("nesting too deep")
	}
	p.pos++ // {
	p.skipWS()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		return append(dst, '{', '}'), nil
	}
	var members []legacyJCSMember
	for {
		p.skipWS()
		if p.pos >= len(p.src) || p.src[p.pos] != '"' {
			return nil, p.fail("expected an object member name")
		}
		name, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipWS()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.pos++
		p.skipWS()
		m := legacyJCSMember{key: utf16.Encode([]rune(name))}
		m.value = legacyAppendJCSString(nil, name)
		m.value = append(m.value, ':')
		if m.value, err = p.value(m.value, depth); err != nil {
			return nil, err
		}
		members = append(members, m)
		more, err := p.separator('}')
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
	}
	slices.SortFunc(members, func(a, b legacyJCSMember) int { return slices.Compare(a.key, b.key) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			if slices.Equal(members[i-1].key, m.key) {
				return nil, &jcsError{reason: "duplicate object member name"}
			}
			dst = append(dst, ',')
		}
		dst = append(dst, m.value...)
	}
	return append(dst, '}'), nil
}

func (p *legacyJCSParser) array(dst []byte, depth int) ([]byte, error) {
	if depth > maxJCSDepth {
		return nil, p.fail("nesting too deep")
	}
	p.pos++ // [
	dst = append(dst, '[')
	p.skipWS()
	if p.pos < len(p.src) && p.src[p.pos] == ']' {
		p.pos++
		return append(dst, ']'), nil
	}
	for first := true; ; first = false {
		if !first {
			dst = append(dst, ',')
		}
		p.skipWS()
		var err error
		if dst, err = p.value(dst, depth); err != nil {
			return nil, err
		}
		more, err := p.separator(']')
		if err != nil {
			return nil, err
		}
		if !more {
			return append(dst, ']'), nil
		}
	}
}

// separator reads what follows a member or element: ',' (more is true) or the closing
// bracket end (more is false), after optional whitespace.
func (p *legacyJCSParser) separator(end byte) (more bool, err error) {
	p.skipWS()
	switch {
	case p.pos >= len(p.src):
		return false, p.fail("unexpected end of input")
	case p.src[p.pos] == ',':
		p.pos++
		return true, nil
	case p.src[p.pos] != end:
		return false, p.fail("expected ',' or '" + string(end) + "'")
	}
	p.pos++
	return false, nil
}

// str parses a JSON string at p.pos and returns its value.
func (p *legacyJCSParser) str() (string, error) {
	p.pos++ // opening quote
	var b []byte
	start := p.pos
	for {
		if p.pos >= len(p.src) {
			return "", p.fail("unterminated string")
		}
		c := p.src[p.pos]
		switch {
		case c == '"':
			var s string
			if b == nil {
				s = string(p.src[start:p.pos])
			} else {
				s = string(append(b, p.src[start:p.pos]...))
			}
			p.pos++
			return s, nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c == '\\':
			b = append(b, p.src[start:p.pos]...)
			p.pos++
			if p.pos >= len(p.src) {
				return "", p.fail("unterminated string")
			}
			e := p.src[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.fail("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || !bytes.HasPrefix(p.src[p.pos:], []byte(`\u`)) {
						return "", p.fail("lone surrogate")
					}
					p.pos += 2
					r2, ok := p.hex4()
					if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
						return "", p.fail("lone surrogate")
					}
					r = utf16.DecodeRune(r, r2)
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", p.fail("invalid escape")
			}
			start = p.pos
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.src[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return "", p.fail("invalid UTF-8")
			}
			p.pos += size
		}
	}
}

func (p *legacyJCSParser) hex4() (rune, bool) {
	if p.pos+4 > len(p.src) {
		return 0, false
	}
	var r rune
	for _, c := range p.src[p.pos : p.pos+4] {
		if !ishex(c) {
			return 0, false
		}
		r = r<<4 | rune(unhex(c))
	}
	p.pos += 4
	return r, true
}

func (p *legacyJCSParser) number(dst []byte) ([]byte, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.src) && '0' <= p.src[p.pos] && p.src[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.src[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.src) && p.src[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, p.fail("invalid number")
	}
	if p.pos < len(p.src) && p.src[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	if p.pos < len(p.src) && (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.src) && (p.src[p.pos] == '+' || p.src[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	f, err := strconv.ParseFloat(string(p.src[start:p.pos]), 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, p.fail("number out of the IEEE 754 double range")
	}
	return legacyAppendESNumber(dst, f), nil
}

// AppendESNumber appends f formatted as ECMAScript's Number.prototype.toString
// (ECMA-262 Number::toString, as RFC 8785 requires). f must be finite.
func legacyAppendESNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±XX
	mant, exp, _ := bytes.Cut(e, []byte("e"))
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	x, _ := strconv.Atoi(string(exp))
	k, n := len(digits), x+1 // value = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for i := 0; i < n-k; i++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for i := 0; i < -n; i++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// appendJCSString appends s (valid UTF-8) as an RFC 8785 string.
func legacyAppendJCSString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = appendEscapedASCII(append(dst, s[start:i]...), c)
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func legacyEncodeEvent(src string, ev *EventData, trace TraceContext) (nats.Header, []byte, error) {
	if !ValidActionID(ev.ActionID) {
		return nil, nil, outputErr("action id is not a valid action id token")
	}
	if ev.Sequence < 0 {
		return nil, nil, outputErr("sequence must not be negative")
	}
	if ev.Kind == "" {
		return nil, nil, outputErr("kind is required")
	}
	body := ev.AppendJSON(make([]byte, 0, ev.sizeHint()))
	return legacyBinaryHeader(src, TypeEvent, EventID(ev.ActionID, ev.Sequence), "", trace), body, nil
}

func legacyCheckJSONContentType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "datacontenttype is not a valid media type"
	}
	if mt != "application/json" && mt != "text/json" && !strings.HasSuffix(mt, "+json") {
		return "datacontenttype must be application/json"
	}
	return ""
}
