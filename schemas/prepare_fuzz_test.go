package schemas_test

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// preparedReasons are the rules hermes.Prepare keeps because the schema cannot say them:
// the only errors it may return for an input the schema accepts.
var preparedReasons = []string{"must be at most 512 bytes", "must not be a dot segment", "must have at most 4096 bytes", "is required"}

// FuzzPrepareSchemaValid: for every input the action schema accepts, hermes.Prepare returns a
// well-formed request (the body valid JSON of an object, every path segment non-empty,
// escaped and not a dot segment, the query string parseable), or one of the errors of the
// rules it keeps (preparedReasons, a sessions_list conflict), never a panic.
func FuzzPrepareSchemaValid(f *testing.F) {
	ops := schemas.Operations()
	for op, in := range seedInputs {
		f.Add(uint8(slices.Index(ops, op)), []byte(in))
	}
	for _, r := range inputRules {
		f.Add(uint8(slices.Index(ops, r.op)), []byte(r.in))
	}
	for _, s := range []struct{ op, in string }{
		{"session_get", `{"session_id":".."}`}, {"response_get", `{"response_id":"` + strings.Repeat("é", 300) + `"}`},
		{"sessions_list", `{"limit":5,"query":{"limit":"6"}}`}, {"sessions_list", `{"query":{"limit":"99999999999999999999"}}`},
		{"run_start", `{"input":[{"role":"user"}]}`}, {"run", `{"body":{"input":[{}]}}`},
		{"session_chat", `{"session_id":"s","body":{"message":"m","session_key":"k"},"session_key":"t"}`},
		{"chat", `{"prompt":"x","temperature":1e400,"n":-0.0e-5}`},
	} {
		f.Add(uint8(slices.Index(ops, s.op)), []byte(s.in))
	}
	f.Fuzz(func(t *testing.T, opi uint8, raw []byte) {
		op := ops[int(opi)%len(ops)]
		// The bridge's path: one decode (events.DecodeAction), the schema on its tree, then
		// Prepare on the decoded input.
		act, err := events.DecodeAction([]byte(`{"input":` + string(raw) + `}`))
		if err != nil || schemas.ValidateActionValue(op, act.Data) != nil {
			return
		}
		if op == "run" {
			op = "run_start" // the governed run starts with run_start's request
		}
		p, err := hermes.Prepare(hermes.Request{Operation: op, Input: act.Value, IdempotencyKey: "key-1"})
		if err != nil {
			var ie *hermes.InputError
			if !errors.As(err, &ie) || !slices.Contains(preparedReasons, ie.Reason) && !strings.HasPrefix(ie.Reason, "conflicts with input.") {
				t.Fatalf("%s %s: schema-valid input refused: %v", op, raw, err)
			}
			return
		}
		path, query, _ := strings.Cut(p.Path, "?")
		for _, seg := range strings.Split(path, "/")[1:] {
			u, err := url.PathUnescape(seg)
			if seg == "" || seg == "." || seg == ".." || err != nil || url.PathEscape(u) != seg && strings.ContainsAny(seg, " /?#") {
				t.Fatalf("%s: bad path %q", op, p.Path)
			}
		}
		if _, err := url.ParseQuery(query); err != nil {
			t.Fatalf("%s: bad query %q", op, p.Path)
		}
		if p.Body != nil {
			if body := jsontext.Value(p.Body); !body.IsValid() || body.Kind() != '{' {
				t.Fatalf("%s: body is not a JSON object: %q", op, p.Body)
			}
		}
	})
}
