package schemas

import (
	"errors"
	"fmt"
	"testing"
)

// TestValidationErrorIsDeterministic: a document with several errors as deep as each
// other gets the same error every time (the library lists an object's members in Go's
// map order): the smallest instance location, then the smallest disallowed member.
// Before, the same action got different invalid_action details on different deliveries.
func TestValidationErrorIsDeterministic(t *testing.T) {
	cases := []struct{ op, action, field string }{
		{"health", `{"input":{},"cc":1,"bb":2,"aa":3}`, "aa"},
		{"chat", `{"input":{"prompt":1,"model":2,"session_id":3}}`, "input.model"},
		{"responses", `{"input":{"input":1,"instructions":2,"model":3}}`, "input.input"},
		{"chat", `{"timeout_ms":0,"tenant_id":1,"input":{"prompt":"x"}}`, "tenant_id"},
		{"chat", `{"input":{"messages":[{"role":1,"content":2},{"role":3}]}}`, ""},
	}
	for _, c := range cases {
		seen := map[string]int{}
		var first error
		for range 200 {
			err := ValidateAction(c.op, []byte(c.action))
			if first == nil {
				first = err
			}
			seen[fmt.Sprint(err)]++
		}
		if len(seen) != 1 {
			t.Errorf("%s %s: %d different errors in 200 calls: %v", c.op, c.action, len(seen), seen)
			continue
		}
		var ve *ValidationError
		if !errors.As(first, &ve) {
			t.Fatalf("%s %s: %v, want a *ValidationError", c.op, c.action, first)
		}
		if c.field != "" && ve.Field != c.field {
			t.Errorf("%s %s: field %q, want %q (%v)", c.op, c.action, ve.Field, c.field, first)
		}
	}
}
