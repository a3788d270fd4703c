package hermes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Run statuses reported by GET /v1/runs/{run_id}. RunInterrupted exists only in later Hermes
// versions (a run cut off by a gateway restart).
const (
	RunQueued             = "queued"
	RunRunning            = "running"
	RunWaitingForApproval = "waiting_for_approval"
	RunStopping           = "stopping"
	RunCompleted          = "completed"
	RunFailed             = "failed"
	RunCancelled          = "cancelled"
	RunInterrupted        = "interrupted"
)

// RunTerminal reports whether a run status is final: completed, failed, cancelled or
// interrupted.
func RunTerminal(status string) bool {
	return status == RunCompleted || status == RunFailed || status == RunCancelled || status == RunInterrupted
}

// RunStarted is the 202 answer of POST /v1/runs.
type RunStarted struct {
	RunID      string
	Status     string // "started"
	Replayed   bool   // durable idempotency: the key was seen before and no run was started
	SessionKey string // the echoed X-Hermes-Session-Key, "" when none
	HTTPStatus int
	Raw        json.RawMessage
}

// RunStatus is the answer of GET /v1/runs/{run_id}.
type RunStatus struct {
	RunID     string    `json:"run_id"`
	Status    string    `json:"status"` // see the Run* constants; RunTerminal tells whether it is final
	SessionID string    `json:"session_id"`
	Model     string    `json:"model"`
	LastEvent string    `json:"last_event"` // name of the run's latest event ("" before the first)
	Output    *string   `json:"output"`     // completed runs
	Error     *string   `json:"error"`      // failed runs
	Usage     *RunUsage `json:"-"`          // ParseUsage of the usage member: nil when absent or unreadable
	// PendingSteer is steer text the agent never read (later Hermes versions, terminal
	// runs; "" when none).
	PendingSteer string `json:"pending_steer"`
	// Approval is, while the status is waiting_for_approval, the approval.request event
	// the run waits for, verbatim (Hermes 0.21 and later; nil before): ParseRunEvent reads it.
	Approval  json.RawMessage `json:"approval"`
	CreatedAt float64         `json:"created_at"` // Unix seconds
	UpdatedAt float64         `json:"updated_at"`
	Raw       json.RawMessage `json:"-"` // the body verbatim
}

// Terminal reports whether the status is final.
func (s *RunStatus) Terminal() bool { return RunTerminal(s.Status) }

// RunApprovalResult is the 200 answer of POST /v1/runs/{run_id}/approval.
type RunApprovalResult struct {
	RunID     string          `json:"run_id"`
	Choice    string          `json:"choice"`     // as Hermes normalised it (approve/allow -> once)
	RequestID string          `json:"request_id"` // the request answered, when the call named one (Hermes 0.21)
	Resolved  int             `json:"resolved"`   // approvals resolved by this decision
	Raw       json.RawMessage `json:"-"`
}

// RunSteerResult is the 200 answer of POST /v1/runs/{run_id}/steer (later Hermes versions):
// the text was queued for the run's agent, not yet read.
type RunSteerResult struct {
	RunID    string          `json:"run_id"`
	Accepted bool            `json:"accepted"`
	Raw      json.RawMessage `json:"-"`
}

// RunStopResult is the 200 answer of POST /v1/runs/{run_id}/stop.
type RunStopResult struct {
	RunID  string          `json:"run_id"`
	Status string          `json:"status"` // "stopping"; a later Hermes answers a finished run's status object instead
	Raw    json.RawMessage `json:"-"`
}

// RunApprovalRequest is the payload of an approval.request event.
type RunApprovalRequest struct {
	Command        string   `json:"command"`
	PatternKey     string   `json:"pattern_key"`
	PatternKeys    []string `json:"pattern_keys"`
	Description    string   `json:"description"`
	AllowPermanent bool     `json:"allow_permanent"`
	AllowSession   bool     `json:"allow_session"`
	SmartDenied    bool     `json:"smart_denied"`
	Choices        []string `json:"choices"`
	RequestID      string   `json:"request_id"` // later Hermes versions only
}

