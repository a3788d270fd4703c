package events_test

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
)

func TestCanonicalizeRFC8785Examples(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "section 3.2.2",
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "section 3.2.3 sorting by UTF-16 code units",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{name: "nested and whitespace", in: " { \"b\" : [ 1 , { \"d\":1, \"c\":2 } ] , \"a\" : {} } ", want: `{"a":{},"b":[1,{"c":2,"d":1}]}`},
		{name: "empty array", in: `[ ]`, want: `[]`},
		{name: "scalar", in: ` "x" `, want: `"x"`},
		{name: "html and line separators not escaped", in: `"<>&\u2028"`, want: "\"<>&\u2028\""},
		{name: "control characters", in: `"\u0000\u0008\u000c\u001f\u007f"`, want: "\"\\u0000\\b\\f\\u001f\u007f\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.Canonicalize(json.RawMessage(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestCanonicalizeNumbers checks the RFC 8785 Appendix B table (IEEE 754 bit
// patterns and their ECMAScript serialization) plus a few named cases.
func TestCanonicalizeNumbers(t *testing.T) {
	table := []struct{ bits, want string }{
		{"0000000000000000", "0"},
		{"8000000000000000", "0"},
		{"0000000000000001", "5e-324"},
		{"8000000000000001", "-5e-324"},
		{"7fefffffffffffff", "1.7976931348623157e+308"},
		{"ffefffffffffffff", "-1.7976931348623157e+308"},
		{"4340000000000000", "9007199254740992"},
		{"c340000000000000", "-9007199254740992"},
		{"4430000000000000", "295147905179352830000"},
		{"44b52d02c7e14af5", "9.999999999999997e+22"},
		{"44b52d02c7e14af6", "1e+23"},
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},
		{"444b1ae4d6e2ef4e", "999999999999999700000"},
		{"444b1ae4d6e2ef4f", "999999999999999900000"},
		{"444b1ae4d6e2ef50", "1e+21"},
		{"3eb0c6f7a0b5ed8c", "9.999999999999997e-7"},
		{"3eb0c6f7a0b5ed8d", "0.000001"},
		{"41b3de4355555553", "333333333.3333332"},
		{"41b3de4355555554", "333333333.33333325"},
		{"41b3de4355555555", "333333333.3333333"},
		{"41b3de4355555556", "333333333.3333334"},
		{"41b3de4355555557", "333333333.33333343"},
		{"becbf647612f3696", "-0.0000033333333333333333"},
		{"43143ff3c1cb0959", "1424953923781206.2"},
	}
	for _, tt := range table {
		u, err := strconv.ParseUint(tt.bits, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		f := math.Float64frombits(u)
		// Go's shortest repr parses back exactly.
		in := strconv.FormatFloat(f, 'g', -1, 64)
		got, err := events.Canonicalize(json.RawMessage(in))
		if err != nil {
			t.Errorf("%s: Canonicalize(%s): %v", tt.bits, in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("%s: Canonicalize(%s) = %s, want %s", tt.bits, in, got, tt.want)
		}
	}
	named := map[string]string{
		"1e21": "1e+21", "0.000001": "0.000001", "1e-7": "1e-7", "-0": "0", "-0.0": "0",
		"100": "100", "1.5e3": "1500", "123456789012345678901234": "1.2345678901234569e+23",
		"0.1": "0.1", "-1E-6": "-0.000001", "1e20": "100000000000000000000",
	}
	for in, want := range named {
		got, err := events.Canonicalize(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `{"a":1,}`, `[1,]`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `01`, `1.`, `.5`, `+1`,
		`1e`, `1e400`, `-1e400`, `NaN`, `Infinity`, `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, "\"\xff\"",
		"\"a\nb\"", `"\x"`, `tru`, `{"a" 1}`, `[1 2]`, `{} {}`, `nul`, `{1:2}`,
		`1.7976931348623159e+308`, `[1,{"a":-1e999}]`, "1" + strings.Repeat("0", 400), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	} {
		if got, err := events.Canonicalize(json.RawMessage(in)); err == nil {
			t.Errorf("Canonicalize(%q) = %s, want error", in, got)
		} else if !errors.Is(err, events.ErrInvalidJSON) {
			t.Errorf("Canonicalize(%q) error %v does not wrap ErrInvalidJSON", in, err)
		}
	}
}

// TestCanonicalizeRange: the largest doubles are numbers like any other, and their
// text inside a string is no number; v is left as it was.
func TestCanonicalizeRange(t *testing.T) {
	for in, want := range map[string]string{
		`[1.7976931348623157e+308, -1.7976931348623158e308]`:    `[1.7976931348623157e+308,-1.7976931348623157e+308]`,
		`{"b":"1.7976931348623157e+308","a":1e-400}`:            `{"a":0,"b":"1.7976931348623157e+308"}`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000): strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	} {
		v := []byte(in)
		got, err := events.Canonicalize(v)
		if err != nil || string(got) != want {
			t.Errorf("Canonicalize(%.40s) = %.40s, %v; want %.40s", in, got, err, want)
		}
		if string(v) != in {
			t.Errorf("Canonicalize modified its input %.40s", in)
		}
	}
}

func TestInputSHA256(t *testing.T) {
	empty, err := events.InputSHA256(nil)
	if err != nil {
		t.Fatal(err)
	}
	// sha256("{}")
	const sumEmpty = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
	if empty != sumEmpty {
		t.Fatalf("InputSHA256(nil) = %s, want %s", empty, sumEmpty)
	}
	for _, in := range []string{"null", " {} ", "{ }"} {
		if got, err := events.InputSHA256(json.RawMessage(in)); err != nil || got != sumEmpty {
			t.Errorf("InputSHA256(%q) = %s, %v; want the hash of {}", in, got, err)
		}
	}
	a, _ := events.InputSHA256(json.RawMessage(`{"b":1.0,"a":"x"}`))
	b, _ := events.InputSHA256(json.RawMessage(`{ "a" : "x", "b" : 1 }`))
	if a != b || len(a) != 64 {
		t.Fatalf("equivalent inputs hash differently: %s vs %s", a, b)
	}
	c, _ := events.InputSHA256(json.RawMessage(`{"a":"y","b":1}`))
	if c == a {
		t.Fatal("different inputs hash the same")
	}
	if _, err := events.InputSHA256(json.RawMessage(`{"a":1,"a":1}`)); !errors.Is(err, events.ErrInvalidJSON) {
		t.Fatalf("duplicate keys: err = %v", err)
	}
}
