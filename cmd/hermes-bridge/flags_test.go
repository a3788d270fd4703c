package main

import "testing"

// TestFlagValueErrors: a flag value of the wrong kind says what is expected instead
// of the flag package's "parse error" (issue 13: `call --timeout 1`).
func TestFlagValueErrors(t *testing.T) {
	const duration = "must be a duration with a unit, such as 30s, 5m or 1h30m"
	runUsageCases(t, []struct {
		args []string
		want string
	}{
		{[]string{"call", "--timeout", "1"}, `invalid value "1" for flag --timeout: ` + duration},
		{[]string{"call", "--wait", "soon"}, `invalid value "soon" for flag --wait: ` + duration},
		{[]string{"watch", "--wait", "5", "some-id"}, `invalid value "5" for flag --wait: ` + duration},
		{[]string{"cancel", "--timeout", "2", "some-id"}, `invalid value "2" for flag --timeout: ` + duration},
		{[]string{"call", "--json=maybe"}, `invalid boolean value "maybe" for flag --json: must be true or false`},
	})
}