// RunEvent is one frame of GET /v1/runs/{run_id}/events: data: <json> with the name in
// data.event (there is no event: line). Fields not carried by the event are zero.
type RunEvent struct {
	Name      string          // data.event: message.delta, tool.started, run.completed, ...
	RunID     string          // data.run_id
	Timestamp float64         // data.timestamp, Unix seconds
	Data      json.RawMessage // the data object verbatim
	// Kind is the AIP operator chunk kind: message.delta data; reasoning.available thought;
	// tool.started, tool.completed, tool.failed tool; approval.request pending_approval;
	// run.failed error; run.completed, run.cancelled (and the later run.interrupted) done;
	// anything else progress.
	Kind     string
	Terminal bool // run.completed, run.failed, run.cancelled, run.interrupted

	Delta     string              // message.delta
	Text      string              // reasoning.available: a copy of the assistant content, not model reasoning
	Tool      string              // tool.*
	Preview   string              // tool.started
	Duration  float64             // tool.completed, seconds
	ToolError bool                // tool.completed: the tool reported an error (also a denied approval)
	Approval  *RunApprovalRequest // approval.request
	Choice    string              // approval.responded
	Resolved  int                 // approval.responded
	Output    string              // run.completed
	Usage     *RunUsage           // run.completed (ParseUsage of its usage)
	CostUSD   *float64            // subagent.complete: the subagent's cost_usd, when Hermes gives one (v0.21)
	// PendingSteer is steer text the agent never read (run.completed, and on later Hermes
	// versions every terminal event).
	PendingSteer string
	Error        string // run.failed
}

func runEventKind(name string) string {
	switch name {
	case "message.delta":
		return KindData
	case "reasoning.available":
		return KindThought
	case "tool.started", "tool.completed", "tool.failed":
		return KindTool
	case "approval.request":
		return KindPendingApproval
	case "run.failed":
		return KindError
	case "run.completed", "run.cancelled", "run.interrupted":
		return KindDone
	}
	return KindProgress
}

// errRunEvent is a run-events frame that is not a JSON object with a string event.
var errRunEvent = &errSSE{"invalid_run_event"}

// ParseRunEvent decodes the data of one run-events frame. It fails (an *Error with Code
// invalid_response) unless data is a JSON object with a non-empty string "event"; members of
// an unexpected type are left zero rather than failing.
func ParseRunEvent(data []byte) (RunEvent, error) {
	ev, err := parseRunEvent(data)
	if err != nil {
		return RunEvent{}, invalidResponse("run_events", errRunEvent.reason, 0)
	}
	return ev, nil
}

