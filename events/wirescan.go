package events

import (
	"bytes"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// The helpers in this file serve wire.go's result decoding (DecodeResult's fast path
// and EncodeResult's output check) and nothing else.

// maxObjectFields bounds the number of known members scanKnownMembers reads.
const maxObjectFields = 6

// validJSON reports whether data is one JSON value with optional surrounding white
// space, as encoding/json's json.Valid decides: RFC 8259 grammar, at most 10000 levels
// of nesting, repeated member names and invalid UTF-8 allowed.
func validJSON(data []byte) bool {
	return jsontext.Value(data).IsValid(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
}

// scanKnownMembers reads the members of data, a valid JSON object, into vals (which
// must be all nil) and reports true when every member name is written without escapes,
// is one of fields and appears once. On false vals holds garbage.
func scanKnownMembers(data []byte, fields []string, vals *[maxObjectFields][]byte) bool {
	i := skipJSONSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipJSONSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) && data[i] == '"' {
		start := i + 1
		end := start
		for end < len(data) && data[end] != '"' && data[end] != '\\' {
			end++
		}
		if end >= len(data) || data[end] != '"' {
			return false // an escape, or truncated
		}
		name := data[start:end]
		idx := -1
		for j, f := range fields {
			if string(name) == f {
				idx = j
				break
			}
		}
		if idx < 0 || vals[idx] != nil {
			return false
		}
		i = skipJSONSpace(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipJSONSpace(data, i+1)
		vend := skipJSONValue(data, i)
		if vend <= i {
			return false
		}
		vals[idx] = data[i:vend:vend]
		i = skipJSONSpace(data, vend)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case '}':
			return true
		case ',':
			i = skipJSONSpace(data, i+1)
		default:
			return false
		}
	}
	return false
}

// skipJSONSpace returns the index of the first byte at or after i that is not JSON
// whitespace.
func skipJSONSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipJSONValue returns the index just after the JSON value that starts at data[i].
// data must be valid JSON (it only tracks strings and brackets); -1 when the value runs
// past the end.
func skipJSONValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipJSONString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				if i = skipJSONString(data, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	// A number or a literal.
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// skipJSONString returns the index just after the JSON string that starts at data[i]
// (a quote), or -1 when it is not terminated.
func skipJSONString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
	return -1
}

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func isNull(v []byte) bool {
	return string(bytes.TrimSpace(v)) == "null"
}

// plainJSONString reports whether b, the inside of a quoted JSON string, needs no
// unquoting: no escape, quote or control character, and valid UTF-8 (which json.Unmarshal
// would keep byte for byte).
func plainJSONString(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(b)
}
