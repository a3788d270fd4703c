package kvstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// testRecords covers every field, strings that need escaping, raw JSON that is
// not compact, and times in other zones.
func testRecords() []Record {
	now := time.Date(2026, 11, 30, 15, 4, 5, 123456789, time.UTC)
	return []Record{
		{},
		{State: StateClaimed, ActionID: "a-1"},
		{State: StateSettled, ActionID: "a_2", CapabilityID: "cap:hermes_agent:primary:chat",
			InputSHA256: "ab12", Owner: "r1", Attempt: 3, Decision: DecisionApprove, Approver: "ops", Reason: "ticket 7", Cancel: true, PendingSeq: 42, IdemKey: "idem.0f1e", RunID: "run_7c",
			ApprovalSeq: 2, ApprovalSHA256: "cd34", ApprovalAnswered: 1, ApprovalDecision: "d-1:approval:1",
			Result:    json.RawMessage(`{"action_id":"a_2","status":"completed","output":{"x":[1,2]},"error":null,"replay_of":null}`),
			CreatedAt: now.Add(-time.Second), UpdatedAt: now},
		{State: StateParked, ActionID: "p-1", Action: json.RawMessage(`{"input": {"response_id": "resp_1", "s": "\u00e9<\ud83d\ude00"}, "idempotency_key":"k"}`),
			ExpiresAt: now.Add(15 * time.Minute)},
		{State: "odd \"state\" <&> \u00e9\n\u2028", ActionID: "x", Owner: "\\owner\t", Attempt: -1 << 63, PendingSeq: 1<<64 - 1,
			Action: json.RawMessage(`{}`), ExpiresAt: now.In(time.FixedZone("x", 3600))},
	}
}

// sameRecord fails t unless got is want with Result and Action compacted.
func sameRecord(t *testing.T, what string, got, want Record) {
	t.Helper()
	for _, raw := range []*json.RawMessage{&want.Result, &want.Action} {
		if *raw != nil {
			var b bytes.Buffer
			if err := json.Compact(&b, *raw); err != nil {
				t.Fatal(err)
			}
			*raw = b.Bytes()
		}
	}
	for _, tt := range [][2]*time.Time{{&got.ExpiresAt, &want.ExpiresAt}, {&got.CreatedAt, &want.CreatedAt}, {&got.UpdatedAt, &want.UpdatedAt}} {
		if !tt[0].Equal(*tt[1]) || tt[0].Format(time.RFC3339Nano) != tt[1].Format(time.RFC3339Nano) {
			t.Errorf("%s: time %v, want %v", what, *tt[0], *tt[1])
		}
		*tt[0], *tt[1] = time.Time{}, time.Time{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// TestEncodeRecordIsMarshal: encodeRecord writes what the library writes, byte for
// byte, or fails where it fails: for the test records and for random ones whose strings
// need escaping or hold invalid UTF-8, whose raw JSON is spaced, escaped, repeats names
// or is not JSON, and whose times are in other zones or cannot be said in RFC 3339.
func TestEncodeRecordIsMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 3))
	records := testRecords()
	for _, t := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("24h", 24*3600)), time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("-24h", -24*3600))} {
		records = append(records, Record{State: StateClaimed, ActionID: "t", UpdatedAt: t}) // refused by both
	}
	for range 3000 {
		records = append(records, randomRecord(rng))
	}
	for i, r := range records {
		got, err := encodeRecord(&r)
		want, werr := marshalRecord(&r)
		if (err != nil) != (werr != nil) || werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("record %d %+v:\n got %s (%v)\nwant %s (%v)", i, r, got, err, want, werr)
		}
	}
}

