package bridge

import (
	"errors"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// The dead-letter reason of a message on an approvals subject says it is an invalid
// decision and what is wrong with it, without the package prefixes of the errors
// (issue 26, item 8: it said "not a readable approval decision: events: invalid
// action: ...").
func TestDecisionProblem(t *testing.T) {
	_, short := events.DecodeApproval([]byte(`{"decision":"approve","input_sha256":"<hash>"}`))
	_, noEnvelope := events.DecodeDecisionEnvelope(nil, []byte(`not json`))
	tooLong := schemas.ValidateApproval([]byte(`{"decision":"deny","reason":"` + strings.Repeat("x", 5000) + `"}`))
	for _, tt := range []struct {
		err  error
		want string
	}{
		{short, "invalid decision: input_sha256: must be 64 lowercase hexadecimal digits"},
		{noEnvelope, "invalid decision: no ce-specversion header and no structured CloudEvent payload"},
		{tooLong, "invalid decision: reason: "},
		{errors.New("something else"), "invalid decision: something else"},
	} {
		if tt.err == nil {
			t.Fatalf("no error for %q", tt.want)
		}
		if got := decisionProblem(tt.err); !strings.HasPrefix(got, tt.want) || strings.Contains(got, "events:") || strings.Contains(got, "schemas:") {
			t.Errorf("decisionProblem(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