func parseRunEvent(data []byte) (RunEvent, error) {
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return RunEvent{}, errRunEvent
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(t, &m) != nil {
		return RunEvent{}, errRunEvent
	}
	var ev RunEvent
	if json.Unmarshal(m["event"], &ev.Name) != nil || ev.Name == "" {
		return RunEvent{}, errRunEvent
	}
	ev.Data = append(json.RawMessage(nil), t...)
	ev.Kind = runEventKind(ev.Name)
	ev.Terminal = ev.Name == "run.completed" || ev.Name == "run.failed" || ev.Name == "run.cancelled" || ev.Name == "run.interrupted"
	str := func(k string, dst *string) { _ = json.Unmarshal(m[k], dst) }
	str("run_id", &ev.RunID)
	_ = json.Unmarshal(m["timestamp"], &ev.Timestamp)
	switch ev.Name {
	case "message.delta":
		str("delta", &ev.Delta)
	case "reasoning.available":
		str("text", &ev.Text)
	case "tool.started", "tool.completed", "tool.failed":
		str("tool", &ev.Tool)
		str("preview", &ev.Preview)
		_ = json.Unmarshal(m["duration"], &ev.Duration)
		_ = json.Unmarshal(m["error"], &ev.ToolError)
		if ev.Name == "tool.failed" {
			ev.ToolError = true
		}
	case "approval.request":
		var a RunApprovalRequest
		// Decode member by member so that one odd member does not lose the others.
		str("command", &a.Command)
		str("pattern_key", &a.PatternKey)
		_ = json.Unmarshal(m["pattern_keys"], &a.PatternKeys)
		str("description", &a.Description)
		_ = json.Unmarshal(m["allow_permanent"], &a.AllowPermanent)
		_ = json.Unmarshal(m["allow_session"], &a.AllowSession)
		_ = json.Unmarshal(m["smart_denied"], &a.SmartDenied)
		_ = json.Unmarshal(m["choices"], &a.Choices)
		str("request_id", &a.RequestID)
		ev.Approval = &a
	case "approval.responded":
		str("choice", &ev.Choice)
		var n float64
		if json.Unmarshal(m["resolved"], &n) == nil && n >= 0 && n < 1<<31 {
			ev.Resolved = int(n)
		}
	case "run.completed":
		str("output", &ev.Output)
		ev.Usage = ParseUsage(m["usage"])
	case "subagent.complete":
		if c, ok := costOf(m["cost_usd"]); ok {
			ev.CostUSD = &c
		}
	case "run.failed":
		str("error", &ev.Error)
	}
	if ev.Terminal {
		str("pending_steer", &ev.PendingSteer)
	}
	return ev, nil
}

// RunEventStream reads the events of one run. It is not safe for concurrent use; Close it
// when done (closing early also ends the subscription: Hermes then drops the run's queue).
type RunEventStream struct {
	body io.ReadCloser
	rd   *sseReader
	ctx  context.Context
	done bool
	err  error
}

// newRunEventStream reads run events from body, with no event limit.
func newRunEventStream(ctx context.Context, body io.ReadCloser, frameLimit int, streamLimit int64) *RunEventStream {
	return &RunEventStream{body: body, rd: newSSEReader(body, frameLimit, streamLimit), ctx: ctx}
}

// Next returns the next event. After a terminal event (run.completed, run.failed,
// run.cancelled, run.interrupted) has been returned, Next returns io.EOF. A stream that ends
// or breaks before a terminal event gives an *Error with Code stream_incomplete (follow the
// status with RunStatus then); an invalid frame or a frame that is not a run event gives
// invalid_response; a done ctx gives cancelled or deadline_exceeded. Errors are sticky.
func (s *RunEventStream) Next() (RunEvent, error) {
	if s.err != nil {
		return RunEvent{}, s.err
	}
	if s.done {
		return RunEvent{}, io.EOF
	}
	f, err := s.rd.next()
	if err != nil {
		var se *errSSE
		switch {
		case errors.As(err, &se):
			s.err = invalidResponse("run_events", se.reason, http.StatusOK)
		case s.ctx.Err() != nil:
			s.err = transportError(s.ctx, "run_events", err, http.StatusOK)
		default:
			e := newError("run_events", CodeStreamIncomplete, "run events stream closed before a terminal event")
			e.HTTPStatus = http.StatusOK
			e.Details = map[string]any{"operation": "run_events"}
			if err != io.EOF {
				e.Details["cause"] = "transport"
				e.Err = err
			}
			s.err = e
		}
		return RunEvent{}, s.err
	}
	ev, err := parseRunEvent(f.data)
	if err != nil {
		s.err = invalidResponse("run_events", errRunEvent.reason, http.StatusOK)
		return RunEvent{}, s.err
	}
	if ev.Terminal {
		s.done = true
	}
	return ev, nil
}

// Close ends the stream. Safe to call more than once.
func (s *RunEventStream) Close() error {
	if s.body == nil {
		return nil
	}
	err := s.body.Close()
	s.body = nil
	return err
}

