package events

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// RefKey is the only member of a reference object: the JSON that stands in for an
// output (a result's "output", or a whole event) too large for one NATS message.
//
//	{"$hermes_bridge_ref": {"bucket": "HERMES_OUTPUT_OBJECTS", "name": "a-1/result",
//	                        "size": 3145728, "sha256": "<lowercase hex>"}}
//
// The named object in the JetStream object store holds the JSON that was replaced:
// for a result, its output; for an event, the whole event data object.
const RefKey = "$hermes_bridge_ref"

// ErrRef is wrapped by every failure to resolve a reference.
var ErrRef = errors.New("events: cannot resolve a stored output")

// Ref points at an object in a JetStream object store.
type Ref struct {
	Bucket string `json:"bucket"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// NewRef describes content stored under bucket/name.
func NewRef(bucket, name string, content []byte) Ref {
	sum := sha256.Sum256(content)
	return Ref{Bucket: bucket, Name: name, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}
}

// JSON is the reference object that replaces the content.
func (r Ref) JSON() json.RawMessage {
	b, _ := json.Marshal(map[string]Ref{RefKey: r})
	return b
}

// ParseRef reports whether raw is a reference object, and returns it.
func ParseRef(raw json.RawMessage) (Ref, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < len(RefKey)+4 || raw[0] != '{' || !bytes.Contains(raw, []byte(RefKey)) {
		return Ref{}, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return Ref{}, false
	}
	inner, ok := m[RefKey]
	if !ok {
		return Ref{}, false
	}
	var r Ref
	if json.Unmarshal(inner, &r) != nil || r.Bucket == "" || r.Name == "" {
		return Ref{}, false
	}
	return r, true
}

// Fetch reads the referenced content from js's object store and checks its size and
// digest. Errors wrap ErrRef.
func (r Ref) Fetch(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
	os, err := js.ObjectStore(ctx, r.Bucket)
	if err != nil {
		return nil, fmt.Errorf("%w: object store %q: %w", ErrRef, r.Bucket, err)
	}
	b, err := os.GetBytes(ctx, r.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: object %q: %w", ErrRef, r.Name, err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != r.Size || hex.EncodeToString(sum[:]) != r.SHA256 {
		return nil, fmt.Errorf("%w: object %q does not match its reference (size or digest)", ErrRef, r.Name)
	}
	return b, nil
}

// ResolveResult replaces a referenced output of r with the stored output.
func ResolveResult(ctx context.Context, js jetstream.JetStream, r *Result) error {
	ref, ok := ParseRef(r.Output)
	if !ok {
		return nil
	}
	b, err := ref.Fetch(ctx, js)
	if err != nil {
		return err
	}
	r.Output = b
	return nil
}

// ResolveEvent returns the stored event when ev stands in for one (its event.data is a
// reference object; its action id, sequence and kind are the stored event's), else ev.
func ResolveEvent(ctx context.Context, js jetstream.JetStream, ev *EventData) (*EventData, error) {
	ref, ok := ParseRef(ev.Event.Data)
	if !ok {
		return ev, nil
	}
	b, err := ref.Fetch(ctx, js)
	if err != nil {
		return nil, err
	}
	var full EventData
	if err := json.Unmarshal(b, &full); err != nil {
		return nil, fmt.Errorf("%w: stored event is not an event object", ErrRef)
	}
	return &full, nil
}
