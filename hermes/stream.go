package hermes

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
)

// Event is one parsed SSE event handed to the callback as soon as it is read.
type Event struct {
	Index    int             // 0-based
	Event    string          // SSE `event:` field, "" when absent
	ID       *string         // SSE `id:` field, nil when absent
	Data     json.RawMessage // JSON data verbatim; non-JSON -> JSON string; empty -> null
	Name     string          // event, else data.event, else data.type, else ""
	Kind     string          // data|progress|tool|thought|pending_approval|error|done
	Text     string          // assistant text this event adds ("" if none)
	Terminal bool
}

// Event kinds.
const (
	KindData            = "data"
	KindProgress        = "progress"
	KindTool            = "tool"
	KindThought         = "thought"
	KindPendingApproval = "pending_approval"
	KindError           = "error"
	KindDone            = "done"
)

// StreamSummary is the outcome of a stream operation.
type StreamSummary struct {
	EventCount int
	Text       string
	Terminal   bool
	Truncated  bool
	LastName   string // name of the last event that had one
	Usage      *Usage // the usage the stream reported (see Result.Usage), nil when none
}

func isTerminalName(n string) bool {
	switch n {
	case "done", "run.completed", "run.failed", "run.cancelled",
		"response.completed", "response.failed", "response.incomplete", "error":
		return true
	}
	return false
}

func isFailureName(n string) bool {
	switch n {
	case "run.failed", "response.failed", "response.incomplete", "error":
		return true
	}
	return false
}

// commonNames are the event names internName returns without allocating.
var commonNames = []string{"done", "error", "hermes.tool.progress", "run.started", "run.completed",
	"message.started", "assistant.delta", "assistant.completed", "tool.progress", "tool.started",
	"tool.completed", "response.created", "response.output_text.delta", "response.output_text.done",
	"response.output_item.added", "response.output_item.done", "response.completed"}

// internName returns string(b), without allocating for "" and the common event names.
func internName(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	for _, n := range commonNames {
		if string(b) == n {
			return n
		}
	}
	return string(b)
}

var (
	jsonNull = json.RawMessage("null")
	doneData = json.RawMessage(`"[DONE]"`)
)

// streamState turns frames into events and keeps the aggregate.
type streamState struct {
	count       int
	text        strings.Builder
	lastName    string
	terminal    bool
	truncated   bool
	failedChunk bool // a chat chunk with finish_reason "error" was seen
	usage       usageState
}

// event builds the Event for frame f. It does not update the aggregate, except for the
// usage an event reports (st.usage).
func (st *streamState) event(f *sseFrame) (Event, bool) {
	ev := Event{Index: st.count, Event: internName(f.event)}
	if f.hasID {
		id := string(f.id)
		ev.ID = &id
	}
	trimmed := bytes.TrimSpace(f.data)
	var p probe
	switch {
	case len(trimmed) == 0:
		ev.Data = jsonNull
	case string(trimmed) == "[DONE]":
		ev.Data = doneData
		ev.Terminal = true
	case json.Valid(trimmed):
		ev.Data = append(json.RawMessage(nil), trimmed...)
		if trimmed[0] == '{' {
			scanProbe(trimmed, &p)
		}
	default:
		ev.Data = mustJSON(string(f.data))
	}

	dataEvent, _ := jsonName(p.event)
	switch {
	case ev.Event != "":
		ev.Name = ev.Event
	case dataEvent != "":
		ev.Name = dataEvent
	default:
		ev.Name, _ = jsonName(p.typ)
	}
	if isTerminalName(ev.Event) || isTerminalName(dataEvent) {
		ev.Terminal = true
	}

	toolName, _ := jsonName(p.toolName)
	ev.Kind = classify(ev.Name, ev.Terminal, toolName)

	fr, _ := jsonName(p.finishReason)
	failed := fr == "error"
	if p.usage != nil || p.response != nil || ev.Name == "subagent.complete" {
		st.usage.observe(&p, ev.Name, ev.Terminal, trimmed)
	}
	if ev.Kind != KindThought {
		ev.Text = eventText(&p, ev.Name, st.text.Len() == 0)
	}
	return ev, failed
}

