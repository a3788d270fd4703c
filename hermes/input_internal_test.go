package hermes

import "github.com/hermes-bridge/hermes-bridge/events"

// decodeInput decodes an input object with the bridge's own decoder (events.DecodeAction
// of {"input": b}); "" gives nil. ok is false for bytes that are not a JSON object or null.
func decodeInput(b []byte) (in map[string]any, ok bool) {
	if len(b) == 0 {
		return nil, true
	}
	act, err := events.DecodeAction(append(append([]byte(`{"input":`), b...), '}'))
	if err != nil {
		return nil, false
	}
	return act.Value, true
}

// DecodedInput decodes a test input (a JSON object, null or ""); it panics on anything else.
func DecodedInput(s string) map[string]any {
	in, ok := decodeInput([]byte(s))
	if !ok {
		panic("test input is not a JSON object: " + s)
	}
	return in
}
