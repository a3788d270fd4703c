package kvstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// State is the lifecycle state of a record.
type State string

// Record states.
const (
	// StateClaimed: a replica owns the key; the work has not been sent to
	// Hermes yet (a crash here is certain non-execution).
	StateClaimed State = "claimed"
	// StateDispatched: the request may have reached Hermes; a crash here is
	// an uncertain outcome and the work must not be resent.
	StateDispatched State = "dispatched"
	// StateParked: the action waits for an approval decision.
	StateParked State = "parked"
	// StateSettled: the terminal result is stored in Record.Result.
	StateSettled State = "settled"
)

// recordVersion is the "v" field written with every record.
const recordVersion = 1

// Record is the value stored under an action or idempotency key.
type Record struct {
	State        State  `json:"state"`
	ActionID     string `json:"action_id"`
	CapabilityID string `json:"capability_id,omitempty"`
	// InputSHA256 is the lowercase hex SHA-256 of the canonical input.
	InputSHA256 string `json:"input_sha256,omitempty"`
	// Owner is the replica id holding the lease.
	Owner string `json:"owner,omitempty"`
	// LeaseUntil is when the owner's lease lapses; the owner renews it with
	// Update while it works.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	Attempt    int       `json:"attempt,omitempty"`
	// Result is the events.Result JSON once settled.
	Result    json.RawMessage `json:"result,omitempty"`
	CreatedAt time.Time       `json:"created_at,omitzero"`
	UpdatedAt time.Time       `json:"updated_at,omitzero"`
}

// LeaseExpired reports whether no live owner holds the record at now: true
// when LeaseUntil is zero or not after now. A record with an expired lease
// in state claimed or dispatched was abandoned by its owner.
func (r Record) LeaseExpired(now time.Time) bool {
	return r.LeaseUntil.IsZero() || !now.Before(r.LeaseUntil)
}

// wireRecord adds the format version to the JSON encoding.
type wireRecord struct {
	V int `json:"v"`
	Record
}

func encodeRecord(r Record) ([]byte, error) {
	return json.Marshal(wireRecord{V: recordVersion, Record: r})
}

func decodeRecord(b []byte) (Record, error) {
	var w wireRecord
	if err := json.Unmarshal(b, &w); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if w.V != recordVersion {
		return Record{}, fmt.Errorf("%w: unsupported record version %d", ErrCorrupt, w.V)
	}
	return w.Record, nil
}

// ActionKey returns the key of an action record: "act." + actionID. Action
// ids ([A-Za-z0-9_-]{1,128}) are valid KV key characters as they are; the
// caller validates them.
func ActionKey(actionID string) string { return "act." + actionID }

// IdempotencyKey returns the key of an idempotency record scoped to a
// capability: "idem." + lowercase hex SHA-256 of capabilityID, a NUL byte
// and key. The same raw key under two capabilities gives two keys.
func IdempotencyKey(capabilityID, key string) string {
	h := sha256.New()
	h.Write([]byte(capabilityID))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return "idem." + hex.EncodeToString(h.Sum(sum[:0]))
}
