package events

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
)

const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// NewActionID returns a random 26-character action id from [A-Za-z0-9]
// (about 154 bits from crypto/rand).
func NewActionID() string {
	var b [26]byte
	var r [64]byte
	n := 0
	for n < len(b) {
		rand.Read(r[:]) // never returns an error (crypto/rand contract)
		for _, x := range r {
			if x >= 248 { // 248 = 4*62: reject to keep the distribution uniform
				continue
			}
			b[n] = idAlphabet[x%62]
			n++
			if n == len(b) {
				break
			}
		}
	}
	return string(b[:])
}

// EncodeAction returns the headers and body of action a with id for operation op on
// endpoint, as a client publishes it on <prefix>.actions.<endpoint>.<op>: binary mode,
// or with structured a CloudEvents JSON document; CloudEvent source src, subject the
// capability id, Nats-Msg-Id the action id, and trace as CloudEvents extensions and
// plain W3C headers. It refuses an id, endpoint or operation that is not a subject
// token the bridge accepts; it does not validate the operation's input (the bridge
// does).
func EncodeAction(src, id, endpoint, op string, a Action, trace TraceContext, structured bool) (nats.Header, []byte, error) {
	if !ValidActionID(id) {
		return nil, nil, fmt.Errorf("events: publish: action id must match [A-Za-z0-9_-]{1,128}")
	}
	if !ValidEndpointID(endpoint) || !validOpToken(op) {
		return nil, nil, fmt.Errorf("events: publish: invalid endpoint id or operation")
	}
	data, err := json.Marshal(a)
	if err != nil {
		return nil, nil, fmt.Errorf("events: publish: encode action: %w", err)
	}
	capID := CapabilityID(endpoint, op)
	if !structured {
		return binaryHeader(src, TypeAction, id, capID, trace, 0), data, nil
	}
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetID(id)
	ev.SetSource(src)
	ev.SetType(TypeAction)
	ev.SetSubject(capID)
	ev.SetTime(time.Now().UTC())
	h := nats.Header{}
	h.Set(HeaderContentType, ContentTypeCloudEventsJSON)
	h.Set(HeaderMsgID, id)
	for name, v := range map[string]string{HeaderW3CTraceparent: trace.Traceparent, HeaderW3CTracestate: trace.Tracestate} {
		if v != "" {
			ev.SetExtension(name, v) // the extensions are named as the W3C headers
			h.Set(name, v)
		}
	}
	if err := ev.SetData(ContentTypeJSON, json.RawMessage(data)); err != nil {
		return nil, nil, fmt.Errorf("events: publish: %w", err)
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, nil, fmt.Errorf("events: publish: encode event: %w", err)
	}
	return h, body, nil
}

// EncodeApproval returns the headers and body of approval decision ap, as a client
// publishes it on <prefix>.approvals.<action id>: binary mode, type [TypeApproval],
// CloudEvent source src and id id (an id token, like an action id).
func EncodeApproval(src, id string, ap Approval) (nats.Header, []byte, error) {
	data, err := json.Marshal(ap)
	if err != nil {
		return nil, nil, fmt.Errorf("events: decide: %w", err)
	}
	return binaryHeader(src, TypeApproval, id, "", TraceContext{}, 0), data, nil
}

// CancelReply is the reply to a cancel request (schemas/README.md, "Cancellation and deadlines").
type CancelReply struct {
	ActionID string `json:"action_id"`
	State    string `json:"state"` // CancelCancelled, CancelAlreadySettled or CancelUnknown
}

// Cancel reply states.
const (
	CancelCancelled      = "cancelled"
	CancelAlreadySettled = "already_settled"
	CancelUnknown        = "unknown"
)