// runJSON sends a prepared JSON run operation and decodes its body into dst.
func (c *Client) runJSON(ctx context.Context, p *Prepared, dst any) (*Result, error) {
	res, err := c.Send(ctx, p, nil)
	if err != nil {
		return nil, err
	}
	if json.Unmarshal(res.Output, dst) != nil || !bytes.HasPrefix(res.Output, []byte("{")) {
		return nil, invalidResponse(p.Spec.Name, "unexpected_body", res.HTTPStatus)
	}
	return res, nil
}

// RunStart submits a run (POST /v1/runs) and returns once Hermes accepted it (202), before
// the agent has done anything: store RunStarted.RunID before anything else. req.Input is the
// run_start input (see Prepare); req.Operation must be "" or "run_start";
// req.IdempotencyKey is required and sent as Idempotency-Key. Only a Hermes that advertises
// durable runs idempotency (Capabilities.RunsIdempotency) honours the key; any other starts a
// second run when the request is repeated, so a lost answer (an *Error with NotStarted false)
// leaves the outcome unknown. A 202 without a run_id is invalid_response. A key Hermes already
// holds for another payload gives a 409 with RemoteCode idempotency_key_conflict (NotStarted).
func (c *Client) RunStart(ctx context.Context, req Request) (*RunStarted, error) {
	if req.Operation != "" && req.Operation != "run_start" {
		return nil, inputErr("operation", "must be run_start")
	}
	req.Operation = "run_start"
	p, err := Prepare(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.Spec.Timeout) // an earlier deadline of ctx stands
	defer cancel()
	resp, err := c.open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, transportError(ctx, "run_start", err, resp.StatusCode)
	}
	var body struct {
		RunID    string `json:"run_id"`
		Status   string `json:"status"`
		Replayed bool   `json:"replayed"`
	}
	if json.Unmarshal(b, &body) != nil || body.RunID == "" {
		return nil, invalidResponse("run_start", "no_run_id", resp.StatusCode)
	}
	return &RunStarted{
		RunID:      body.RunID,
		Status:     body.Status,
		Replayed:   body.Replayed || strings.EqualFold(resp.Header.Get("Idempotency-Replayed"), "true"),
		SessionKey: resp.Header.Get("X-Hermes-Session-Key"),
		HTTPStatus: resp.StatusCode,
		Raw:        normalizeBody(b),
	}, nil
}

// RunStatus polls a run (GET /v1/runs/{run_id}). Statuses live in the Hermes process's
// memory: after a Hermes restart, or 1 h after the run ended, the answer is a 404 matched by
// errors.Is(err, ErrRunNotFound).
func (c *Client) RunStatus(ctx context.Context, runID string) (*RunStatus, error) {
	p, err := Prepare(Request{Operation: "run_status", Input: map[string]any{"run_id": runID}})
	if err != nil {
		return nil, err
	}
	rs := new(RunStatus)
	res, err := c.runJSON(ctx, p, rs)
	if err != nil {
		return nil, err
	}
	if rs.Status == "" {
		return nil, invalidResponse("run_status", "no_status", res.HTTPStatus)
	}
	rs.Raw = res.Output
	rs.Usage = bodyUsage(res.Output)
	return rs, nil
}

// RunEvents subscribes to a run's events (GET /v1/runs/{run_id}/events) and returns the open
// stream; it is bounded by ctx only. Hermes keeps one queue per run that buffers every event
// from the start: the first subscriber gets them all, and when that subscriber's stream ends
// or breaks the queue is gone, so any later subscription (a re-attach after a crash, a
// second reader) fails with errors.Is(err, ErrRunNotFound), as it does 300 s after creation if
// nobody subscribed. Then poll RunStatus. The stream has no event limit; the client's frame
// and stream byte limits (WithFrameLimit, WithStreamLimit) apply.
func (c *Client) RunEvents(ctx context.Context, runID string) (*RunEventStream, error) {
	p, err := Prepare(Request{Operation: "run_events", Input: map[string]any{"run_id": runID}})
	if err != nil {
		return nil, err
	}
	resp, err := c.open(ctx, p)
	if err != nil {
		return nil, err
	}
	return newRunEventStream(ctx, resp.Body, c.o.frameLimit, c.o.streamLimit), nil
}

