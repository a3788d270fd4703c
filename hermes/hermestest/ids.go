package hermestest

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
)

// randHex returns n lowercase hex characters.
func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)[:n]
}

// uuid4 returns a random RFC 4122 version 4 UUID string.
func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// prepareTools fills tool defaults (call id, python-style args, emoji, label).
func prepareTools(tools []Tool) []Tool {
	out := make([]Tool, len(tools))
	for i, t := range tools {
		if t.CallID == "" {
			t.CallID = "call_" + randHex(24)
		}
		v, _ := loads([]byte(t.Args)) // "" or not an object: {}
		args, ok := v.(obj)
		if !ok {
			args = obj{}
		}
		t.Args = string(dumps(args, true))
		t.Emoji = cmp.Or(t.Emoji, "\U0001F4BB")
		if t.Label == "" {
			t.Label = t.Name
			for _, m := range args {
				if s, ok := m.v.(string); ok {
					t.Label = s
					break
				}
			}
		}
		out[i] = t
	}
	return out
}

// argsObj returns the decoded (ordered) args of a prepared tool.
func argsObj(t Tool) any {
	v, err := loads([]byte(t.Args))
	if err != nil {
		return obj{}
	}
	return v
}
