package bridge

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// TestDecodeActionCoversTheActionSchema is the premise of validateAction: for an action
// whose members are among shortMembers, events.DecodeAction accepting it means that
// action.schema.json's own rules (without $defs) accept it, so checking its input alone
// answers as checking the whole action does. The rules of those members are pinned here:
// a change to them fails this test until DecodeAction is seen to check the new rule.
func TestDecodeActionCoversTheActionSchema(t *testing.T) {
	b, err := fs.ReadFile(schemas.FS(), schemas.ActionSchema)
	noErr(t, err)
	var doc map[string]any
	noErr(t, json.Unmarshal(b, &doc))
	if keys := slices.Sorted(maps.Keys(doc)); !slices.Equal(keys, []string{"$defs", "$id", "$schema", "additionalProperties",
		"description", "properties", "title", "type", "x-defs"}) || doc["type"] != "object" || doc["additionalProperties"] != false {
		t.Fatalf("action.schema.json's top level changed (%v): check that events.DecodeAction checks the new rules, then update this test", keys)
	}
	props := doc["properties"].(map[string]any)
	want := map[string]string{
		"input":           `{"type":["object","null"]}`,
		"idempotency_key": `{"maxLength":1024,"minLength":1,"pattern":"^[^\\x00-\\x1f\\x7f]*$","type":["string","null"]}`,
		"tenant_id":       `{"maxLength":256,"pattern":"^[^\\x00-\\x1f\\x7f]*$","type":["string","null"]}`,
	}
	for _, k := range shortMembers {
		p := maps.Clone(props[k].(map[string]any))
		delete(p, "description")
		if got, _ := json.Marshal(p); string(got) != want[k] {
			t.Fatalf("action.schema.json's rules of %s changed: %s, were %s: check that events.DecodeAction checks them, then update this test", k, got, want[k])
		}
	}

	rng := rand.New(rand.NewPCG(25, 7))
	texts := []string{"", "k", "k-c-1", "é", "😀", "a\x00b", "a\x1fb", "a\x7fb", "a\u0085b", "a\u2028b", "tab\tx", " ", "\\", `"`,
		strings.Repeat("k", 256), strings.Repeat("é", 257), strings.Repeat("k", 1024), strings.Repeat("😀", 1025)}
	inputs := []string{``, `null`, `{}`, `{"prompt":"bench c-1"}`, `{"prompt":" "}`, `{"query":"q","prompt":"p"}`,
		`{"messages":[{"role":"user","content":"hi"}]}`, `{"messages":[]}`, `{"prompt":1}`, `[]`, `"x"`}
	checked := 0
	for range 3000 {
		var members []string
		if in := inputs[rng.IntN(len(inputs))]; in != "" {
			members = append(members, `"input":`+in)
		}
		for _, k := range []string{"idempotency_key", "tenant_id"} {
			switch rng.IntN(4) {
			case 0:
				members = append(members, fmt.Sprintf("%q:null", k))
			case 1, 2:
				s, _ := json.Marshal(texts[rng.IntN(len(texts))] + texts[rng.IntN(len(texts))])
				members = append(members, fmt.Sprintf("%q:%s", k, s))
			}
		}
		rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		data := "{" + strings.Join(members, ",") + "}"
		act, err := events.DecodeAction([]byte(data))
		if err != nil {
			continue
		}
		for _, op := range []string{"chat", "responses", "session_chat"} {
			whole, short := schemas.ValidateActionValue(op, act.Data), validateAction(op, act)
			if !reflect.DeepEqual(whole, short) {
				t.Fatalf("%s %s: the whole action gives %v, validateAction %v", op, data, whole, short)
			}
			checked++
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d actions checked", checked)
	}
}
