package events

import (
	"bytes"
	v1json "encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nats.go"
)

// Event kinds (schemas/README.md, "Events").
const (
	KindData            = "data"
	KindProgress        = "progress"
	KindTool            = "tool"
	KindThought         = "thought"
	KindPendingApproval = "pending_approval"
	KindError           = "error"
	KindDone            = "done"
)

// Result statuses (schemas/README.md, "Results").
const (
	StatusCompleted       = "completed"
	StatusFailed          = "failed"
	StatusCancelled       = "cancelled"
	StatusPendingApproval = "pending_approval"
)

// Terminal reports whether status settles an action (completed, failed or
// cancelled).
func Terminal(status string) bool {
	return status == StatusCompleted || status == StatusFailed || status == StatusCancelled
}

// ErrInvalidOutput marks an event or result that cannot be encoded or decoded
// (bad action id, unknown status, malformed JSON, wrong CloudEvent type).
var ErrInvalidOutput = errors.New("events: invalid output message")

type outputError struct{ reason string }

func (e *outputError) Error() string        { return "events: invalid output message: " + e.reason }
func (e *outputError) Is(target error) bool { return target == ErrInvalidOutput }

// TraceContext is the W3C trace context propagated onto output messages.
type TraceContext struct {
	Traceparent string
	Tracestate  string
}

// EventData is the data of an event CloudEvent (schemas/README.md, "Events"). Its JSON form
// is {"action_id","sequence","kind","event":{"event","id","data"},"text"}
// with "text" omitted when empty.
type EventData struct {
	ActionID string `json:"action_id"`
	Sequence int64  `json:"sequence"`
	Kind     string `json:"kind"`
	Event    SSE    `json:"event"`
	Text     string `json:"text,omitempty"`
}

// SSE is one upstream server-sent event. Its JSON form always has the three
// members: "event" (the SSE event name, null when absent), "id" (null when
// absent) and "data" (the parsed JSON data, the raw string when it is not
// JSON, null when empty).
type SSE struct {
	Event string            `json:"event"`
	ID    *string           `json:"id"`
	Data  v1json.RawMessage `json:"data"`
}

// Result is the data of a result CloudEvent (schemas/README.md, "Results"). Its JSON form
// always has the six members action_id, capability_id, status, output, error
// and replay_of (output, error and replay_of null when absent), and a seventh,
// usage, only when Hermes reported usage for the action's work.
//
// Output is carried as-is: for an output that did not fit in one message it
// is whatever reference object the bridge stored in its place, and callers
// that need the full output resolve that reference themselves.
type Result struct {
	ActionID     string            `json:"action_id"`
	CapabilityID string            `json:"capability_id"`
	Status       string            `json:"status"`
	Output       v1json.RawMessage `json:"output"`
	Error        *ErrorInfo        `json:"error"`
	ReplayOf     *string           `json:"replay_of"`
	Usage        *Usage            `json:"usage,omitempty"`
}

// Usage is the token usage (and cost) Hermes reported for an action's work
// (schemas/result.schema.json, $defs/usage). CostUSD is nil, and cost_usd
// absent, when Hermes reported no cost.
type Usage struct {
	InputTokens  int64    `json:"input_tokens"`
	OutputTokens int64    `json:"output_tokens"`
	TotalTokens  int64    `json:"total_tokens"`
	CostUSD      *float64 `json:"cost_usd,omitempty"`
}

// ErrorInfo is a result's error object. Its JSON form always has all eight
// members; http_status and retry_after_ms are null when 0 and details is null
// when empty.
type ErrorInfo struct {
	Code             string         `json:"code"`
	Message          string         `json:"message"`
	Category         string         `json:"category"`
	Retryable        bool           `json:"retryable"`
	UncertainOutcome bool           `json:"uncertain_outcome"`
	HTTPStatus       int            `json:"http_status"`
	RetryAfterMS     int64          `json:"retry_after_ms"`
	Details          map[string]any `json:"details"`
}

// MarshalJSON implements json.Marshaler with the contract form. Errors (event
// data that is not valid JSON) wrap [ErrInvalidOutput].
func (e EventData) MarshalJSON() ([]byte, error) { return marshalEvent(&e) }

// MarshalJSON implements json.Marshaler with the contract form. Errors (an
// output that is not valid JSON, error details that cannot be encoded) wrap
// [ErrInvalidOutput].
func (r Result) MarshalJSON() ([]byte, error) { return marshalResult(&r) }

// MarshalJSON implements json.Marshaler with the contract form.
func (e ErrorInfo) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(&e, encodeOptions)
	if err != nil {
		return nil, &outputError{"error details are not JSON-encodable"}
	}
	return b, nil
}