// RunApproval answers the run's oldest pending approval, or every pending one when all is
// set (POST /v1/runs/{run_id}/approval). choice is once, session, always or deny (aliases
// approve, approved, allow mean once). Errors: ErrRunNotFound for an unknown run; a 409 with
// RemoteCode approval_not_active (the run finished) or approval_not_pending (nothing waits);
// 400 invalid_approval_choice.
func (c *Client) RunApproval(ctx context.Context, runID, choice string, all bool) (*RunApprovalResult, error) {
	in := map[string]any{"run_id": runID, "choice": choice}
	if all {
		in["all"] = true
	}
	return c.runApproval(ctx, in)
}

// RunApprovalFor answers the run's approval request requestID (the request_id of its
// approval.request; Hermes 0.21 and later), or, when requestID is "", the oldest pending
// one, as RunApproval does. A requestID the run does not wait for (answered, or never
// asked) is a 409 approval_not_pending; the errors are RunApproval's.
func (c *Client) RunApprovalFor(ctx context.Context, runID, choice, requestID string) (*RunApprovalResult, error) {
	in := map[string]any{"run_id": runID, "choice": choice}
	if requestID != "" {
		in["request_id"] = requestID
	}
	return c.runApproval(ctx, in)
}

func (c *Client) runApproval(ctx context.Context, in map[string]any) (*RunApprovalResult, error) {
	p, err := Prepare(Request{Operation: "run_approval", Input: in})
	if err != nil {
		return nil, err
	}
	ar := new(RunApprovalResult)
	res, err := c.runJSON(ctx, p, ar)
	if err != nil {
		return nil, err
	}
	ar.Raw = res.Output
	return ar, nil
}

// RunSteer adds text to a running run's turn (POST /v1/runs/{run_id}/steer, later Hermes
// versions: Capabilities.RunSteer). The text is queued, not yet read: text the agent never
// reads comes back as the run's pending_steer. Errors: ErrRunNotFound for an unknown run;
// a 409 with RemoteCode run_not_accepting_steer (the run is not running: queued, waiting
// for an approval, stopping or finished) or steer_not_accepted (the agent declined it);
// 400 invalid_steer_input (blank text); ErrRouteNotFound from a Hermes without steer.
func (c *Client) RunSteer(ctx context.Context, runID, text string) (*RunSteerResult, error) {
	p, err := Prepare(Request{Operation: "run_steer", Input: map[string]any{"run_id": runID, "input": text}})
	if err != nil {
		return nil, err
	}
	sr := new(RunSteerResult)
	res, err := c.runJSON(ctx, p, sr)
	if err != nil {
		return nil, err
	}
	sr.Raw = res.Output
	return sr, nil
}

// RunStop asks a live run to stop (POST /v1/runs/{run_id}/stop). Stopping is cooperative: the
// answer is "stopping" and the run later settles as cancelled (run.cancelled), or as it
// ended if it finished first. A finished run gives ErrRunNotFound on Hermes 0.19 (read
// RunStatus to learn how it ended) and, on Hermes 0.21, a 200 whose RunStopResult.Status is
// its terminal status (Raw is the full status object). On 0.21, a run another gateway
// process owns gives a 409 with RemoteCode run_not_active: follow it with RunStatus.
func (c *Client) RunStop(ctx context.Context, runID string) (*RunStopResult, error) {
	p, err := Prepare(Request{Operation: "run_stop", Input: map[string]any{"run_id": runID}})
	if err != nil {
		return nil, err
	}
	sr := new(RunStopResult)
	res, err := c.runJSON(ctx, p, sr)
	if err != nil {
		return nil, err
	}
	sr.Raw = res.Output
	return sr, nil
}

// RunsIdempotency is the runs_idempotency capability of later Hermes versions.
type RunsIdempotency struct {
	Supported        bool  // POST /v1/runs honours Idempotency-Key
	Durable          bool  // the reservation survives a Hermes restart
	RetentionSeconds int64 // how long a key is kept
}

