package hermes

import (
	v1json "encoding/json"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// numberAsV1 decodes JSON numbers as encoding/json.Number, as the bridge's decoder does.
var numberAsV1 = json.WithUnmarshalers(json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *any) error {
	if dec.PeekKind() != '0' {
		return json.SkipFunc
	}
	val, err := dec.ReadValue()
	if err != nil {
		return err
	}
	*v = v1json.Number(val)
	return nil
}))

// decodeInput decodes an input object as the bridge does; "" and null give nil. ok is false
// for bytes that are not a JSON object or null.
func decodeInput(b []byte) (in map[string]any, ok bool) {
	if len(b) == 0 {
		return nil, true
	}
	return in, json.Unmarshal(b, &in, numberAsV1) == nil
}

// DecodedInput decodes a test input (a JSON object, null or ""); it panics on anything else.
func DecodedInput(s string) map[string]any {
	in, ok := decodeInput([]byte(s))
	if !ok {
		panic("test input is not a JSON object: " + s)
	}
	return in
}
