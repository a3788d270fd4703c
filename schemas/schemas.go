// Package schemas embeds the JSON Schemas (draft 2020-12) of the
// hermes-bridge wire contract and validates documents against them.
//
// The schema files are the published contract for publishers and
// subscribers in any language (see README.md); this package is the Go
// binding used by the bridge and its tests. Every schema is compiled once, on
// first use; all functions are safe for concurrent use.
//
// Validation errors are *[ValidationError]: the most specific failure found,
// with a dotted field path and a reason that describes the constraint without
// quoting the offending value (inputs may hold secrets).
package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

//go:embed *.json
var files embed.FS

// BaseURL is the base of every schema's $id; a file's $id is BaseURL + its name.
const BaseURL = "https://github.com/hermes-bridge/hermes-bridge/schemas/"

// Schema file names.
const (
	ActionSchema      = "action.schema.json"
	EventSchema       = "event.schema.json"
	ResultSchema      = "result.schema.json"
	ApprovalSchema    = "approval.schema.json"
	ErrorCodesSchema  = "error-codes.schema.json"
	CancelReplySchema = "cancel-reply.schema.json"
	SteerSchema       = "steer.schema.json"
	SteerReplySchema  = "steer-reply.schema.json"
	DLQSchema         = "dlq.schema.json"
)

// FS returns the embedded schema files (*.schema.json at the root).
func FS() fs.FS { return files }

// ErrInvalid marks a document that fails its schema.
var ErrInvalid = errors.New("schemas: document does not match its schema")

// ErrUnknownOperation is returned by [ValidateAction] for an operation that
// has no input schema.
var ErrUnknownOperation = errors.New("schemas: unknown operation")

// ValidationError is the most specific schema failure of a document.
// errors.Is(err, ErrInvalid) holds.
type ValidationError struct {
	// Field is the dotted path of the offending member, e.g. "idempotency_key",
	// "input.messages", "input.body.title"; "" for the document itself, and
	// "input" for the input object itself. Array elements appear as their index.
	Field string
	// Reason describes the violated constraint, e.g. "exactly one of prompt,
	// query, messages is required". It never contains the offending value.
	Reason string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "schemas: invalid document: " + e.Reason
	}
	return "schemas: invalid document: " + e.Field + ": " + e.Reason
}

// Is reports whether target is [ErrInvalid].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

type compiled struct {
	files  map[string]*jsonschema.Schema // by file name
	inputs map[string]*jsonschema.Schema // by operation: action.schema.json's $defs
	hints  map[string]string             // schema location + "|" + keyword -> reason
}

// load compiles the schemas on first use.
var load = sync.OnceValues(compile)

func compile() (*compiled, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	out := &compiled{files: map[string]*jsonschema.Schema{}, inputs: map[string]*jsonschema.Schema{}, hints: map[string]string{}}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	var actionDoc map[string]any
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schemas: %s: %w", e.Name(), err)
		}
		if err := c.AddResource(BaseURL+e.Name(), doc); err != nil {
			return nil, fmt.Errorf("schemas: %s: %w", e.Name(), err)
		}
		collectHints(out.hints, BaseURL+e.Name()+"#", doc)
		if e.Name() == ActionSchema {
			actionDoc, _ = doc.(map[string]any)
		}
	}
	mustCompile := func(loc string) *jsonschema.Schema {
		if err != nil {
			return nil
		}
		var s *jsonschema.Schema
		s, err = c.Compile(BaseURL + loc)
		return s
	}
	for _, e := range entries {
		out.files[e.Name()] = mustCompile(e.Name())
	}
	defs, _ := actionDoc["$defs"].(map[string]any)
	for op := range defs {
		out.inputs[op] = mustCompile(ActionSchema + "#/$defs/" + op)
	}
	if err != nil {
		return nil, fmt.Errorf("schemas: compile: %w", err)
	}
	return out, nil
}