// textOptions are the encoder options of every output encoding. Strings are
// escaped as encoding/json escapes them (<, >, &, U+2028 and U+2029 as \uXXXX)
// and invalid UTF-8 in them becomes U+FFFD. Raw JSON values (a result's output,
// an event's data) are validated and compacted, their strings kept as written
// and repeated member names allowed (encoding/json accepts them too).
var textOptions = json.JoinOptions(
	jsontext.EscapeForHTML(true), jsontext.EscapeForJS(true), jsontext.AllowInvalidUTF8(true),
	jsontext.AllowDuplicateNames(true), jsontext.PreserveRawStrings(true),
)

// encodeOptions are the options of the output encodings that marshal Go values:
// textOptions; an empty raw value is null; map keys (error details) are sorted;
// SSE and ErrorInfo are written in their contract forms (sseWire, errorWire).
var encodeOptions = json.JoinOptions(
	textOptions, json.Deterministic(true),
	json.WithMarshalers(json.JoinMarshalers(
		json.MarshalToFunc(func(enc *jsontext.Encoder, v v1json.RawMessage) error {
			if len(v) == 0 {
				return enc.WriteToken(jsontext.Null)
			}
			if enc.WriteValue(jsontext.Value(v)) != nil {
				return errRawNotJSON // the library's error may quote the value
			}
			return nil
		}),
		json.MarshalToFunc(func(enc *jsontext.Encoder, s *SSE) error {
			w := sseWire{ID: s.ID, Data: s.Data}
			if s.Event != "" {
				w.Event = &s.Event
			}
			return json.MarshalEncode(enc, &w)
		}),
		json.MarshalToFunc(func(enc *jsontext.Encoder, e *ErrorInfo) error {
			return json.MarshalEncode(enc, errorJSON(e))
		}),
	)),
)

// errRawNotJSON reports a raw JSON value that is not valid JSON.
var errRawNotJSON = errors.New("raw value is not valid JSON")

// resultWire is Result without its MarshalJSON method, which calls marshalResult.
type resultWire Result

// sseWire is the contract form of SSE: the event name null when empty.
type sseWire struct {
	Event *string           `json:"event"`
	ID    *string           `json:"id"`
	Data  v1json.RawMessage `json:"data"`
}

// errorWire is the contract form of ErrorInfo: http_status and retry_after_ms
// null when 0, details null when empty.
type errorWire struct {
	Code             string         `json:"code"`
	Message          string         `json:"message"`
	Category         string         `json:"category"`
	Retryable        bool           `json:"retryable"`
	UncertainOutcome bool           `json:"uncertain_outcome"`
	HTTPStatus       *int           `json:"http_status"`
	RetryAfterMS     *int64         `json:"retry_after_ms"`
	Details          map[string]any `json:"details,format:emitnull"`
}

// errorJSON returns the contract form of e; it points into e.
func errorJSON(e *ErrorInfo) *errorWire {
	w := &errorWire{Code: e.Code, Message: e.Message, Category: e.Category, Retryable: e.Retryable,
		UncertainOutcome: e.UncertainOutcome}
	if e.HTTPStatus != 0 {
		w.HTTPStatus = &e.HTTPStatus
	}
	if e.RetryAfterMS != 0 {
		w.RetryAfterMS = &e.RetryAfterMS
	}
	if len(e.Details) > 0 {
		w.Details = e.Details
	}
	return w
}

// eventEncoders are reused encoders of event bodies, each with its buffer: a stream
// encodes every event it republishes.
var eventEncoders = sync.Pool{New: func() any {
	e := new(eventEncoder)
	e.enc = jsontext.NewEncoder(&e.buf, textOptions)
	return e
}}

// maxPooledEvent is the largest buffer an encoder goes back to the pool with.
const maxPooledEvent = 64 << 10

type eventEncoder struct {
	buf bytes.Buffer
	enc *jsontext.Encoder
}

// marshalEvent returns the contract JSON of e, written token by token (the form
// json.Marshal gives an EventData with encodeOptions, in about half the time).
// Errors wrap [ErrInvalidOutput].
func marshalEvent(e *EventData) ([]byte, error) {
	ee := eventEncoders.Get().(*eventEncoder)
	defer func() {
		if ee.buf.Cap() <= maxPooledEvent { // the buffer of a rare large event is not kept
			eventEncoders.Put(ee)
		}
	}()
	ee.buf.Reset()
	ee.enc.Reset(&ee.buf, textOptions)
	if err := ee.event(e); err != nil {
		return nil, &outputError{"event data is not valid JSON"}
	}
	// The encoder ends its top-level value with a newline; the body has none.
	return bytes.Clone(bytes.TrimSuffix(ee.buf.Bytes(), []byte("\n"))), nil
}

