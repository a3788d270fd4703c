package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// FuzzDecodeEnvelope feeds arbitrary headers (one "name: value" per line) and
// bodies. It checks the decoder's contract: no panic; a nil envelope exactly
// with a DecodeError; any returned envelope carries a valid action id.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add("ce-specversion: 1.0\nce-id: a-1\nce-source: s\nce-type: hermes.bridge.action.v1", []byte(`{"input":{}}`))
	f.Add("content-type: application/cloudevents+json", []byte(`{"specversion":"1.0","id":"a","source":"s","type":"hermes.bridge.action.v1","data":{}}`))
	f.Add("", []byte(`{"specversion":"1.0","id":"a","source":"s","type":"x","data_base64":"e30="}`))
	f.Add("CE-SPECVERSION: \"1.0\"\nCe-Id: %61\nce-time: 2030-01-01T00:00:00Z\nce-source: %C3%28", []byte(`[]`))
	f.Add("content-type: application/cloudevents-batch+json", []byte(`[]`))
	f.Add("ce-specversion: 1.0\nce-id: del-7:approval:1\nce-source: urn:approver:alice\nce-type: hermes.bridge.approval.v1", []byte(`{"decision":"approve"}`))
	f.Fuzz(func(t *testing.T, headers string, body []byte) {
		var h nats.Header
		if headers != "" {
			h = nats.Header{}
			for _, line := range strings.Split(headers, "\n") {
				k, v, _ := strings.Cut(line, ":")
				h[strings.TrimSpace(k)] = append(h[strings.TrimSpace(k)], strings.TrimSpace(v))
			}
		}
		env, err := events.DecodeEnvelope(h, body)
		if env == nil {
			if !errors.Is(err, events.ErrNotCloudEvent) {
				t.Fatalf("nil envelope with err %v", err)
			}
			return
		}
		if !events.ValidActionID(env.ID) {
			t.Fatalf("envelope with invalid id %q", env.ID)
		}
		if err != nil && !errors.Is(err, events.ErrInvalidAttribute) {
			t.Fatalf("envelope with unexpected error %v", err)
		}
		if err == nil {
			if env.Type != events.TypeAction || env.SpecVersion != "1.0" {
				t.Fatalf("accepted envelope %+v", env)
			}
			_, _ = events.DecodeAction(env.Data)
		}
		// The decision decoder reads the same bytes by the same rules but the id's and
		// the type's: whatever it accepts has a non-empty id and the approval type.
		denv, derr := events.DecodeDecisionEnvelope(h, body)
		if denv == nil {
			if !errors.Is(derr, events.ErrNotCloudEvent) {
				t.Fatalf("nil decision envelope with err %v", derr)
			}
			return
		}
		if denv.ID == "" || (derr == nil && denv.Type != events.TypeApproval) {
			t.Fatalf("accepted decision envelope %+v (err %v)", denv, derr)
		}
	})
}

// FuzzCanonicalize checks Canonicalize against the library: it never panics nor
// modifies its input; it rejects what jsontext.Value.Canonicalize rejects and what
// holds a number beyond the float64 range, and otherwise returns the library's
// canonical form, which is valid JSON, decodes to the same value as the input and is
// its own canonical form.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"b":[1,2.50,-0,1e21,1e-7],"a":"\u20ac\ud83d\ude00\n"}`, `[]`, `0`, `"x"`, `{"a":{"a":{}}}`,
		`{"\ufb33":1,"\ud83d\ude00":2}`, `[1e400]`, `{"a":1,"a":2}`, `"\ud800"`, `123456789012345678901234567890`,
		`[1.7976931348623157e+308,"1.7976931348623157e+308"]`, `{"x":-1.7976931348623159e308}`, "\"\xff\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		out, err := events.Canonicalize(in)
		if !bytes.Equal(in, orig) {
			t.Fatalf("Canonicalize modified its input")
		}
		lib := jsontext.Value(bytes.Clone(in))
		libErr := lib.Canonicalize()
		switch {
		case libErr != nil:
			if err == nil {
				t.Fatalf("accepted %q, which the library rejects: %v", in, libErr)
			}
		case overflows(t, in):
			if err == nil {
				t.Fatalf("accepted %q, which holds a number beyond float64", in)
			}
		case err != nil:
			t.Fatalf("rejected %q (%v), which the library canonicalizes", in, err)
		case !bytes.Equal(out, lib):
			t.Fatalf("Canonicalize(%q) = %q, the library's %q", in, out, lib)
		}
		if err != nil {
			if !errors.Is(err, events.ErrInvalidJSON) {
				t.Fatalf("error %v does not wrap ErrInvalidJSON", err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("produced invalid JSON %q from %q", out, in)
		}
		var x, y any
		if json.Unmarshal(in, &x) != nil || json.Unmarshal(out, &y) != nil || !reflect.DeepEqual(x, y) {
			t.Fatalf("Canonicalize(%q) = %q, another value", in, out)
		}
		again, err := events.Canonicalize(out)
		if err != nil {
			t.Fatalf("canonical output rejected: %v (%q)", err, out)
		}
		if string(again) != string(out) {
			t.Fatalf("not idempotent:\n%q\n%q", out, again)
		}
	})
}

// overflows reports whether in, valid JSON, holds a number literal whose float64 parse
// overflows (read with encoding/json).
func overflows(t *testing.T, in []byte) bool {
	d := json.NewDecoder(bytes.NewReader(in))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("encoding/json rejects %q, which the library canonicalizes: %v", in, err)
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case json.Number:
			_, err := strconv.ParseFloat(string(v), 64)
			return err != nil
		case []any:
			return slices.ContainsFunc(v, walk)
		case map[string]any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}
