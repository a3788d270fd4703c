package events

import (
	"bytes"
	"errors"
	"mime"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"
)

// Content modes reported in [Envelope.Mode].
const (
	ModeBinary     = "binary"
	ModeStructured = "structured"
)

// ErrNotCloudEvent marks a message that is not a readable CloudEvent or has
// no usable action id. Such a message cannot be answered on a results
// subject; the bridge copies it to the dead-letter subject.
var ErrNotCloudEvent = errors.New("events: not a readable CloudEvent")

// ErrInvalidAttribute marks a readable CloudEvent with a valid action id whose
// other attributes break the contract (wrong type or specversion, missing or
// malformed source, bad time, non-JSON data content type, ...). The bridge
// answers it with a failed result (code invalid_action).
var ErrInvalidAttribute = errors.New("events: invalid CloudEvent attribute")

// DecodeError is the error [DecodeEnvelope] returns for a message that goes
// to the dead-letter subject. errors.Is(err, ErrNotCloudEvent) holds. Reason
// is a human-readable description that never quotes message content.
type DecodeError struct {
	Reason string
}

func (e *DecodeError) Error() string { return "events: not a readable CloudEvent: " + e.Reason }

// Is reports whether target is [ErrNotCloudEvent].
func (e *DecodeError) Is(target error) bool { return target == ErrNotCloudEvent }

// AttributeError is the error [DecodeEnvelope] returns, together with a
// non-nil [Envelope] whose ID is valid, when the event is identifiable but an
// attribute is wrong. errors.Is(err, ErrInvalidAttribute) holds;
// errors.Is(err, ErrNotCloudEvent) does not.
type AttributeError struct {
	Attribute string // CloudEvents attribute name, e.g. "type"
	Reason    string // describes the constraint, never the value
}

func (e *AttributeError) Error() string {
	return "events: invalid CloudEvent attribute " + FieldReason(e.Attribute, e.Reason)
}

// Is reports whether target is [ErrInvalidAttribute].
func (e *AttributeError) Is(target error) bool { return target == ErrInvalidAttribute }

// Envelope is the CloudEvent wrapper of an action, as read from NATS.
type Envelope struct {
	ID          string    // valid action id (see ValidActionID); any printable id for a decision
	SpecVersion string    // "1.0" unless an AttributeError says otherwise
	Source      string    // URI-reference naming the publisher
	Type        string    // TypeAction unless an AttributeError says otherwise
	Subject     string    // optional CloudEvents subject ("" when absent)
	Traceparent string    // W3C traceparent: the CloudEvents extension, else the plain NATS header
	Tracestate  string    // W3C tracestate, same precedence
	Time        time.Time // zero when absent
	Mode        string    // ModeBinary or ModeStructured
	Data        []byte    // the event data (the action JSON), verbatim; nil when absent
}

// DecodeEnvelope reads an action CloudEvent from a NATS message. h may be nil.
//
// Mode detection: structured when a content-type header (name matched
// case-insensitively) starts with application/cloudevents; otherwise binary
// when a ce-specversion header exists; otherwise structured when the payload
// is a JSON object with a "specversion" member (the sdk-go rule); otherwise
// the message is not a CloudEvent. Binary-mode ce- header names are matched
// case-insensitively; values may be quoted (RFC 7230 quoted-string) and are
// percent-decoded once, and must then be valid UTF-8. Structured payloads are
// read with the CloudEvents JSON event format (sdk-go); one that sdk-go cannot read
// is classified by its id, specversion, type, source and subject members (names
// matched exactly) as the go-json-experiment library reads them: a payload that is
// not one JSON value (RFC 8259, valid UTF-8, no member name repeated) or has no
// string id is not a CloudEvent.
//
// Results:
//   - (env, nil): a valid action CloudEvent: specversion 1.0, type
//     [TypeAction], a valid action id, a non-empty source.
//   - (nil, *DecodeError): not a readable CloudEvent or no usable id (missing,
//     unreadable, or not matching [ValidActionID]); errors.Is(err,
//     ErrNotCloudEvent). The message belongs on the DLQ.
//   - (env, *AttributeError): the id is readable and valid (env.ID is set and
//     the other fields are filled as far as they could be read) but another
//     attribute breaks the contract; errors.Is(err, ErrInvalidAttribute). The
//     caller should answer with a failed invalid_action result for env.ID.
//
// DecodeEnvelope does not look inside the data; see [DecodeAction].
func DecodeEnvelope(h nats.Header, data []byte) (*Envelope, error) {
	return decodeEnvelope(h, data, actionRules)
}

