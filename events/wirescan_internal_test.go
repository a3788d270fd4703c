package events

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValidJSONMatchesEncodingJSON: validJSON decides as encoding/json's json.Valid.
func FuzzValidJSONMatchesEncodingJSON(f *testing.F) {
	const depth = 10000
	for _, s := range []string{
		`0`, `-0`, `-`, `01`, `1.`, `.1`, `1e`, `1e+`, `1E-5`, `-1.5e+10`, `1.5.5`, `+1`, `0x1`, `Infinity`, `NaN`,
		`true`, `tru`, `truex`, `false`, `null`, `nul`, ` null `, "\vnull", "null\f", "\u00a0null",
		`""`, `"\u12"`, `"\u12G4"`, `"\uD800"`, `"\x"`, "\"\x01\"", "\"\x7f\xff\"", `"\/\b\f\n\r\t\\\""`, `"`, `"\`,
		`[]`, `[ ]`, `[,]`, `[1,]`, `[1 2]`, `[[[]]]`, `[[[]]`, `{}`, `{ }`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{1:1}`,
		`{"a":1 "b":2}`, `{"a" : [ {"b" : null} , 2 ] }`, `{}{}`, `[] x`, `{"a":1}}`, `{"a":1,"a":2}`, "{\"\xff\":1}",
		strings.Repeat("[", depth) + strings.Repeat("]", depth),
		strings.Repeat("[", depth+1) + strings.Repeat("]", depth+1),
		strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth),
		strings.Repeat(`{"a":`, depth+1) + "1" + strings.Repeat("}", depth+1),
		strings.Repeat("[", 100) + strings.Repeat("]", 99),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", data, got, want)
		}
	})
}
