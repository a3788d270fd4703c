package bridge

import (
	"encoding/json"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// TestRunCost: a run's cost is the sum of its subagents' cost_usd, set on run.completed's
// usage only when every event was read from the first; a cost in the usage itself is kept,
// and a run without subagent costs has tokens only.
func TestRunCost(t *testing.T) {
	parse := func(s string) hermes.RunEvent {
		t.Helper()
		ev, err := hermes.ParseRunEvent([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	sub := func(c string) string {
		return `{"event":"subagent.complete","run_id":"r","timestamp":1,"subagent_id":"sa","cost_usd":` + c + `}`
	}
	done := `{"event":"run.completed","run_id":"r","timestamp":2,"output":"x","usage":{"input_tokens":812,"output_tokens":40,"total_tokens":852}}`
	doneCost := `{"event":"run.completed","run_id":"r","timestamp":2,"output":"x","usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3,"cost_usd":2.5}}`
	for _, tc := range []struct {
		name  string
		whole bool
		evs   []string
		want  string
	}{
		{"summed", true, []string{sub("0.25"), `{"event":"subagent.start","run_id":"r","timestamp":1}`, sub("0.5"), done},
			`{"input_tokens":812,"output_tokens":40,"total_tokens":852,"cost_usd":0.75}`},
		{"taken over", false, []string{sub("0.5"), done}, `{"input_tokens":812,"output_tokens":40,"total_tokens":852}`},
		{"no subagent", true, []string{done}, `{"input_tokens":812,"output_tokens":40,"total_tokens":852}`},
		{"unreadable cost", true, []string{sub(`"x"`), done}, `{"input_tokens":812,"output_tokens":40,"total_tokens":852}`},
		{"zero cost", true, []string{sub("0"), done}, `{"input_tokens":812,"output_tokens":40,"total_tokens":852,"cost_usd":0}`},
		{"hermes's own cost", true, []string{sub("0.5"), doneCost}, `{"input_tokens":1,"output_tokens":2,"total_tokens":3,"cost_usd":2.5}`},
	} {
		c := runCost{whole: tc.whole}
		var last hermes.RunEvent
		for _, s := range tc.evs {
			last = parse(s)
			c.observe(&last)
		}
		if got, _ := json.Marshal(last.Usage); string(got) != tc.want {
			t.Errorf("%s: usage %s, want %s", tc.name, got, tc.want)
		}
	}
}