// DecodeDecisionEnvelope reads an approval decision CloudEvent (CONTRACT §7) from a
// NATS message, with the rules of DecodeEnvelope except two: the id may be any
// non-empty string of printable UTF-8 (CloudEvents allows any; the action id comes
// from the subject), and the type must be [TypeApproval].
func DecodeDecisionEnvelope(h nats.Header, data []byte) (*Envelope, error) {
	return decodeEnvelope(h, data, decisionRules)
}

// envelopeRules is what differs between the kinds of CloudEvent the bridge reads.
type envelopeRules struct {
	validID  func(string) bool
	idReason string
	typ      string
}

var (
	actionRules   = &envelopeRules{validID: ValidActionID, idReason: "id is not a valid action id token", typ: TypeAction}
	decisionRules = &envelopeRules{validID: func(id string) bool { return id != "" && utf8Printable(id) },
		idReason: "id is not printable UTF-8", typ: TypeApproval}
)

func decodeEnvelope(h nats.Header, data []byte, rules *envelopeRules) (*Envelope, error) {
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
		return decodeBinary(&hv, data, rules)
	case looksStructured(data):
		return decodeStructured(&hv, data, rules)
	default:
		return nil, &DecodeError{Reason: "no ce-specversion header and no structured CloudEvent payload"}
	}
}

// Indexes of the header attributes DecodeEnvelope reads.
const (
	attrSpecVersion = iota
	attrID
	attrSource
	attrType
	attrSubject
	attrTime
	attrTraceparent
	attrTracestate
	attrDataSchema
	numAttrs
)

var attrNames = [numAttrs]string{"specversion", "id", "source", "type", "subject", "time", "traceparent", "tracestate", "dataschema"}

// headerView is the case-insensitive view of the headers DecodeEnvelope needs.
type headerView struct {
	raw         [numAttrs]string
	has         [numAttrs]bool
	conflict    string // name of the first attribute given conflicting values
	contentType string
	traceparent string // plain W3C headers
	tracestate  string
}

func (hv *headerView) add(k string, vs []string) {
	if len(vs) == 0 {
		return
	}
	switch {
	case hasPrefixFold(k, "ce-"):
		name := k[3:]
		for i, an := range attrNames {
			if !strings.EqualFold(name, an) {
				continue
			}
			for _, v := range vs {
				if hv.has[i] && hv.raw[i] != v && hv.conflict == "" {
					hv.conflict = an
				}
				if !hv.has[i] {
					hv.raw[i], hv.has[i] = v, true
				}
			}
			return
		}
	case strings.EqualFold(k, "content-type"):
		hv.contentType = vs[0]
	case strings.EqualFold(k, "traceparent"):
		hv.traceparent = vs[0]
	case strings.EqualFold(k, "tracestate"):
		hv.tracestate = vs[0]
	}
}

func looksStructured(data []byte) bool {
	d := bytes.TrimLeft(data, " \t\r\n")
	return len(d) > 0 && d[0] == '{' && bytes.Contains(d, []byte(`"specversion"`))
}

func decodeBinary(hv *headerView, data []byte, rules *envelopeRules) (*Envelope, error) {
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

	if hv.has[attrSource] && !parsesAsURL(env.Source) {
		return env, &AttributeError{Attribute: "source", Reason: "source must be a URI-reference"}
	}
	if hv.has[attrTime] {
		// As types.ParseTimestamp, without allocating the *Timestamp: "" is no time.
		ts, err := time.Parse(time.RFC3339Nano, vals[attrTime])
		if err != nil || vals[attrTime] == "" {
			return env, &AttributeError{Attribute: "time", Reason: "time must be an RFC 3339 timestamp"}
		}
		env.Time = ts
	}
	ct := strings.TrimSpace(hv.contentType)
	if ct != "" {
		if reason := checkJSONContentType(ct); reason != "" {
			return env, &AttributeError{Attribute: "datacontenttype", Reason: reason}
		}
	}
	if err := validateBinary(env, hv, &vals, ct); err != nil {
		return env, err
	}
	return env, rules.checkType(env)
}

