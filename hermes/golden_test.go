package hermes_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/hermes"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

type goldenEvent struct {
	Index    int             `json:"index"`
	Event    string          `json:"event"`
	ID       *string         `json:"id"`
	Name     string          `json:"name"`
	Kind     string          `json:"kind"`
	Text     string          `json:"text"`
	Terminal bool            `json:"terminal"`
	Data     json.RawMessage `json:"data"`
}

type golden struct {
	Operation string          `json:"operation"`
	Status    string          `json:"status"`
	Output    json.RawMessage `json:"output"`
	LastName  string          `json:"last_name"`
	Events    []goldenEvent   `json:"events"`
}

// TestGoldenTranscripts replays the SSE bodies captured from real Hermes servers (v0.16 and
// v0.19) through Client.Call and compares events and result with testdata/*.golden.json.
// The run-events transcript (41) is not one of the 21 operations; it is replayed as chat_stream
// because the reader and the terminal rules are route-independent.
func TestGoldenTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.sse")
	if err != nil || len(files) != 8 {
		t.Fatalf("want 8 transcripts, got %d (%v)", len(files), err)
	}
	ops := map[string]struct{ op, in, text string }{
		"11": {"chat_stream", `{"prompt":"Hello stream"}`, "stub reply: Hello stream"},
		"22": {"responses_stream", `{"input":"Hello responses stream"}`, "stub reply: Hello responses stream"},
		"32": {"session_chat_stream", `{"session_id":"s","message":"Hello session stream"}`, "stub reply: Hello session stream"},
		"41": {"chat_stream", `{"prompt":"Hello run"}`, "stub reply: Hello run"},
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			noErr(t, err)
			spec := ops[strings.SplitN(filepath.Base(f), "_", 3)[1]]
			srv := sseServer(t, string(body))
			res, evs, err := streamCall(t, newClient(t, srv.URL), spec.op, spec.in)
			noErr(t, err)
			if res.Status != "completed" || !res.Stream.Terminal || res.Stream.Truncated || res.Stream.Text != spec.text {
				t.Fatalf("result %+v %+v", res, res.Stream)
			}
			g := golden{Operation: spec.op, Status: res.Status, Output: res.Output, LastName: res.Stream.LastName}
			var text strings.Builder
			for _, ev := range evs {
				g.Events = append(g.Events, goldenEvent{ev.Index, ev.Event, ev.ID, ev.Name, ev.Kind, ev.Text, ev.Terminal, ev.Data})
				text.WriteString(ev.Text)
			}
			if text.String() != res.Stream.Text || len(evs) != res.Stream.EventCount || !evs[len(evs)-1].Terminal {
				t.Fatalf("events disagree with the summary")
			}
			got, err := json.MarshalIndent(g, "", "  ")
			noErr(t, err)
			got = append(got, '\n')
			checkGolden(t, strings.TrimSuffix(f, ".sse")+".golden.json", got, "TestGoldenTranscripts")
		})
	}
}

// checkGolden compares got with the golden file gf (written first with -update); test is
// the test to run with -update.
func checkGolden(t *testing.T, gf string, got []byte, test string) {
	t.Helper()
	if *update {
		noErr(t, os.WriteFile(gf, got, 0o644))
	}
	want, err := os.ReadFile(gf)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the golden file; run go test -run %s -update and review the diff\n%s", gf, test, got)
	}
}

// TestGoldenCRLF checks that the same transcripts give the same events with CRLF line endings.
func TestGoldenCRLF(t *testing.T) {
	body, err := os.ReadFile("testdata/v0.19_32_sessions_chat_stream.sse")
	noErr(t, err)
	var a, b []hermes.Event
	for i, raw := range []string{string(body), strings.ReplaceAll(string(body), "\n", "\r\n")} {
		_, evs, err := streamCall(t, newClient(t, sseServer(t, raw).URL), "session_chat_stream", `{"session_id":"s","message":"m"}`)
		noErr(t, err)
		if i == 0 {
			a = evs
		} else {
			b = evs
		}
	}
	if len(a) != len(b) || len(a) != 10 {
		t.Fatalf("%d vs %d events", len(a), len(b))
	}
	for i := range a {
		if string(a[i].Data) != string(b[i].Data) || a[i].Name != b[i].Name || a[i].Text != b[i].Text {
			t.Fatalf("event %d differs", i)
		}
	}
}
