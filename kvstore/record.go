package kvstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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
	// StateReleased: no replica owns the action and it was certainly not sent: a
	// retry released it, or it waits for its next delivery. The next delivery takes
	// it over with one compare-and-set.
	StateReleased State = "released"
	// StateSettling: the owner is settling a result it reached without calling
	// Hermes (the core's fence before it appends such a result); a delivery that takes it over knows that
	// nothing was sent and must not send.
	StateSettling State = "settling"
	// StateParked: the action waits for an approval decision.
	StateParked State = "parked"
	// StateSettled: the terminal result is held in Record.Result (only a cancel that
	// arrived before its action does this; every other terminal result is the
	// action's result message in the output stream, see JetStreamLog).
	StateSettled State = "settled"
)

// Decisions recorded in Record.Decision: why a formerly parked action runs or ends.
const (
	DecisionApprove  = "approve"
	DecisionDeny     = "deny"
	DecisionMismatch = "mismatch"
	DecisionExpired  = "expired"
	DecisionCancel   = "cancel"
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
	// Owner names the delivery that holds the claim (replica id and a per-delivery
	// nonce). The owner proves it is alive by moving the record's revision (a
	// heartbeat rewrites the record); a reader decides that an owner is gone when the
	// revision stood still for a lease (bridge/core), without comparing clocks.
	Owner   string `json:"owner,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// IdemKey is, in an action record, the key of the action's idempotency record
	// (IdempotencyKey's result), "" when the action has no idempotency key. For a keyed
	// unsafe action the write-ahead "dispatched" mark is the idempotency record's state,
	// so whoever recovers the action reads it there.
	IdemKey string `json:"idem_key,omitempty"`
	// Result is the events.Result JSON once settled.
	Result json.RawMessage `json:"result,omitempty"`
	// Action is the action JSON of a parked action, so that any replica can run it
	// once it is approved.
	Action json.RawMessage `json:"action,omitempty"`
	// ExpiresAt is when a parked action's approval window ends.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Decision is the approval outcome of a formerly parked action (Decision*
	// constants), written by the transition that ends the parking.
	Decision string `json:"decision,omitempty"`
	// Approver names who decided, for the log and the status of the action.
	Approver string `json:"approver,omitempty"`
	// Reason is the approver's reason for a denial (returned in the result's details).
	Reason string `json:"reason,omitempty"`
	// Cancel is set by a cancel request that found the action owned by no replica
	// it could reach: whoever owns or takes over the action settles it cancelled.
	Cancel bool `json:"cancel,omitempty"`
	// RunID is the id of the durable Hermes work a dispatched action started (a run's
	// run_id), stored as soon as Hermes returns it: a delivery that
	// takes the record over follows that work instead of settling an unknown outcome.
	RunID string `json:"run_id,omitempty"`
	// ApprovalSeq is the number of tool approvals a bound run asked for (the latest
	// one's index, from 1), ApprovalSHA256 that one's hash (of its approval.request
	// data), and ExpiresAt its window's end. ApprovalAnswered is the index of the latest
	// approval answered (by a decision or the window's expiry), ApprovalDecision the id
	// of the decision message that answered it ("" for an expiry). See bridge/core's
	// run approvals.
	ApprovalSeq      int    `json:"approval_seq,omitempty"`
	ApprovalSHA256   string `json:"approval_sha256,omitempty"`
	ApprovalAnswered int    `json:"approval_answered,omitempty"`
	ApprovalDecision string `json:"approval_decision,omitempty"`
	// PendingSeq is the output-stream sequence of the action's pending_approval
	// result message; its terminal result is appended after it (see JetStreamLog).
	PendingSeq uint64    `json:"pending_seq,omitempty"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
}

// wireRecord adds the format version to the JSON encoding.
type wireRecord struct {
	V int `json:"v"`
	Record
}

// encodeRecord writes the same JSON as json.Marshal(wireRecord{...}) by hand: records
// are written several times per action, and json.Marshal would re-validate and compact
// the embedded result on every write. Result must be valid JSON (it is produced by
// json.Marshal); it is copied verbatim. r is only read.
func encodeRecord(r *Record) ([]byte, error) {
	b := make([]byte, 0, recordSize(r))
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, recordVersion, 10)
	b = appendField(b, "state", string(r.State), false)
	b = appendField(b, "action_id", r.ActionID, false)
	b = appendField(b, "capability_id", r.CapabilityID, true)
	b = appendField(b, "input_sha256", r.InputSHA256, true)
	b = appendField(b, "owner", r.Owner, true)
	if r.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(r.Attempt), 10)
	}
	b = appendField(b, "idem_key", r.IdemKey, true)
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
	}
	if len(r.Action) > 0 {
		b = append(b, `,"action":`...)
		b = append(b, r.Action...)
	}
	b = appendTime(b, "expires_at", r.ExpiresAt)
	b = appendField(b, "decision", r.Decision, true)
	b = appendField(b, "approver", r.Approver, true)
	b = appendField(b, "reason", r.Reason, true)
	if r.Cancel {
		b = append(b, `,"cancel":true`...)
	}
	b = appendField(b, "run_id", r.RunID, true)
	if r.ApprovalSeq != 0 {
		b = append(b, `,"approval_seq":`...)
		b = strconv.AppendInt(b, int64(r.ApprovalSeq), 10)
	}
	b = appendField(b, "approval_sha256", r.ApprovalSHA256, true)
	if r.ApprovalAnswered != 0 {
		b = append(b, `,"approval_answered":`...)
		b = strconv.AppendInt(b, int64(r.ApprovalAnswered), 10)
	}
	b = appendField(b, "approval_decision", r.ApprovalDecision, true)
	if r.PendingSeq != 0 {
		b = append(b, `,"pending_seq":`...)
		b = strconv.AppendUint(b, r.PendingSeq, 10)
	}
	b = appendTime(b, "created_at", r.CreatedAt)
	b = appendTime(b, "updated_at", r.UpdatedAt)
	return append(b, '}'), nil
}

