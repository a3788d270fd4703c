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

// contentErr is a 400 produced by content normalisation.
type contentErr struct {
	msg, code, param string
}

func (e *contentErr) body() obj {
	return openaiParamError(e.msg, "invalid_request_error", e.param, e.code)
}

// normContent normalises one message content value like Hermes'
// multimodal normaliser. It returns the joined text, whether an image was
// present, and the normalised value (string or list of parts).
func normContent(v any, param string) (text string, image bool, norm any, err *contentErr) {
	switch x := v.(type) {
	case nil:
		return "", false, "", nil
	case string:
		if utf8.RuneCountInString(x) > maxTextChars {
			return "", false, nil, &contentErr{"Text content exceeds 65536 characters", "invalid_content_part", param}
		}
		return x, false, x, nil
	case []any:
		if len(x) > maxParts {
			return "", false, nil, &contentErr{"Too many content parts (max 1000)", "invalid_content_part", param}
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
						return "", false, nil, &contentErr{"Text content part must have a string 'text'", "invalid_content_part", param}
					}
					if utf8.RuneCountInString(ts) > maxTextChars {
						return "", false, nil, &contentErr{"Text content part exceeds 65536 characters", "invalid_content_part", param}
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
						return "", false, nil, &contentErr{"Unsupported content type: non-image data URL", "unsupported_content_type", param}
					default:
						return "", false, nil, &contentErr{"Invalid image URL", "invalid_image_url", param}
					}
					image = true
					out = append(out, obj{{"type", "image_url"}, {"image_url", obj{{"url", url}}}})
				default:
					if typ == "" {
						return "", false, nil, &contentErr{"Content part is missing 'type'", "invalid_content_part", param}
					}
					return "", false, nil, &contentErr{"Unsupported content type: " + typ, "unsupported_content_type", param}
				}
			default:
				return "", false, nil, &contentErr{"Invalid content part", "invalid_content_part", param}
			}
		}
		return strings.Join(texts, "\n"), image, out, nil
	case json.Number:
		return x.String(), false, x.String(), nil
	}
	return "", false, nil, &contentErr{"Invalid content", "invalid_content_part", param}
}
