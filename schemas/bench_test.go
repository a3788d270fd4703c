package schemas_test

import (
	"encoding/json"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// benchValidate validates one typical action per iteration, as the bridge does per action.
func benchValidate(b *testing.B, op, action string) {
	b.Helper()
	a := json.RawMessage(action)
	noErr(b, schemas.ValidateAction(op, a))
	b.ReportAllocs()
	for b.Loop() {
		if err := schemas.ValidateAction(op, a); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateActionChat(b *testing.B) {
	benchValidate(b, "chat", `{"input":{"prompt":"bench c-1"},"idempotency_key":"k-c-1"}`)
}

func BenchmarkValidateActionResponses(b *testing.B) {
	benchValidate(b, "responses", `{"input":{"input":"bench r-1","model":"hermes-agent"},"idempotency_key":"k-r-1"}`)
}

func BenchmarkValidateActionSessionChat(b *testing.B) {
	benchValidate(b, "session_chat", `{"input":{"session_id":"s-1","message":"bench s-1"},"idempotency_key":"k-s-1"}`)
}

// BenchmarkValidateActionValue is BenchmarkValidateActionChat without the decoding: the
// bridge validates the tree events.DecodeAction decoded.
func BenchmarkValidateActionValue(b *testing.B) {
	tree, err := schemas.Parse([]byte(`{"input":{"prompt":"bench c-1"},"idempotency_key":"k-c-1"}`), "action")
	noErr(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if err := schemas.ValidateActionValue("chat", tree); err != nil {
			b.Fatal(err)
		}
	}
}
