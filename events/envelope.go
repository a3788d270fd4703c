package events

import (
	"bytes"
	"errors"
	"maps"
	"mime"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/go-json-experiment/json"
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
// not a JSON object (RFC 8259, valid UTF-8, no member name repeated) or has no
// string id is not a CloudEvent.
//
// Results:
//   - (env, nil): a valid action CloudEvent: specversion 1.0, type
//     [TypeAction], a valid action id, a non-empty source, a JSON data content
//     type when one is given, and attributes that pass sdk-go's CloudEvents
//     validation (as an RFC 3339 time and an absolute dataschema URI).
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

// DecodeDecisionEnvelope reads an approval decision CloudEvent (schemas/README.md, "Approvals") from a
// NATS message, with the rules of DecodeEnvelope except two: the id may be any
// non-empty string of printable ASCII (CloudEvents allows any; the action id comes
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
	decisionRules = &envelopeRules{validID: func(id string) bool { return id != "" && printableASCII(id) },
		idReason: "id is not printable ASCII", typ: TypeApproval}
)

func decodeEnvelope(h nats.Header, data []byte, rules *envelopeRules) (*Envelope, error) {
	hv := readHeaders(h)
	if hv.conflict[attrID] {
		return nil, &DecodeError{Reason: "conflicting ce-id headers"}
	}
	ct := strings.TrimSpace(hv.contentType)
	switch {
	case hasPrefixFold(ct, "application/cloudevents-batch"):
		return nil, &DecodeError{Reason: "batched CloudEvents are not supported"}
	case hasPrefixFold(ct, "application/cloudevents"):
		return decodeStructured(&hv, data, rules)
	case hv.has[attrSpecVersion]:
		return decodeBinary(&hv, ct, data, rules)
	case looksStructured(data):
		return decodeStructured(&hv, data, rules)
	}
	return nil, &DecodeError{Reason: "no ce-specversion header and no structured CloudEvent payload"}
}

// Indexes of the ce- headers DecodeEnvelope reads, in the order their failures are
// reported.
const (
	attrSpecVersion = iota
	attrID
	attrSource
	attrType
	attrSubject
	attrTime
	attrDataSchema
	attrTraceparent
	attrTracestate
	numAttrs
)

var attrNames = [numAttrs]string{"specversion", "id", "source", "type", "subject", "time", "dataschema", "traceparent", "tracestate"}

// headerView is what DecodeEnvelope reads from the headers, names matched
// case-insensitively.
type headerView struct {
	raw      [numAttrs]string // the first value of each ce- header
	has      [numAttrs]bool
	conflict [numAttrs]bool // a ce- header given different values
	// content-type and the plain W3C trace-context headers
	contentType, traceparent, tracestate string
}

func readHeaders(h nats.Header) headerView {
	var hv headerView
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		switch {
		case hasPrefixFold(k, "ce-"):
			i := slices.IndexFunc(attrNames[:], func(name string) bool { return strings.EqualFold(k[3:], name) })
			for _, v := range vs {
				switch {
				case i < 0:
				case !hv.has[i]:
					hv.raw[i], hv.has[i] = v, true
				case v != hv.raw[i]:
					hv.conflict[i] = true
				}
			}
		case strings.EqualFold(k, HeaderContentType):
			hv.contentType = vs[0]
		case strings.EqualFold(k, HeaderW3CTraceparent):
			hv.traceparent = vs[0]
		case strings.EqualFold(k, HeaderW3CTracestate):
			hv.tracestate = vs[0]
		}
	}
	return hv
}

func looksStructured(data []byte) bool {
	d := bytes.TrimLeft(data, " \t\r\n")
	return len(d) > 0 && d[0] == '{' && bytes.Contains(d, []byte(`"specversion"`))
}

