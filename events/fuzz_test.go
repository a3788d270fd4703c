package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

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

// FuzzCanonicalize checks that Canonicalize never panics, produces valid JSON
// for the inputs it accepts, is idempotent, and accepts only valid JSON.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"b":[1,2.50,-0,1e21,1e-7],"a":"\u20ac\ud83d\ude00\n"}`, `[]`, `0`, `"x"`, `{"a":{"a":{}}}`,
		`{"\ufb33":1,"\ud83d\ude00":2}`, `[1e400]`, `{"a":1,"a":2}`, `"\ud800"`, `123456789012345678901234567890`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := events.Canonicalize(in)
		if err != nil {
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		if !json.Valid(out) {
			t.Fatalf("produced invalid JSON %q from %q", out, in)
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
