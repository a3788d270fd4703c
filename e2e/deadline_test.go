package e2e_test

import (
	"testing"
	"time"
)

// untilDeadline is how long a wait that may include a build (go build, go install, make)
// may take: until a little before the test binary's deadline (go test -timeout; a tenth
// of the time left, at most a minute, so that the test fails with the command's output
// instead of a panic), or an hour without one. A fixed limit failed make test on a
// loaded machine.
func untilDeadline(t *testing.T) time.Duration {
	d, ok := t.Deadline()
	if !ok {
		return time.Hour
	}
	left := time.Until(d)
	return left - min(left/10, time.Minute)
}
