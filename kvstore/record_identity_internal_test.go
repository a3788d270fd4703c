package kvstore

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// The encoder as it was at commit 6b9938e (before recordSize was made tight and
// appendString used a table), with its helpers, kept to prove that the encoder writes
// the same bytes as before on any record.

// encodeRecord writes the same JSON as json.Marshal(wireRecord{...}) by hand: records
// are written several times per action, and json.Marshal would re-validate and compact
// the embedded result on every write. Result must be valid JSON (it is produced by
// json.Marshal); it is copied verbatim.
func oldEncodeRecord(r Record) ([]byte, error) {
	b := make([]byte, 0, oldRecordSize(r))
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, recordVersion, 10)
	b = oldAppendField(b, "state", string(r.State), false)
	b = oldAppendField(b, "action_id", r.ActionID, false)
	b = oldAppendField(b, "capability_id", r.CapabilityID, true)
	b = oldAppendField(b, "input_sha256", r.InputSHA256, true)
	b = oldAppendField(b, "owner", r.Owner, true)
	if r.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(r.Attempt), 10)
	}
	b = oldAppendField(b, "idem_key", r.IdemKey, true)
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
	}
	if len(r.Action) > 0 {
		b = append(b, `,"action":`...)
		b = append(b, r.Action...)
	}
	b = oldAppendTime(b, "expires_at", r.ExpiresAt)
	b = oldAppendField(b, "decision", r.Decision, true)
	b = oldAppendField(b, "approver", r.Approver, true)
	b = oldAppendField(b, "reason", r.Reason, true)
	if r.Cancel {
		b = append(b, `,"cancel":true`...)
	}
	b = oldAppendField(b, "run_id", r.RunID, true)
	if r.ApprovalSeq != 0 {
		b = append(b, `,"approval_seq":`...)
		b = strconv.AppendInt(b, int64(r.ApprovalSeq), 10)
	}
	b = oldAppendField(b, "approval_sha256", r.ApprovalSHA256, true)
	if r.ApprovalAnswered != 0 {
		b = append(b, `,"approval_answered":`...)
		b = strconv.AppendInt(b, int64(r.ApprovalAnswered), 10)
	}
	b = oldAppendField(b, "approval_decision", r.ApprovalDecision, true)
	if r.PendingSeq != 0 {
		b = append(b, `,"pending_seq":`...)
		b = strconv.AppendUint(b, r.PendingSeq, 10)
	}
	b = oldAppendTime(b, "created_at", r.CreatedAt)
	b = oldAppendTime(b, "updated_at", r.UpdatedAt)
	return append(b, '}'), nil
}

// recordSize bounds the encoding of r when its strings need no escaping: the field
// names, punctuation, attempt, pending_seq and three timestamps take at most 448 bytes (run_id's name included; the approval fields' names and numbers take at most 128 more). Sizing the
// buffer with it keeps encodeRecord from growing (and copying) it while filling it.
func oldRecordSize(r Record) int {
	return 448 + len(r.State) + len(r.ActionID) + len(r.CapabilityID) + len(r.InputSHA256) +
		len(r.Owner) + len(r.IdemKey) + len(r.Result) + len(r.Action) + len(r.Decision) + len(r.Approver) + len(r.Reason) + len(r.RunID) + len(r.ApprovalSHA256) + len(r.ApprovalDecision) + 128
}

func oldAppendField(b []byte, name, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return oldAppendString(b, v)
}

// appendString appends v as a JSON string; anything but plain printable ASCII goes
// through encoding/json so the escaping is exactly its own.
func oldAppendString(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(v)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, v...)
	return append(b, '"')
}

