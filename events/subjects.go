package events

import (
	"errors"
	"strings"
)

// CloudEvent types of the hermes-bridge contract.
const (
	TypeAction   = "hermes.bridge.action.v1"
	TypeEvent    = "hermes.bridge.event.v1"
	TypeResult   = "hermes.bridge.result.v1"
	TypeApproval = "hermes.bridge.approval.v1"
)

// SpecVersion is the only CloudEvents spec version the bridge reads or writes.
const SpecVersion = "1.0"

// DefaultPrefix is the default first token of every hermes-bridge subject.
const DefaultPrefix = "hermes"

// MaxTokenLen is the maximum length of an action id or endpoint id.
const MaxTokenLen = 128

// ErrInvalidSubject is returned by the subject parsers.
var ErrInvalidSubject = errors.New("events: invalid subject")

// Subjects builds and parses hermes-bridge subjects. The zero value uses
// [DefaultPrefix]. Prefix may itself contain dots ("acme.hermes") but no
// wildcards. Builders do not validate their arguments; callers validate ids
// with [ValidActionID] and [ValidEndpointID] first.
type Subjects struct {
	Prefix string
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// Action is the subject an action for op on endpoint is published to:
// <prefix>.actions.<endpoint>.<op>.
func (s Subjects) Action(endpoint, op string) string {
	return s.prefix() + ".actions." + endpoint + "." + op
}

// Actions is the wildcard subject every action is published under:
// <prefix>.actions.>.
func (s Subjects) Actions() string { return s.prefix() + ".actions.>" }

// Events is the subject carrying the events of one action: <prefix>.events.<id>.
func (s Subjects) Events(actionID string) string { return s.prefix() + ".events." + actionID }

// Results is the subject carrying the results of one action: <prefix>.results.<id>.
func (s Subjects) Results(actionID string) string { return s.prefix() + ".results." + actionID }

// Cancel is the request/reply subject cancelling one action: <prefix>.cancel.<id>.
func (s Subjects) Cancel(actionID string) string { return s.prefix() + ".cancel." + actionID }

// Approvals is the subject carrying approval decisions for one action:
// <prefix>.approvals.<id>.
func (s Subjects) Approvals(actionID string) string { return s.prefix() + ".approvals." + actionID }

// DLQ is the dead-letter subject: <prefix>.dlq.
func (s Subjects) DLQ() string { return s.prefix() + ".dlq" }

// AllCancel is the wildcard over every cancel subject: <prefix>.cancel.*.
func (s Subjects) AllCancel() string { return s.prefix() + ".cancel.*" }

// AllApprovals is the wildcard over every approvals subject: <prefix>.approvals.>.
func (s Subjects) AllApprovals() string { return s.prefix() + ".approvals.>" }

// Output returns the events and results subjects of one action, in that
// order; an ordered consumer filtered on both replays the action.
func (s Subjects) Output(actionID string) []string {
	return []string{s.Events(actionID), s.Results(actionID)}
}

// ParseAction splits an action subject into its endpoint id and operation.
// The endpoint must satisfy [ValidEndpointID]; the operation must be a
// non-empty token of [a-z0-9_] (whether it names a known operation is for
// the caller to check). Errors wrap [ErrInvalidSubject].
func (s Subjects) ParseAction(subject string) (endpoint, op string, err error) {
	rest, ok := strings.CutPrefix(subject, s.prefix()+".actions.")
	if !ok {
		return "", "", subjectError("not under the actions subject")
	}
	endpoint, op, ok = strings.Cut(rest, ".")
	if !ok {
		return "", "", subjectError("want <prefix>.actions.<endpoint_id>.<operation>")
	}
	if !ValidEndpointID(endpoint) {
		return "", "", subjectError("endpoint id must match [a-z0-9_-]{1,128}")
	}
	if !validOpToken(op) {
		return "", "", subjectError("operation must match [a-z0-9_]{1,64}")
	}
	return endpoint, op, nil
}

// parseIDSubject extracts the action id from <prefix>.<kind>.<id>.
func (s Subjects) parseIDSubject(kind, subject string) (string, error) {
	// Cut piece by piece: every delivery is asked whether it is a decision, and an
	// action's subject must cost no allocation to say no.
	id, ok := strings.CutPrefix(subject, s.prefix())
	for _, p := range [...]string{".", kind, "."} {
		if ok {
			id, ok = strings.CutPrefix(id, p)
		}
	}
	if !ok {
		return "", notKindSubject[kind]
	}
	if !ValidActionID(id) {
		return "", subjectError("action id must match [A-Za-z0-9_-]{1,128}")
	}
	return id, nil
}

// ParseCancel returns the action id of a cancel subject.
func (s Subjects) ParseCancel(subject string) (string, error) {
	return s.parseIDSubject("cancel", subject)
}

// ParseApprovals returns the action id of an approvals subject.
func (s Subjects) ParseApprovals(subject string) (string, error) {
	return s.parseIDSubject("approvals", subject)
}

type subjectError string

// notKindSubject is the error of a subject that is not of the kind parseIDSubject expects.
var notKindSubject = map[string]error{
	"cancel":    subjectError("not a cancel subject"),
	"approvals": subjectError("not a approvals subject"),
	"steer":     subjectError("not a steer subject"),
}

func (e subjectError) Error() string        { return "events: invalid subject: " + string(e) }
func (e subjectError) Is(target error) bool { return target == ErrInvalidSubject }

// CapabilityPrefix starts every capability id.
const CapabilityPrefix = "cap:hermes_agent:"

// CapabilityID returns cap:hermes_agent:<endpoint>:<op>.
func CapabilityID(endpoint, op string) string {
	return CapabilityPrefix + endpoint + ":" + op
}

// ParseCapabilityID splits a capability id into endpoint id and operation.
// ok is false when id is not of the form cap:hermes_agent:<endpoint>:<op>
// with a valid endpoint id and operation token.
func ParseCapabilityID(id string) (endpoint, op string, ok bool) {
	rest, ok := strings.CutPrefix(id, CapabilityPrefix)
	if !ok {
		return "", "", false
	}
	endpoint, op, ok = strings.Cut(rest, ":")
	if !ok || !ValidEndpointID(endpoint) || !validOpToken(op) {
		return "", "", false
	}
	return endpoint, op, true
}

// ValidActionID reports whether id matches [A-Za-z0-9_-]{1,128}, the action
// id syntax (an action id is used as a subject token).
func ValidActionID(id string) bool { return validToken(id, MaxTokenLen, true, true) }

// ValidEndpointID reports whether id matches [a-z0-9_-]{1,128}.
func ValidEndpointID(id string) bool { return validToken(id, MaxTokenLen, false, true) }

// validOpToken reports whether op matches [a-z0-9_]{1,64}.
func validOpToken(op string) bool { return validToken(op, 64, false, false) }

// validToken reports whether s is 1 to max bytes of [a-z0-9_], upper-case letters
// when upper, '-' when dash.
func validToken(s string, max int, upper, dash bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || upper && 'A' <= c && c <= 'Z' || dash && c == '-') {
			return false
		}
	}
	return true
}

// Steer is the request/reply subject steering one action's governed run:
// <prefix>.steer.<id>.
func (s Subjects) Steer(actionID string) string { return s.prefix() + ".steer." + actionID }

// AllSteer is the wildcard over every steer subject: <prefix>.steer.*.
func (s Subjects) AllSteer() string { return s.prefix() + ".steer.*" }

// ParseSteer returns the action id of a steer subject.
func (s Subjects) ParseSteer(subject string) (string, error) {
	return s.parseIDSubject("steer", subject)
}
