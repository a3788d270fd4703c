package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// reasonVocabulary is the fixed text a Reason is built from: the schema files (x-error
// hints, patterns, enums and constants) and the templates of the validator's messages.
// Numbers are normalized so that "must have at most 256 characters" matches its template.
func reasonVocabulary(f *testing.F) string {
	var b strings.Builder
	err := fs.WalkDir(schemas.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(schemas.FS(), path)
		b.Write(data)
		b.WriteByte('\n')
		return err
	})
	if err != nil {
		f.Fatalf("read schemas: %v", err)
	}
	for _, s := range []string{
		"must be an object or an array or an integer or a string or a number or a boolean or null",
		"must not be empty", "must have at least 0 characters", "must have at most 0 characters",
		"must be at least 0", "must be at most 0", "must be greater than 0", "must be less than 0",
		"must be a multiple of 0", "must match the pattern ", "must be one of ", "must have at least 0 items",
		"must have at most 0 items", "must have at least 0 members", "must have at most 0 members",
		"must be a valid ", "must match exactly one allowed form", "does not match any allowed form",
		"is not allowed in this combination", "is not allowed", "must not contain duplicate items",
		"is required", "is invalid", "cannot be validated", "action is not valid JSON",
		"must not contain control characters", "must not contain CR, LF or NUL characters",
		"must be 64 lowercase hexadecimal digits", "must match [A-Za-z0-9_-]{1,128}",
		"must be cap:hermes_agent:<endpoint_id>:<operation>", "must be a decimal number", "the limit",
	} {
		b.WriteString(s)
		b.WriteByte('\n')
	}
	return normalizeDigits(b.String())
}

var digitRun = regexp.MustCompile(`[0-9]+`)

func normalizeDigits(s string) string { return digitRun.ReplaceAllString(s, "0") }

// jsonStrings returns every string value and member name of a JSON document (nil when it
// does not parse).
func jsonStrings(data []byte) []string {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				out = append(out, k)
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// FuzzValidateAction validates arbitrary action documents for every operation. Invariants:
// no panic; an error is a *ValidationError (errors.Is ErrInvalid) with a Reason; the Reason
// never quotes the input: no string value or member name of the document longer than 8 bytes
// appears in it, unless it is text the Reason is built from anyway.
func FuzzValidateAction(f *testing.F) {
	ops := schemas.Operations()
	if len(ops) == 0 {
		f.Fatal("no operations")
	}
	vocab := reasonVocabulary(f)
	for i, op := range ops {
		in, ok := seedInputs[op]
		if !ok {
			f.Fatalf("no seed input for %s", op)
		}
		idx := uint8(i)
		f.Add(idx, []byte(`{"capability_id":"cap:hermes_agent:primary:`+op+`","input":`+in+`,"idempotency_key":"k-1","timeout_ms":60000,"tenant_id":"acme","approval":null}`))
		f.Add(idx, []byte(`{"input":`+in+`}`))
		f.Add(idx, []byte(`{"input":{"unexpected_secret_value":"secret-value-0123456789"}}`))
		f.Add(idx, []byte(`{"input":`+strings.Replace(in, `"`, `"secret-value-`, 1)+`}`))
	}
	f.Add(uint8(0), []byte(`{"timeout_ms":"123456789012"}`))
	f.Add(uint8(0), []byte(`{"idempotency_key":"secret\u0000value-123456"}`))
	f.Add(uint8(0), []byte(`{"capability_id":"cap:hermes_agent:secret-value-123:chat"}`))
	f.Add(uint8(0), []byte(`{"approval":{"decision":"secret-decision","input_sha256":"nothex-secret-value"}}`))
	f.Add(uint8(0), []byte(`[`))
	f.Add(uint8(0), []byte(``))
	f.Fuzz(func(t *testing.T, opIdx uint8, data []byte) {
		op := ops[int(opIdx)%len(ops)]
		err := schemas.ValidateAction(op, json.RawMessage(data))
		if err == nil {
			return
		}
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, schemas.ErrInvalid) {
			t.Fatalf("%s: error %T %v is not a *ValidationError", op, err, err)
		}
		if ve.Reason == "" {
			t.Fatalf("%s: ValidationError without a reason (field %q)", op, ve.Field)
		}
		for _, s := range jsonStrings(data) {
			if len(s) <= 8 || !strings.Contains(ve.Reason, s) {
				continue
			}
			if strings.Contains(vocab, normalizeDigits(s)) {
				continue
			}
			t.Fatalf("%s: reason %q quotes the input value %q", op, ve.Reason, s)
		}
	})
}
