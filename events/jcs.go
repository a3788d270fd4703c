package events

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrInvalidJSON marks input that [Canonicalize] rejects: malformed JSON,
// duplicate object member names, lone surrogates, invalid UTF-8, numbers
// outside the IEEE 754 double range, or nesting deeper than 10000 levels.
var ErrInvalidJSON = errors.New("events: invalid JSON for canonicalization")

const maxJCSDepth = 10000

type jcsError struct{ reason string }

func (e *jcsError) Error() string        { return "events: invalid JSON for canonicalization: " + e.reason }
func (e *jcsError) Is(target error) bool { return target == ErrInvalidJSON }

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of v:
// no insignificant whitespace, object members sorted by the UTF-16 code units
// of their names, strings escaped minimally (only ", \ and control
// characters; \b \t \n \f \r shorthand, others as \u00xx), and numbers
// written as ECMAScript's Number.prototype.toString writes IEEE 754 doubles
// (1e21 -> 1e+21, 1e-7 -> 1e-7, -0 -> 0). Errors wrap [ErrInvalidJSON].
func Canonicalize(v json.RawMessage) ([]byte, error) {
	p := jcsParser{src: v}
	p.skipWS()
	out, err := p.value(make([]byte, 0, len(v)), 0)
	if err != nil {
		return nil, err
	}
	p.skipWS()
	if p.pos != len(p.src) {
		return nil, p.fail("unexpected data after the JSON value")
	}
	return out, nil
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

type jcsParser struct {
	src []byte
	pos int
}

func (p *jcsParser) fail(reason string) error {
	return &jcsError{reason: reason + " at offset " + strconv.Itoa(p.pos)}
}

func (p *jcsParser) skipWS() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jcsParser) value(dst []byte, depth int) ([]byte, error) {
	if p.pos >= len(p.src) {
		return nil, p.fail("unexpected end of input")
	}
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object(dst, depth+1)
	case c == '[':
		return p.array(dst, depth+1)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return appendJCSString(dst, s), nil
	case c == '-' || '0' <= c && c <= '9':
		return p.number(dst)
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if bytes.HasPrefix(p.src[p.pos:], []byte(lit)) {
				p.pos += len(lit)
				return append(dst, lit...), nil
			}
		}
		return nil, p.fail("invalid character")
	}
}

// jcsMember is an object member already written to the output: its unescaped name
// (valid UTF-8) and where its "name":value text lies in dst.
type jcsMember struct {
	key        []byte
	start, end int
}

// object writes the members to dst in document order, which is the canonical order
// when their names are already sorted (the usual case); otherwise reorderMembers sorts
// them in place.
func (p *jcsParser) object(dst []byte, depth int) ([]byte, error) {
	if depth > maxJCSDepth {
		return nil, p.fail("nesting too deep")
	}
	p.pos++ // {
	p.skipWS()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		return append(dst, '{', '}'), nil
	}
	dst = append(dst, '{')
	base := len(dst)
	var stack [4]jcsMember
	members := stack[:0]
	sorted := true
	for {
		p.skipWS()
		if p.pos >= len(p.src) || p.src[p.pos] != '"' {
			return nil, p.fail("expected an object member name")
		}
		name, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipWS()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.pos++
		p.skipWS()
		if len(members) > 0 {
			dst = append(dst, ',')
			if sorted && compareUTF16(members[len(members)-1].key, name) >= 0 {
				sorted = false
			}
		}
		m := jcsMember{key: name, start: len(dst)}
		dst = appendJCSString(dst, name)
		dst = append(dst, ':')
		if dst, err = p.value(dst, depth); err != nil {
			return nil, err
		}
		m.end = len(dst)
		members = append(members, m)
		more, err := p.separator('}')
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
	}
	if !sorted {
		var err error
		if dst, err = reorderMembers(dst, base, members); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// reorderMembers rewrites dst[base:], the members written in document order, in the
// order of their names' UTF-16 code units; an error when two names are equal.
func reorderMembers(dst []byte, base int, members []jcsMember) ([]byte, error) {
	slices.SortFunc(members, func(a, b jcsMember) int { return compareUTF16(a.key, b.key) })
	for i := 1; i < len(members); i++ {
		if bytes.Equal(members[i-1].key, members[i].key) {
			return nil, &jcsError{reason: "duplicate object member name"}
		}
	}
	written := append([]byte(nil), dst[base:]...)
	dst = dst[:base]
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, written[m.start-base:m.end-base]...)
	}
	return dst, nil
}

