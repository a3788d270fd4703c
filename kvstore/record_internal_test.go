package kvstore

import (
	"encoding/json"
	"testing"
	"time"
)

// TestEncodeRecordMatchesJSON: the hand-written encoder writes exactly what
// encoding/json writes for the same record.
func TestEncodeRecordMatchesJSON(t *testing.T) {
	now := time.Date(2026, 11, 30, 15, 4, 5, 123456789, time.UTC)
	records := []Record{
		{},
		{State: StateClaimed, ActionID: "a-1"},
		{State: StateSettled, ActionID: "a_2", CapabilityID: "cap:hermes_agent:primary:chat",
			InputSHA256: "ab12", Owner: "r1", Attempt: 3, Decision: DecisionApprove, Approver: "ops", Reason: "ticket 7", Cancel: true, PendingSeq: 42, IdemKey: "idem.0f1e", RunID: "run_7c",
			Result:    json.RawMessage(`{"action_id":"a_2","status":"completed","output":{"x":[1,2]},"error":null,"replay_of":null}`),
			CreatedAt: now.Add(-time.Second), UpdatedAt: now},
		{State: StateParked, ActionID: "p-1", Action: json.RawMessage(`{"input":{"response_id":"resp_1"},"idempotency_key":"k"}`),
			ExpiresAt: now.Add(15 * time.Minute)},
		{State: "odd \"state\" <&> \u00e9\n", ActionID: "x", Owner: "\\owner\t", ExpiresAt: now.In(time.FixedZone("x", 3600))},
	}
	for i, r := range records {
		got, err := encodeRecord(&r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(wireRecord{V: recordVersion, Record: r})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("record %d:\n got %s\nwant %s", i, got, want)
		}
		back, err := decodeRecord(got)
		if err != nil {
			t.Fatalf("record %d does not decode: %v", i, err)
		}
		if back.State != r.State || back.ActionID != r.ActionID || back.Attempt != r.Attempt || back.IdemKey != r.IdemKey || !back.ExpiresAt.Equal(r.ExpiresAt) || back.PendingSeq != r.PendingSeq || back.Cancel != r.Cancel || back.RunID != r.RunID {
			t.Errorf("record %d round trip: %+v", i, back)
		}
	}
}

// TestRecordSizeBoundsEncoding: recordSize is at least the encoding's length for a
// record with every field set at its longest (no escaping), so encodeRecord never
// grows its buffer.
func TestRecordSizeBoundsEncoding(t *testing.T) {
	at := time.Date(2026, 11, 30, 15, 4, 5, 123456789, time.FixedZone("x", -(9*3600+30*60)))
	r := Record{State: StateDispatched, ActionID: "a-1", CapabilityID: "cap:hermes_agent:primary:chat",
		InputSHA256: "9d65f4847e8c62344303cac0c554f29b8b75bf9c25dfe3e5de5a5928e2f5f746",
		Owner:       "gcX8Gp6L9TlUpf1N4O7dmR", Attempt: -1 << 63, Decision: DecisionMismatch, Approver: "approver-1", Reason: "not this one", Cancel: true, PendingSeq: 1<<64 - 1, IdemKey: "idem.4d82", RunID: "run_0123456789abcdef0123456789abcdef",
		Result: json.RawMessage(`{"a":1}`), Action: json.RawMessage(`{"b":2}`),
		ExpiresAt: at, CreatedAt: at, UpdatedAt: at}
	got, err := encodeRecord(&r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > recordSize(&r) {
		t.Fatalf("encoding is %d bytes, recordSize %d", len(got), recordSize(&r))
	}
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