// randomRecord is a record with random fields, each zero half of the time.
func randomRecord(rng *rand.Rand) Record {
	strs := []string{"", "a", "act-1", `q"b\s`, "<&>", "\u00e9\u2028\u2029", "\x00\x1f\x7f\n\t", "\xff", "a\xc3", "\U0001F600", "cap:hermes_agent:primary:chat"}
	raws := []string{`{}`, ` { "a" : [ 1 , 2.50 , -0 , 1e3 ] } `, `{"s":"\u00e9\ud83d\ude00 \"x\" \/"}`, `{"a":1,"a":2}`, "\"\xff\"", `null`, `[true,false]`, `{"a":`, ``}
	zones := []*time.Location{time.UTC, time.FixedZone("p", 3600), time.FixedZone("m", -(9*3600 + 30*60)), time.FixedZone("s", 3601),
		time.FixedZone("big", 24*3600), time.FixedZone("max", 23*3600+59*60)}
	str := func() string {
		if rng.IntN(2) == 0 {
			return ""
		}
		return strs[rng.IntN(len(strs))] + strs[rng.IntN(len(strs))]
	}
	raw := func() json.RawMessage {
		if rng.IntN(2) == 0 {
			return nil
		}
		return json.RawMessage(raws[rng.IntN(len(raws))])
	}
	tm := func() time.Time {
		if rng.IntN(2) == 0 {
			return time.Time{}
		}
		years := []int{2026, 1, 9999, 10000, -1}
		return time.Date(years[rng.IntN(len(years))], time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60),
			rng.IntN(3)*rng.IntN(1e9), zones[rng.IntN(len(zones))])
	}
	num := func() int {
		if rng.IntN(2) == 0 {
			return 0
		}
		return int(rng.Int64()) >> rng.IntN(64)
	}
	return Record{State: State(str()), ActionID: str(), CapabilityID: str(), InputSHA256: str(), Owner: str(), Attempt: num(),
		IdemKey: str(), Result: raw(), Action: raw(), ExpiresAt: tm(), Decision: str(), Approver: str(), Reason: str(),
		Cancel: rng.IntN(2) == 0, RunID: str(), ApprovalSeq: num(), ApprovalSHA256: str(), ApprovalAnswered: num(),
		ApprovalDecision: str(), ApprovalRequestID: str(), PendingSeq: uint64(num()) * uint64(1+rng.IntN(3)), CreatedAt: tm(), UpdatedAt: tm()}
}

// TestRecordRoundTrip: a record decodes to itself, and encoding/json reads the
// encoding the same.
func TestRecordRoundTrip(t *testing.T) {
	for i, r := range testRecords() {
		b, err := encodeRecord(&r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("record %d does not decode: %v\n%s", i, err, b)
		}
		sameRecord(t, fmt.Sprintf("record %d", i), back, r)
		var v1 struct {
			V int `json:"v"`
			Record
		}
		if err := json.Unmarshal(b, &v1); err != nil || v1.V != recordVersion {
			t.Fatalf("record %d: encoding/json reads v %d, %v", i, v1.V, err)
		}
		sameRecord(t, fmt.Sprintf("record %d read by encoding/json", i), v1.Record, r)
	}
}

// TestDecodeRecordWrittenBefore: records as the hand-written encoder of earlier
// versions wrote them (encoding/json's escaping, raw JSON as it came) decode.
func TestDecodeRecordWrittenBefore(t *testing.T) {
	now := time.Date(2026, 11, 30, 15, 4, 5, 123456789, time.UTC)
	for _, c := range []struct {
		b    string
		want Record
	}{
		{`{"v":1,"state":"settled","action_id":"a_2","capability_id":"cap:hermes_agent:primary:chat","input_sha256":"ab12","owner":"r1","attempt":3,"idem_key":"idem.0f1e","result":{"action_id":"a_2","capability_id":"cap:hermes_agent:primary:chat","status":"cancelled","output":null,"error":{"code":"cancelled","message":"m","category":"cancelled","retryable":false,"uncertain_outcome":false,"http_status":null,"retry_after_ms":null,"details":null},"replay_of":null},"decision":"approve","approver":"ops","reason":"ticket \u003c7\u003e \u0026 \"x\" é\n","cancel":true,"run_id":"run_7c","approval_seq":2,"approval_sha256":"cd34","approval_answered":1,"approval_decision":"d-1:approval:1","pending_seq":42,"created_at":"2026-11-30T15:04:04.123456789Z","updated_at":"2026-11-30T15:04:05.123456789Z"}`,
			Record{State: StateSettled, ActionID: "a_2", CapabilityID: "cap:hermes_agent:primary:chat",
				InputSHA256: "ab12", Owner: "r1", Attempt: 3, Decision: DecisionApprove, Approver: "ops", Reason: "ticket <7> & \"x\" é\n", Cancel: true, PendingSeq: 42, IdemKey: "idem.0f1e", RunID: "run_7c",
				ApprovalSeq: 2, ApprovalSHA256: "cd34", ApprovalAnswered: 1, ApprovalDecision: "d-1:approval:1",
				Result:    json.RawMessage(`{"action_id":"a_2","capability_id":"cap:hermes_agent:primary:chat","status":"cancelled","output":null,"error":{"code":"cancelled","message":"m","category":"cancelled","retryable":false,"uncertain_outcome":false,"http_status":null,"retry_after_ms":null,"details":null},"replay_of":null}`),
				CreatedAt: now.Add(-time.Second), UpdatedAt: now}},
		{`{"v":1,"state":"parked","action_id":"p-1","capability_id":"cap:hermes_agent:primary:responses","owner":"r2.n1","attempt":1,"action":{"input":{"prompt":"a \u00e9 <b>","response_id":"resp_1"},"idempotency_key":"k"},"expires_at":"2026-11-30T16:19:05.123456789+01:00","created_at":"2026-11-30T15:04:05.123456789Z","updated_at":"2026-11-30T15:04:05.123456789Z"}`,
			Record{State: StateParked, ActionID: "p-1", CapabilityID: "cap:hermes_agent:primary:responses", Owner: "r2.n1", Attempt: 1,
				Action:    json.RawMessage(`{"input":{"prompt":"a \u00e9 <b>","response_id":"resp_1"},"idempotency_key":"k"}`),
				ExpiresAt: now.Add(15 * time.Minute).In(time.FixedZone("", 3600)), CreatedAt: now, UpdatedAt: now}},
	} {
		got, err := decodeRecord([]byte(c.b))
		if err != nil {
			t.Fatalf("%s: %v", c.b, err)
		}
		sameRecord(t, c.b, got, c.want)
		if string(got.Result) != string(c.want.Result) || string(got.Action) != string(c.want.Action) {
			t.Errorf("raw JSON not kept as written: %s %s", got.Result, got.Action)
		}
	}
	for _, bad := range []string{``, `null`, `[]`, `{"v":2,"state":"claimed"}`, `{"state":"claimed"}`, `{"v":1,"attempt":"3"}`, `{"v":1} x`} {
		if _, err := decodeRecord([]byte(bad)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeRecord(%s) = %v, want ErrCorrupt", bad, err)
		}
	}
}