// parsesAsURL reports whether url.Parse accepts s. A plain URI reference without a
// colon (see plainURIRef; as "hermes-bench") always parses, as a relative path, so it is
// not parsed.
func parsesAsURL(s string) bool {
	if plainURIRef(s) && strings.IndexByte(s, ':') < 0 {
		return true
	}
	_, err := url.Parse(s)
	return err == nil
}

func plainTrace(v string) string {
	if v == "" || !utf8Printable(v) {
		return ""
	}
	return v
}

// utf8Printable reports whether v is printable ASCII (trace-context values are).
func utf8Printable(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] >= 0x7f {
			return false
		}
	}
	return true
}

func checkJSONContentType(ct string) string {
	if ct == ContentTypeJSON {
		return "" // what mime.ParseMediaType would conclude, without its parameter map
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "datacontenttype is not a valid media type"
	}
	if mt != "application/json" && mt != "text/json" && !strings.HasSuffix(mt, "+json") {
		return "datacontenttype must be application/json"
	}
	return ""
}

func (r *envelopeRules) checkType(env *Envelope) error {
	if env.Type != r.typ {
		return &AttributeError{Attribute: "type", Reason: "type must be " + r.typ}
	}
	return nil
}

// sdkValidationOnly makes validateBinary always take the sdk-go path (tests compare the
// two paths).
var sdkValidationOnly atomic.Bool

// validateBinary applies sdk-go's CloudEvents validation to a binary event whose id,
// specversion, time and content type are already checked. The common case (no
// dataschema, a source made of plain URI characters) is checked here directly: sdk-go
// would build an event and format its source URL only to find it non-empty. Anything
// else builds the sdk-go event and runs its validation. Both paths give the same answer
// (TestBinaryValidationMatchesSDK, FuzzBinaryValidation).
func validateBinary(env *Envelope, hv *headerView, vals *[numAttrs]string, ct string) error {
	if !sdkValidationOnly.Load() && !hv.has[attrDataSchema] && plainURIRef(env.Source) {
		// The attributes left, in the name order validateEvent reports them in. (sdk-go
		// stores a blank subject as absent, so a subject never fails.)
		switch {
		case env.Source == "":
			return &AttributeError{Attribute: "source", Reason: attrReason("source")}
		case strings.TrimSpace(env.Type) == "":
			return &AttributeError{Attribute: "type", Reason: attrReason("type")}
		}
		return nil
	}
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetID(env.ID)
	ev.SetType(env.Type)
	if hv.has[attrSource] {
		ev.SetSource(env.Source)
	}
	if hv.has[attrSubject] {
		ev.SetSubject(env.Subject)
	}
	if hv.has[attrTime] {
		ev.SetTime(env.Time)
	}
	if hv.has[attrDataSchema] {
		ev.SetDataSchema(vals[attrDataSchema])
	}
	if ct != "" {
		ev.SetDataContentType(ct)
	}
	return validateEvent(&ev)
}

// plainURIRef reports whether s starts with a letter or digit and holds only unreserved
// URI characters, '/' and ':' (as "hermes-bench", "urn:x:y" or "https://host/path"):
// such a source, once parsed, formats as a non-empty URL.
func plainURIRef(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '-' || c == '.' || c == '_' || c == '~' || c == '/' || c == ':'):
		default:
			return false
		}
	}
	return true
}