func oldAppendTime(b []byte, name string, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':', '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// randString returns a string for a record field: often empty or plain, sometimes with
// characters that JSON escapes, non-ASCII or invalid UTF-8.
func randString(rng *rand.Rand) string {
	const plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:"
	odd := []string{`"`, `\`, "<", ">", "&", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "日本", "\xff", "\xe2\x82", "🙂", " ", "/"}
	switch rng.IntN(6) {
	case 0:
		return ""
	case 1, 2, 3:
		b := make([]byte, rng.IntN(80))
		for i := range b {
			b[i] = plain[rng.IntN(len(plain))]
		}
		return string(b)
	default:
		var s string
		for range rng.IntN(12) {
			if rng.IntN(2) == 0 {
				s += odd[rng.IntN(len(odd))]
			} else {
				s += string(plain[rng.IntN(len(plain))])
			}
		}
		return s
	}
}

func randInt(rng *rand.Rand) int {
	switch rng.IntN(5) {
	case 0:
		return 0
	case 1:
		return rng.IntN(10)
	case 2:
		return -rng.IntN(1000)
	case 3:
		return []int{-1 << 63, 1<<63 - 1, -1, 9, 10, 99, 100, -9, -10}[rng.IntN(9)]
	default:
		return int(rng.Int64()) * (1 - 2*rng.IntN(2))
	}
}

func randTime(rng *rand.Rand) time.Time {
	if rng.IntN(3) == 0 {
		return time.Time{}
	}
	var sec int64
	switch rng.IntN(4) {
	case 0:
		sec = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Unix() + rng.Int64N(1<<30)
	case 1:
		sec = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Unix() + rng.Int64N(10000*366*86400) // years 0 to 9999
	case 2:
		sec = time.Date(10000+rng.IntN(100000), 1, 1, 0, 0, 0, 0, time.UTC).Unix() // past json's range
	default:
		sec = time.Date(-rng.IntN(5000), 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	}
	nsec := []int64{0, 1, 100, 123456789, 999999999, 500000000, rng.Int64N(1e9)}[rng.IntN(7)]
	t := time.Unix(sec, nsec)
	switch rng.IntN(4) {
	case 0:
		return t.UTC()
	case 1:
		return t.In(time.FixedZone("x", (rng.IntN(28*60)-14*60)*60))
	case 2:
		return t.In(time.FixedZone("odd", rng.IntN(86400)-43200)) // seconds in the offset
	default:
		return t.Local()
	}
}

func randJSON(rng *rand.Rand) json.RawMessage {
	switch rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return json.RawMessage(`{}`)
	case 2:
		b, _ := json.Marshal(map[string]any{"action_id": randString(rng), "status": "completed",
			"output": map[string]any{"text": randString(rng), "n": randInt(rng)}, "error": nil})
		return b
	default:
		return json.RawMessage(`{"a": [1, 2,  3], "b" : "x"}`) // not compact: copied as it is
	}
}

func randRecord(rng *rand.Rand) Record {
	states := []State{StateClaimed, StateDispatched, StateReleased, StateSettling, StateParked, StateSettled, ""}
	r := Record{State: states[rng.IntN(len(states))], ActionID: randString(rng), CapabilityID: randString(rng),
		InputSHA256: randString(rng), Owner: randString(rng), Attempt: randInt(rng), IdemKey: randString(rng),
		Result: randJSON(rng), Action: randJSON(rng), ExpiresAt: randTime(rng), Decision: randString(rng),
		Approver: randString(rng), Reason: randString(rng), Cancel: rng.IntN(2) == 0, RunID: randString(rng),
		ApprovalSeq: randInt(rng), ApprovalSHA256: randString(rng), ApprovalAnswered: randInt(rng),
		ApprovalDecision: randString(rng), CreatedAt: randTime(rng), UpdatedAt: randTime(rng)}
	if rng.IntN(5) == 0 {
		r.State = State(randString(rng))
	}
	switch rng.IntN(3) {
	case 0:
	case 1:
		r.PendingSeq = uint64(rng.IntN(1000))
	default:
		r.PendingSeq = rng.Uint64()
	}
	return r
}

// checkSameBytes fails t unless encodeRecord writes exactly what the old encoder wrote
// for r (and, where encoding/json can encode r the same way, what it writes), and
// recordSize bounds the output of a record whose strings need no escaping tightly.
func checkSameBytes(t *testing.T, r Record) {
	t.Helper()
	got, err := encodeRecord(&r)
	if err != nil {
		t.Fatal(err)
	}
	want, err := oldEncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("record %+v:\n got %s\nwant %s", r, got, want)
	}
	if j, err := json.Marshal(wireRecord{V: recordVersion, Record: r}); err == nil && compact(r) && string(j) != string(got) {
		t.Fatalf("record %+v:\n got %s\njson %s", r, got, j)
	}
	if plain(r) {
		if n := recordSize(&r); n < len(got) || n > len(got)+3*(maxTimeLen-len("2006-01-02T15:04:05Z")) {
			t.Fatalf("recordSize %d for an encoding of %d bytes: %s", n, len(got), got)
		}
	}
}

// compact reports whether r's raw JSON is as encoding/json would write it.
func compact(r Record) bool {
	for _, m := range []json.RawMessage{r.Result, r.Action} {
		if b, err := json.Marshal(m); err != nil || string(b) != string(m) && len(m) > 0 {
			return false
		}
	}
	return true
}

// plain reports whether none of r's strings needs escaping and its times have years
// of four digits: recordSize is then an upper bound.
func plain(r Record) bool {
	for _, s := range []string{string(r.State), r.ActionID, r.CapabilityID, r.InputSHA256, r.Owner, r.IdemKey,
		r.Decision, r.Approver, r.Reason, r.RunID, r.ApprovalSHA256, r.ApprovalDecision} {
		if len(appendString(nil, s)) != len(s)+2 {
			return false
		}
	}
	for _, t := range []time.Time{r.ExpiresAt, r.CreatedAt, r.UpdatedAt} {
		if y := t.Year(); !t.IsZero() && (y < 0 || y > 9999) {
			return false
		}
	}
	return true
}

// TestAppendStringSameBytes: appendString writes what it wrote before for every byte
// alone and within plain text, and for random strings.
func TestAppendStringSameBytes(t *testing.T) {
	for c := range 256 {
		for _, v := range []string{string(rune(c)), string([]byte{byte(c)}), "ab" + string([]byte{byte(c)}) + "cd"} {
			if got, want := appendString([]byte("x"), v), oldAppendString([]byte("x"), v); string(got) != string(want) {
				t.Fatalf("%q: got %s, want %s", v, got, want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		v := randString(rng)
		if got, want := appendString(nil, v), oldAppendString(nil, v); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", v, got, want)
		}
	}
}

// TestEncodeRecordSameBytes: on many random records (escaping, non-ASCII and invalid
// UTF-8 strings, extreme numbers, times in odd zones and years, raw JSON) the encoder
// writes byte for byte what it wrote before recordSize was made tight.
func TestEncodeRecordSameBytes(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range n {
		checkSameBytes(t, randRecord(rng))
	}
	for _, r := range benchRecords() {
		checkSameBytes(t, r)
	}
}

// FuzzEncodeRecord: the same check on records the fuzzer builds.
func FuzzEncodeRecord(f *testing.F) {
	f.Add("claimed", "a-1", "cap:hermes_agent:ep1:chat", "replica-1", "idem.ab", "run_1", 1, uint64(7), int64(0), int64(0), true, []byte(`{"x":1}`))
	f.Add("odd \"state\" <&>", "é\n", "", "\\owner\t", "", "", -1, uint64(1<<64-1), int64(1764547200), int64(123456789), false, []byte(nil))
	f.Fuzz(func(t *testing.T, state, id, capID, owner, idem, runID string, attempt int, pending uint64, sec, nsec int64, cancel bool, raw []byte) {
		var result json.RawMessage
		if json.Valid(raw) {
			result = raw
		}
		at := time.Unix(sec%(1<<40), nsec%1e9).UTC()
		checkSameBytes(t, Record{State: State(state), ActionID: id, CapabilityID: capID, Owner: owner, IdemKey: idem,
			RunID: runID, Attempt: attempt, ApprovalSeq: attempt, PendingSeq: pending, Cancel: cancel, Result: result,
			ExpiresAt: at, CreatedAt: at.In(time.FixedZone("z", int(sec%50000))), UpdatedAt: at})
	})
}
