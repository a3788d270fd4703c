package hermes

import (
	"net/http"
	"slices"
	"time"
)

// Spec describes one Hermes operation: its HTTP route and its safety class.
type Spec struct {
	Name        string        // operation name, e.g. "chat_stream"
	Method      string        // HTTP method
	Path        string        // route template, e.g. "/api/sessions/{session_id}/chat"
	Stream      bool          // the response is an SSE stream
	Safe        bool          // read-only and retry-safe
	KeyRequired bool          // an idempotency key is required by the contract
	Approval    bool          // human approval is required by the contract
	Auth        bool          // the route needs the Bearer token (false only for health)
	Timeout     time.Duration // per-request HTTP timeout; 0 for streams (ctx-bound)
}

const (
	jsonTimeout  = 30 * time.Second
	agentTimeout = 300 * time.Second
)

// operations is the table of the 21 operations, in the documented order.
var operations = []Spec{
	{Name: "health", Method: http.MethodGet, Path: "/health", Safe: true, Timeout: jsonTimeout},
	{Name: "health_detailed", Method: http.MethodGet, Path: "/health/detailed", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "models", Method: http.MethodGet, Path: "/v1/models", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "capabilities", Method: http.MethodGet, Path: "/v1/capabilities", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "skills", Method: http.MethodGet, Path: "/v1/skills", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "toolsets", Method: http.MethodGet, Path: "/v1/toolsets", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "chat", Method: http.MethodPost, Path: "/v1/chat/completions", Auth: true, Timeout: agentTimeout},
	{Name: "chat_stream", Method: http.MethodPost, Path: "/v1/chat/completions", Stream: true, Auth: true},
	{Name: "responses", Method: http.MethodPost, Path: "/v1/responses", Auth: true, Timeout: agentTimeout},
	{Name: "responses_stream", Method: http.MethodPost, Path: "/v1/responses", Stream: true, Auth: true},
	{Name: "response_get", Method: http.MethodGet, Path: "/v1/responses/{response_id}", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "response_delete", Method: http.MethodDelete, Path: "/v1/responses/{response_id}", KeyRequired: true, Approval: true, Auth: true, Timeout: jsonTimeout},
	{Name: "sessions_list", Method: http.MethodGet, Path: "/api/sessions", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "session_create", Method: http.MethodPost, Path: "/api/sessions", KeyRequired: true, Auth: true, Timeout: jsonTimeout},
	{Name: "session_get", Method: http.MethodGet, Path: "/api/sessions/{session_id}", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "session_patch", Method: http.MethodPatch, Path: "/api/sessions/{session_id}", KeyRequired: true, Auth: true, Timeout: jsonTimeout},
	{Name: "session_delete", Method: http.MethodDelete, Path: "/api/sessions/{session_id}", KeyRequired: true, Approval: true, Auth: true, Timeout: jsonTimeout},
	{Name: "session_messages", Method: http.MethodGet, Path: "/api/sessions/{session_id}/messages", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "session_fork", Method: http.MethodPost, Path: "/api/sessions/{session_id}/fork", KeyRequired: true, Auth: true, Timeout: jsonTimeout},
	{Name: "session_chat", Method: http.MethodPost, Path: "/api/sessions/{session_id}/chat", Auth: true, Timeout: agentTimeout},
	{Name: "session_chat_stream", Method: http.MethodPost, Path: "/api/sessions/{session_id}/chat/stream", Stream: true, Auth: true},
}

// runOperations is the table of the five structured-runs operations (Hermes /v1/runs*), kept
// apart from the 21-operation table; the bridge serves them (bridge.Operations), and Prepare,
// Call and the typed Run* methods accept them.
var runOperations = []Spec{
	{Name: "run_start", Method: http.MethodPost, Path: "/v1/runs", KeyRequired: true, Auth: true, Timeout: jsonTimeout},
	{Name: "run_status", Method: http.MethodGet, Path: "/v1/runs/{run_id}", Safe: true, Auth: true, Timeout: jsonTimeout},
	{Name: "run_events", Method: http.MethodGet, Path: "/v1/runs/{run_id}/events", Stream: true, Safe: true, Auth: true},
	{Name: "run_approval", Method: http.MethodPost, Path: "/v1/runs/{run_id}/approval", KeyRequired: true, Approval: true, Auth: true, Timeout: jsonTimeout},
	{Name: "run_stop", Method: http.MethodPost, Path: "/v1/runs/{run_id}/stop", KeyRequired: true, Approval: true, Auth: true, Timeout: jsonTimeout},
}

// runSteerSpec is POST /v1/runs/{run_id}/steer (later Hermes versions). It is not one of
// the run operations the bridge serves as actions: steering goes through the bridge's
// steer subject to [Client.RunSteer]. Prepare and Call accept it.
var runSteerSpec = Spec{Name: "run_steer", Method: http.MethodPost, Path: "/v1/runs/{run_id}/steer", Auth: true, Timeout: jsonTimeout}

// RunOperations returns the five run operations (run_start, run_status, run_events,
// run_approval, run_stop) in that order. The slice is a fresh copy. They are not part of
// Operations or Lookup; use LookupRun.
func RunOperations() []Spec { return slices.Clone(runOperations) }

// LookupRun returns the Spec of the named run operation and whether it exists.
func LookupRun(op string) (Spec, bool) {
	for _, s := range runOperations {
		if s.Name == op {
			return s, true
		}
	}
	return Spec{}, false
}

// lookupAny finds op in either table.
func lookupAny(op string) (Spec, bool) {
	if s, ok := Lookup(op); ok {
		return s, true
	}
	if op == runSteerSpec.Name {
		return runSteerSpec, true
	}
	return LookupRun(op)
}

// byName indexes operations by name.
var byName = func() map[string]Spec {
	m := make(map[string]Spec, len(operations))
	for _, s := range operations {
		m[s.Name] = s
	}
	return m
}()

// Lookup returns the Spec of the named operation and whether it exists.
func Lookup(op string) (Spec, bool) {
	s, ok := byName[op]
	return s, ok
}

// Operations returns all 21 operations in table order. The slice is a fresh copy.
func Operations() []Spec { return slices.Clone(operations) }
