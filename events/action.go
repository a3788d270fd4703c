package events

import (
	"bytes"
	v1json "encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Limits on action fields.
const (
	MaxIdempotencyKeyLen = 1024       // characters
	MaxTenantIDLen       = 256        // characters
	MaxTimeoutMS         = 86_400_000 // 24 h
)

// Approval decisions.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// ErrInvalidAction marks an action object that breaks the contract; the
// bridge answers it with a failed invalid_action result.
var ErrInvalidAction = errors.New("events: invalid action")

// ActionError describes why an action (or approval) object is invalid.
// errors.Is(err, ErrInvalidAction) holds. Field is the JSON path of the
// offending member ("" for the object itself, "timeout_ms",
// "approval.input_sha256", or the name of an unknown member); Reason
// describes the constraint and never quotes the value.
type ActionError struct {
	Field  string
	Reason string
}

func (e *ActionError) Error() string {
	return "events: invalid action: " + FieldReason(e.Field, e.Reason)
}

// FieldReason joins a field name and the reason it is invalid for a message: "field:
// reason", or the reason alone when there is no field or the reason already starts
// with the field's name ("capability_id does not match ..."), so that no message names
// its field twice.
func FieldReason(field, reason string) string {
	if field == "" {
		return reason
	}
	if rest, ok := strings.CutPrefix(reason, field); ok && (rest == "" || rest[0] == ' ') {
		return reason
	}
	return field + ": " + reason
}

// Is reports whether target is [ErrInvalidAction].
func (e *ActionError) Is(target error) bool { return target == ErrInvalidAction }

// Action is the data of an action CloudEvent (schemas/README.md, "The action").
type Action struct {
	// CapabilityID, when set, must equal the capability named by the subject
	// (the caller checks that).
	CapabilityID string `json:"capability_id,omitempty"`
	// Input is the operation input's JSON text, verbatim (hashed by [InputSHA256] and
	// kept in the action's record). DecodeAction sets {} when the member is absent or
	// null.
	Input          v1json.RawMessage `json:"input,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	TimeoutMS      *int64            `json:"timeout_ms,omitempty"`
	TenantID       string            `json:"tenant_id,omitempty"`
	Approval       *Approval         `json:"approval,omitempty"`

	// Data is the whole action object as DecodeAction decoded it (the tree described
	// there), for schema validation; nil for an Action built by hand.
	Data map[string]any `json:"-"`
	// Value is the decoded input: Data's input object, or an empty map when the member
	// is absent or null; nil for an Action built by hand.
	Value map[string]any `json:"-"`
}

// Approval is an approval decision: the data of an approval CloudEvent
// (schemas/README.md, "Approvals") or an action's pre-approval.
type Approval struct {
	Decision    string     `json:"decision"` // DecisionApprove or DecisionDeny
	Approver    string     `json:"approver,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	InputSHA256 string     `json:"input_sha256,omitempty"` // see InputSHA256
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	// Choice answers a governed run's tool approval: once, session or always (with
	// decision approve; "" means once) or deny (with decision deny). Parked actions
	// ignore it.
	Choice string `json:"choice,omitempty"`
	// RequestID names the tool approval of a governed run the decision answers: the
	// request_id of its approval.request (Hermes 0.21 and later send one; see the
	// pending_approval result's output.approval.request_id). "" answers the request
	// the run waits for. A decision naming a request the run no longer waits for is
	// not applied. Parked actions ignore it.
	RequestID string `json:"request_id,omitempty"`
}

// Run approval choices (Approval.Choice).
const (
	ChoiceOnce    = "once"
	ChoiceSession = "session"
	ChoiceAlways  = "always"
	ChoiceDeny    = "deny"
)

// RunChoice returns the Hermes choice an approval decision stands for: its Choice, else
// once for approve and deny for deny.
func (a *Approval) RunChoice() string {
	switch {
	case a.Choice != "":
		return a.Choice
	case a.Decision == DecisionDeny:
		return ChoiceDeny
	}
	return ChoiceOnce
}

// Timeout returns the action's timeout, or 0 when it has none.
func (a *Action) Timeout() time.Duration {
	if a.TimeoutMS == nil {
		return 0
	}
	return time.Duration(*a.TimeoutMS) * time.Millisecond
}

var emptyObject = v1json.RawMessage(`{}`)

// DecodeAction parses the data of an action CloudEvent. data must be one JSON object
// as the go-json-experiment library reads it by default (RFC 8259, valid UTF-8, no
// member name repeated at any depth, at most 10000 levels of nesting). Rules:
//   - members other than capability_id, input, idempotency_key, timeout_ms,
//     tenant_id and approval are rejected;
//   - a null member counts as absent;
//   - capability_id is a string;
//   - input, if present, is an object (absent: {});
//   - idempotency_key is a string of 1..1024 characters without control characters;
//   - timeout_ms is a positive integer no greater than 86,400,000;
//   - tenant_id is a string of at most 256 characters without control characters;
//   - approval is an object {decision, approver?, reason?, input_sha256,
//     decided_at} with decision approve|deny, input_sha256 64 lowercase hex
//     digits and decided_at an RFC 3339 timestamp (see [DecodeApproval]).
//
// The data is parsed once, into Action.Data: objects become map[string]any, arrays
// []any, strings string, true and false bool, null nil, and numbers encoding/json's
// Number holding the literal as written. Action.Value is its input object and
// Action.Input that member's text. The Action shares no memory with data.
//
// Errors are *[ActionError].
func DecodeAction(data []byte) (*Action, error) {
	obj, input, err := decodeObject(data, "action", "input")
	if err != nil {
		return nil, err
	}
	if k := firstUnknown(obj, actionFields); k != "" {
		return nil, &ActionError{Field: safeFieldName(k), Reason: "unknown field"}
	}
	a := &Action{Input: emptyObject, Data: obj}
	for _, k := range actionFields {
		v := obj[k]
		if v == nil {
			continue
		}
		switch k {
		case "capability_id":
			if a.CapabilityID, err = jsonString(k, v); err != nil {
				return nil, err
			}
		case "input":
			m, ok := v.(map[string]any)
			if !ok {
				return nil, &ActionError{Field: k, Reason: "must be a JSON object"}
			}
			// A copy: the action must not share memory with data.
			a.Input, a.Value = append(v1json.RawMessage(nil), input...), m
		case "idempotency_key", "tenant_id":
			dst, minLen, maxLen := &a.IdempotencyKey, 1, MaxIdempotencyKeyLen
			if k == "tenant_id" {
				dst, minLen, maxLen = &a.TenantID, 0, MaxTenantIDLen
			}
			if *dst, err = jsonString(k, v); err != nil {
				return nil, err
			}
			if reason := checkText(*dst, minLen, maxLen); reason != "" {
				return nil, &ActionError{Field: k, Reason: reason}
			}
		case "timeout_ms":
			n, ok := jsonInteger(v)
			if !ok || n <= 0 || n > MaxTimeoutMS {
				return nil, &ActionError{Field: k, Reason: "must be a positive integer no greater than 86400000"}
			}
			a.TimeoutMS = &n
		case "approval":
			m, ok := v.(map[string]any)
			if !ok {
				return nil, &ActionError{Field: k, Reason: "must be a JSON object"}
			}
			if a.Approval, err = approvalFrom(m, true); err != nil {
				return nil, err
			}
		}
	}
	if a.Value == nil {
		a.Value = map[string]any{}
	}
	return a, nil
}

// DecodeApproval parses the data of an approval CloudEvent:
// {decision, approver?, reason?, input_sha256?, decided_at?, choice?}, one JSON object
// read as [DecodeAction] reads its data. decision is approve or deny; input_sha256,
// when present, is 64 lowercase hex digits (the bridge requires it to approve);
// decided_at, when present, is an RFC 3339 timestamp; choice (see [Approval]) agrees
// with decision. Unknown members are rejected. Errors are *[ActionError].
func DecodeApproval(data []byte) (*Approval, error) {
	obj, _, err := decodeObject(data, "approval", "")
	if err != nil {
		return nil, err
	}
	return approvalFrom(obj, false)
}

// approvalFrom checks a decoded approval object. pre says it is an action's
// pre-approval: its errors' Fields start with "approval.", and input_sha256 and
// decided_at are required.
func approvalFrom(obj map[string]any, pre bool) (*Approval, error) {
	prefix := ""
	if pre {
		prefix = "approval."
	}
	if k := firstUnknown(obj, approvalFields); k != "" {
		return nil, &ActionError{Field: prefix + safeFieldName(k), Reason: "unknown field"}
	}
	ap := &Approval{}
	for _, k := range approvalFields {
		v := obj[k]
		if v == nil {
			continue
		}
		f := prefix + k
		s, err := jsonString(f, v)
		if err != nil {
			return nil, err
		}
		switch k {
		case "decision":
			if s != DecisionApprove && s != DecisionDeny {
				return nil, &ActionError{Field: f, Reason: "must be approve or deny"}
			}
			ap.Decision = s
		case "approver":
			ap.Approver = s
		case "reason":
			ap.Reason = s
		case "choice":
			if s != ChoiceOnce && s != ChoiceSession && s != ChoiceAlways && s != ChoiceDeny {
				return nil, &ActionError{Field: f, Reason: "must be once, session, always or deny"}
			}
			ap.Choice = s
		case "request_id":
			if n := utf8.RuneCountInString(s); n < 1 || n > 256 {
				return nil, &ActionError{Field: f, Reason: "must be 1 to 256 characters"}
			}
			ap.RequestID = s
		case "input_sha256":
			if !validSHA256Hex(s) {
				return nil, &ActionError{Field: f, Reason: "must be 64 lowercase hexadecimal digits"}
			}
			ap.InputSHA256 = s
		case "decided_at":
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

var (
	actionFields   = []string{"capability_id", "input", "idempotency_key", "timeout_ms", "tenant_id", "approval"}
	approvalFields = []string{"decision", "approver", "reason", "input_sha256", "decided_at", "choice", "request_id"}
)

// firstUnknown returns the smallest member name not in known, or "" when all
// are known. An unknown empty name is reported as "(unnamed field)".
func firstUnknown(m map[string]any, known []string) string {
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

// objectDecoder is a reusable library decoder reading from a byte slice in place.
type objectDecoder struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var objectDecoders = sync.Pool{New: func() any { return new(objectDecoder) }}

// decodeObject decodes data, which must be one JSON object, into its tree (see
// DecodeAction). raw is the text of the member named rawName, without the white space
// around it, or nil when there is no such member; it shares memory with data. The
// errors say that what ("action" or "approval") is not valid JSON or not a JSON object.
func decodeObject(data []byte, what, rawName string) (obj map[string]any, raw []byte, err error) {
	d := objectDecoders.Get().(*objectDecoder)
	defer func() {
		d.buf = bytes.Buffer{} // keep no reference to data
		d.dec.Reset(&d.buf)
		objectDecoders.Put(d)
	}()
	d.buf = *bytes.NewBuffer(data)
	d.dec.Reset(&d.buf)
	dec := &d.dec
	if dec.PeekKind() != '{' {
		if jsontext.Value(data).IsValid() {
			return nil, nil, &ActionError{Reason: what + " must be a JSON object"}
		}
		return nil, nil, &ActionError{Reason: what + " is not valid JSON"}
	}
	obj, err = readObject(dec, func(name string, start, end int64) {
		if name == rawName {
			raw = bytes.TrimLeft(data[start:end], " \t\r\n:")
		}
	})
	if err == nil {
		_, err = dec.ReadToken() // nothing may follow the object
		if err == io.EOF {
			return obj, raw, nil
		}
	}
	return nil, nil, &ActionError{Reason: what + " is not valid JSON"}
}

// readTree reads the next JSON value from dec into the tree DecodeAction describes.
// The decoder checks the syntax, UTF-8, nesting depth and member names' uniqueness.
func readTree(dec *jsontext.Decoder) (any, error) {
	switch dec.PeekKind() {
	case '{':
		return readObject(dec, nil)
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		a := []any{}
		for dec.PeekKind() != ']' {
			v, err := readTree(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.ReadToken()
		return a, err
	case '0':
		num, err := dec.ReadValue()
		return v1json.Number(num), err
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '"':
		return tok.String(), nil
	case 't', 'f':
		return tok.Bool(), nil
	}
	return nil, nil // null
}

// readObject reads the JSON object that starts at dec's next token into a map. member,
// when not nil, is given each member's name and the input offsets just after the name
// and just after the value.
func readObject(dec *jsontext.Decoder, member func(name string, start, end int64)) (map[string]any, error) {
	if _, err := dec.ReadToken(); err != nil {
		return nil, err
	}
	m := map[string]any{}
	for dec.PeekKind() != '}' {
		name, err := readName(dec)
		if err != nil {
			return nil, err
		}
		start := dec.InputOffset()
		v, err := readTree(dec)
		if err != nil {
			return nil, err
		}
		m[name] = v
		if member != nil {
			member(name, start, dec.InputOffset())
		}
	}
	_, err := dec.ReadToken()
	return m, err
}

// readName reads the member name at dec's next token. A name written without escapes
// that actions usually have (knownNames) is that constant, not a new string.
func readName(dec *jsontext.Decoder) (string, error) {
	raw, err := dec.ReadValue() // the quoted name, valid until the next read
	if err != nil {
		return "", err
	}
	if bytes.IndexByte(raw, '\\') >= 0 {
		b, err := jsontext.AppendUnquote(nil, raw)
		return string(b), err
	}
	name := raw[1 : len(raw)-1]
	if s, ok := knownNames[string(name)]; ok {
		return s, nil
	}
	return string(name), nil
}

// knownNames are the member names of an action and its pre-approval, and the usual ones
// of an input (chat, responses and session chat, their messages).
var knownNames = func() map[string]string {
	m := map[string]string{}
	for _, names := range [][]string{actionFields, approvalFields, {"prompt", "query", "messages", "message", "role",
		"content", "model", "session_id", "session_key", "instructions", "conversation", "previous_response_id",
		"temperature", "max_tokens", "stream", "metadata", "tools", "tool_choice", "text", "type", "name"}} {
		for _, n := range names {
			m[n] = n
		}
	}
	return m
}()

// jsonString returns v as a string; an error names field when v is not a string.
func jsonString(field string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", &ActionError{Field: field, Reason: "must be a string"}
	}
	return s, nil
}

// jsonInteger accepts a JSON number with an integral value (1, 1.0, 1e3), like
// JSON Schema's "integer".
func jsonInteger(v any) (int64, bool) {
	num, ok := v.(v1json.Number)
	if !ok {
		return 0, false
	}
	s := string(num)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// checkText checks a length in characters and the absence of control characters.
func checkText(s string, minLen, maxLen int) string {
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

// validSHA256Hex reports whether s is 64 lowercase hexadecimal digits.
func validSHA256Hex(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// safeFieldName returns a member name fit for an error message: names that
// are not short identifiers are replaced by a placeholder.
func safeFieldName(k string) string {
	if len(k) == 0 || len(k) > 64 || strings.Trim(k, idAlphabet+"_-.") != "" {
		return "(unnamed field)"
	}
	return k
}
