package hermestest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// kv is one member of an ordered JSON object.
type kv struct {
	k string
	v any
}

// obj is a JSON object that keeps insertion order, like a Python dict.
type obj []kv

// get returns the value of key k and whether it was present.
func (o obj) get(k string) (any, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].k == k {
			return o[i].v, true
		}
	}
	return nil, false
}

// str returns the value of key k when it is a string, else "".
func (o obj) str(k string) string {
	v, _ := o.get(k)
	s, _ := v.(string)
	return s
}

// set replaces the value of k in place or appends it.
func (o obj) set(k string, v any) obj {
	for i := range o {
		if o[i].k == k {
			o[i].v = v
			return o
		}
	}
	return append(o, kv{k, v})
}

// rawJSON is pre-encoded Python-style JSON inserted verbatim.
type rawJSON []byte

// pyFloat forces float formatting (Python repr) even for integral values.
type pyFloat float64

// dumps encodes v like Python's json.dumps with default separators.
// ascii selects ensure_ascii=True. v is built of nil, bool, string, int,
// int64, float64, pyFloat, json.Number, rawJSON, obj, []any and []string;
// any other type is a bug of the fake (panic).
func dumps(v any, ascii bool) []byte {
	return appendJSON(nil, v, ascii)
}

// appendList appends xs as a Python-style JSON array ("[a, b]"), each element by elem.
func appendList[T any](b []byte, xs []T, ascii bool, elem func([]byte, T, bool) []byte) []byte {
	b = append(b, '[')
	for i, e := range xs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = elem(b, e, ascii)
	}
	return append(b, ']')
}

func appendJSON(b []byte, v any, ascii bool) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		if x {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case string:
		return appendString(b, x, ascii)
	case int:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case float64:
		return appendFloat(b, x)
	case pyFloat:
		return appendFloat(b, float64(x))
	case json.Number:
		return append(b, x...)
	case rawJSON:
		return append(b, x...)
	case obj:
		b = append(b, '{')
		for i, m := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendString(b, m.k, ascii)
			b = append(b, ": "...)
			b = appendJSON(b, m.v, ascii)
		}
		return append(b, '}')
	case []any:
		return appendList(b, x, ascii, appendJSON)
	case []string:
		return appendList(b, x, ascii, appendString)
	}
	panic(fmt.Sprintf("hermestest: no Python-style JSON encoding for %T", v))
}

// appendFloat formats f like Python's float repr.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	a := math.Abs(f)
	if a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.AppendFloat(b, f, 'e', -1, 64)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'f', -1, 64)
	if bytes.IndexByte(b[start:], '.') < 0 {
		b = append(b, ".0"...)
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString writes a JSON string literal like Python's json encoder:
// short escapes for " \ \n \r \t \b \f, \u00XX for other control
// characters and, with ascii, \uXXXX (surrogate pairs above U+FFFF) for
// everything from DEL up. Invalid UTF-8 reads as U+FFFD.
func appendString(b []byte, s string, ascii bool) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r == '\b':
			b = append(b, `\b`...)
		case r == '\f':
			b = append(b, `\f`...)
		case r >= 0x10000 && ascii:
			r1, r2 := utf16.EncodeRune(r)
			b = appendU(appendU(b, r1), r2)
		case r < 0x20 || (r >= 0x7f && ascii):
			b = appendU(b, r)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

func appendU(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[(r>>12)&0xf], hexDigits[(r>>8)&0xf], hexDigits[(r>>4)&0xf], hexDigits[r&0xf])
}

// loads decodes JSON into ordered values: obj, []any, string, json.Number, bool, nil.
func loads(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

// decodeValue reads one value. The Decoder's tokens are syntax-checked: an
// object's keys are strings and every '{' or '[' has its closing token.
func decodeValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil || (t != json.Delim('{') && t != json.Delim('[')) {
		return t, err
	}
	isObj := t == json.Delim('{')
	o, a := obj{}, []any{}
	for dec.More() {
		var k json.Token
		if isObj {
			if k, err = dec.Token(); err != nil {
				return nil, err
			}
		}
		v, err := decodeValue(dec)
		if err != nil {
			return nil, err
		}
		if isObj {
			o = o.set(k.(string), v)
		} else {
			a = append(a, v)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if isObj {
		return o, nil
	}
	return a, nil
}

// truthy mirrors Python truthiness for decoded JSON values.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case obj:
		return len(x) > 0
	case []any:
		return len(x) > 0
	}
	return true
}

// boolish interprets a "stream"/"store" style flag the way Hermes does.
func boolish(v any, def bool) bool {
	switch x := v.(type) {
	case nil:
		return def
	case bool:
		return x
	case string:
		switch x {
		case "true", "1", "yes", "on", "True", "TRUE", "Yes", "YES", "On", "ON":
			return true
		case "false", "0", "no", "off", "False", "FALSE", "No", "NO", "Off", "OFF", "":
			return false
		}
		return def
	case json.Number:
		f, err := x.Float64()
		return err == nil && f != 0
	}
	return truthy(v)
}
