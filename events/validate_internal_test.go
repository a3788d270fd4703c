package events

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
)

// decodeBothWays decodes one binary event with the direct validation and with sdk-go's
// only, and reports both outcomes as comparable strings. The tests that call it do not
// run in parallel: the switch is package-wide.
func decodeBothWays(h nats.Header) (direct, sdk string) {
	outcome := func() string {
		env, err := DecodeEnvelope(h, []byte(`{"input":{"prompt":"hi"}}`))
		if env == nil {
			return fmt.Sprintf("nil / %v", err)
		}
		return fmt.Sprintf("%q %q %q / %v", env.Source, env.Subject, env.Type, err)
	}
	direct = outcome()
	sdkValidationOnly.Store(true)
	defer sdkValidationOnly.Store(false)
	return direct, outcome()
}

func binaryEvent(source, subject, typ, schema string) nats.Header {
	h := nats.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"a-1"}, "Content-Type": {"application/json"}}
	for k, v := range map[string]string{"Ce-Source": source, "Ce-Subject": subject, "Ce-Type": typ, "Ce-Dataschema": schema} {
		if v != "\x00" { // "\x00" leaves the header out
			h[k] = []string{v}
		}
	}
	return h
}

// TestBinaryValidationMatchesSDK: the direct checks of the common case decide exactly
// as sdk-go's validation does, attribute and reason included.
func TestBinaryValidationMatchesSDK(t *testing.T) {
	const no = "\x00"
	sources := []string{no, "", " ", "hermes-bench", "urn:x:y", "https://agents.example/a", "/a/b", "#", "?", "a:",
		"1", "-x", "%20", "a b", " s ", "::", "a#b", "é"}
	subjects := []string{no, "", " ", "cap:hermes_agent:primary:chat"}
	types := []string{no, "", " ", TypeAction, "other"}
	schemas := []string{no, "https://schemas.example/a.json", "relative/a.json", ""}
	n := 0
	for _, src := range sources {
		for _, sub := range subjects {
			for _, typ := range types {
				for _, sch := range schemas {
					direct, sdk := decodeBothWays(binaryEvent(src, sub, typ, sch))
					if direct != sdk {
						t.Errorf("source %q subject %q type %q dataschema %q:\n direct %s\n sdk    %s", src, sub, typ, sch, direct, sdk)
					}
					n++
				}
			}
		}
	}
	if n != len(sources)*len(subjects)*len(types)*len(schemas) {
		t.Fatalf("compared %d cases", n)
	}
}

// FuzzBinaryValidation compares the two validation paths on arbitrary attribute values.
func FuzzBinaryValidation(f *testing.F) {
	f.Add("hermes-bench", "cap:x", TypeAction, "\x00")
	f.Add("#", " ", "", "x")
	f.Add("%C3%28", "\x00", " t ", "https://a/b")
	f.Fuzz(func(t *testing.T, source, subject, typ, schema string) {
		direct, sdk := decodeBothWays(binaryEvent(source, subject, typ, schema))
		if direct != sdk {
			t.Fatalf("source %q subject %q type %q dataschema %q:\n direct %s\n sdk    %s", source, subject, typ, schema, direct, sdk)
		}
	})
}

// BenchmarkDecodeEnvelopeBinary measures decoding one typical binary action; run it with
// and without -sdk to compare the two validation paths.
func BenchmarkDecodeEnvelopeBinary(b *testing.B) {
	h := binaryEvent("hermes-bench", "cap:hermes_agent:primary:chat", TypeAction, "\x00")
	h["Ce-Time"] = []string{"2026-11-30T12:00:00.123456Z"}
	body := []byte(`{"input":{"prompt":"hi"},"idempotency_key":"k-1"}`)
	for _, sdk := range []bool{false, true} {
		b.Run(fmt.Sprintf("sdk=%v", sdk), func(b *testing.B) {
			sdkValidationOnly.Store(sdk)
			defer sdkValidationOnly.Store(false)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeEnvelope(h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
