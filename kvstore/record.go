package kvstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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
	CapabilityID string `json:"capability_id,omitzero"`
	// InputSHA256 is the lowercase hex SHA-256 of the canonical input.
	InputSHA256 string `json:"input_sha256,omitzero"`
	// Owner names the delivery that holds the claim (replica id and a per-delivery
	// nonce). The owner proves it is alive by moving the record's revision (a
	// heartbeat rewrites the record); a reader decides that an owner is gone when the
	// revision stood still for a lease (bridge/core), without comparing clocks.
	Owner   string `json:"owner,omitzero"`
	Attempt int    `json:"attempt,omitzero"`
	// IdemKey is, in an action record, the key of the action's idempotency record
	// (IdempotencyKey's result), "" when the action has no idempotency key. For a keyed
	// unsafe action the write-ahead "dispatched" mark is the idempotency record's state,
	// so whoever recovers the action reads it there.
	IdemKey string `json:"idem_key,omitzero"`
	// Result is the events.Result JSON once settled.
	Result json.RawMessage `json:"result,omitzero"`
	// Action is the action JSON of a parked action, so that any replica can run it
	// once it is approved.
	Action json.RawMessage `json:"action,omitzero"`
	// ExpiresAt is when a parked action's approval window ends.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Decision is the approval outcome of a formerly parked action (Decision*
	// constants), written by the transition that ends the parking.
	Decision string `json:"decision,omitzero"`
	// Approver names who decided, for the log and the status of the action.
	Approver string `json:"approver,omitzero"`
	// Reason is the approver's reason for a denial (returned in the result's details).
	Reason string `json:"reason,omitzero"`
	// Cancel is set by a cancel request that found the action owned by no replica
	// it could reach: whoever owns or takes over the action settles it cancelled.
	Cancel bool `json:"cancel,omitzero"`
	// RunID is the id of the durable Hermes work a dispatched action started (a run's
	// run_id), stored as soon as Hermes returns it: a delivery that
	// takes the record over follows that work instead of settling an unknown outcome.
	RunID string `json:"run_id,omitzero"`
	// ApprovalSeq is the number of tool approvals a bound run asked for (the latest
	// one's index, from 1), ApprovalSHA256 that one's hash (of its approval.request
	// data), and ExpiresAt its window's end. ApprovalAnswered is the index of the latest
	// approval answered (by a decision or the window's expiry), ApprovalDecision the id
	// of the decision message that answered it ("" for an expiry). See bridge/core's
	// run approvals.
	ApprovalSeq      int    `json:"approval_seq,omitzero"`
	ApprovalSHA256   string `json:"approval_sha256,omitzero"`
	ApprovalAnswered int    `json:"approval_answered,omitzero"`
	ApprovalDecision string `json:"approval_decision,omitzero"`
	// ApprovalRequestID is the request_id of the latest tool approval's
	// approval.request (Hermes 0.21 and later; "" when Hermes sent none): the
	// answer names it, so that it resolves that request and not merely the oldest.
	ApprovalRequestID string `json:"approval_request_id,omitzero"`
	// PendingSeq is the output-stream sequence of the action's pending_approval
	// result message; its terminal result is appended after it (see JetStreamLog).
	PendingSeq uint64    `json:"pending_seq,omitzero"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
}

// wireRecord adds the format version to the JSON encoding.
type wireRecord struct {
	V int `json:"v"`
	*Record
}

// recordOptions encode and decode records. Result and Action are validated
// and compacted, their strings kept as written; repeated member names and
// invalid UTF-8 are accepted (invalid UTF-8 in a string becomes U+FFFD), as
// the encoding/json encoder of earlier versions accepted them.
var recordOptions = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true),
	jsontext.PreserveRawStrings(true))

// encodeRecord returns the JSON of r with the format version; r is only read.
// Result and Action, when not nil, must be valid JSON.
//
// It writes what marshalRecord writes, byte for byte (TestEncodeRecordIsMarshal),
// without reflection and in one allocation: the members in the struct's order, the
// omitzero ones left out when zero, strings quoted as the library quotes them, Result
// and Action formatted with recordOptions, times in RFC 3339 with nanoseconds. A record
// with a time RFC 3339 cannot say (a year outside 0..9999, a zone offset of 24 hours or
// more) goes through marshalRecord, which reports it.
func encodeRecord(r *Record) ([]byte, error) {
	// Room for the members' names and punctuation, the numbers and times, and the
	// strings (more only where they need escaping).
	n := 320 + len(r.State) + len(r.ActionID) + len(r.CapabilityID) + len(r.InputSHA256) + len(r.Owner) +
		len(r.IdemKey) + len(r.Result) + len(r.Action) + len(r.Decision) + len(r.Approver) + len(r.Reason) +
		len(r.RunID) + len(r.ApprovalSHA256) + len(r.ApprovalDecision) + len(r.ApprovalRequestID)
	b := make([]byte, 0, n)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, recordVersion, 10)
	b = appendMember(b, "state", string(r.State), true)
	b = appendMember(b, "action_id", r.ActionID, true)
	b = appendMember(b, "capability_id", r.CapabilityID, false)
	b = appendMember(b, "input_sha256", r.InputSHA256, false)
	b = appendMember(b, "owner", r.Owner, false)
	b = appendInt(b, "attempt", int64(r.Attempt))
	b = appendMember(b, "idem_key", r.IdemKey, false)
	var err error
	if b, err = appendRaw(b, "result", r.Result); err != nil {
		return nil, err
	}
	if b, err = appendRaw(b, "action", r.Action); err != nil {
		return nil, err
	}
	ok := true
	b, ok = appendTime(b, "expires_at", r.ExpiresAt, ok)
	b = appendMember(b, "decision", r.Decision, false)
	b = appendMember(b, "approver", r.Approver, false)
	b = appendMember(b, "reason", r.Reason, false)
	if r.Cancel {
		b = append(b, `,"cancel":true`...)
	}
	b = appendMember(b, "run_id", r.RunID, false)
	b = appendInt(b, "approval_seq", int64(r.ApprovalSeq))
	b = appendMember(b, "approval_sha256", r.ApprovalSHA256, false)
	b = appendInt(b, "approval_answered", int64(r.ApprovalAnswered))
	b = appendMember(b, "approval_decision", r.ApprovalDecision, false)
	b = appendMember(b, "approval_request_id", r.ApprovalRequestID, false)
	if r.PendingSeq != 0 {
		b = strconv.AppendUint(append(b, `,"pending_seq":`...), r.PendingSeq, 10)
	}
	b, ok = appendTime(b, "created_at", r.CreatedAt, ok)
	if b, ok = appendTime(b, "updated_at", r.UpdatedAt, ok); !ok {
		return marshalRecord(r)
	}
	return append(b, '}'), nil
}

// marshalRecord is encodeRecord by the library's reflection.
func marshalRecord(r *Record) ([]byte, error) {
	return jsonv2.Marshal(&wireRecord{V: recordVersion, Record: r}, recordOptions)
}

// appendMember appends the member name: s, unless s is empty and not always.
func appendMember(b []byte, name, s string, always bool) []byte {
	if s == "" && !always {
		return b
	}
	b = append(append(append(b, ',', '"'), name...), '"', ':')
	b, _ = jsontext.AppendQuote(b, s) // invalid UTF-8 is replaced, as the library's encoder does
	return b
}

// appendInt appends the member name: n, unless n is 0.
func appendInt(b []byte, name string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(append(append(b, ',', '"'), name...), '"', ':'), n, 10)
}

// appendRaw appends the member name: raw formatted, unless raw is nil.
func appendRaw(b []byte, name string, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return b, nil
	}
	return jsontext.AppendFormat(append(append(append(b, ',', '"'), name...), '"', ':'), raw, recordOptions)
}

// appendTime appends the member name: t in RFC 3339 with nanoseconds, unless t is zero;
// ok is false from then on once a time is one RFC 3339 cannot say (the library's checks).
func appendTime(b []byte, name string, t time.Time, ok bool) ([]byte, bool) {
	if t.IsZero() {
		return b, ok
	}
	b = append(append(append(b, ',', '"'), name...), '"', ':', '"')
	n := len(b)
	b = t.AppendFormat(b, time.RFC3339Nano)
	s := b[n:]
	switch {
	case s[len("9999")] != '-':
		ok = false // the year is not 4 digits
	case s[len(s)-1] != 'Z':
		if c := s[len(s)-len("Z07:00")]; '0' <= c && c <= '9' || (s[len(s)-5]-'0')*10+s[len(s)-4]-'0' >= 24 {
			ok = false
		}
	}
	return append(b, '"'), ok
}

// decodeRecord reads a record encodeRecord wrote (or an earlier version's
// encoding/json wrote). Errors: ErrCorrupt.
func decodeRecord(b []byte) (Record, error) {
	var r Record
	w := wireRecord{Record: &r}
	if err := jsonv2.Unmarshal(b, &w, recordOptions); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if w.V != recordVersion {
		return Record{}, fmt.Errorf("%w: unsupported record version %d", ErrCorrupt, w.V)
	}
	return r, nil
}

// ParkKey returns the key of a parked action's index entry: "park." + actionID. The
// entries let any replica list the parked actions (to expire them) without scanning
// every action record.
func ParkKey(actionID string) string { return "park." + actionID }

// AskKey returns the key of a governed run's tool approval k in the index of runs waiting
// for a tool approval: "ask." + actionID + "." + k.
func AskKey(actionID string, k int) string { return "ask." + actionID + "." + strconv.Itoa(k) }

// ActionKey returns the key of an action record: "act." + actionID. Action
// ids ([A-Za-z0-9_-]{1,128}) are valid KV key characters as they are; the
// caller validates them.
func ActionKey(actionID string) string { return "act." + actionID }

// IdempotencyKey returns the key of an idempotency record scoped to a
// capability: "idem." + lowercase hex SHA-256 of capabilityID, a NUL byte
// and key. The same raw key under two capabilities gives two keys.
func IdempotencyKey(capabilityID, key string) string {
	var buf [256]byte // the usual capability id and key fit: hashed without an allocation
	in := append(append(append(buf[:0], capabilityID...), 0), key...)
	sum := sha256.Sum256(in)
	const prefix = "idem."
	var out strings.Builder
	out.Grow(len(prefix) + hex.EncodedLen(len(sum)))
	out.WriteString(prefix)
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	out.Write(digits[:])
	return out.String()
}

// IsIdempotencyKey reports whether a record key is one IdempotencyKey returns.
func IsIdempotencyKey(k string) bool { return strings.HasPrefix(k, "idem.") }