// collectHints records the "x-error" annotations: an object mapping a
// keyword (anyOf, oneOf, not, ...) of the schema it sits in to the reason to
// report when that keyword fails.
func collectHints(hints map[string]string, loc string, v any) {
	switch v := v.(type) {
	case map[string]any:
		if xe, ok := v["x-error"].(map[string]any); ok {
			for kw, msg := range xe {
				if s, ok := msg.(string); ok {
					hints[loc+"|"+kw] = s
				}
			}
		}
		for k, child := range v {
			if k == "x-error" || k == "const" || k == "enum" {
				continue
			}
			collectHints(hints, loc+"/"+escapePointer(k), child)
		}
	case []any:
		for i, child := range v {
			collectHints(hints, loc+"/"+strconv.Itoa(i), child)
		}
	}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// Operations returns the operations that have an input schema, sorted.
func Operations() []string {
	c, err := load()
	if err != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.inputs))
}

// inputSchema returns the compiled schemas and the input schema of operation op.
func inputSchema(op string) (*compiled, *jsonschema.Schema, error) {
	c, err := load()
	if err != nil {
		return nil, nil, err
	}
	in, ok := c.inputs[op]
	if !ok {
		return nil, nil, fmt.Errorf("%w: no input schema for this operation", ErrUnknownOperation)
	}
	return c, in, nil
}

// ValidateAction validates an action object (the data of an action
// CloudEvent) for operation op: it decodes action as [ValidateActionValue]
// expects it, then validates that. It returns nil, a *[ValidationError], or an
// error wrapping [ErrUnknownOperation]; data that is not one JSON value (or
// repeats a member name, or holds invalid UTF-8) is "action is not valid JSON".
func ValidateAction(op string, action json.RawMessage) error {
	if _, _, err := inputSchema(op); err != nil {
		return err
	}
	v, err := parse(action, "action")
	if err != nil {
		return err
	}
	return ValidateActionValue(op, v)
}

// ValidateActionValue validates a decoded action object for operation op: the
// whole object against action.schema.json, then its input ({} when absent or
// null) against action.schema.json's $defs/<op>. action is a tree of
// map[string]any, []any, string, bool, nil and numbers (json.Number with the
// literal text, as events.DecodeAction gives it, or float64). It returns what
// [ValidateAction] returns for the same document.
func ValidateActionValue(op string, action any) error {
	c, inSchema, err := inputSchema(op)
	if err != nil {
		return err
	}
	if err := c.validate(c.files[ActionSchema], action, ""); err != nil {
		return err
	}
	var input any
	if m, ok := action.(map[string]any); ok {
		input = m["input"]
	}
	return validateInput(c, inSchema, input)
}

// ValidateActionInput is the second half of [ValidateActionValue]: it validates the
// decoded input of an action ({} when nil) against action.schema.json's $defs/<op>,
// with field paths from the action ("input.messages"), for a caller that has checked
// the action object's own rules otherwise.
func ValidateActionInput(op string, input any) error {
	c, inSchema, err := inputSchema(op)
	if err != nil {
		return err
	}
	return validateInput(c, inSchema, input)
}

func validateInput(c *compiled, inSchema *jsonschema.Schema, input any) error {
	if input == nil {
		input = map[string]any{}
	}
	return c.validate(inSchema, input, "input")
}

// ValidateInput validates an operation input alone against $defs/<op>;
// field paths are relative to the input ("messages", not "input.messages").
func ValidateInput(op string, input json.RawMessage) error {
	c, inSchema, err := inputSchema(op)
	if err != nil {
		return err
	}
	var v any = map[string]any{}
	if t := bytes.TrimSpace(input); len(t) > 0 && string(t) != "null" {
		var verr error
		if v, verr = parse(input, "input"); verr != nil {
			return verr
		}
	}
	return c.validate(inSchema, v, "")
}

// ValidateEvent validates the data of an event CloudEvent against event.schema.json.
func ValidateEvent(data []byte) error {
	return validateWith(EventSchema, data, "event")
}

// ValidateResult validates the data of a result CloudEvent against result.schema.json.
func ValidateResult(data []byte) error {
	return validateWith(ResultSchema, data, "result")
}

// ValidateApproval validates the data of an approval CloudEvent against approval.schema.json.
func ValidateApproval(data []byte) error {
	return validateWith(ApprovalSchema, data, "approval")
}

// ValidateCancelReply validates a cancel reply against cancel-reply.schema.json.
func ValidateCancelReply(data []byte) error {
	return validateWith(CancelReplySchema, data, "cancel reply")
}

// ValidateSteer validates a steer request against steer.schema.json.
func ValidateSteer(data []byte) error {
	return validateWith(SteerSchema, data, "steer request")
}

