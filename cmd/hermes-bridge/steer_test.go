package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// TestSteerCommand: steer sends {"text"} (from the argument, or stdin with -) on
// hermes.steer.<id> and exits 0 when accepted, 1 with the code and reason when refused,
// 2 when nobody answers; the text is never printed back.
func TestSteerCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	s := natsembed.RunTest(t)
	nc, _ := natsembed.Connect(t, s)
	env := map[string]string{"NATS_URL": s.ClientURL()}
	ctx := context.Background()

	code, out, errOut := runMain(ctx, env, "", "steer", "act-1", "focus")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "no bridge answered on hermes.steer.act-1") {
		t.Fatalf("no responders: exit %d\n%s\n%s", code, out, errOut)
	}

	var mu sync.Mutex
	got := map[string]string{}
	sub, err := nc.Subscribe("hermes.steer.*", func(m *nats.Msg) {
		id := strings.TrimPrefix(m.Subject, "hermes.steer.")
		req, err := events.DecodeSteer(m.Data)
		if err != nil {
			t.Errorf("request %q: %v", m.Data, err)
			return
		}
		mu.Lock()
		got[id] = req.Text
		mu.Unlock()
		r := events.SteerReply{ActionID: id, State: events.SteerAccepted}
		switch id {
		case "act-r":
			r = events.SteerReply{ActionID: id, State: events.SteerRefused, Code: events.SteerNotRunning, Reason: "the run is waiting for a tool approval"}
		case "act-x":
			r.State = "confused"
		}
		b, _ := json.Marshal(r)
		m.Respond(b)
	})
	noErr(t, err)
	defer sub.Unsubscribe()
	nc.Flush()
	for _, tt := range []struct {
		id, text, stdin, want string
		code                  int
		stderr                string
	}{
		{"act-a", "focus on tests", "", "focus on tests", exitOK, ""},
		{"act-s", "-", "use staging\nplease\n", "use staging\nplease", exitOK, ""},
		{"act-r", "hurry", "", "hurry", exitFailed, "refused: not_running: the run is waiting for a tool approval"},
		{"act-x", "secret words", "", "secret words", exitUsage, "unexpected reply state"},
	} {
		code, out, errOut := runMain(ctx, env, tt.stdin, "steer", tt.id, tt.text)
		mu.Lock()
		sent := got[tt.id]
		mu.Unlock()
		if code != tt.code || sent != tt.want || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("steer %s: exit %d sent %q stderr %q, want %d %q %q", tt.id, code, sent, errOut, tt.code, tt.want, tt.stderr)
		}
		if tt.code == exitOK && !strings.HasPrefix(out, "accepted") {
			t.Errorf("steer %s: out %q", tt.id, out)
		}
		if strings.Contains(out+errOut, tt.want) {
			t.Errorf("steer %s: the text is printed back: %q %q", tt.id, out, errOut)
		}
	}
}
