package schemas_test

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// testDocuments are the JSON texts written as raw string literals in this package's tests
// (actions, inputs and documents, valid and invalid).
func testDocuments(f *testing.F) []string {
	var out []string
	for _, name := range []string{"schemas_test.go", "fuzz_test.go"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// FuzzValidateLegacy is a differential test of the parser and of ValidateAction and
// ValidateInput against their copies from before the allocation work (legacy_test.go): the
// same tree (types and values) or the same error, and the same validation result, error
// contents included, for every operation.
func FuzzValidateLegacy(f *testing.F) {
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
		want, werr := schemas.LegacyParse(data, "action")
		if !reflect.DeepEqual(gerr, werr) {
			t.Fatalf("parse %q: error %v, legacy %v", data, gerr, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parse %q: %#v, legacy %#v", data, got, want)
		}
		op := ops[int(opIdx)%len(ops)]
		if g, w, ok := sameResult(schemas.ValidateAction(op, data), func() error { return schemas.LegacyValidateAction(op, data) }); !ok {
			t.Fatalf("ValidateAction(%s, %q) = %#v, legacy %#v", op, data, g, w)
		}
		if g, w, ok := sameResult(schemas.ValidateInput(op, data), func() error { return schemas.LegacyValidateInput(op, data) }); !ok {
			t.Fatalf("ValidateInput(%s, %q) = %#v, legacy %#v", op, data, g, w)
		}
	})
}

// sameResult reports whether got is a result legacy gives. The validator's choice among
// several failures is not deterministic (the library lists the disallowed members of an object
// in map order, and pick keeps the first of equally deep causes), so the legacy function is
// asked up to 100 times for the same answer.
func sameResult(got error, legacy func() error) (error, error, bool) {
	var want error
	for range 100 {
		if want = legacy(); reflect.DeepEqual(got, want) {
			return got, want, true
		}
	}
	return got, want, false
}

// TestParseTypes: numbers stay json.Number with their literal text.
func TestParseTypes(t *testing.T) {
	v, err := schemas.Parse([]byte(`{"n":[1.50,-0,1e400]}`), "action")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"n": []any{json.Number("1.50"), json.Number("-0"), json.Number("1e400")}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("%#v", v)
	}
}