// ValidateSteerReply validates a steer reply against steer-reply.schema.json.
func ValidateSteerReply(data []byte) error {
	return validateWith(SteerReplySchema, data, "steer reply")
}

func validateWith(file string, data []byte, what string) error {
	c, err := load()
	if err != nil {
		return err
	}
	v, verr := parse(data, what)
	if verr != nil {
		return verr
	}
	return c.validate(c.files[file], v, "")
}

// numberAsJSONNumber decodes the numbers of a tree as json.Number holding the
// literal text, which jsonschema validates exactly (big numbers included).
var numberAsJSONNumber = jsonv2.WithUnmarshalers(jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *any) error {
	if dec.PeekKind() != '0' {
		return jsonv2.SkipFunc
	}
	val, err := dec.ReadValue()
	if err != nil {
		return err
	}
	*v = json.Number(val)
	return nil
}))

// parse decodes data into a tree (map[string]any, []any, json.Number with the literal
// text, string, bool, nil), or returns a *ValidationError when data is not exactly one
// JSON value, repeats a member name or holds invalid UTF-8.
func parse(data []byte, what string) (any, error) {
	var v any
	if err := jsonv2.Unmarshal(data, &v, numberAsJSONNumber); err != nil {
		return nil, &ValidationError{Reason: what + " is not valid JSON"}
	}
	return v, nil
}

func (c *compiled) validate(s *jsonschema.Schema, v any, prefix string) error {
	err := s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ValidationError{Field: prefix, Reason: "cannot be validated"}
	}
	return c.describe(c.pick(ve), prefix)
}

// pick descends from the root error to the most specific failure: through
// wrapper nodes to the cause that points deepest into the instance, stopping
// at an anyOf/oneOf/not node that carries an x-error reason.
func (c *compiled) pick(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for {
		if _, ok := c.hint(e); ok || len(e.Causes) == 0 {
			return e
		}
		switch e.ErrorKind.(type) {
		case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf, *kind.AnyOf, *kind.OneOf:
		default:
			return e
		}
		best, bestDepth := e.Causes[0], -1
		for _, cause := range e.Causes {
			if d := depth(cause); d > bestDepth || d == bestDepth && orderedBefore(cause, best) {
				best, bestDepth = cause, d
			}
		}
		e = best
	}
}

// orderedBefore breaks a tie between two causes as deep as each other, so that one
// document always gets the same error: the library lists causes in the order it met
// them, which follows Go's map order for the members of an object. The smaller instance
// location wins (member names compared as strings), then the smaller member a
// required or additionalProperties error names, then the smaller schema location.
func orderedBefore(a, b *jsonschema.ValidationError) bool {
	if c := slices.Compare(a.InstanceLocation, b.InstanceLocation); c != 0 {
		return c < 0
	}
	if an, bn := namedMember(a), namedMember(b); an != bn {
		return an < bn
	}
	return a.SchemaURL+"|"+strings.Join(a.ErrorKind.KeywordPath(), "/") < b.SchemaURL+"|"+strings.Join(b.ErrorKind.KeywordPath(), "/")
}

// namedMember is the member a required or additionalProperties error is about: the
// first missing one in the schema's order, the smallest disallowed one (the library
// lists those in map order); "" for other errors.
func namedMember(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		if len(k.Missing) > 0 {
			return k.Missing[0] // the schema's order: already the same every time
		}
	case *kind.AdditionalProperties:
		if len(k.Properties) > 0 {
			return slices.Min(k.Properties)
		}
	}
	return ""
}

// depth is how far into the instance an error points; a missing or
// disallowed member counts as one level below its object.
func depth(e *jsonschema.ValidationError) int {
	d := len(e.InstanceLocation)
	switch e.ErrorKind.(type) {
	case *kind.Required, *kind.AdditionalProperties:
		d++
	}
	return d
}

func (c *compiled) hint(e *jsonschema.ValidationError) (string, bool) {
	kw := ""
	if kp := e.ErrorKind.KeywordPath(); len(kp) > 0 {
		kw = kp[0]
	} else if _, ok := e.ErrorKind.(*kind.Not); ok {
		kw = "not" // reported with an empty keyword path
	} else {
		return "", false
	}
	h, ok := c.hints[e.SchemaURL+"|"+kw]
	return h, ok
}

