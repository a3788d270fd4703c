package schemas_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// inputRule is one input the action schema rejects: the operation, the input, and the
// field and reason of the error. These rules were hermes.Prepare's (the case names are those
// of hermes/prepare_test.go and runs_test.go); the schema says them now and Prepare only maps.
// Where the schema reports differently, the old field or reason is noted.
type inputRule struct {
	name, op, in  string
	field, reason string
}

var inputRules = []inputRule{
	// discovery
	{"property", "health", `{"x":1}`, "input.x", "is not allowed"}, // was "unexpected property: the input must be an empty object"
	{"property", "toolsets", `{"x":1}`, "input.x", "is not allowed"},
	{"array", "models", `[]`, "input", "must be null or an object"}, // was "must be a JSON object"

	// chat
	{"none", "chat", `{}`, "input", "exactly one of prompt, query, messages is required"},
	{"two branches", "chat", `{"prompt":"a","query":"b"}`, "input", "exactly one of prompt, query, messages is required"},
	{"prompt and messages", "chat_stream", `{"prompt":"a","messages":[{"role":"user","content":"b"}]}`, "input", "exactly one of prompt, query, messages is required"},
	{"empty prompt", "chat", `{"prompt":"  "}`, "input.prompt", "must not be blank"}, // was "must be a non-empty string"
	{"blank query", "chat_stream", `{"query":"\u3000\n"}`, "input.query", "must not be blank"},
	{"prompt not string", "chat", `{"prompt":5}`, "input.prompt", "must be a string"},
	{"empty messages", "chat", `{"messages":[]}`, "input.messages", "must not be empty"},
	{"messages not array", "chat", `{"messages":"x"}`, "input.messages", "must be an array"},
	{"message not object", "chat", `{"messages":["x"]}`, "input.messages.0", "must be an object"}, // was input.messages[0]
	{"model empty", "chat", `{"prompt":"a","model":""}`, "input.model", "must not be empty"},
	{"session id long", "chat", `{"prompt":"a","session_id":"` + strings.Repeat("é", 257) + `"}`, "input.session_id", "must have at most 256 characters"},
	{"session id control", "chat", `{"prompt":"a","session_id":"a\nb"}`, "input.session_id", "must not contain control characters"},
	{"session id C1 control", "chat", `{"prompt":"a","session_id":"a\u0085b"}`, "input.session_id", "must not contain control characters"},
	{"session key control", "chat", `{"prompt":"a","session_key":"a\u0000b"}`, "input.session_key", "must not contain control characters"},
	{"session key type", "chat", `{"prompt":"a","session_key":1}`, "input.session_key", "must be a string"},
	{"max_events zero", "chat_stream", `{"prompt":"a","max_events":0}`, "input.max_events", "must be at least 1"},
	{"max_events big", "chat_stream", `{"prompt":"a","max_events":100001}`, "input.max_events", "must be at most 100000"},
	{"max_events frac", "chat_stream", `{"prompt":"a","max_events":1.5}`, "input.max_events", "must be an integer"},
	{"max_events string", "chat_stream", `{"prompt":"a","max_events":"5"}`, "input.max_events", "must be an integer"},

	// responses
	{"missing input", "responses", `{"model":"m"}`, "input", "input (or body.input) is required"},               // was input.input
	{"missing body input", "responses", `{"body":{"model":"m"}}`, "input", "input (or body.input) is required"}, // was input.body.input
	{"bad input type", "responses", `{"input":5}`, "input.input", "must be a string or an array of strings or message objects"},
	{"wrapped number", "responses", `{"body":5}`, "input.body", "must be an object"},                                                                                                                         // was input.body.input
	{"conversation and previous", "responses", `{"input":"x","conversation":"c","previous_response_id":"r"}`, "input", "conversation and previous_response_id cannot both be set"},                           // was input.conversation
	{"body conversation and previous", "responses_stream", `{"body":{"input":"x","conversation":"c","previous_response_id":"r"}}`, "input.body", "conversation and previous_response_id cannot both be set"}, // was input.body.conversation
	{"history not array", "responses", `{"input":"x","conversation_history":{}}`, "input.conversation_history", "must be an array"},
	{"history no content", "responses", `{"input":"x","conversation_history":[{"role":"user"}]}`, "input.conversation_history.0.content", "is required"}, // was input.conversation_history[0]
	{"history not object", "responses", `{"input":"x","conversation_history":[{"role":"user","content":"a"},"b"]}`, "input.conversation_history.1", "must be an object"},
	{"sibling of body", "responses", `{"body":{"input":"x"},"model":"m"}`, "input.model", "is not allowed"}, // was "is not allowed beside body"
	{"session key bad", "responses", `{"input":"x","session_key":"a\rb"}`, "input.session_key", "must not contain control characters"},

	// response ids
	{"blank", "response_get", `{"response_id":"  "}`, "input.response_id", "must not be blank"},
	{"control", "response_delete", `{"response_id":"a\tb"}`, "input.response_id", "must not contain control characters"},
	{"C1 control", "response_get", `{"response_id":"a\u009fb"}`, "input.response_id", "must not contain control characters"},
	{"CR", "response_get", `{"response_id":"a\rb"}`, "input.response_id", "must not contain CR, LF or NUL characters"}, // was "must not contain control characters"

	// sessions_list
	{"string top", "sessions_list", `{"limit":"5"}`, "input.limit", "must be an integer"},
	{"source empty", "sessions_list", `{"source":""}`, "input.source", "must not be blank"}, // was "must be a non-empty string",
	{"source blank", "sessions_list", `{"source":" "}`, "input.source", "must not be blank"},
	{"source control", "sessions_list", `{"source":"a\nb"}`, "input.source", "must not contain control characters"},
	{"children string top", "sessions_list", `{"include_children":"true"}`, "input.include_children", "must be a boolean"},
	{"unknown top", "sessions_list", `{"order":"x"}`, "input.order", "is not allowed"},                   // was "unexpected property"
	{"unknown query", "sessions_list", `{"query":{"order":"x"}}`, "input.query.order", "is not allowed"}, // was "unknown query parameter"
	{"query not object", "sessions_list", `{"query":"limit=5"}`, "input.query", "must be an object"},
	{"query non-scalar", "sessions_list", `{"query":{"source":["a"]}}`, "input.query.source", "must be a string"}, // was "must be a scalar"
	{"query negative", "sessions_list", `{"query":{"offset":"-1"}}`, "input.query.offset", "must be a decimal number"},
	{"query negative number", "sessions_list", `{"query":{"limit":-1}}`, "input.query.limit", "must be at least 0"},
	{"query fraction", "sessions_list", `{"query":{"limit":1.5}}`, "input.query.limit", "must be an integer or a string"},
	{"query children", "sessions_list", `{"query":{"include_children":"yes"}}`, "input.query.include_children", "must be a boolean"},
	{"query source blank", "sessions_list", `{"query":{"source":"\t"}}`, "input.query.source", "must not be blank"},

	// session_create
	{"blank id", "session_create", `{"id":"   "}`, "input.id", "must not be blank"},
	{"dotdot", "session_create", `{"body":{"id":"a..b"}}`, "input.body.id", `must not contain "..", "/" or "\"`},
	{"slash", "session_create", `{"id":"a/b"}`, "input.id", `must not contain "..", "/" or "\"`},
	{"backslash", "session_create", `{"id":"a\\b"}`, "input.id", `must not contain "..", "/" or "\"`},
	{"drive", "session_create", `{"id":"C:temp"}`, "input.id", "must not start with a drive prefix"},
	{"drive after space", "session_create", `{"body":{"session_id":" d:x"}}`, "input.body.session_id", "must not start with a drive prefix"},
	{"control", "session_create", `{"session_id":"a\u0007"}`, "input.session_id", "must not contain control characters"},
	{"long", "session_create", `{"id":"` + strings.Repeat("x", 257) + `"}`, "input.id", "must have at most 256 characters"},
	{"id type", "session_create", `{"id":5}`, "input.id", "must be a string"},
	{"system prompt type", "session_create", `{"system_prompt":1}`, "input.system_prompt", "must be a string"},
	{"sibling of body", "session_create", `{"body":{"id":"x"},"title":"t"}`, "input.title", "is not allowed"}, // was "is not allowed beside body"

	// session paths
	{"whitespace", "session_delete", `{"session_id":" \t"}`, "input.session_id", "must not be blank"},
	{"nul", "session_messages", `{"session_id":"a\u0000"}`, "input.session_id", "must not contain CR, LF or NUL characters"}, // was "must not contain control characters"
	{"tab", "session_get", `{"session_id":"a\tb"}`, "input.session_id", "must not contain control characters"},

	// session_patch
	{"unsupported", "session_patch", `{"session_id":"s","body":{"title":"T","model":"m"}}`, "input.body.model", "is not allowed"}, // was "unsupported session field: ..."
	{"unsupported whole", "session_patch", `{"session_id":"s","pinned":true}`, "input.pinned", "is not allowed"},
	{"title type", "session_patch", `{"session_id":"s","title":5}`, "input.title", "is not allowed"}, // was "must be a string or null"; the schema has title in body only

	// session_fork
	{"bad child", "session_fork", `{"session_id":"s","body":{"id":"../x"}}`, "input.body.id", `must not contain "..", "/" or "\"`},
	{"blank child", "session_fork", `{"session_id":"s","body":{"id":" "}}`, "input.body.id", "must not be blank"},
	{"drive child", "session_fork", `{"session_id":"s","id":"d:x"}`, "input.id", "is not allowed"}, // was "must not start with a drive prefix"; the schema has id in body only

	// session_chat
	{"missing", "session_chat", `{"session_id":"s"}`, "input", "one of message, input, prompt, query (or body) is required and must not be blank"}, // was input.message "a non-empty message or input is required"
	{"blank", "session_chat", `{"session_id":"s","message":"  "}`, "input", "one of message, input, prompt, query (or body) is required and must not be blank"},
	{"empty parts", "session_chat", `{"session_id":"s","message":[]}`, "input", "one of message, input, prompt, query (or body) is required and must not be blank"},
	{"blank prompt", "session_chat_stream", `{"session_id":"s","prompt":" "}`, "input", "one of message, input, prompt, query (or body) is required and must not be blank"},
	{"prompt beside blank message", "session_chat", `{"session_id":"s","message":" ","prompt":"p"}`, "input", "one of message, input, prompt, query (or body) is required and must not be blank"},
	{"blank body", "session_chat", `{"session_id":"s","body":{"message":"\n"}}`, "input.body", "a non-blank message or input (or prompt or query) is required"},
	{"text too long", "session_chat", `{"session_id":"s","message":"` + strings.Repeat("é", 65537) + `"}`, "input.message", "must have at most 65536 characters"},
	{"part too long", "session_chat", `{"session_id":"s","message":[{"type":"text","text":"` + strings.Repeat("é", 65537) + `"}]}`, "input.message.0.text", "must have at most 65536 characters"}, // was input.message[0].text
	{"too many parts", "session_chat", `{"session_id":"s","message":[` + strings.Repeat(`{"type":"text","text":"a"},`, 1000) + `{"type":"text","text":"b"}]}`, "input.message", "must have at most 1000 items"},
	{"bad type", "session_chat", `{"session_id":"s","message":5}`, "input.message", "must be a string or an array"},
	{"bad part", "session_chat", `{"session_id":"s","message":[5]}`, "input.message.0", "must be an object"}, // was input.message[0]
	{"body text too long", "session_chat", `{"session_id":"s","body":{"input":"` + strings.Repeat("x", 65537) + `"}}`, "input.body.input", "must have at most 65536 characters"},
	{"prompt type", "session_chat", `{"session_id":"s","prompt":1}`, "input.prompt", "must be a string"},
	{"sibling of body", "session_chat", `{"session_id":"s","body":{"message":"m"},"message":"n"}`, "input.message", "is not allowed"}, // was "is not allowed beside body"
	{"max events", "session_chat_stream", `{"session_id":"s","message":"m","max_events":-2}`, "input.max_events", "must be at least 1"},

	// runs
	{"no input", "run_start", `{}`, "input", "input is required (or body alone, with session_key and max_events)"}, // was input.input
	{"blank input", "run_start", `{"input":"  "}`, "input.input", "must not be blank"},
	{"empty input", "run_start", `{"input":[]}`, "input.input", "must not be empty"},
	{"input item", "run_start", `{"input":["a"]}`, "input.input.0", "must be an object"}, // was input.input[0]
	{"input type", "run_start", `{"input":5}`, "input.input", "must be a string or an array"},
	{"model type", "run_start", `{"input":"x","model":1}`, "input.model", "must be a string"},
	{"history", "run_start", `{"input":"x","conversation_history":[{"role":"user"}]}`, "input.conversation_history.0.content", "is required"},           // was input.conversation_history[0]
	{"sibling of body", "run_start", `{"body":{"input":"x"},"extra":1}`, "input", "input is required (or body alone, with session_key and max_events)"}, // was input.extra
	{"body blank input", "run_start", `{"body":{"input":" "}}`, "input.body.input", "must not be blank"},
	{"body session id", "run", `{"body":{"input":"x","session_id":"a\u0085"}}`, "input.body.session_id", "must not contain control characters"},
	{"body number", "run_start", `{"body":5}`, "input.body", "must be a string or an array"},  // was input.body.input
	{"body null", "run_start", `{"body":null}`, "input.body", "must be a string or an array"}, // was input.input "is required"
	{"session id C1", "run", `{"input":"x","session_id":"\u0080"}`, "input.session_id", "must not contain control characters"},
	{"run id blank", "run_status", `{"run_id":" "}`, "input.run_id", "must not be blank"},
	{"run id C1", "run_stop", `{"run_id":"r\u0090"}`, "input.run_id", "must not contain control characters"},
	{"run session key", "run_events", `{"run_id":"r","session_key":"k\n"}`, "input.session_key", "must not contain control characters"},
	{"max events", "run_events", `{"run_id":"r","max_events":0}`, "input.max_events", "must be at least 1"},
	{"no choice", "run_approval", `{"run_id":"r"}`, "input.choice", "is required"},
	{"bad choice", "run_approval", `{"run_id":"r","choice":"yes"}`, "input.choice", "must be one of"},
	{"all type", "run_approval", `{"run_id":"r","choice":"once","all":"yes"}`, "input.all", "must be a boolean"},
}

