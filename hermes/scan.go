package hermes

import (
	"bytes"
	"encoding/json"
)

// probe holds raw JSON values (slices of the frame's data) of the few data members the
// classifier and the text assembly look at. nil means absent.
type probe struct {
	event, typ, delta, text, content, output, toolName []byte
	choiceContent, finishReason                        []byte
	usage, response                                    []byte // read by usageState only when present
}

// scanProbe fills p from b, which must be valid JSON (checked with json.Valid first). It reads
// only the top-level members and choices[0].delta.content / choices[0].finish_reason, without
// allocating (except for escaped member names, which are decoded). usage and response are
// only sliced here, not parsed.
func scanProbe(b []byte, p *probe) {
	eachMember(b, func(key, val []byte) {
		switch string(key) {
		case "event":
			p.event = val
		case "type":
			p.typ = val
		case "delta":
			p.delta = val
		case "text":
			p.text = val
		case "content":
			p.content = val
		case "output":
			p.output = val
		case "tool_name":
			p.toolName = val
		case "usage":
			p.usage = val
		case "response":
			p.response = val
		case "choices":
			p.choiceContent, p.finishReason = nil, nil
			i := skipWS(val, 0)
			if i >= len(val) || val[i] != '[' {
				return
			}
			i = skipWS(val, i+1)
			if i >= len(val) || val[i] != '{' {
				return
			}
			first := val[i:skipValue(val, i)]
			eachMember(first, func(k, v []byte) {
				switch string(k) {
				case "finish_reason":
					p.finishReason = v
				case "delta":
					eachMember(v, func(k2, v2 []byte) {
						if string(k2) == "content" {
							p.choiceContent = v2
						}
					})
				}
			})
		}
	})
}

// eachMember calls fn for each member of the JSON object b (no-op if b is not an object).
func eachMember(b []byte, fn func(key, val []byte)) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return
	}
	i++
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] != '"' {
			return // '}' or malformed
		}
		kEnd := skipString(b, i)
		if kEnd > len(b) || kEnd-1 <= i {
			return
		}
		key := b[i+1 : kEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 { // rare: decode an escaped member name
			k, _ := jsonString(b[i:kEnd])
			key = []byte(k)
		}
		i = skipWS(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return
		}
		i = skipWS(b, i+1)
		vEnd := skipValue(b, i)
		if vEnd > len(b) || vEnd <= i {
			return
		}
		fn(key, b[i:vEnd])
		i = skipWS(b, vEnd)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i++
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b) + 1
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b) + 1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}

// jsonString decodes a raw JSON string value; ok is false for any other value (and for nil).
func jsonString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c < 0x20 {
			plain = false
			break
		}
	}
	if plain {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonName decodes a raw JSON string used as an event name, interning common names.
func jsonName(v []byte) (string, bool) {
	if len(v) >= 2 && v[0] == '"' {
		inner := v[1 : len(v)-1]
		for _, c := range inner {
			if c == '\\' {
				return jsonString(v)
			}
		}
		return internName(inner), true
	}
	return "", false
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with strings and simple values
	}
	return b
}
