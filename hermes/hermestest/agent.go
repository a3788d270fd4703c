package hermestest

import (
	"context"
	"strings"
	"time"
)

// Agent decides the reply to one agent turn. It is called on its own
// goroutine; it may block (to simulate a slow model) but must return promptly
// once ctx is done (client gone or Server.Close). Server.Close waits for it.
type Agent func(ctx context.Context, t Turn) Reply

// Message is one history message handed to the Agent.
type Message struct {
	Role    string
	Content string
}

// Turn describes one agent run.
type Turn struct {
	Route        string    // route key: chat, chat_stream, responses, responses_stream, session_chat, session_chat_stream, run_start
	UserText     string    // text of the new user turn (text parts joined with "\n")
	History      []Message // prior messages (body, stored response chain, or session DB)
	SessionID    string    // effective Hermes session id
	SessionKey   string    // X-Hermes-Session-Key, "" when absent
	Instructions string    // ephemeral system prompt ("" when none)
	Model        string    // requested model name
	// Steered, on a /v1/runs run of Hermes 0.21 (Version021), returns the
	// texts POST /v1/runs/{id}/steer accepted since the last call and marks
	// them consumed, as the agent applying them; texts never consumed come
	// back as pending_steer on run.completed. nil on other routes and versions.
	Steered func() []string
}

// Tool is one server-side tool call the fake pretends the agent made.
type Tool struct {
	Name   string // tool name; names starting with "_" are never reported on chat streams
	Args   string // JSON object text, e.g. `{"command": "ls"}`; "" means {}
	Output string // tool result content (string)
	CallID string // default "call_" + 24 hex
	Emoji  string // default "💻"
	Label  string // default: first string argument value, else the name
	// Text is assistant text streamed before this tool call (the "thinking
	// aloud" of the LLM response that requested the tool). It appears in
	// streams only, never in non-stream final content.
	Text string
	// Approval, when set, makes the tool wait for an approval decision
	// on /v1/runs (see Approval); other routes ignore it.
	Approval *Approval
}

// Usage is the token usage the fake reports. Zero value: derived from text.
type Usage struct {
	Input, Output int
}

// Reply scripts one agent run.
type Reply struct {
	Text       string        // final assistant text
	Deltas     int           // number of stream deltas the final text is split into; 0 = one per word
	Delay      time.Duration // before the first event after the stream preamble (and before a JSON reply)
	DeltaDelay time.Duration // between consecutive deltas
	Tools      []Tool        // tool calls, run in order before the final text
	// Fail is an agent error. chat: 502 agent_incomplete when Text is empty,
	// else 200 with finish_reason "error" and a hermes block; chat stream:
	// finish chunk with error+hermes; responses: 200 completed with the error as
	// text (stream: response.failed when Text is empty); session chat: text/plain
	// 500; session chat stream: error then done.
	Fail string
	// Partial marks the run as partial (truncated): finish_reason "length"
	// when the error mentions "truncat" (default error text does).
	Partial bool
	// Events adds this many extra delta events after the text (each carrying
	// PadText, default "") for cheap large streams; they bypass Responses
	// batching.
	Events  int
	PadText string
	Usage   Usage
	// Subagents, on a /v1/runs run of Hermes 0.21, are delegated subagents:
	// each plays subagent.start and subagent.complete (with its tokens and
	// cost) after the tools, before the final text. Ignored elsewhere.
	Subagents []Subagent
}

// Subagent scripts one delegated subagent (see Reply.Subagents).
type Subagent struct {
	Goal, Summary string        // omitted from the events when ""
	Duration      time.Duration // between subagent.start and subagent.complete
	InputTokens   int
	OutputTokens  int
	CostUSD       float64
}

// StubAgent is the default agent: "stub reply: <last user text>", streamed
// one word per delta like the recorded stub LLM.
func StubAgent(_ context.Context, t Turn) Reply {
	return Reply{Text: "stub reply: " + t.UserText}
}

// splitDeltas splits text into n pieces (n<=0: one piece per word, each
// piece carrying its leading whitespace, like the recorded transcripts).
func splitDeltas(text string, n int) []string {
	if text == "" {
		return nil
	}
	var out []string
	if n <= 0 {
		// A piece ends where the whitespace run before the next word begins.
		start, run := 0, -1 // run: start of the current whitespace run, -1 in a word
		for i := 0; i < len(text); i++ {
			if c := text[i]; c == ' ' || c == '\n' || c == '\t' {
				if run < 0 {
					run = i
				}
				continue
			}
			if run > start {
				out = append(out, text[start:run])
				start = run
			}
			run = -1
		}
		return append(out, text[start:])
	}
	runes := []rune(text)
	n = min(n, len(runes))
	for i, pos := 0, 0; i < n; i++ {
		size := len(runes) / n
		if i < len(runes)%n {
			size++
		}
		out = append(out, string(runes[pos:pos+size]))
		pos += size
	}
	return out
}

// outcome is the derived completion state of a reply.
type outcome struct {
	completed, partial, failed bool
	err                        string
	finish                     string // stop|length|error
	errorCode                  string // output_truncated|agent_error
}

func (r Reply) outcome() outcome {
	o := outcome{failed: r.Fail != "", partial: r.Partial, err: r.Fail}
	if o.partial && o.err == "" {
		o.err = "Response truncated due to output length limit"
	}
	o.completed = !o.failed && !o.partial
	o.finish, o.errorCode = "stop", "agent_error"
	switch {
	case o.partial && strings.Contains(strings.ToLower(o.err), "truncat"):
		o.finish, o.errorCode = "length", "output_truncated"
	case !o.completed:
		o.finish = "error"
	}
	return o
}

// fullText is the final assistant text including padding.
func (r Reply) fullText() string {
	return r.Text + strings.Repeat(r.PadText, max(r.Events, 0))
}

// usage is the token usage of the reply to t: Usage when scripted, else
// derived from the prompt (user text and instructions) and the reply text.
func (r Reply) usage(t Turn) (in, out int) {
	if r.Usage.Input != 0 || r.Usage.Output != 0 {
		return r.Usage.Input, r.Usage.Output
	}
	in = 570 + len(t.UserText+t.Instructions)/4
	out = len(strings.Fields(r.fullText())) + 2
	return in, out
}

// deltas emits text split into n deltas (see splitDeltas), waiting DeltaDelay
// between them; false as soon as wait or emit fails.
func (r Reply) deltas(text string, n int, wait func(time.Duration) bool, emit func(string) bool) bool {
	for i, d := range splitDeltas(text, n) {
		if (i > 0 && !wait(r.DeltaDelay)) || !emit(d) {
			return false
		}
	}
	return true
}

// padding emits the Events extra deltas of PadText, each after DeltaDelay;
// false as soon as wait or emit fails.
func (r Reply) padding(wait func(time.Duration) bool, emit func(string) bool) bool {
	for range r.Events {
		if (r.DeltaDelay > 0 && !wait(r.DeltaDelay)) || !emit(r.PadText) {
			return false
		}
	}
	return true
}