// FuzzDecodeRecord feeds arbitrary bucket values: decodeRecord never panics, and
// a record it accepts encodes, and decodes back to the same encoding.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range testRecords() {
		b, err := encodeRecord(&r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"state":"claimed","action_id":"a","action_id":"b","result":{"a":1,"a":2},"reason":"\xff"}`))
	f.Add([]byte(`{"V":1,"STATE":"claimed","created_at":"2026-11-30T15:04:05+01:00"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc, err := encodeRecord(&r)
		if err != nil {
			if r.ExpiresAt.Year() > 9999 || r.CreatedAt.Year() > 9999 || r.UpdatedAt.Year() > 9999 {
				return // an offset moved a time past what RFC 3339 can write
			}
			t.Fatalf("decoded record %+v does not encode: %v", r, err)
		}
		back, err := decodeRecord(enc)
		if err != nil {
			t.Fatalf("encoding %s does not decode: %v", enc, err)
		}
		again, err := encodeRecord(&back)
		if err != nil || string(again) != string(enc) {
			t.Fatalf("round trip:\n%s\n%s (%v)", enc, again, err)
		}
	})
}

func TestShortens(t *testing.T) {
	for _, tt := range []struct {
		current, requested time.Duration
		want               bool
	}{
		{time.Hour, time.Minute, true},
		{time.Hour, time.Hour, false},
		{time.Minute, time.Hour, false},
		{0, time.Hour, true},  // no expiry -> an expiry
		{time.Hour, 0, false}, // an expiry -> none
		{0, 0, false},
	} {
		if got := shortens(tt.current, tt.requested); got != tt.want {
			t.Errorf("shortens(%s, %s) = %v, want %v", tt.current, tt.requested, got, tt.want)
		}
	}
}

// benchRecords are records as one action writes them: the action record when claimed
// and when dispatched, and its key record.
func benchRecords() []Record {
	at := time.Date(2026, 11, 30, 15, 4, 5, 123456789, time.UTC)
	act := Record{State: StateClaimed, ActionID: "01JDQ3ZC7V4M8XG2K9T6RB5NWE", CapabilityID: "cap:hermes_agent:primary:chat",
		InputSHA256: "9d65f4847e8c62344303cac0c554f29b8b75bf9c25dfe3e5de5a5928e2f5f746", Owner: "replica-1.gcX8Gp6L9TlUpf1N4O7dmR",
		Attempt: 1, IdemKey: "idem.4d82c1f0e1b7a2d3c4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071829304a", CreatedAt: at, UpdatedAt: at}
	disp := act
	disp.State = StateDispatched
	key := Record{State: StateClaimed, ActionID: act.ActionID, CapabilityID: act.CapabilityID, InputSHA256: act.InputSHA256,
		Owner: act.Owner, CreatedAt: at, UpdatedAt: at}
	return []Record{act, key, disp}
}

func BenchmarkEncodeRecord(b *testing.B) {
	rs := benchRecords()
	b.ReportAllocs()
	start := cpuTime(b)
	for b.Loop() {
		for i := range rs {
			if _, err := encodeRecord(&rs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportCPU(b, start)
}