// decodeBinary reads a binary-mode event. The attributes are validated by sdk-go
// (its v1 event context); ct is the trimmed content-type header.
func decodeBinary(hv *headerView, ct string, data []byte, rules *envelopeRules) (*Envelope, error) {
	var val, bad [numAttrs]string
	for i := range val {
		if hv.has[i] {
			val[i], bad[i] = decodeHeaderValue(hv.raw[i])
		}
	}
	switch {
	case !hv.has[attrID]:
		return nil, &DecodeError{Reason: "missing ce-id header"}
	case bad[attrID] != "":
		return nil, &DecodeError{Reason: "ce-id header " + bad[attrID]}
	case !rules.validID(val[attrID]):
		return nil, &DecodeError{Reason: rules.idReason}
	}
	env := &Envelope{ID: val[attrID], SpecVersion: val[attrSpecVersion], Source: val[attrSource], Type: val[attrType],
		Subject: val[attrSubject], Mode: ModeBinary, Data: data,
		Traceparent: val[attrTraceparent], Tracestate: val[attrTracestate]}
	if !hv.has[attrTraceparent] || bad[attrTraceparent] != "" {
		env.Traceparent = plainTrace(hv.traceparent)
	}
	if !hv.has[attrTracestate] || bad[attrTracestate] != "" {
		env.Tracestate = plainTrace(hv.tracestate)
	}
	for i, reason := range bad {
		switch {
		case hv.conflict[i]:
			return env, &AttributeError{Attribute: attrNames[i], Reason: "conflicting ce-" + attrNames[i] + " headers"}
		case reason != "":
			return env, &AttributeError{Attribute: attrNames[i], Reason: "ce-" + attrNames[i] + " header " + reason}
		}
	}
	if env.SpecVersion != SpecVersion {
		return env, &AttributeError{Attribute: "specversion", Reason: "specversion must be 1.0"}
	}
	// ec holds the attributes sdk-go's v1 validation reads (Validate, below).
	ec := event.EventContextV1{ID: env.ID, Type: env.Type}
	if hv.has[attrSource] && ec.SetSource(env.Source) != nil {
		return env, &AttributeError{Attribute: "source", Reason: "source must be a URI-reference"}
	}
	if hv.has[attrTime] {
		t, err := time.Parse(time.RFC3339Nano, val[attrTime])
		if err != nil {
			return env, &AttributeError{Attribute: "time", Reason: attrReason("time")}
		}
		env.Time = t
	}
	if ct != "" {
		if reason := checkJSONContentType(ct); reason != "" {
			return env, &AttributeError{Attribute: "datacontenttype", Reason: reason}
		}
	}
	// The rest of sdk-go's validation: id and type non-blank, source non-empty,
	// dataschema an absolute URI (sdk-go holds a blank subject as absent; time and
	// content type are checked above).
	if ec.SetDataSchema(val[attrDataSchema]) != nil {
		return env, &AttributeError{Attribute: "dataschema", Reason: attrReason("dataschema")}
	}
	if err := firstInvalid(ec.Validate()); err != nil {
		return env, err
	}
	return env, rules.checkType(env)
}

// plainTrace is a plain W3C trace-context header's value, "" when it is not printable
// ASCII (as a trace-context value is).
func plainTrace(v string) string {
	if !printableASCII(v) {
		return ""
	}
	return v
}

func printableASCII(v string) bool {
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

// firstInvalid turns the first failure of sdk-go's validation (in attribute-name order,
// for determinism) into an AttributeError whose reason does not echo values; nil when
// there is none.
func firstInvalid(ve event.ValidationError) error {
	if len(ve) == 0 {
		return nil
	}
	k := slices.Min(slices.Collect(maps.Keys(ve)))
	return &AttributeError{Attribute: k, Reason: attrReason(k)}
}

// attrReason is the reason given for an attribute that fails CloudEvents validation; it
// never echoes the value.
func attrReason(k string) string {
	if r, ok := attrReasons[k]; ok {
		return r
	}
	return k + " is invalid"
}

var attrReasons = map[string]string{
	"source":          "source is required and must be a non-empty URI-reference",
	"type":            "type is required",
	"subject":         "subject, if present, must be non-empty",
	"time":            "time must be an RFC 3339 timestamp",
	"datacontenttype": "datacontenttype must be an RFC 2046 media type",
	"dataschema":      "dataschema must be an absolute URI",
}

func decodeStructured(hv *headerView, data []byte, rules *envelopeRules) (*Envelope, error) {
	var ev event.Event
	if err := ev.UnmarshalJSON(data); err != nil {
		// Not the CloudEvents JSON format: classified by the members it has.
		var p map[string]any
		if json.Unmarshal(data, &p) != nil {
			return nil, &DecodeError{Reason: "structured payload is not a JSON object"}
		}
		str := func(name string) string { s, _ := p[name].(string); return s }
		if _, ok := p["id"].(string); !ok {
			return nil, &DecodeError{Reason: "missing id attribute or not a string"}
		}
		if !rules.validID(str("id")) {
			return nil, &DecodeError{Reason: rules.idReason}
		}
		env := &Envelope{ID: str("id"), Mode: ModeStructured, SpecVersion: str("specversion"), Type: str("type"),
			Source: str("source"), Subject: str("subject"),
			Traceparent: plainTrace(hv.traceparent), Tracestate: plainTrace(hv.tracestate)}
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
	ve, _ := ev.Validate().(event.ValidationError)
	if err := firstInvalid(ve); err != nil {
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
