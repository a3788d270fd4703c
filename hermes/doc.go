// Package hermes is the HTTP/SSE client for one Hermes Agent API server.
//
// It owns the table of the 21 operations of the Hermes API contract ([Operations], [Lookup])
// and of the five run operations ([RunOperations], [LookupRun]), which the bridge serves with
// its governed run (bridge.Operations: 27 in all), maps an action input to an HTTP request
// without I/O ([Prepare]) and runs one exchange ([Client.Call]).
// It never logs and never retries; the caller decides with [Error.Retryable].
//
// # Input mapping
//
// [Request].Input is the decoded action input. The input rules (of the seeds, the AIP
// hermes-agent capability pages, and of the AIP connector's implementation notes) are those of
// schemas/action.schema.json ($defs/<operation>); [Prepare] maps an input the schema accepts to
// its request and checks only what the schema cannot say (see its doc comment). What it refuses
// is an [*InputError], matched by errors.Is(err, [ErrInvalidInput]); its Field names the
// offending member ("input.session_id", "input.body.input[0].content") and never holds the
// value. A request body over [MaxRequestBody] is refused before sending ([Error]
// payload_too_large, NotStarted).
//
// Path ids (response_id, session_id) are percent-encoded as one path segment: the unreserved
// bytes A–Z a–z 0–9 - . _ ~ are kept and every other byte becomes %XX in upper case. This is not
// the connector's form_urlencoded serializer (which keeps '*' and encodes a space as '+'): in a
// path '+' would be a literal plus.
//
// # Requests
//
// Every route but /health carries Authorization: Bearer; streams send Accept:
// text/event-stream; bodies are application/json; Request.IdempotencyKey becomes
// Idempotency-Key. JSON operations have a per-request timeout (300 s for chat, responses and
// session_chat, 30 s for the others); streams are bounded by ctx only, and cancelling ctx closes
// the HTTP stream at once. Redirects are not followed. For unsafe operations the request is
// built so that net/http never replays it on a broken keep-alive connection.
//
// # Results
//
// JSON bodies are returned verbatim (bounded by the body limit); a non-JSON body becomes
// {"text": ...}, an empty one null. health is normalized to {endpoint_id, status, platform,
// version, http_status, raw} and completes only when status is exactly "ok"; otherwise the
// result is returned with Status "failed" and an [Error] with Code unhealthy.
//
// # Usage
//
// [Result].Usage is the token usage Hermes reported for the agent work of the call, as
// [Usage] {input_tokens, output_tokens, total_tokens, cost_usd?} whatever the route called
// the members ([ParseUsage]): the usage member of the chat, responses and session_chat bodies;
// for a stream, the usage of its final event (the chat finish chunk, response.completed or
// response.failed, the session's and the run's run.completed), with for a run's events the
// sum of the subagent.complete events' cost_usd (Hermes v0.21) as the cost. It is nil when
// Hermes reported none, and for reads of earlier work (response_get, run_status, ...). The
// per-event path only slices the usage and response members; they are parsed on the events
// that carry them.
//
// # Errors
//
// Failures are [*Error] values with a Code, a Category and NotStarted, which is true only when
// Hermes certainly did not start the work: 401/403 (authentication), other 4xx
// (remote_rejected, RemoteCode = Hermes's error.code), 413 (payload_too_large), 429 with code
// rate_limit_exceeded (the concurrency gate), 503 gateway_draining, and a dial error such as a
// refused connection. 429 and 5xx are remote_unavailable (RetryAfter from Retry-After, seconds
// or HTTP date); 502 agent_incomplete is agent_incomplete. A session_fork 400 invalid_title has
// NotStarted false, because the provider's fork ends the source and creates the child before it
// validates the title. Transport failures after connecting are transport (NotStarted false),
// except once a stream has started: a connection that breaks mid-stream is stream_incomplete
// and the Result with the events read so far is returned beside the error;
// undecodable or oversized responses are invalid_response; an expired or cancelled ctx gives
// deadline_exceeded or cancelled. Messages hold only the operation, status and remote code:
// never content, tokens, session ids or keys, nor Hermes's error message (which may echo ids).
//
// # Streams
//
// The SSE reader (on bufio.Reader) handles event:, id: and data: fields (several data lines
// joined with "\n", one leading space stripped), LF and CRLF, comment lines (": keepalive",
// ": stream closed"), drops empty frames and parses a trailing partial frame at EOF. A frame
// over 1 MiB, a stream over 64 MiB (both configurable) or invalid UTF-8 is invalid_response.
// Event.Data is the JSON data verbatim; other data is a JSON string; empty data is null.
//
// An event is terminal when its trimmed data is [DONE], or its SSE event name or data.event is
// one of done, run.completed, run.failed, run.cancelled, response.completed, response.failed,
// response.incomplete or error. Reading stops at the first terminal event. max_events (input,
// default 4096, 1..100000) is checked before the terminal rule: reaching it stops the stream as
// truncated (stream_truncated, even if that event was terminal). A stream that closes without a
// terminal event is stream_incomplete. Otherwise the last named event decides: run.cancelled
// gives Status "cancelled" (no error); run.failed, response.failed, response.incomplete and error
// give stream_failed (Details.last_event). As an improvement over the AIP connector, a chat
// chunk with choices[0].finish_reason "error" also gives stream_failed.
//
// Event kinds follow the AIP table: failure names are error; other terminal events are done;
// tool.started, tool.completed, tool.failed and hermes.tool.progress are tool; approval.request
// is pending_approval; reasoning.available and the session stream's tool.progress with tool_name
// "_thinking" are thought (another tool.progress is tool); run.started, message.started,
// response.created, response.in_progress and assistant.completed are progress; the rest is data.
//
// Event.Text is what the event adds to the assembled text, by the AIP rule: choices[0].delta.content,
// else a string data.delta, else data.text for response.output_text.delta, else (only while the
// text is still empty) data.content or data.output. Deviation from AIP: thought events add no
// text, because Hermes fills them with a copy of the assistant content, which AIP would append
// a second time when no delta preceded them.
//
// The stream result's Output is the aggregate {endpoint_id, operation, http_status,
// event_count, text, terminal, truncated}; events are handed one by one to the callback and
// are not collected.
//
// # Structured runs
//
// The five run operations (run_start, run_status, run_events, run_approval, run_stop; see
// [RunOperations], [LookupRun]) have a table of their own beside the 21 ([Operations],
// [Lookup]); the bridge serves them as actions. [Prepare] and [Client.Call] accept them, and run_steer,
// which the bridge does not serve as an action (input rules in Prepare's doc), and typed
// methods serve the governed run:
//
//   - [Client.RunStart] posts /v1/runs and returns the run_id from the 202 as soon as Hermes
//     accepted the run; an Idempotency-Key (1–255 visible ASCII) is required. Store the run_id
//     before anything else: the run goes on in Hermes whatever happens to the caller.
//   - [Client.RunEvents] opens GET /v1/runs/{id}/events and returns a pull reader,
//     [RunEventStream]: [RunEventStream.Next] returns [RunEvent] values (name from data.event,
//     the AIP operator kind, typed fields) and io.EOF after the terminal event; a stream that
//     ends before one is stream_incomplete.
//   - [Client.RunStatus] polls GET /v1/runs/{id} ([RunStatus], [RunTerminal]).
//   - [Client.RunApproval] and [Client.RunStop] forward a decision and a stop.
//   - [Client.RunSteer] adds text to a running run (later Hermes versions, advertised as
//     [Capabilities.RunSteer]); text the agent never read comes back as pending_steer
//     ([RunEvent.PendingSteer], [RunStatus.PendingSteer]).
//   - [Client.Capabilities] and [ParseCapabilities] read /v1/capabilities;
//     [Capabilities.DurableRunIdempotency] tells whether the endpoint honours Idempotency-Key on
//     /v1/runs durably (features.runs_idempotency of later Hermes versions; absent from v0.16
//     and v0.19, which start a new run for every POST).
//
// A 404 with Hermes code run_not_found matches errors.Is(err, [ErrRunNotFound]): the run, its
// status or its events queue is gone (see below). A 404 or 405 without a Hermes error envelope
// (aiohttp's text page: the endpoint has no such route) matches [ErrRouteNotFound] instead.
//
// Hermes semantics the caller must design for (hermes-api.md §8.2, §9; the recorded
// transcripts 40–43 of v0.16 and v0.19):
//
//   - The events of a run are ONE queue, created at POST and buffered from the start. The first
//     subscriber gets everything; when its stream ends or breaks, the queue is deleted and every
//     later subscription is 404 run_not_found. A queue nobody subscribed to is swept 300 s after
//     creation. So: follow the events once, and on any break or 404 poll RunStatus.
//   - Frames are "data: <json>" with the name in data.event (no event: or id: line, no seq);
//     ": keepalive" comments every 30 s idle; the end is the comment ": stream closed". There is
//     no run.started or run.queued event; the events are message.delta, reasoning.available (a
//     copy of the assistant text, not model reasoning), tool.started, tool.completed,
//     approval.request, approval.responded, and one of run.completed (output, usage),
//     run.failed (error), run.cancelled.
//   - Statuses are queued, running, waiting_for_approval, stopping, completed, failed,
//     cancelled (later versions add interrupted). They live in Hermes's memory only: lost on a
//     Hermes restart, and kept 3600 s after the run ended; then 404.
//   - Stop is cooperative ("stopping", later cancelled) and is 404 once the run's task is no
//     longer live, even though its status still answers.
//   - An approval.request pauses the run (waiting_for_approval) until RunApproval decides; the
//     409 codes approval_not_active and approval_not_pending are in Error.RemoteCode.
//
// Where hermes-api.md and the transcripts could disagree they agree for the runs routes.
// Where the sources differ, this package and the fake (hermestest) follow:
//
//   - run.started on the events stream: none (nor run.queued), as both recorded
//     transcripts show (they start with message.delta).
//   - The approval and stop answers: the bodies of Hermes's source
//     ({"object":"hermes.run.approval_response","run_id","choice","resolved"} and
//     {"run_id","status":"stopping"}), not the AIP test double's; the client decodes
//     tolerantly.
//   - The stop body: the client sends none (transcript 43 sends {}); the fake accepts both.
//   - Stop after the end: 404 run_not_found in the fake, as recorded;
//     the client maps 404 to [ErrRunNotFound] and returns a later version's 200 status in
//     [RunStopResult].Status.
//   - runs_idempotency, listed among the later capabilities without a place: the fake puts
//     it in features, after cors; the client reads features, then the top level, and
//     accepts a bare boolean.
//   - The v0.16 runs gate: only runs capped, at 10, with invalid_request_error and no
//     Retry-After, as Hermes's API notes describe v0.16 (the message text is assumed).
//   - An early events subscriber: the fake answers 404 at once (its queue exists from the
//     POST) instead of polling 20 × 50 ms; it drops an unsubscribed queue at exactly 300 s
//     where Hermes's 60 s sweep may keep it up to ~360 s.
//   - The order of tool.started and approval.request (not recorded): the fake sends
//     tool.started, approval.request, approval.responded, tool.completed (inferred).
//   - The runs 400/409 bodies: the OpenAI envelope with code null; "Missing 'input'
//     field", "No user message found in input"; the approval and idempotency messages are
//     invented. A failed status without earlier events ends "..., model, error,
//     last_event".
package hermes
