package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	var m map[string]Ref
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return Ref{}, false
	}
	r, ok := m[RefKey]
	return r, ok && r.Bucket != "" && r.Name != ""
}

// Check returns nil if b is the referenced content (its size and digest), else an
// error wrapping ErrRef.
func (r Ref) Check(b []byte) error {
	sum := sha256.Sum256(b)
	if int64(len(b)) != r.Size || hex.EncodeToString(sum[:]) != r.SHA256 {
		return fmt.Errorf("%w: object %q does not match its reference (size or digest)", ErrRef, r.Name)
	}
	return nil
}
