package events

import (
	"strings"
	"unicode/utf8"
)

// MaxSteerText is the maximum length of a steer request's text, in characters.
const MaxSteerText = 8000

// SteerRequest is the body of a steer request on <prefix>.steer.<action id>
// (schemas/steer.schema.json): text to add to a running governed run's turn. The text
// is user content: the bridge forwards it to Hermes and never logs it.
type SteerRequest struct {
	Text string `json:"text"`
}

// DecodeSteer parses a steer request: one JSON object {"text"} read as [DecodeAction]
// reads its data. text is a string of 1 to [MaxSteerText] characters that is not only
// white space; unknown members are rejected. Errors are *[ActionError] and never quote
// the text.
func DecodeSteer(data []byte) (*SteerRequest, error) {
	obj, _, err := decodeObject(data, "steer request", "")
	if err != nil {
		return nil, err
	}
	if k := firstUnknown(obj, []string{"text"}); k != "" {
		return nil, &ActionError{Field: safeFieldName(k), Reason: "unknown field"}
	}
	v, ok := obj["text"]
	if !ok || v == nil {
		return nil, &ActionError{Field: "text", Reason: "is required"}
	}
	s, err := jsonString("text", v)
	if err != nil {
		return nil, err
	}
	if err := CheckSteerText(s); err != nil {
		return nil, err
	}
	return &SteerRequest{Text: s}, nil
}

// CheckSteerText reports (as an *[ActionError] on field text) why s cannot be steer
// text: blank, or longer than [MaxSteerText] characters. nil when it can.
func CheckSteerText(s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return &ActionError{Field: "text", Reason: "must not be empty or only white space"}
	case utf8.RuneCountInString(s) > MaxSteerText:
		return &ActionError{Field: "text", Reason: "must have at most 8000 characters"}
	}
	return nil
}

// SteerReply is the reply to a steer request (schemas/steer-reply.schema.json): State
// is SteerAccepted, or SteerRefused with a Code (the Steer* codes) and a Reason for
// people (it never quotes the text).
type SteerReply struct {
	ActionID string `json:"action_id"`
	State    string `json:"state"`
	Code     string `json:"code,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Steer reply states.
const (
	SteerAccepted = "accepted"
	SteerRefused  = "refused"
)

// Steer refusal codes (SteerReply.Code).
const (
	// SteerInvalid: the request is not a steer request (schemas/steer.schema.json).
	SteerInvalid = "invalid_request"
	// SteerUnknown: the bridge has no record of the action.
	SteerUnknown = "unknown"
	// SteerNotARun: the action is not a governed run (operation run).
	SteerNotARun = "not_a_run"
	// SteerNotRunning: the run is not running: not started or not yet bound to a run_id,
	// waiting for a tool approval, stopping, or settled (Hermes: run_not_accepting_steer).
	SteerNotRunning = "not_running"
	// SteerNotAccepted: Hermes's agent declined the text (Hermes: steer_not_accepted).
	SteerNotAccepted = "not_accepted"
	// SteerUnsupported: the endpoint does not support steer (no features.run_steer, or
	// no steer route).
	SteerUnsupported = "steer_unsupported"
	// SteerFailed: the request to Hermes failed (transport, 5xx, an unexpected answer);
	// the text may or may not have been queued.
	SteerFailed = "failed"
)