// recordSize is the length of encodeRecord's output for r, or a little more: exact for
// the strings (when they need no escaping), the raw JSON and the numbers, and at most
// a few bytes over for each timestamp (its longest RFC 3339 form, for a year of four
// digits). Sizing the buffer with it keeps encodeRecord from growing (and copying) it
// while filling it, without allocating much more than it fills. An escaped string or
// a longer year only makes encodeRecord grow the buffer: the bytes are the same.
func recordSize(r *Record) int {
	n := len(`{"v":`) + intLen(recordVersion) + len(`}`)
	n += fieldSize("state", string(r.State), false) + fieldSize("action_id", r.ActionID, false) +
		fieldSize("capability_id", r.CapabilityID, true) + fieldSize("input_sha256", r.InputSHA256, true) +
		fieldSize("owner", r.Owner, true) + fieldSize("idem_key", r.IdemKey, true) +
		fieldSize("decision", r.Decision, true) + fieldSize("approver", r.Approver, true) +
		fieldSize("reason", r.Reason, true) + fieldSize("run_id", r.RunID, true) +
		fieldSize("approval_sha256", r.ApprovalSHA256, true) + fieldSize("approval_decision", r.ApprovalDecision, true)
	if r.Attempt != 0 {
		n += len(`,"attempt":`) + intLen(int64(r.Attempt))
	}
	if len(r.Result) > 0 {
		n += len(`,"result":`) + len(r.Result)
	}
	if len(r.Action) > 0 {
		n += len(`,"action":`) + len(r.Action)
	}
	if r.Cancel {
		n += len(`,"cancel":true`)
	}
	if r.ApprovalSeq != 0 {
		n += len(`,"approval_seq":`) + intLen(int64(r.ApprovalSeq))
	}
	if r.ApprovalAnswered != 0 {
		n += len(`,"approval_answered":`) + intLen(int64(r.ApprovalAnswered))
	}
	if r.PendingSeq != 0 {
		n += len(`,"pending_seq":`) + uintLen(r.PendingSeq)
	}
	n += timeSize("expires_at", r.ExpiresAt) + timeSize("created_at", r.CreatedAt) + timeSize("updated_at", r.UpdatedAt)
	return n
}

// fieldSize is the length appendField writes for v when it needs no escaping.
func fieldSize(name, v string, omitEmpty bool) int {
	if omitEmpty && v == "" {
		return 0
	}
	return len(name) + len(v) + len(`,"":""`)
}

// maxTimeLen is the longest time.RFC3339Nano form of a time in years 0 to 9999.
const maxTimeLen = len("2006-01-02T15:04:05.999999999-07:00")

// timeSize bounds the length appendTime writes for t (years 0 to 9999).
func timeSize(name string, t time.Time) int {
	if t.IsZero() {
		return 0
	}
	return len(name) + maxTimeLen + len(`,"":""`)
}

// intLen is the length of strconv.FormatInt(v, 10).
func intLen(v int64) int {
	if v < 0 {
		return 1 + uintLen(uint64(-(v+1))+1)
	}
	return uintLen(uint64(v))
}

// uintLen is the length of strconv.FormatUint(v, 10).
func uintLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

func appendField(b []byte, name, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

// notPlain marks the bytes that appendString does not copy as they are: control
// characters, DEL and non-ASCII bytes, and '"', '\\', '<', '>' and '&'.
var notPlain = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&'
	}
	return t
}()

// appendString appends v as a JSON string; anything but plain printable ASCII goes
// through encoding/json so the escaping is exactly its own.
func appendString(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		if notPlain[v[i]] {
			q, _ := json.Marshal(v)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, v...)
	return append(b, '"')
}

func appendTime(b []byte, name string, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':', '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
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

// ParkKey returns the key of a parked action's index entry: "park." + actionID. The
// entries let any replica list the parked actions (to expire them) without scanning
// every action record.
func ParkKey(actionID string) string { return "park." + actionID }

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

// IsIdempotencyKey reports whether a record key is one IdempotencyKey returns.
func IsIdempotencyKey(k string) bool { return strings.HasPrefix(k, "idem.") }