// event writes e's contract JSON; the only error is data that is not valid JSON.
func (ee *eventEncoder) event(e *EventData) error {
	enc := ee.enc
	member := func(name string, v jsontext.Token) {
		_ = enc.WriteToken(jsontext.String(name))
		_ = enc.WriteToken(v)
	}
	orNull := func(s *string) jsontext.Token {
		if s == nil {
			return jsontext.Null
		}
		return jsontext.String(*s)
	}
	_ = enc.WriteToken(jsontext.BeginObject)
	member("action_id", jsontext.String(e.ActionID))
	member("sequence", jsontext.Int(e.Sequence))
	member("kind", jsontext.String(e.Kind))
	_ = enc.WriteToken(jsontext.String("event"))
	_ = enc.WriteToken(jsontext.BeginObject)
	var name *string
	if e.Event.Event != "" {
		name = &e.Event.Event
	}
	member("event", orNull(name))
	member("id", orNull(e.Event.ID))
	_ = enc.WriteToken(jsontext.String("data"))
	if len(e.Event.Data) == 0 {
		_ = enc.WriteToken(jsontext.Null)
	} else if err := enc.WriteValue(jsontext.Value(e.Event.Data)); err != nil {
		return err
	}
	_ = enc.WriteToken(jsontext.EndObject)
	if e.Text != "" {
		member("text", jsontext.String(e.Text))
	}
	return enc.WriteToken(jsontext.EndObject)
}

// marshalResult returns the contract JSON of r. Errors wrap [ErrInvalidOutput].
func marshalResult(r *Result) ([]byte, error) {
	b, err := json.Marshal((*resultWire)(r), encodeOptions)
	switch {
	case errors.Is(err, errRawNotJSON):
		return nil, &outputError{"result output is not valid JSON"}
	case err != nil:
		return nil, &outputError{"error details are not JSON-encodable"}
	}
	return b, nil
}

// EventID returns the CloudEvent id of an event: <action_id>:<sequence>.
func EventID(actionID string, seq int64) string {
	var b [MaxTokenLen + 21]byte // one allocation: the string
	return string(strconv.AppendInt(append(append(b[:0], actionID...), ':'), seq, 10))
}

// ResultID returns the CloudEvent id of a result: <action_id>:pending for a
// pending_approval result, <action_id>:result otherwise.
func ResultID(actionID, status string) string {
	if status == StatusPendingApproval {
		return actionID + ":pending"
	}
	return actionID + ":result"
}

// binaryHeader returns the binary-mode headers of a message with CloudEvent id id, time
// now; subject may be "". The header values share one slice.
func binaryHeader(src, typ, id, subject string, trace TraceContext, room int) nats.Header {
	n := 8 + room // 7 headers, the subject and room for the caller's
	if trace != (TraceContext{}) {
		n += 4
	}
	vals := make([]string, 0, n)
	h := make(nats.Header, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HeaderSpecVersion, SpecVersion)
	set(HeaderID, id) // ids are [A-Za-z0-9_:-]: never need encoding
	set(HeaderMsgID, id)
	set(HeaderSource, PercentEncodeHeader(src))
	set(HeaderType, typ)
	set(HeaderTime, time.Now().UTC().Format(time.RFC3339Nano))
	set(HeaderContentType, ContentTypeJSON)
	if subject != "" {
		set(HeaderSubject, PercentEncodeHeader(subject))
	}
	if trace.Traceparent != "" {
		set(HeaderTraceparent, PercentEncodeHeader(trace.Traceparent))
		set(HeaderW3CTraceparent, vals[len(vals)-1])
	}
	if trace.Tracestate != "" {
		set(HeaderTracestate, PercentEncodeHeader(trace.Tracestate))
		set(HeaderW3CTracestate, vals[len(vals)-1])
	}
	return h
}

// EncodeEvent returns the binary-mode headers and body of an event CloudEvent:
// ce-specversion 1.0, ce-id and Nats-Msg-Id <action_id>:<sequence>,
// ce-source src (percent-encoded when needed), ce-type [TypeEvent], ce-time
// now (RFC 3339, UTC, nanoseconds), content-type application/json, ce-subject
// the action's capability id (as on its results; none when capabilityID is ""),
// and ce-traceparent/ce-tracestate plus the plain traceparent/tracestate headers
// when trace carries them. The capability lets a reader of headers alone (the
// dashboard) tell what a running action is.
//
// ev.Event.Data must be valid JSON or empty (null); it is written compacted,
// its strings as they are. Errors (invalid action id, negative sequence, empty
// kind, data that is not JSON) wrap [ErrInvalidOutput].
func EncodeEvent(src, capabilityID string, ev *EventData, trace TraceContext) (nats.Header, []byte, error) {
	if !ValidActionID(ev.ActionID) {
		return nil, nil, &outputError{"action id is not a valid action id token"}
	}
	if ev.Sequence < 0 {
		return nil, nil, &outputError{"sequence must not be negative"}
	}
	if ev.Kind == "" {
		return nil, nil, &outputError{"kind is required"}
	}
	body, err := marshalEvent(ev)
	if err != nil {
		return nil, nil, err
	}
	return binaryHeader(src, TypeEvent, EventID(ev.ActionID, ev.Sequence), capabilityID, trace, 0), body, nil
}

