package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// ErrInvalidJSON marks input that [Canonicalize] rejects: malformed JSON,
// duplicate object member names, lone surrogates, invalid UTF-8, numbers
// outside the IEEE 754 double range, or nesting deeper than 10000 levels.
var ErrInvalidJSON = errors.New("events: invalid JSON for canonicalization")

type jcsError struct{ reason string }

func (e *jcsError) Error() string        { return "events: invalid JSON for canonicalization: " + e.reason }
func (e *jcsError) Is(target error) bool { return target == ErrInvalidJSON }

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of v, as
// the go-json-experiment library's jsontext.Value.Canonicalize writes it: no
// insignificant whitespace, object members sorted by the UTF-16 code units of their
// names, strings escaped minimally (only ", \ and control characters; \b \t \n \f \r
// shorthand, others as \u00xx), and numbers written as ECMAScript's
// Number.prototype.toString writes IEEE 754 doubles (1e21 -> 1e+21, 1e-7 -> 1e-7,
// -0 -> 0). A number beyond the double range, which the library would write as the
// largest double, is an error. v is not modified. Errors wrap [ErrInvalidJSON] and
// never quote v.
func Canonicalize(v json.RawMessage) ([]byte, error) {
	out := jsontext.Value(bytes.Clone(v)) // Canonicalize rewrites its receiver
	if err := out.Canonicalize(); err != nil {
		return nil, &jcsError{reason: jcsReason(err)}
	}
	// The library writes an out-of-range number as ±MaxFloat64: look for one only when
	// that text appears.
	if bytes.Contains(out, maxFloatText) && hasOverflow(v) {
		return nil, &jcsError{reason: "number out of the IEEE 754 double range"}
	}
	return out, nil
}

// maxFloatText is how Canonicalize writes math.MaxFloat64.
var maxFloatText = strconv.AppendFloat(nil, math.MaxFloat64, 'g', -1, 64)

// hasOverflow reports whether v, valid JSON, holds a number whose float64 parse
// overflows.
func hasOverflow(v []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewBuffer(v))
	for {
		switch dec.PeekKind() {
		case 0:
			return false // the end (v is valid)
		case '0':
			num, err := dec.ReadValue()
			if err != nil {
				return false
			}
			if _, err := strconv.ParseFloat(string(num), 64); err != nil {
				return true
			}
		default:
			if _, err := dec.ReadToken(); err != nil {
				return false
			}
		}
	}
}

// jcsReason describes a library error without quoting the input.
func jcsReason(err error) string {
	var se *jsontext.SyntacticError
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName):
		return "duplicate object member name"
	case errors.As(err, &se):
		return "malformed JSON at offset " + strconv.FormatInt(se.ByteOffset, 10)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "unexpected end of input"
	}
	return "malformed JSON"
}

// InputSHA256 returns the lowercase hex SHA-256 of the canonical JSON
// ([Canonicalize]) of an action input. An absent (empty) or null input hashes
// as {}, matching DecodeAction's default.
func InputSHA256(input json.RawMessage) (string, error) {
	trimmed := bytes.TrimSpace(input)
	canon := []byte("{}")
	if len(trimmed) != 0 && string(trimmed) != "null" {
		var err error
		if canon, err = Canonicalize(trimmed); err != nil {
			return "", err
		}
	}
	sum := sha256.Sum256(canon)
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	return string(digits[:]), nil
}
