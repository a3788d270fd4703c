package schemas

// This file keeps test-only copies of the functions as they were before the allocation work
// (commit 1a5a5d9) and exports them, with the current parser, to the differential fuzz
// targets in legacy_fuzz_test.go. Do not edit the copies except to keep them compiling.
// A change that means to alter what these functions accept or produce deletes the copy
// and its differential target in the same commit, and says so.

import (
	"bytes"
	"encoding/json"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// legacyParse is parse as it was: jsonschema.UnmarshalJSON (a json.Decoder with UseNumber).
func legacyParse(data []byte, what string) (any, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, &ValidationError{Reason: what + " is not valid JSON"}
	}
	return v, nil
}

// legacyValidateAction is ValidateAction as it was.
func legacyValidateAction(op string, action json.RawMessage) error {
	c, inSchema, err := inputSchema(op)
	if err != nil {
		return err
	}
	v, verr := legacyParse(action, "action")
	if verr != nil {
		return verr
	}
	if err := c.validate(c.action, v, ""); err != nil {
		return err
	}
	var input any = map[string]any{}
	if m, ok := v.(map[string]any); ok && m["input"] != nil {
		input = m["input"]
	}
	return c.validate(inSchema, input, "input")
}

// legacyValidateInput is ValidateInput as it was.
func legacyValidateInput(op string, input json.RawMessage) error {
	c, inSchema, err := inputSchema(op)
	if err != nil {
		return err
	}
	var v any = map[string]any{}
	if t := bytes.TrimSpace(input); len(t) > 0 && string(t) != "null" {
		var verr error
		if v, verr = legacyParse(input, "input"); verr != nil {
			return verr
		}
	}
	return c.validate(inSchema, v, "")
}

// Exported for the external test package.
var (
	Parse                = parse
	LegacyParse          = legacyParse
	LegacyValidateAction = legacyValidateAction
	LegacyValidateInput  = legacyValidateInput
)
