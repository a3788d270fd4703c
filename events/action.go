package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
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

// Action is the data of an action CloudEvent (CONTRACT §2).
type Action struct {
	// CapabilityID, when set, must equal the capability named by the subject
	// (the caller checks that).
	CapabilityID string `json:"capability_id,omitempty"`
	// Input is the operation input, verbatim. DecodeAction sets {} when the
	// member is absent or null.
	Input          json.RawMessage `json:"input,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	TimeoutMS      *int64          `json:"timeout_ms,omitempty"`
	TenantID       string          `json:"tenant_id,omitempty"`
	Approval       *Approval       `json:"approval,omitempty"`
}

// Approval is an approval decision: the data of an approval CloudEvent
// (CONTRACT §7) or an action's pre-approval.
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

var emptyObject = json.RawMessage(`{}`)

// DecodeAction parses the data of an action CloudEvent. Rules:
//   - data is a JSON object; members other than capability_id, input,
//     idempotency_key, timeout_ms, tenant_id and approval are rejected;
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
// Errors are *[ActionError].
func DecodeAction(data []byte) (*Action, error) {
	var vals [maxObjectFields][]byte
	k, err := objectFields(data, "action", actionFields, false, &vals)
	if err != nil {
		return nil, err
	}
	if k != "" {
		return nil, &ActionError{Field: safeFieldName(k), Reason: "unknown field"}
	}
	a := &Action{Input: emptyObject}
	for i, k := range actionFields {
		v := vals[i]
		if v == nil || isNull(v) {
			continue
		}
		switch k {
		case "capability_id":
			if a.CapabilityID, err = jsonString(k, v); err != nil {
				return nil, err
			}
		case "input":
			if firstByte(v) != '{' {
				return nil, &ActionError{Field: k, Reason: "must be a JSON object"}
			}
			// A copy: the action must not share memory with data.
			a.Input = append(json.RawMessage(nil), v...)
		case "idempotency_key":
			s, err := jsonString(k, v)
			if err != nil {
				return nil, err
			}
			if reason := checkText(s, 1, MaxIdempotencyKeyLen); reason != "" {
				return nil, &ActionError{Field: k, Reason: reason}
			}
			a.IdempotencyKey = s
		case "timeout_ms":
			n, ok := jsonInteger(v)
			if !ok || n <= 0 || n > MaxTimeoutMS {
				return nil, &ActionError{Field: k, Reason: "must be a positive integer no greater than 86400000"}
			}
			a.TimeoutMS = &n
		case "tenant_id":
			s, err := jsonString(k, v)
			if err != nil {
				return nil, err
			}
			if reason := checkText(s, 0, MaxTenantIDLen); reason != "" {
				return nil, &ActionError{Field: k, Reason: reason}
			}
			a.TenantID = s
		case "approval":
			ap, err := decodeApproval(v, "approval.", true, true)
			if err != nil {
				return nil, err
			}
			a.Approval = ap
		}
	}
	return a, nil
}

// DecodeApproval parses the data of an approval CloudEvent:
// {decision, approver?, reason?, input_sha256?, decided_at?}. decision is
// approve or deny; input_sha256, when present, is 64 lowercase hex digits
// (the bridge requires it to approve); decided_at, when present, is an
// RFC 3339 timestamp. Unknown members are rejected. Errors are *[ActionError].
func DecodeApproval(data []byte) (*Approval, error) {
	return decodeApproval(data, "", false, false)
}

// decodeApproval decodes an approval object; prefix ("" or "approval.") starts the
// Field of its errors, pre requires input_sha256 and decided_at, and valid says that
// data is known to be valid JSON.
func decodeApproval(data []byte, prefix string, pre, valid bool) (*Approval, error) {
	var vals [maxObjectFields][]byte
	k, err := objectFields(data, "approval", approvalFields, valid, &vals)
	if err != nil {
		if prefix != "" {
			return nil, &ActionError{Field: "approval", Reason: "must be a JSON object"}
		}
		return nil, err
	}
	if k != "" {
		return nil, &ActionError{Field: prefix + safeFieldName(k), Reason: "unknown field"}
	}
	names := approvalFields
	if prefix != "" {
		names = prefixedApprovalFields(prefix)
	}
	ap := &Approval{}
	for i, k := range approvalFields {
		v := vals[i]
		if v == nil || isNull(v) {
			continue
		}
		f := names[i]
		switch k {
		case "decision":
			s, err := jsonString(f, v)
			if err != nil {
				return nil, err
			}
			if s != DecisionApprove && s != DecisionDeny {
				return nil, &ActionError{Field: f, Reason: "must be approve or deny"}
			}
			ap.Decision = s
		case "approver", "reason":
			s, err := jsonString(f, v)
			if err != nil {
				return nil, err
			}
			if k == "approver" {
				ap.Approver = s
			} else {
				ap.Reason = s
			}
		case "choice":
			s, err := jsonString(f, v)
			if err != nil {
				return nil, err
			}
			if s != ChoiceOnce && s != ChoiceSession && s != ChoiceAlways && s != ChoiceDeny {
				return nil, &ActionError{Field: f, Reason: "must be once, session, always or deny"}
			}
			ap.Choice = s
		case "input_sha256":
			s, err := jsonString(f, v)
			if err != nil {
				return nil, err
			}
			if !validSHA256Hex(s) {
				return nil, &ActionError{Field: f, Reason: "must be 64 lowercase hexadecimal digits"}
			}
			ap.InputSHA256 = s
		case "decided_at":
			s, err := jsonString(f, v)
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

var (
	actionFields   = []string{"capability_id", "input", "idempotency_key", "timeout_ms", "tenant_id", "approval"}
	approvalFields = []string{"decision", "approver", "reason", "input_sha256", "decided_at", "choice"}
	// approvalFieldsInAction are the Fields of a pre-approval's members: "approval." + name.
	approvalFieldsInAction = func() []string {
		names := make([]string, len(approvalFields))
		for i, k := range approvalFields {
			names[i] = "approval." + k
		}
		return names
	}()
)

// maxObjectFields bounds the number of known members of the objects objectFields reads.
const maxObjectFields = 6

// prefixedApprovalFields returns prefix + each of approvalFields, without allocating for
// the one prefix in use.
func prefixedApprovalFields(prefix string) []string {
	if prefix == "approval." {
		return approvalFieldsInAction
	}
	names := make([]string, len(approvalFields))
	for i, k := range approvalFields {
		names[i] = prefix + k
	}
	return names
}

// firstUnknown returns the smallest member name not in known, or "" when all
// are known. An unknown empty name is reported as "(unnamed field)".
func firstUnknown(m map[string]json.RawMessage, known []string) string {
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

// objectFields reads data, which must be a JSON object whose members are named in fields
// (at most maxObjectFields): vals[i] is the value of member fields[i], verbatim and
// without surrounding whitespace, or nil when absent; for a repeated member the last one
// counts. It gives the answers objectMembers followed by firstUnknown gives: the same
// errors for data that is not a JSON object (valid says data is known to be valid
// JSON), and unknown is firstUnknown's name when a member is not in fields. The values
// may share memory with data.
//
// The common case (member names without escapes, each a known one, none repeated) is
// read by scanning data once; anything else falls back to objectMembers.
func objectFields(data []byte, what string, fields []string, valid bool, vals *[maxObjectFields][]byte) (unknown string, err error) {
	if firstByte(data) != '{' {
		if !validJSON(data) {
			return "", &ActionError{Reason: what + " is not valid JSON"}
		}
		return "", &ActionError{Reason: what + " must be a JSON object"}
	}
	if !valid && !validJSON(data) {
		return "", &ActionError{Reason: what + " is not valid JSON"}
	}
	if scanKnownMembers(data, fields, vals) {
		return "", nil
	}
	*vals = [maxObjectFields][]byte{}
	m, err := objectMembers(data, what)
	if err != nil {
		return "", err
	}
	if k := firstUnknown(m, fields); k != "" {
		return k, nil
	}
	for i, k := range fields {
		if v, ok := m[k]; ok {
			vals[i] = v
		}
	}
	return "", nil
}

// scanKnownMembers reads the members of data, a valid JSON object, into vals (which
// must be all nil) and reports true when every member name is written without escapes,
// is one of fields and appears once. On false vals holds garbage.
func scanKnownMembers(data []byte, fields []string, vals *[maxObjectFields][]byte) bool {
	i := skipJSONSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipJSONSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) && data[i] == '"' {
		start := i + 1
		end := start
		for end < len(data) && data[end] != '"' && data[end] != '\\' {
			end++
		}
		if end >= len(data) || data[end] != '"' {
			return false // an escape, or truncated
		}
		name := data[start:end]
		idx := -1
		for j, f := range fields {
			if string(name) == f {
				idx = j
				break
			}
		}
		if idx < 0 || vals[idx] != nil {
			return false
		}
		i = skipJSONSpace(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipJSONSpace(data, i+1)
		vend := skipJSONValue(data, i)
		if vend <= i {
			return false
		}
		vals[idx] = data[i:vend:vend]
		i = skipJSONSpace(data, vend)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case '}':
			return true
		case ',':
			i = skipJSONSpace(data, i+1)
		default:
			return false
		}
	}
	return false
}

// skipJSONSpace returns the index of the first byte at or after i that is not JSON
// whitespace.
func skipJSONSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipJSONValue returns the index just after the JSON value that starts at data[i].
// data must be valid JSON (it only tracks strings and brackets); -1 when the value runs
// past the end.
func skipJSONValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipJSONString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				if i = skipJSONString(data, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	// A number or a literal.
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// skipJSONString returns the index just after the JSON string that starts at data[i]
// (a quote), or -1 when it is not terminated.
func skipJSONString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
	return -1
}

func objectMembers(data []byte, what string) (map[string]json.RawMessage, error) {
	if firstByte(data) != '{' {
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

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func isNull(v json.RawMessage) bool {
	return string(bytes.TrimSpace(v)) == "null"
}

// jsonString returns the JSON string v (without surrounding whitespace) unquoted as
// json.Unmarshal unquotes it; an error names field when v is not a string.
func jsonString(field string, v json.RawMessage) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && plainJSONString(v[1:len(v)-1]) {
		return string(v[1 : len(v)-1]), nil
	}
	var s string
	if firstByte(v) != '"' || json.Unmarshal(v, &s) != nil {
		return "", &ActionError{Field: field, Reason: "must be a string"}
	}
	return s, nil
}

// plainJSONString reports whether b, the inside of a quoted JSON string, needs no
// unquoting: no escape, quote or control character, and valid UTF-8 (which json.Unmarshal
// would keep byte for byte).
func plainJSONString(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(b)
}

// jsonInteger accepts a JSON number with an integral value (1, 1.0, 1e3), like
// JSON Schema's "integer".
func jsonInteger(v json.RawMessage) (int64, bool) {
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

func validSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// safeFieldName returns a member name fit for an error message: names that
// are not short identifiers are replaced by a placeholder.
func safeFieldName(k string) string {
	if len(k) == 0 || len(k) > 64 {
		return "(unnamed field)"
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return "(unnamed field)"
		}
	}
	return k
}
