package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
)

var resultSeeds = []string{
	`{"action_id":"c-1","capability_id":"cap:hermes_agent:primary:chat","status":"completed","output":{"id":"chatcmpl-1","choices":[{"message":{"content":"ok \u2028 é"}}]},"error":null,"replay_of":null}`,
	`{"action_id":"a-1","capability_id":"cap:hermes_agent:p:chat","status":"failed","output":null,"error":{"code":"remote_unavailable","message":"Hermes is busy","category":"temporary","retryable":true,"uncertain_outcome":false,"http_status":429,"retry_after_ms":1000,"details":{"remote_code":"rate_limit_exceeded"}},"replay_of":"orig-1"}`,
	`{"action_id":"a-2","capability_id":"","status":"pending_approval","output":{},"error":null,"replay_of":null}`,
	`{"action_id":"a","status":"cancelled"}`, `{"action_id":"a","status":"weird"}`, `{"status":"completed"}`,
	` {"action_id" : "a" , "status" : "completed" , "output" : [ 1 , 2 ] } `, `{"action_id":"a","status":"completed","output":"s"}`,
	`{"action_id":"a","status":"completed","output":12.5e3}`, `{"action_id":"a","status":"completed","output":true}`,
	`{"Action_ID":"a","STATUS":"completed"}`, `{"action_id":"a","action_id":"b","status":"completed"}`,
	`{"action_id":"a","status":"completed","extra":{"x":[1]}}`, `{"action_id":"a\u002d1","status":"completed"}`,
	`{"action_id":null,"status":"completed"}`, `{"action_id":"a","status":"completed","replay_of":"r\"x"}`,
	`{"action_id":"a","status":"completed","replay_of":5}`, `{"action_id":1,"status":"completed"}`,
	"{\"action_id\":\"a\",\"status\":\"completed\",\"capability_id\":\"\xff\"}", `{"action_id":"a","status":"completed"}x`,
	`{"action_id":"a","status":"completed",}`, `[]`, `{`, ``, `null`, `{"action_id":"a","status":"completed","output":}`,
	`{"action_id":"a","status":"completed","output":nul}`, `{"action_id":"a","status":"completed","error":{}}`,
	`{"action_id":"a","status":"completed","error":{"http_status":"x"}}`, `{"action_id":"a","status":"completed","output":{"a":"\ud800"}}`,
}

// FuzzDecodeResult checks DecodeResult against encoding/json, whose reading of a Result
// its documentation promises: a body that is a JSON object json.Unmarshal reads into a
// Result with a valid action id and a known status is returned as json.Unmarshal reads
// it (Output "null" when absent), sharing no memory with data; anything else, or a
// ce-type other than the result type, is an error wrapping ErrInvalidOutput.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range resultSeeds {
		f.Add(uint8(0), []byte(s))
		f.Add(uint8(1), []byte(s))
	}
	f.Add(uint8(2), []byte(resultSeeds[0]))
	f.Fuzz(func(t *testing.T, hdr uint8, data []byte) {
		var h nats.Header
		switch hdr % 4 {
		case 1:
			h = nats.Header{events.HeaderType: {events.TypeResult}}
		case 2:
			h = nats.Header{"CE-Type": {events.TypeEvent}}
		case 3:
			h = nats.Header{}
		}
		in := bytes.Clone(data)
		got, err := events.DecodeResult(h, data)
		want := new(events.Result)
		ok := hdr%4 != 2 && bytes.HasPrefix(bytes.TrimLeft(in, " \t\r\n"), []byte("{")) && json.Unmarshal(in, want) == nil &&
			events.ValidActionID(want.ActionID) && (events.Terminal(want.Status) || want.Status == events.StatusPendingApproval)
		if !ok {
			if err == nil || !errors.Is(err, events.ErrInvalidOutput) || got != nil {
				t.Fatalf("DecodeResult(%q) = %+v, %v; want an ErrInvalidOutput", in, got, err)
			}
			return
		}
		if len(want.Output) == 0 {
			want.Output = json.RawMessage("null")
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeResult(%q) = %+v, %v; encoding/json reads %+v", in, got, err, want)
		}
		for i := range data {
			data[i] = 'x'
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeResult's result aliases its input")
		}
	})
}