// classify maps an event to its kind (AIP connector §2 table, extended): failure names are
// error; other terminal events are done; tool.* and hermes.tool.progress are tool; the session
// stream's tool.progress is thought when tool_name is "_thinking" and tool otherwise;
// approval.request is pending_approval; reasoning.available is thought; lifecycle events are
// progress; everything else is data.
func classify(name string, terminal bool, toolName string) string {
	if isFailureName(name) {
		return KindError
	}
	if terminal {
		return KindDone
	}
	switch name {
	case "tool.started", "tool.completed", "tool.failed", "hermes.tool.progress":
		return KindTool
	case "tool.progress":
		if toolName == "_thinking" {
			return KindThought
		}
		return KindTool
	case "approval.request":
		return KindPendingApproval
	case "reasoning.available":
		return KindThought
	case "run.started", "message.started", "response.created", "response.in_progress", "assistant.completed":
		return KindProgress
	}
	return KindData
}

// eventText is the text an event adds (AIP append_event_text): choices[0].delta.content; else a
// string data.delta; else data.text for response.output_text.delta; else, only while the text is
// still empty, data.content or data.output.
func eventText(p *probe, name string, textEmpty bool) string {
	if s, ok := jsonString(p.choiceContent); ok {
		return s
	}
	if s, ok := jsonString(p.delta); ok {
		return s
	}
	if name == "response.output_text.delta" {
		if s, ok := jsonString(p.text); ok {
			return s
		}
	}
	if textEmpty {
		if s, ok := jsonString(p.content); ok {
			return s
		}
		if s, ok := jsonString(p.output); ok {
			return s
		}
	}
	return ""
}

// callbackError wraps an error returned by the event callback of operation op.
type callbackError struct {
	op  string // set by the Client
	err error
}

func (e *callbackError) Error() string {
	return "hermes: " + e.op + ": event callback: " + e.err.Error()
}
func (e *callbackError) Unwrap() error { return e.err }

// consumeStream reads SSE events from r, calls onEvent for each in order and stops at the first
// terminal event, at maxEvents (truncated) or at EOF. Read errors are returned as they are
// (*errSSE for an invalid stream); a callback error is returned as *callbackError.
// failedChunk reports a chat chunk with finish_reason "error".
func consumeStream(r io.Reader, frameLimit int, streamLimit int64, maxEvents int, onEvent func(Event) error) (sum StreamSummary, failedChunk bool, err error) {
	if maxEvents <= 0 {
		maxEvents = DefaultMaxEvents
	}
	rd := newSSEReader(r, frameLimit, streamLimit)
	var st streamState
	for {
		f, err := rd.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st.summary(), st.failedChunk, err
		}
		ev, failed := st.event(f)
		st.failedChunk = st.failedChunk || failed
		st.text.WriteString(ev.Text)
		if ev.Name != "" {
			st.lastName = ev.Name
		}
		st.terminal = ev.Terminal
		if onEvent != nil {
			if err := onEvent(ev); err != nil {
				return st.summary(), st.failedChunk, &callbackError{err: err}
			}
		}
		st.count++
		if st.count >= maxEvents {
			st.truncated, st.terminal = true, false
			break
		}
		if ev.Terminal {
			break
		}
	}
	return st.summary(), st.failedChunk, nil
}

func (st *streamState) summary() StreamSummary {
	return StreamSummary{EventCount: st.count, Text: st.text.String(), Terminal: st.terminal,
		Truncated: st.truncated, LastName: st.lastName, Usage: st.usage.result()}
}

// streamOutcome gives the result status and error of a finished stream (AIP stream_outcome):
// truncated -> failed stream_truncated; no terminal event -> failed stream_incomplete; last named
// event run.cancelled -> cancelled; run.failed, response.failed, response.incomplete or error ->
// failed stream_failed. As an improvement over the AIP connector, a chat chunk whose
// choices[0].finish_reason is "error" also makes the stream fail with stream_failed.
func streamOutcome(op string, s StreamSummary, failedChunk bool, maxEvents int, status int) (string, *Error) {
	var e *Error
	switch {
	case s.Truncated:
		e = newError(op, CodeStreamTruncated, "stream reached max_events before a terminal event")
		e.Details = map[string]any{"operation": op, "max_events": maxEvents}
	case !s.Terminal:
		e = newError(op, CodeStreamIncomplete, "stream closed without a terminal event")
		e.Details = map[string]any{"operation": op}
	case s.LastName == "run.cancelled":
		return "cancelled", nil
	case isFailureName(s.LastName):
		e = newError(op, CodeStreamFailed, "stream ended with a failure event")
		e.Details = map[string]any{"operation": op, "last_event": s.LastName}
	case failedChunk:
		e = newError(op, CodeStreamFailed, "stream ended with finish_reason error")
		e.Details = map[string]any{"operation": op, "last_event": s.LastName, "finish_reason": "error"}
	default:
		return "completed", nil
	}
	e.HTTPStatus = status
	return "failed", e
}
