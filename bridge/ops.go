package bridge

import (
	"net/http"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// RunOperation is the governed run: one action that starts a Hermes run (with run_start's
// request), republishes its events, and settles with the run's terminal status and output,
// following the run again after a crash (see run.go).
const RunOperation = "run"

// runSpec describes the governed run. Its HTTP route is the start's; the action is a stream
// of the run's events; the idempotency key is required (it is also the run's
// Idempotency-Key).
var runSpec = hermes.Spec{Name: RunOperation, Method: http.MethodPost, Path: "/v1/runs",
	Stream: true, KeyRequired: true, Auth: true}

// defaultRunTimeout is a governed run's deadline when the action sets none (the AIP
// operator's 900 s): agent work with tools takes longer than one chat.
const defaultRunTimeout = 15 * time.Minute

// Operations returns every operation the bridge serves, in this order: the 21 of the
// contract (hermes.Operations), the five run operations (hermes.RunOperations) and the
// governed run. The slice is a fresh copy.
func Operations() []hermes.Spec {
	ops := append(hermes.Operations(), hermes.RunOperations()...)
	return append(ops, runSpec)
}

// LookupOperation returns the Spec of an operation the bridge serves and whether there
// is one.
func LookupOperation(op string) (hermes.Spec, bool) {
	if s, ok := hermes.Lookup(op); ok {
		return s, true
	}
	if s, ok := hermes.LookupRun(op); ok {
		return s, true
	}
	if op == RunOperation {
		return runSpec, true
	}
	return hermes.Spec{}, false
}
