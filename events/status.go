package events

// Service discovery and the status endpoint. Every bridge replica registers a NATS
// micro service named [ServiceName] (see nats.go/micro), answering the discovery
// requests on $SRV.PING|INFO|STATS.hermes-bridge and one endpoint, "status", on
// [Subjects.Status]. A status request is answered by one replica (a queue group) from
// the KV records and the result log: it is a possibly-stale read, for information only.

// ServiceName is the name of the bridge's micro service ($SRV.*.hermes-bridge).
const ServiceName = "hermes-bridge"

// Status returns the subject of the status endpoint: <prefix>.status.
func (s Subjects) Status() string { return s.prefix() + ".status" }

// States reported by the status endpoint besides the ledger's record states
// (claimed, dispatched, released, settling, parked, settled).
const (
	// StateUnknown: there is no record and no result of the action (never seen, or
	// its records and result expired).
	StateUnknown = "unknown"
)

// Status error codes, in the Nats-Service-Error-Code header of an error reply.
const (
	StatusErrBadRequest  = "400" // not a JSON object with a valid action_id
	StatusErrUnavailable = "503" // the records could not be read in time
)

// StatusRequest is the body of a request on [Subjects.Status].
type StatusRequest struct {
	ActionID string `json:"action_id"`
}

// StatusReply is what the ledger knows about an action. It never holds inputs,
// outputs, session ids or keys.
type StatusReply struct {
	ActionID string `json:"action_id"`
	// State is the record's state, "settled" once the result log holds the terminal
	// result, or StateUnknown.
	State        string `json:"state"`
	CapabilityID string `json:"capability_id,omitempty"`
	// Owner is the replica id of the claim's last owner (not the per-delivery nonce).
	Owner string `json:"owner,omitempty"`
	// Attempt counts the Hermes calls started for the action (the record's attempt).
	Attempt int `json:"attempt,omitempty"`
	// CreatedAt is when the action record was created; AgeMS is the time since then,
	// on the answering replica's clock.
	CreatedAt string `json:"created_at,omitempty"`
	UpdatedAt string `json:"updated_at,omitempty"`
	AgeMS     int64  `json:"age_ms,omitempty"`
	// CancelRequested: a cancel request set the record's cancel flag.
	CancelRequested bool `json:"cancel_requested"`
	// Decision is the approval outcome of a formerly parked action (approve, deny,
	// mismatch, expired, cancel); ApprovalExpiresAt is when a parked action's window ends.
	Decision          string `json:"decision,omitempty"`
	ApprovalExpiresAt string `json:"approval_expires_at,omitempty"`
	// Result summarises the action's last result message, nil when it has none.
	Result *StatusResult `json:"result,omitempty"`
	// AnsweredBy is the replica id of the bridge that answered.
	AnsweredBy string `json:"answered_by"`
}

// StatusResult is the summary of a result message: never its output.
type StatusResult struct {
	// Status is completed, failed, cancelled or pending_approval.
	Status    string  `json:"status"`
	ErrorCode string  `json:"error_code,omitempty"`
	ReplayOf  *string `json:"replay_of,omitempty"`
	// Seq is the result message's sequence in the output stream (0 for a result held
	// in a settled record).
	Seq uint64 `json:"seq,omitempty"`
}