// validateEvent runs the sdk-go validation and turns its first failure (in
// attribute-name order, for determinism) into an AttributeError whose reason
// does not echo values.
func validateEvent(ev *event.Event) error {
	err := ev.Validate()
	if err == nil {
		return nil
	}
	var ve event.ValidationError
	if !errors.As(err, &ve) || len(ve) == 0 {
		return &AttributeError{Attribute: "event", Reason: "event fails CloudEvents validation"}
	}
	keys := make([]string, 0, len(ve))
	for k := range ve {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	k := keys[0]
	return &AttributeError{Attribute: k, Reason: attrReason(k)}
}

// attrReason is the reason given for an attribute that fails CloudEvents validation; it
// never echoes the value.
func attrReason(k string) string {
	switch k {
	case "source":
		return "source is required and must be a non-empty URI-reference"
	case "type":
		return "type is required"
	case "subject":
		return "subject, if present, must be non-empty"
	case "time":
		return "time must be an RFC 3339 timestamp"
	case "datacontenttype":
		return "datacontenttype must be an RFC 2046 media type"
	case "dataschema":
		return "dataschema must be an absolute URI"
	}
	return k + " is invalid"
}

// structuredPeek reads the attributes needed to classify a structured event
// that sdk-go could not read.
type structuredPeek struct {
	ID          *string `json:"id"`
	SpecVersion any     `json:"specversion"`
	Type        any     `json:"type"`
	Source      any     `json:"source"`
	Subject     any     `json:"subject"`
}

// stringOf returns v when it is a string, else "".
func stringOf(v any) string {
	s, _ := v.(string)
	return s
}

func decodeStructured(hv *headerView, data []byte, rules *envelopeRules) (*Envelope, error) {
	var ev event.Event
	if err := ev.UnmarshalJSON(data); err != nil {
		if !jsontext.Value(data).IsValid() {
			return nil, &DecodeError{Reason: "structured payload is not valid JSON"}
		}
		var p structuredPeek
		if json.Unmarshal(data, &p) != nil {
			return nil, &DecodeError{Reason: "structured payload is not a JSON object with string attributes"}
		}
		if p.ID == nil {
			return nil, &DecodeError{Reason: "missing id attribute"}
		}
		if !rules.validID(*p.ID) {
			return nil, &DecodeError{Reason: rules.idReason}
		}
		env := &Envelope{
			ID: *p.ID, Mode: ModeStructured,
			SpecVersion: stringOf(p.SpecVersion), Type: stringOf(p.Type),
			Source: stringOf(p.Source), Subject: stringOf(p.Subject),
			Traceparent: plainTrace(hv.traceparent), Tracestate: plainTrace(hv.tracestate),
		}
		if env.SpecVersion != SpecVersion {
			return env, &AttributeError{Attribute: "specversion", Reason: "specversion must be 1.0"}
		}
		return env, &AttributeError{Attribute: "event", Reason: "event does not follow the CloudEvents JSON format"}
	}
	id := ev.ID()
	if id == "" {
		return nil, &DecodeError{Reason: "missing id attribute"}
	}
	if !rules.validID(id) {
		return nil, &DecodeError{Reason: rules.idReason}
	}
	env := &Envelope{
		ID:          id,
		SpecVersion: ev.SpecVersion(),
		Source:      ev.Source(),
		Type:        ev.Type(),
		Subject:     ev.Subject(),
		Time:        ev.Time(),
		Mode:        ModeStructured,
		Data:        ev.Data(),
	}
	var extErr error
	env.Traceparent, extErr = stringExtension(&ev, "traceparent", hv.traceparent)
	if extErr == nil {
		env.Tracestate, extErr = stringExtension(&ev, "tracestate", hv.tracestate)
	}
	if env.SpecVersion != SpecVersion {
		return env, &AttributeError{Attribute: "specversion", Reason: "specversion must be 1.0"}
	}
	if extErr != nil {
		return env, extErr
	}
	// data or data_base64: either way the bytes must be JSON (DecodeAction checks them).
	if ct := ev.DataContentType(); ct != "" {
		if reason := checkJSONContentType(ct); reason != "" {
			return env, &AttributeError{Attribute: "datacontenttype", Reason: reason}
		}
	}
	if err := validateEvent(&ev); err != nil {
		return env, err
	}
	return env, rules.checkType(env)
}

func stringExtension(ev *event.Event, name, fallback string) (string, error) {
	v, ok := ev.Extensions()[name]
	if !ok {
		return plainTrace(fallback), nil
	}
	s, err := types.ToString(v)
	if err != nil {
		return "", &AttributeError{Attribute: name, Reason: name + " must be a string"}
	}
	return s, nil
}
