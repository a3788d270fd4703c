package schemas_test

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// testDocuments are the JSON texts written as raw string literals in this package's tests
// (actions, inputs and documents, valid and invalid).
func testDocuments(f *testing.F) []string {
	var out []string
	for _, name := range []string{"schemas_test.go", "fuzz_test.go", "input_rules_test.go"} {
		b, err := os.ReadFile(name)
		noErr(f, err)
		for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// FuzzParseMatchesEncodingJSON checks the decoder and ValidateAction against
// encoding/json (a json.Decoder with UseNumber, as jsonschema.UnmarshalJSON reads): a
// document the decoder accepts gives encoding/json's tree, and a document it refuses is
// one encoding/json refuses too, or one that repeats a member name or holds invalid
// UTF-8 (which encoding/json accepts and the decoder does not). ValidateAction gives
// what ValidateActionValue gives for encoding/json's tree, and ValidateInput what it
// gives for the input alone.
func FuzzParseMatchesEncodingJSON(f *testing.F) {
	ops := schemas.Operations()
	for i, op := range ops {
		in := seedInputs[op]
		f.Add(uint8(i), []byte(`{"capability_id":"cap:hermes_agent:primary:`+op+`","input":`+in+`,"idempotency_key":"k-1","timeout_ms":60000,"tenant_id":"acme","approval":null}`))
		f.Add(uint8(i), []byte(`{"input":`+in+`}`))
		f.Add(uint8(i), []byte(in))
	}
	for i, s := range testDocuments(f) {
		f.Add(uint8(i), []byte(s))
		f.Add(uint8(i), []byte(`{"input":`+s+`}`))
	}
	for i, s := range []string{``, ` `, `null`, `{}`, `{} `, ` {}x`, `{}{}`, `{},`, `[`, `1`, `-0`, `1e400`, `0.1E+2`, `01`, `"\ud800"`,
		`"\u00e9\n"`, "\"\xff\"", "{\"input\":{\"prompt\":\"\xe2\x80\xa8\"}}", `{"a":1,"a":2}`, `{"input":{"prompt":"x"},"input":null}`,
		`{"input":{"prompt":"bench c-1"},"idempotency_key":"k-c-1"}`, `{"timeout_ms":1.0}`, `{"timeout_ms":60000e0}`, `[1,[2,{"x":[]}],true,false,null]`,
		`{"\u0069nput":{"prompt":"x"}}`, "\ufeff{}", `{"input":{"messages":[{"role":"user","content":"x"}]}}`} {
		f.Add(uint8(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, opIdx uint8, data []byte) {
		got, gerr := schemas.Parse(data, "action")
		want, werr := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		switch {
		case gerr == nil && werr != nil:
			t.Fatalf("parse %q accepted, encoding/json: %v", data, werr)
		case gerr == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("parse %q: %#v, encoding/json %#v", data, got, want)
		case gerr != nil && werr == nil:
			if !jsontext.Value(data).IsValid(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)) {
				t.Fatalf("parse %q refused (%v), encoding/json accepts it", data, gerr)
			}
		}
		if gerr != nil {
			if ve, ok := gerr.(*schemas.ValidationError); !ok || *ve != (schemas.ValidationError{Reason: "action is not valid JSON"}) {
				t.Fatalf("parse error %#v", gerr)
			}
			return
		}
		op := ops[int(opIdx)%len(ops)]
		if g, w, ok := sameResult(schemas.ValidateAction(op, data), func() error { return schemas.ValidateActionValue(op, want) }); !ok {
			t.Fatalf("ValidateAction(%s, %q) = %#v, ValidateActionValue %#v", op, data, g, w)
		}
	})
}

// sameResult reports whether got is a result want gives. The validator's choice among
// several failures is not deterministic (the library lists the disallowed members of an object
// in map order, and pick keeps the first of equally deep causes), so want is asked up to
// 100 times for the same answer.
func sameResult(got error, want func() error) (error, error, bool) {
	var w error
	for range 100 {
		if w = want(); reflect.DeepEqual(got, w) {
			return got, w, true
		}
	}
	return got, w, false
}

// TestParseTypes: numbers stay json.Number with their literal text, at any depth.
func TestParseTypes(t *testing.T) {
	v, err := schemas.Parse([]byte(`{"n":[1.50,-0,1e400,{"m":123456789012345678901234567890}]}`), "action")
	noErr(t, err)
	want := map[string]any{"n": []any{json.Number("1.50"), json.Number("-0"), json.Number("1e400"),
		map[string]any{"m": json.Number("123456789012345678901234567890")}}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("%#v", v)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, "\"\xff\"", `"\ud800"`, `{} x`, ``} {
		if _, err := schemas.Parse([]byte(bad), "action"); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