// Capabilities is the parsed answer of GET /v1/capabilities.
type Capabilities struct {
	Object          string
	Platform        string
	Model           string
	Features        map[string]json.RawMessage
	Endpoints       map[string]CapabilityEndpoint
	RunsIdempotency RunsIdempotency
	// RunSteer: the endpoint serves POST /v1/runs/{run_id}/steer (features.run_steer).
	RunSteer bool
	Raw      json.RawMessage
}

// CapabilityEndpoint is one member of capabilities.endpoints.
type CapabilityEndpoint struct {
	Method string `json:"method"`
	Path   string `json:"path"`
}

// Feature reports whether features[name] is JSON true.
func (c *Capabilities) Feature(name string) bool {
	return string(bytes.TrimSpace(c.Features[name])) == "true"
}

// Runs reports whether the endpoint advertises the whole runs API: run_submission,
// run_status, run_events_sse, run_stop and run_approval_response.
func (c *Capabilities) Runs() bool {
	for _, f := range []string{"run_submission", "run_status", "run_events_sse", "run_stop", "run_approval_response"} {
		if !c.Feature(f) {
			return false
		}
	}
	return true
}

// DurableRunIdempotency reports whether a repeated RunStart with the same key is answered
// with the same run even across a Hermes restart.
func (c *Capabilities) DurableRunIdempotency() bool {
	return c.RunsIdempotency.Supported && c.RunsIdempotency.Durable
}

// ParseCapabilities decodes a /v1/capabilities body. runs_idempotency is read from features
// (where later Hermes versions put it) or, failing that, the top level; it may be an object
// {supported, durable, retention_seconds} or a bare boolean (supported, not durable). Absent,
// it is the zero value, as for v0.16 and v0.19. A body that is not a JSON object fails with
// invalid_response.
func ParseCapabilities(b []byte) (*Capabilities, error) {
	t := bytes.TrimSpace(b)
	// Decode member by member so that an odd member does not lose the rest.
	var top map[string]json.RawMessage
	if len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &top) != nil {
		return nil, invalidResponse("capabilities", "not_an_object", 0)
	}
	c := &Capabilities{Features: map[string]json.RawMessage{}, Endpoints: map[string]CapabilityEndpoint{},
		Raw: append(json.RawMessage(nil), t...)}
	_ = json.Unmarshal(top["object"], &c.Object)
	_ = json.Unmarshal(top["platform"], &c.Platform)
	_ = json.Unmarshal(top["model"], &c.Model)
	_ = json.Unmarshal(top["features"], &c.Features)
	var endpoints map[string]json.RawMessage
	_ = json.Unmarshal(top["endpoints"], &endpoints)
	for k, raw := range endpoints {
		var e CapabilityEndpoint
		if json.Unmarshal(raw, &e) == nil {
			c.Endpoints[k] = e
		}
	}
	c.RunSteer = c.Feature("run_steer")
	ri, ok := c.Features["runs_idempotency"]
	if !ok {
		ri = top["runs_idempotency"]
	}
	switch jsontext.Value(ri).Kind() {
	case 't':
		c.RunsIdempotency.Supported = true
	case '{':
		var m map[string]json.RawMessage
		var retention float64
		_ = json.Unmarshal(ri, &m)
		_ = json.Unmarshal(m["retention_seconds"], &retention)
		// An object without "supported" (or with a null one) advertises support by its presence.
		supported := jsontext.Value(m["supported"]).Kind()
		c.RunsIdempotency.Supported = supported == 0 || supported == 'n' || supported == 't'
		c.RunsIdempotency.Durable = c.RunsIdempotency.Supported && jsontext.Value(m["durable"]).Kind() == 't'
		if retention > 0 && retention < 1<<53 {
			c.RunsIdempotency.RetentionSeconds = int64(retention)
		}
	}
	return c, nil
}
