package events

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
)

// Realistic per-action inputs for the hot-path benchmarks: what the bench
// scenario publishes and what the bridge answers.
var (
	benchActionHeader = nats.Header{
		"ce-id":          {"c-1"},
		"ce-source":      {"hermes-bench"},
		"ce-specversion": {"1.0"},
		"ce-subject":     {"cap:hermes_agent:primary:chat"},
		"ce-time":        {"2026-11-30T12:00:00.123456Z"},
		"ce-type":        {TypeAction},
		"content-type":   {"application/json"},
		"Nats-Msg-Id":    {"c-1"},
	}
	benchActionData = []byte(`{"input":{"prompt":"bench c-1"},"idempotency_key":"k-c-1"}`)
	benchOutput     = json.RawMessage(`{"id":"chatcmpl-bench-1","object":"chat.completion","created":1764504000,"model":"hermes-agent","choices":[{"index":0,"message":{"role":"assistant","content":"bench c-1: ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}`)
	benchResult     = &Result{ActionID: "c-1", CapabilityID: "cap:hermes_agent:primary:chat", Status: StatusCompleted, Output: benchOutput}
	benchResultData = func() []byte {
		b, err := marshalResult(benchResult)
		if err != nil {
			panic(err)
		}
		return b
	}()
	benchResultHeader = func() nats.Header {
		h, _, err := EncodeResult("hermes-bridge", benchResult, TraceContext{})
		if err != nil {
			panic(err)
		}
		return h
	}()
)

func BenchmarkDecodeEnvelope(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEnvelope(benchActionHeader, benchActionData); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAction(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeAction(benchActionData); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeActionFull(b *testing.B) {
	data := []byte(`{"capability_id":"cap:hermes_agent:primary:chat_stream","input":{"prompt":"Summarize the incident notes."},"idempotency_key":"incident-42-summary","timeout_ms":120000,"tenant_id":"acme","approval":{"decision":"approve","approver":"ops","reason":"ok","input_sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","decided_at":"2030-01-01T00:00:00Z"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeAction(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInputSHA256(b *testing.B) {
	input := json.RawMessage(`{"prompt":"bench c-1"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := InputSHA256(input); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeResult(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := EncodeResult("hermes-bridge", benchResult, TraceContext{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeResultBody is the body's share of BenchmarkEncodeResult.
func BenchmarkEncodeResultBody(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := marshalResult(benchResult); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeResultBinaryHeader(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = binaryHeader("hermes-bridge", TypeResult, "c-1:result", "cap:hermes_agent:primary:chat", TraceContext{}, ResultHeaderRoom)
	}
}

func BenchmarkDecodeResult(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeResult(benchResultHeader, benchResultData); err != nil {
			b.Fatal(err)
		}
	}
}
