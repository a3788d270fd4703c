package events

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Event kinds (CONTRACT §3).
const (
	KindData            = "data"
	KindProgress        = "progress"
	KindTool            = "tool"
	KindThought         = "thought"
	KindPendingApproval = "pending_approval"
	KindError           = "error"
	KindDone            = "done"
)

// Result statuses (CONTRACT §4).
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

func outputErr(reason string) error {
	return &outputError{reason}
}

type outputError struct{ reason string }

func (e *outputError) Error() string        { return "events: invalid output message: " + e.reason }
func (e *outputError) Is(target error) bool { return target == ErrInvalidOutput }

// TraceContext is the W3C trace context propagated onto output messages.
type TraceContext struct {
	Traceparent string
	Tracestate  string
}

// EventData is the data of an event CloudEvent (CONTRACT §3). Its JSON form
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
	Event string          `json:"event"`
	ID    *string         `json:"id"`
	Data  json.RawMessage `json:"data"`
}

// Result is the data of a result CloudEvent (CONTRACT §4). Its JSON form
// always has all six members; output, error and replay_of are null when
// absent.
//
// Output is carried as-is: for an output that did not fit in one message it
// is whatever reference object the bridge stored in its place, and callers
// that need the full output resolve that reference themselves.
type Result struct {
	ActionID     string          `json:"action_id"`
	CapabilityID string          `json:"capability_id"`
	Status       string          `json:"status"`
	Output       json.RawMessage `json:"output"`
	Error        *ErrorInfo      `json:"error"`
	ReplayOf     *string         `json:"replay_of"`
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

// AppendJSON appends the contract JSON of e to dst. e.Event.Data must be
// valid JSON (it is copied verbatim); an empty Data is written as null.
func (e *EventData) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"action_id":`...)
	dst = appendJSONString(dst, e.ActionID)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendInt(dst, e.Sequence, 10)
	dst = append(dst, `,"kind":`...)
	dst = appendJSONString(dst, e.Kind)
	dst = append(dst, `,"event":{"event":`...)
	dst = appendStringOrNull(dst, e.Event.Event)
	dst = append(dst, `,"id":`...)
	if e.Event.ID == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, *e.Event.ID)
	}
	dst = append(dst, `,"data":`...)
	dst = appendRaw(dst, e.Event.Data)
	dst = append(dst, '}')
	if e.Text != "" {
		dst = append(dst, `,"text":`...)
		dst = appendJSONString(dst, e.Text)
	}
	return append(dst, '}')
}

// MarshalJSON implements json.Marshaler with the contract form.
func (e EventData) MarshalJSON() ([]byte, error) {
	if len(e.Event.Data) > 0 && !json.Valid(e.Event.Data) {
		return nil, outputErr("event data is not valid JSON")
	}
	return e.AppendJSON(make([]byte, 0, e.sizeHint())), nil
}

func (e *EventData) sizeHint() int {
	n := 96 + len(e.ActionID) + len(e.Kind) + len(e.Event.Event) + len(e.Event.Data) + len(e.Text) + len(e.Text)/8
	if e.Event.ID != nil {
		n += len(*e.Event.ID)
	}
	return n
}

// AppendJSON appends the contract JSON of r to dst.
func (r *Result) AppendJSON(dst []byte) ([]byte, error) {
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
		if dst, err = r.Error.AppendJSON(dst); err != nil {
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

// sizeHint returns the length of r's contract JSON, exactly when r.Error is nil,
// else an estimate.
func (r *Result) sizeHint() int {
	n := len(`{"action_id":,"capability_id":,"status":,"output":,"error":,"replay_of":}`) +
		jsonStringLen(r.ActionID) + jsonStringLen(r.CapabilityID) + jsonStringLen(r.Status) + len(r.Output)
	if len(r.Output) == 0 {
		n += 4
	}
	if r.Error == nil {
		n += 4
	} else {
		e := r.Error
		n += 192 + jsonStringLen(e.Code) + jsonStringLen(e.Message) + jsonStringLen(e.Category)
		if len(e.Details) > 0 {
			n += 64
		}
	}
	if r.ReplayOf == nil {
		n += 4
	} else {
		n += jsonStringLen(*r.ReplayOf)
	}
	return n
}

// MarshalJSON implements json.Marshaler with the contract form.
func (r Result) MarshalJSON() ([]byte, error) {
	if len(r.Output) > 0 && !json.Valid(r.Output) {
		return nil, outputErr("result output is not valid JSON")
	}
	return r.AppendJSON(make([]byte, 0, 256+len(r.Output)))
}

// AppendJSON appends the contract JSON of e to dst.
func (e *ErrorInfo) AppendJSON(dst []byte) ([]byte, error) {
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

// MarshalJSON implements json.Marshaler with the contract form.
func (e ErrorInfo) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(make([]byte, 0, 192))
}

// EventID returns the CloudEvent id of an event: <action_id>:<sequence>.
func EventID(actionID string, seq int64) string {
	return actionID + ":" + strconv.FormatInt(seq, 10)
}

// ResultID returns the CloudEvent id of a result: <action_id>:pending for a
// pending_approval result, <action_id>:result otherwise.
func ResultID(actionID, status string) string {
	if status == StatusPendingApproval {
		return actionID + ":pending"
	}
	return actionID + ":result"
}

// binaryHeader builds the binary-mode headers with one allocation for the
// value slices. subject may be "".
func binaryHeader(src, typ, id, subject string, trace TraceContext) nats.Header {
	return binaryHeaderID(src, typ, id, nil, subject, trace)
}

// binaryHeaderID is binaryHeader for the id idHead + idTail. The id and the time
// share one string allocation.
func binaryHeaderID(src, typ, idHead string, idTail []byte, subject string, trace TraceContext) nats.Header {
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
	var buf [128]byte
	b := append(append(buf[:0], idHead...), idTail...)
	idLen := len(b)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	idTime := string(b)
	id := idTime[:idLen]
	set(HeaderSpecVersion, SpecVersion)
	set(HeaderID, id) // ids are [A-Za-z0-9_:-]: never need encoding
	set(HeaderSource, PercentEncodeHeader(src))
	set(HeaderType, typ)
	set(HeaderTime, idTime[idLen:])
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

// EncodeEvent returns the binary-mode headers and body of an event CloudEvent:
// ce-specversion 1.0, ce-id and Nats-Msg-Id <action_id>:<sequence>,
// ce-source src (percent-encoded when needed), ce-type [TypeEvent], ce-time
// now (RFC 3339, UTC, nanoseconds), content-type application/json, and
// ce-traceparent/ce-tracestate plus the plain traceparent/tracestate headers
// when trace carries them.
//
// ev.Event.Data is copied verbatim and must be valid JSON (the hermes client
// guarantees it); EncodeEvent does not re-validate it because it is on the
// per-event hot path. Errors (invalid action id, negative sequence, empty
// kind) wrap [ErrInvalidOutput].
func EncodeEvent(src string, ev *EventData, trace TraceContext) (nats.Header, []byte, error) {
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
	var tail [24]byte // ":" + sequence: the id is EventID(ev.ActionID, ev.Sequence)
	return binaryHeaderID(src, TypeEvent, ev.ActionID, strconv.AppendInt(append(tail[:0], ':'), ev.Sequence, 10), "", trace), body, nil
}

// EncodeResult returns the binary-mode headers and body of a result
// CloudEvent: as [EncodeEvent] with ce-type [TypeResult], ce-id and
// Nats-Msg-Id from [ResultID], and ce-subject the capability id. Output must
// be valid JSON or empty (null). Errors wrap [ErrInvalidOutput].
func EncodeResult(src string, r *Result, trace TraceContext) (nats.Header, []byte, error) {
	if !ValidActionID(r.ActionID) {
		return nil, nil, outputErr("action id is not a valid action id token")
	}
	if !Terminal(r.Status) && r.Status != StatusPendingApproval {
		return nil, nil, outputErr("status must be completed, failed, cancelled or pending_approval")
	}
	if len(r.Output) > 0 && !validJSON(r.Output) {
		return nil, nil, outputErr("result output is not valid JSON")
	}
	body, err := r.AppendJSON(make([]byte, 0, r.sizeHint()))
	if err != nil {
		return nil, nil, err
	}
	// The id is ResultID(r.ActionID, r.Status).
	tail := ":result"
	if r.Status == StatusPendingApproval {
		tail = ":pending"
	}
	var tb [8]byte
	return binaryHeaderID(src, TypeResult, r.ActionID, append(tb[:0], tail...), r.CapabilityID, trace), body, nil
}

// headerGetFold returns the first value of the header named name (ASCII
// case-insensitive), percent-decoded; "" when absent or undecodable.
func headerGetFold(h nats.Header, name string) string {
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

func checkOutputType(h nats.Header, want string) error {
	if h == nil {
		return nil
	}
	if t := headerGetFold(h, HeaderType); t != "" && t != want {
		return outputErr("CloudEvent type is not " + want)
	}
	return nil
}

// DecodeEvent reads an event message written by [EncodeEvent] (or another
// binary-mode producer). It is tolerant: h may be nil, and only a ce-type
// other than [TypeEvent], a body that is not the event JSON object, or an
// invalid action id is an error (wrapping [ErrInvalidOutput]).
func DecodeEvent(h nats.Header, data []byte) (*EventData, error) {
	if err := checkOutputType(h, TypeEvent); err != nil {
		return nil, err
	}
	var ev EventData
	if firstByte(data) != '{' || json.Unmarshal(data, &ev) != nil {
		return nil, outputErr("event data is not a JSON object of the event shape")
	}
	if !ValidActionID(ev.ActionID) {
		return nil, outputErr("action id is not a valid action id token")
	}
	if len(ev.Event.Data) == 0 {
		ev.Event.Data = json.RawMessage("null")
	}
	return &ev, nil
}

// DecodeResult reads a result message written by [EncodeResult]. Tolerant
// like [DecodeEvent]; additionally the status must be known. Output is
// returned as-is ("null" when absent). data is read as json.Unmarshal reads it
// into a [Result] (member names matched case-insensitively, unknown members
// ignored, the last of repeated members kept); the Result shares no memory with
// data.
func DecodeResult(h nats.Header, data []byte) (*Result, error) {
	if err := checkOutputType(h, TypeResult); err != nil {
		return nil, err
	}
	if firstByte(data) != '{' || !validJSON(data) {
		return nil, outputErr("result data is not a JSON object of the result shape")
	}
	r, ok := scanResult(data)
	if !ok {
		r = new(Result)
		if json.Unmarshal(data, r) != nil {
			return nil, outputErr("result data is not a JSON object of the result shape")
		}
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
	return r, nil
}

var resultFields = []string{"action_id", "capability_id", "status", "output", "error", "replay_of"}

// scanResult decodes data, a valid JSON object, into a Result the way json.Unmarshal
// would, for the common shape: member names exactly those of Result's JSON form, none
// repeated, strings without escapes, error null or absent. It reports false for
// anything else (the caller then uses json.Unmarshal).
func scanResult(data []byte) (*Result, bool) {
	var vals [maxObjectFields][]byte
	if !scanKnownMembers(data, resultFields, &vals) {
		return nil, false
	}
	if v := vals[4]; v != nil && !isNull(v) {
		return nil, false
	}
	// action_id and capability_id share one string allocation.
	id, ok1 := plainStringValue(vals[0])
	capID, ok2 := plainStringValue(vals[1])
	status, ok3 := plainStringValue(vals[2])
	replay, ok4 := plainStringValue(vals[5])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, false
	}
	r := &Result{}
	var buf [128]byte
	both := string(append(append(buf[:0], id...), capID...))
	r.ActionID, r.CapabilityID = both[:len(id)], both[len(id):]
	switch string(status) {
	case StatusCompleted:
		r.Status = StatusCompleted
	case StatusFailed:
		r.Status = StatusFailed
	case StatusCancelled:
		r.Status = StatusCancelled
	case StatusPendingApproval:
		r.Status = StatusPendingApproval
	default:
		r.Status = string(status)
	}
	if v := vals[3]; v != nil {
		r.Output = append(json.RawMessage(nil), v...)
	}
	if v := vals[5]; v != nil && !isNull(v) {
		s := string(replay)
		r.ReplayOf = &s
	}
	return r, true
}

// plainStringValue returns the contents of v when it is a JSON string that needs no
// unquoting (see plainJSONString), nil when v is nil or null (json.Unmarshal leaves a
// string unchanged for null); ok is false for anything else.
func plainStringValue(v []byte) (s []byte, ok bool) {
	switch {
	case v == nil || isNull(v):
		return nil, true
	case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && plainJSONString(v[1:len(v)-1]):
		return v[1 : len(v)-1], true
	}
	return nil, false
}
