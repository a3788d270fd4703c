package events

import (
	"bytes"
	"encoding/json"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
)

// eventByReflection is EventData without its MarshalJSON method: json.Marshal with
// encodeOptions writes it in the contract form by reflection, the oracle of
// marshalEvent.
type eventByReflection EventData

// FuzzMarshalEvent: marshalEvent writes, byte for byte, what json.Marshal writes for
// the same event with encodeOptions, and refuses exactly the data it refuses.
func FuzzMarshalEvent(f *testing.F) {
	f.Add("a-1", int64(0), "data", "response.output_text.delta", true, "e\"1", []byte(`{"delta": "<b>&\u2028"}`), "Three <b>")
	f.Add("a", int64(-7), "", "", false, "", []byte(``), "")
	f.Add("\xff<", int64(1)<<62, "k\xff", "\u2029", true, "", []byte(`{"a":1,"a":"\ud800"}`), "\xff")
	f.Add("a", int64(3), "data", "x", false, "", []byte(`{`), "t")
	f.Add("a", int64(3), "data", "x", false, "", []byte(` [ 1 , "x" ] `), "")
	f.Fuzz(func(t *testing.T, id string, seq int64, kind, name string, hasID bool, sseID string, data []byte, text string) {
		ev := &EventData{ActionID: id, Sequence: seq, Kind: kind, Event: SSE{Event: name, Data: json.RawMessage(data)}, Text: text}
		if hasID {
			ev.Event.ID = &sseID
		}
		got, err := marshalEvent(ev)
		want, wantErr := jsonv2.Marshal((*eventByReflection)(ev), encodeOptions)
		if (err != nil) != (wantErr != nil) || err == nil && !bytes.Equal(got, want) {
			t.Fatalf("marshalEvent(%+v)\n got %s (%v)\nwant %s (%v)", ev, got, err, want, wantErr)
		}
	})
}

func BenchmarkMarshalEvent(b *testing.B) {
	id := "chatcmpl-1"
	ev := &EventData{ActionID: "01J9ZK3Q4X5Y6Z7A8B9C0D1E2F", Sequence: 12345, Kind: KindData,
		Event: SSE{ID: &id, Data: json.RawMessage(`{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": null}]}`)},
		Text:  " tok"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := marshalEvent(ev); err != nil {
			b.Fatal(err)
		}
	}
}