// compareUTF16 compares a and b, valid UTF-8, by their UTF-16 code units (as
// slices.Compare of utf16.Encode([]rune(x)) would).
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			if a[0] != b[0] {
				return cmp.Compare(a[0], b[0])
			}
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			// Runes compare like their first code units, except that a supplementary
			// rune's first unit (a surrogate, 0xD800-0xDBFF) is below 0xE000-0xFFFF.
			// Runes with the same first unit compare like their second ones, in rune
			// order.
			if ua, ub := firstUTF16Unit(ra), firstUTF16Unit(rb); ua != ub {
				return cmp.Compare(ua, ub)
			}
			return cmp.Compare(ra, rb)
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// firstUTF16Unit returns the first UTF-16 code unit of r.
func firstUTF16Unit(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

func (p *jcsParser) array(dst []byte, depth int) ([]byte, error) {
	if depth > maxJCSDepth {
		return nil, p.fail("nesting too deep")
	}
	p.pos++ // [
	dst = append(dst, '[')
	p.skipWS()
	if p.pos < len(p.src) && p.src[p.pos] == ']' {
		p.pos++
		return append(dst, ']'), nil
	}
	for first := true; ; first = false {
		if !first {
			dst = append(dst, ',')
		}
		p.skipWS()
		var err error
		if dst, err = p.value(dst, depth); err != nil {
			return nil, err
		}
		more, err := p.separator(']')
		if err != nil {
			return nil, err
		}
		if !more {
			return append(dst, ']'), nil
		}
	}
}

// separator reads what follows a member or element: ',' (more is true) or the closing
// bracket end (more is false), after optional whitespace.
func (p *jcsParser) separator(end byte) (more bool, err error) {
	p.skipWS()
	switch {
	case p.pos >= len(p.src):
		return false, p.fail("unexpected end of input")
	case p.src[p.pos] == ',':
		p.pos++
		return true, nil
	case p.src[p.pos] != end:
		return false, p.fail("expected ',' or '" + string(end) + "'")
	}
	p.pos++
	return false, nil
}

// str parses a JSON string at p.pos and returns its value, which shares memory with
// p.src when the string has no escapes.
func (p *jcsParser) str() ([]byte, error) {
	p.pos++ // opening quote
	var b []byte
	start := p.pos
	for {
		if p.pos >= len(p.src) {
			return nil, p.fail("unterminated string")
		}
		c := p.src[p.pos]
		switch {
		case c == '"':
			s := p.src[start:p.pos:p.pos]
			if b != nil {
				s = append(b, s...)
			}
			p.pos++
			return s, nil
		case c < 0x20:
			return nil, p.fail("control character in string")
		case c == '\\':
			b = append(b, p.src[start:p.pos]...)
			p.pos++
			if p.pos >= len(p.src) {
				return nil, p.fail("unterminated string")
			}
			e := p.src[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return nil, p.fail("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || !bytes.HasPrefix(p.src[p.pos:], []byte(`\u`)) {
						return nil, p.fail("lone surrogate")
					}
					p.pos += 2
					r2, ok := p.hex4()
					if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
						return nil, p.fail("lone surrogate")
					}
					r = utf16.DecodeRune(r, r2)
				}
				b = utf8.AppendRune(b, r)
			default:
				return nil, p.fail("invalid escape")
			}
			start = p.pos
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.src[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return nil, p.fail("invalid UTF-8")
			}
			p.pos += size
		}
	}
}

func (p *jcsParser) hex4() (rune, bool) {
	if p.pos+4 > len(p.src) {
		return 0, false
	}
	var r rune
	for _, c := range p.src[p.pos : p.pos+4] {
		if !ishex(c) {
			return 0, false
		}
		r = r<<4 | rune(unhex(c))
	}
	p.pos += 4
	return r, true
}

func (p *jcsParser) number(dst []byte) ([]byte, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.src) && '0' <= p.src[p.pos] && p.src[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.src[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.src) && p.src[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, p.fail("invalid number")
	}
	if p.pos < len(p.src) && p.src[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	if p.pos < len(p.src) && (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.src) && (p.src[p.pos] == '+' || p.src[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	f, err := strconv.ParseFloat(string(p.src[start:p.pos]), 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, p.fail("number out of the IEEE 754 double range")
	}
	return AppendESNumber(dst, f), nil
}

// AppendESNumber appends f formatted as ECMAScript's Number.prototype.toString
// (ECMA-262 Number::toString, as RFC 8785 requires). f must be finite.
func AppendESNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±XX
	mant, exp, _ := bytes.Cut(e, []byte("e"))
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	x, _ := strconv.Atoi(string(exp))
	k, n := len(digits), x+1 // value = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for i := 0; i < n-k; i++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for i := 0; i < -n; i++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// appendJCSString appends s (valid UTF-8) as an RFC 8785 string.
func appendJCSString(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = appendEscapedASCII(append(dst, s[start:i]...), c)
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