// TestInputRules: each rule rejects its input with its field and reason (the reason in full,
// except run_approval's enum list, matched by its start).
func TestInputRules(t *testing.T) {
	for _, r := range inputRules {
		err := schemas.ValidateAction(r.op, json.RawMessage(`{"input":`+r.in+`}`))
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s %s: %v, want a *ValidationError", r.op, r.name, err)
			continue
		}
		if ve.Field != r.field || ve.Reason != r.reason && !(r.reason == "must be one of" && strings.HasPrefix(ve.Reason, r.reason)) {
			t.Errorf("%s %s: field %q reason %q, want %q %q", r.op, r.name, ve.Field, ve.Reason, r.field, r.reason)
		}
	}
}

// TestInputRulesAccept: inputs next to the rules that the schema accepts (a rule must not
// reject more than it says).
func TestInputRulesAccept(t *testing.T) {
	for _, c := range []struct{ op, in string }{
		{"chat", `{"prompt":" a "}`},
		{"chat", `{"prompt":"a","session_id":"` + strings.Repeat("é", 256) + `","session_key":"k:1\u00a0x"}`},
		{"session_get", `{"session_id":"a b"}`},
		{"response_get", `{"response_id":"a/b c+d~e*f%é"}`},
		{"sessions_list", `{"limit":0,"source":"api server/x","include_children":false,"query":{"limit":"7","offset":3,"include_children":"false","source":"cli"}}`},
		{"session_create", `{"id":"","session_id":"x"}`},
		{"session_create", `{"body":{"id":"case-1.a:b","title":"T"},"idempotency_key":"k","session_key":"s"}`},
		{"session_fork", `{"session_id":"s","body":{"id":"child","title":"T"}}`},
		{"session_chat", `{"session_id":"s","message":" ","input":"hi"}`},
		{"session_chat", `{"session_id":"s","prompt":" ","query":"q"}`},
		{"session_chat", `{"session_id":"s","message":"` + strings.Repeat("é", 65536) + `"}`},
		{"session_chat_stream", `{"session_id":"s","body":{"message":[{"type":"text","text":"a"}]},"session_key":"k","max_events":2}`},
		{"session_chat_stream", `{"session_id":"s","body":{"prompt":"p","system_message":"x"}}`},
		{"responses", `{"body":{"input":"hi","store":true},"session_key":"k","idempotency_key":"x","max_events":3}`},
		{"run_start", `{"body":"just text","session_key":"k"}`},
		{"run_start", `{"body":{"input":[{"role":"user","content":"x"}],"session_id":"s"}}`},
		{"run_start", `{"input":[{"role":"user"}]}`}, // the last message's content is Prepare's rule
		{"run_events", `{"run_id":"run_1","max_events":3}`},
	} {
		if err := schemas.ValidateAction(c.op, json.RawMessage(`{"input":`+c.in+`}`)); err != nil {
			t.Errorf("%s %.80s: %v", c.op, c.in, err)
		}
	}
}
