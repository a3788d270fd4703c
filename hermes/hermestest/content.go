package hermestest

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

const (
	maxTextChars = 65536
	maxParts     = 1000
)

// normContent normalises one message content value like Hermes'
// multimodal normaliser. It returns the joined text, whether an image was
// present, and the normalised value (string or list of parts), or the 400
// answer (param names the field) when the content is invalid.
func normContent(v any, param string) (text string, image bool, norm any, errBody obj) {
	bad := func(msg, code string) (string, bool, any, obj) {
		return "", false, nil, openaiParamError(msg, "invalid_request_error", param, code)
	}
	switch x := v.(type) {
	case nil:
		return "", false, "", nil
	case string:
		if utf8.RuneCountInString(x) > maxTextChars {
			return bad("Text content exceeds 65536 characters", "invalid_content_part")
		}
		return x, false, x, nil
	case []any:
		if len(x) > maxParts {
			return bad("Too many content parts (max 1000)", "invalid_content_part")
		}
		var texts []string
		out := make([]any, 0, len(x))
		for _, p := range x {
			if s, ok := p.(string); ok {
				p = obj{{"type", "text"}, {"text", s}} // a bare string is a text part
			}
			switch pp := p.(type) {
			case obj:
				switch typ := pp.str("type"); typ {
				case "text", "input_text", "output_text":
					t, _ := pp.get("text")
					ts, ok := t.(string)
					if !ok && t != nil {
						return bad("Text content part must have a string 'text'", "invalid_content_part")
					}
					if utf8.RuneCountInString(ts) > maxTextChars {
						return bad("Text content part exceeds 65536 characters", "invalid_content_part")
					}
					texts = append(texts, ts)
					out = append(out, obj{{"type", "text"}, {"text", ts}})
				case "image_url", "input_image":
					iv, _ := pp.get("image_url")
					url := ""
					switch u := iv.(type) {
					case string:
						url = u
					case obj:
						url = u.str("url")
					}
					switch {
					case strings.HasPrefix(url, "http://"), strings.HasPrefix(url, "https://"), strings.HasPrefix(url, "data:image/"):
					case strings.HasPrefix(url, "data:"):
						return bad("Unsupported content type: non-image data URL", "unsupported_content_type")
					default:
						return bad("Invalid image URL", "invalid_image_url")
					}
					image = true
					out = append(out, obj{{"type", "image_url"}, {"image_url", obj{{"url", url}}}})
				default:
					if typ == "" {
						return bad("Content part is missing 'type'", "invalid_content_part")
					}
					return bad("Unsupported content type: "+typ, "unsupported_content_type")
				}
			default:
				return bad("Invalid content part", "invalid_content_part")
			}
		}
		return strings.Join(texts, "\n"), image, out, nil
	case json.Number:
		return x.String(), false, x.String(), nil
	}
	return bad("Invalid content", "invalid_content_part")
}