// EncodeResult returns the binary-mode headers and body of a result
// CloudEvent: as [EncodeEvent] with ce-type [TypeResult], ce-id and
// Nats-Msg-Id from [ResultID], and ce-subject the capability id. Output must
// be valid JSON or empty (null); it is written as [EncodeEvent] writes an
// event's data. Errors wrap [ErrInvalidOutput]. The header has room for
// [ResultHeaderRoom] more without growing.
func EncodeResult(src string, r *Result, trace TraceContext) (nats.Header, []byte, error) {
	if !ValidActionID(r.ActionID) {
		return nil, nil, &outputError{"action id is not a valid action id token"}
	}
	if !Terminal(r.Status) && r.Status != StatusPendingApproval {
		return nil, nil, &outputError{"status must be completed, failed, cancelled or pending_approval"}
	}
	body, err := marshalResult(r)
	if err != nil {
		return nil, nil, err
	}
	return binaryHeader(src, TypeResult, ResultID(r.ActionID, r.Status), r.CapabilityID, trace, ResultHeaderRoom), body, nil
}

// ResultHeaderRoom is how many headers a publisher may add to [EncodeResult]'s
// without the header map growing (the bridge adds its owner and the action's duration).
const ResultHeaderRoom = 2

// checkOutputType returns an error when h has a readable ce-type header (name matched
// ASCII case-insensitively) other than want.
func checkOutputType(h nats.Header, want string) error {
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, HeaderType) {
			if t, _ := decodeHeaderValue(vs[0]); t != "" && t != want {
				return &outputError{"CloudEvent type is not " + want}
			}
		}
	}
	return nil
}

// decodeOptions read output messages as encoding/json v1 reads them into the
// same types: member names matched case-insensitively, unknown members
// ignored, repeated members allowed (the last kept), invalid UTF-8 in strings
// replaced by U+FFFD.
var decodeOptions = jsonv1.DefaultOptionsV1()

// DecodeEvent reads an event message written by [EncodeEvent] (or another
// binary-mode producer). It is tolerant: h may be nil, and only a ce-type
// other than [TypeEvent], a body that is not the event JSON object, or an
// invalid action id is an error (wrapping [ErrInvalidOutput]). data is read as
// encoding/json reads it into an [EventData] (see [DecodeResult]).
func DecodeEvent(h nats.Header, data []byte) (*EventData, error) {
	if err := checkOutputType(h, TypeEvent); err != nil {
		return nil, err
	}
	var ev EventData
	if jsontext.Value(data).Kind() != '{' || json.Unmarshal(data, &ev, decodeOptions) != nil {
		return nil, &outputError{"event data is not a JSON object of the event shape"}
	}
	if !ValidActionID(ev.ActionID) {
		return nil, &outputError{"action id is not a valid action id token"}
	}
	if len(ev.Event.Data) == 0 {
		ev.Event.Data = v1json.RawMessage("null")
	}
	return &ev, nil
}

// DecodeResult reads a result message written by [EncodeResult]. Tolerant
// like [DecodeEvent]; additionally the status must be known. Output is
// returned as-is ("null" when absent). data is read as encoding/json v1's
// Unmarshal reads it into a [Result] (member names matched
// case-insensitively, unknown members ignored, the last of repeated members
// kept); the Result shares no memory with data.
func DecodeResult(h nats.Header, data []byte) (*Result, error) {
	if err := checkOutputType(h, TypeResult); err != nil {
		return nil, err
	}
	r := new(Result)
	if jsontext.Value(data).Kind() != '{' || json.Unmarshal(data, r, decodeOptions) != nil {
		return nil, &outputError{"result data is not a JSON object of the result shape"}
	}
	if !ValidActionID(r.ActionID) {
		return nil, &outputError{"action id is not a valid action id token"}
	}
	if !Terminal(r.Status) && r.Status != StatusPendingApproval {
		return nil, &outputError{"unknown result status"}
	}
	if len(r.Output) == 0 {
		r.Output = v1json.RawMessage("null")
	}
	return r, nil
}