func joinField(prefix string, loc []string, extra ...string) string {
	parts := make([]string, 0, len(loc)+2)
	if prefix != "" {
		parts = append(parts, prefix)
	}
	parts = append(parts, loc...)
	parts = append(parts, extra...)
	return strings.Join(parts, ".")
}

var patternReasons = map[string]string{
	`^[^\x00-\x1f\x7f]*$`:    "must not contain control characters",
	`^[^\r\n\x00]+$`:         "must not contain CR, LF or NUL characters",
	`^[0-9a-f]{64}$`:         "must be 64 lowercase hexadecimal digits",
	`^[A-Za-z0-9_-]{1,128}$`: "must match [A-Za-z0-9_-]{1,128}",
	`^cap:hermes_agent:[a-z0-9_-]{1,128}:[a-z0-9_]{1,64}$`: "must be cap:hermes_agent:<endpoint_id>:<operation>",
	`^[0-9]+$`: "must be a decimal number",
}

func (c *compiled) describe(e *jsonschema.ValidationError, prefix string) *ValidationError {
	field := joinField(prefix, e.InstanceLocation)
	if h, ok := c.hint(e); ok {
		return &ValidationError{Field: field, Reason: h}
	}
	reason := "is invalid"
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		return &ValidationError{Field: joinField(prefix, e.InstanceLocation, safeName(namedMember(e))), Reason: "is required"}
	case *kind.AdditionalProperties:
		return &ValidationError{Field: joinField(prefix, e.InstanceLocation, safeName(namedMember(e))), Reason: "is not allowed"}
	case *kind.Type:
		reason = "must be " + typeList(k.Want)
	case *kind.MinLength:
		reason = "must have at least " + strconv.Itoa(k.Want) + " characters"
		if k.Want == 1 {
			reason = "must not be empty"
		}
	case *kind.MaxLength:
		reason = "must have at most " + strconv.Itoa(k.Want) + " characters"
	case *kind.Minimum:
		reason = "must be at least " + ratString(k.Want)
	case *kind.Maximum:
		reason = "must be at most " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		reason = "must be greater than " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		reason = "must be less than " + ratString(k.Want)
	case *kind.MultipleOf:
		reason = "must be a multiple of " + ratString(k.Want)
	case *kind.Pattern:
		if r, ok := patternReasons[k.Want]; ok {
			reason = r
		} else {
			reason = "must match the pattern " + k.Want
		}
	case *kind.Enum:
		reason = "must be one of " + constList(k.Want)
	case *kind.Const:
		reason = "must be " + constList([]any{k.Want})
	case *kind.MinItems:
		reason = "must have at least " + strconv.Itoa(k.Want) + " items"
		if k.Want == 1 {
			reason = "must not be empty"
		}
	case *kind.MaxItems:
		reason = "must have at most " + strconv.Itoa(k.Want) + " items"
	case *kind.MinProperties:
		reason = "must have at least " + strconv.Itoa(k.Want) + " members"
	case *kind.MaxProperties:
		reason = "must have at most " + strconv.Itoa(k.Want) + " members"
	case *kind.Format:
		reason = "must be a valid " + k.Want
	case *kind.OneOf:
		reason = "must match exactly one allowed form"
	case *kind.AnyOf:
		reason = "does not match any allowed form"
	case *kind.Not:
		reason = "is not allowed in this combination"
	case *kind.FalseSchema:
		reason = "is not allowed"
	case *kind.UniqueItems:
		reason = "must not contain duplicate items"
	}
	return &ValidationError{Field: field, Reason: reason}
}

func typeList(want []string) string {
	out := make([]string, len(want))
	for i, w := range want {
		switch w {
		case "object", "array", "integer":
			out[i] = "an " + w
		case "null":
			out[i] = "null"
		default:
			out[i] = "a " + w
		}
	}
	return strings.Join(out, " or ")
}

func constList(vals []any) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		b, _ := json.Marshal(v)
		out[i] = string(b)
	}
	return strings.Join(out, ", ")
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "the limit"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	return r.FloatString(6)
}

// safeName keeps member names readable in errors without echoing arbitrary
// input: names that are not short identifiers are replaced.
func safeName(k string) string {
	const ident = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	if k == "" || len(k) > 64 || strings.Trim(k, ident) != "" {
		return "(unnamed field)"
	}
	return k
}
