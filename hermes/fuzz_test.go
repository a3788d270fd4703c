package hermes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/go-json-experiment/json/jsontext"
	"golang.org/x/net/http/httpguts"
)

func transcriptSeeds(f *testing.F) [][]byte {
	files, _ := filepath.Glob("testdata/*.sse")
	var out [][]byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

var validKinds = map[string]bool{KindData: true, KindProgress: true, KindTool: true, KindThought: true,
	KindPendingApproval: true, KindError: true, KindDone: true}

func FuzzSSEReader(f *testing.F) {
	for _, b := range transcriptSeeds(f) {
		f.Add(b, uint16(4096))
		f.Add(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")), uint16(3))
	}
	for _, s := range []string{
		"", "\n\n", ":\n\n", "data\n\n", "data:\ndata:\n\n", "event: done", "data: [DONE]",
		"id: 1\nretry: 5\nfoo: bar\n\n", "data: {\"choices\":[{\"delta\":{\"content\":1}}]}\n\n",
		"data: {\"choices\":\"x\",\"delta\":{},\"event\":5}\n\n", "data: {\"\\u0064elta\":\"esc\",\"t\\u0079pe\":\"x\"}\n\n", "data: \xff\n\n", "data: {\"a\":\n\n",
		chatFailBodyForFuzz,
	} {
		f.Add([]byte(s), uint16(2))
	}
	f.Fuzz(func(t *testing.T, data []byte, max uint16) {
		maxEvents := int(max%200) + 1
		var evs []Event
		var text strings.Builder
		sum, _, err := consumeStream(bytes.NewReader(data), 4096, 1<<16, maxEvents, func(ev Event) error {
			if name, txt := reference(ev, text.Len() == 0); name != ev.Name || txt != ev.Text {
				t.Fatalf("event %d: name %q text %q, reference gives %q %q (data %s)", ev.Index, ev.Name, ev.Text, name, txt, ev.Data)
			}
			evs = append(evs, ev)
			text.WriteString(ev.Text)
			return nil
		})
		var se *errSSE
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("unexpected error type %T %v", err, err)
		}
		if sum.EventCount != len(evs) || sum.EventCount > maxEvents {
			t.Fatalf("count %d events %d max %d", sum.EventCount, len(evs), maxEvents)
		}
		if sum.Text != text.String() {
			t.Fatalf("text %q is not the concatenation %q", sum.Text, text.String())
		}
		if sum.Truncated && (sum.Terminal || sum.EventCount != maxEvents) {
			t.Fatalf("truncated summary %+v", sum)
		}
		for i, ev := range evs {
			if ev.Index != i || !json.Valid(ev.Data) || !validKinds[ev.Kind] {
				t.Fatalf("event %d: %+v", i, ev)
			}
			if ev.Terminal && i != len(evs)-1 {
				t.Fatalf("event after a terminal event")
			}
			if ev.Terminal && ev.Kind != KindDone && ev.Kind != KindError {
				t.Fatalf("terminal event of kind %s", ev.Kind)
			}
			if ev.Kind == KindThought && ev.Text != "" {
				t.Fatalf("thought adds text")
			}
		}
		if sum.Terminal && (len(evs) == 0 || !evs[len(evs)-1].Terminal) {
			t.Fatalf("terminal without a terminal event")
		}
		if err == nil && !sum.Truncated && !sum.Terminal {
			for _, ev := range evs {
				if ev.Terminal {
					t.Fatalf("missed terminal")
				}
			}
		}
		if u := sum.Usage; u != nil && (u.InputTokens < 0 || u.OutputTokens < 0 || u.TotalTokens < 0 || (u.CostUSD != nil && !(*u.CostUSD >= 0))) {
			t.Fatalf("usage %+v", u)
		}
		status, e := streamOutcome("chat_stream", sum, false, maxEvents, 200)
		if (status == "failed") != (e != nil) {
			t.Fatalf("outcome %s %v", status, e)
		}
	})
}

const chatFailBodyForFuzz = "data: {\"choices\": [{\"delta\": {}, \"finish_reason\": \"error\"}]}\n\ndata: [DONE]\n\n"

func FuzzPrepare(f *testing.F) {
	seeds := []struct {
		op int
		in string
	}{
		{0, `{}`}, {6, `{"prompt":"hi","session_id":"s","session_key":"k"}`}, {7, `{"messages":[{"role":"user","content":"x"}],"max_events":5}`},
		{8, `{"body":{"input":"x","store":true},"session_key":"k"}`}, {9, `{"input":[{"role":"user","content":"a"}],"conversation_history":[{"role":"user","content":"b"}]}`},
		{10, `{"response_id":"resp_1"}`}, {11, `{"body":{"response_id":"a/b"}}`}, {12, `{"limit":500,"query":{"source":"api_server","offset":"3"}}`},
		{13, `{"body":{"id":"case","title":"t"}}`}, {14, `{"session_id":"s"}`}, {15, `{"session_id":"s","body":{"title":null}}`},
		{16, `{"session_id":"x y"}`}, {17, `{"session_id":"s"}`}, {18, `{"session_id":"s","body":{"id":"c"}}`},
		{19, `{"session_id":"s","prompt":"hi"}`}, {20, `{"session_id":"s","message":[{"type":"text","text":"a"}],"max_events":1}`},
		{6, `null`}, {12, `{"query":{"limit":1e3}}`}, {13, `{"id":"C:x"}`},
	}
	for _, s := range seeds {
		f.Add(uint8(s.op), []byte(s.in))
	}
	f.Add(uint8(21), []byte(`{"input":[{"role":"user","content":"x"}],"session_key":"k"}`))
	f.Add(uint8(22), []byte(`{"run_id":"run_1"}`))
	f.Add(uint8(23), []byte(`{"body":{"run_id":"a b"},"max_events":2}`))
	f.Add(uint8(24), []byte(`{"run_id":"r","choice":"allow","all":true}`))
	f.Add(uint8(25), []byte(`{"run_id":"r"}`))
	all := append(append([]Spec(nil), operations...), runOperations...)
	f.Fuzz(func(t *testing.T, opi uint8, raw []byte) {
		spec := all[int(opi)%len(all)]
		in, ok := decodeInput(raw)
		if !ok {
			return // not an input object: the decoder refuses it before Prepare
		}
		p, err := Prepare(Request{Operation: spec.Name, Input: in, IdempotencyKey: "k"})
		if err != nil {
			var ie *InputError
			var he *Error
			switch {
			case errors.As(err, &ie):
				if !errors.Is(err, ErrInvalidInput) || ie.Field == "" {
					t.Fatalf("bad input error %#v", ie)
				}
			case errors.As(err, &he):
				if he.Code != CodePayloadTooLarge || !he.NotStarted {
					t.Fatalf("unexpected %+v", he)
				}
			default:
				t.Fatalf("unexpected error %T %v", err, err)
			}
			return
		}
		if !strings.HasPrefix(p.Path, "/") || strings.ContainsAny(p.Path, "{} \t\r\n#") {
			t.Fatalf("bad path %q", p.Path)
		}
		for _, r := range p.Path {
			if r > unicode.MaxASCII || unicode.IsControl(r) {
				t.Fatalf("non-ASCII path %q", p.Path)
			}
		}
		path, query, _ := strings.Cut(p.Path, "?")
		for i, seg := range strings.Split(path, "/")[1:] {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("path segment %d of %q is empty or a dot segment", i, p.Path)
			}
			if u, err := url.PathUnescape(seg); err != nil || escapeSegment(u) != seg && !strings.Contains(spec.Path, seg) {
				t.Fatalf("path segment %q is not escaped (%v)", seg, err)
			}
		}
		if _, err := url.ParseQuery(query); err != nil || (spec.Name == "sessions_list") != (query != "") {
			t.Fatalf("query %q: %v", query, err)
		}
		for k, vs := range p.Header {
			for _, v := range vs {
				if !httpguts.ValidHeaderFieldName(k) || !validHeaderValue(v) {
					t.Fatalf("bad header %q: %q", k, v)
				}
			}
		}
		if (p.Body != nil) != (spec.Name != "run_stop" && (spec.Method == "POST" || spec.Method == "PATCH")) {
			t.Fatalf("%s body presence %v", spec.Name, p.Body != nil)
		}
		if p.Body != nil {
			if !jsontext.Value(p.Body).IsValid() {
				t.Fatalf("body is not valid JSON: %q", p.Body)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(p.Body, &m); err != nil || len(p.Body) > MaxRequestBody {
				t.Fatalf("body is not a JSON object: %v %s", err, p.Body)
			}
			if spec.Name == "chat" || spec.Name == "chat_stream" || spec.Name == "responses" || spec.Name == "responses_stream" {
				if string(m["stream"]) != strconv.FormatBool(spec.Stream) {
					t.Fatalf("stream not forced: %s", m["stream"])
				}
			}
			for _, k := range []string{"idempotency_key", "max_events", "session_key"} {
				if _, ok := m[k]; ok && spec.Name != "session_create" {
					if spec.Name == "responses" || spec.Name == "responses_stream" || spec.Name == "session_fork" || spec.Name == "run_start" {
						continue // a provider body given as input.body is forwarded as is
					}
					t.Fatalf("%s: control field %s reached the body", spec.Name, k)
				}
			}
		}
		if spec.Stream != (p.MaxEvents > 0) || p.MaxEvents > MaxMaxEvents {
			t.Fatalf("MaxEvents %d", p.MaxEvents)
		}
	})
}

// reference computes an event's name and text with encoding/json, to cross-check the
// allocation-free scanner. Case-sensitive member lookup, as the scanner does.
func reference(ev Event, textEmpty bool) (string, string) {
	var m map[string]any
	if json.Unmarshal(ev.Data, &m) != nil {
		m = nil
	}
	str := func(v any) (string, bool) { s, ok := v.(string); return s, ok }
	name := ev.Event
	if name == "" {
		if s, _ := str(m["event"]); s != "" {
			name = s
		} else if s, ok := str(m["type"]); ok {
			name = s
		}
	}
	if ev.Kind == KindThought {
		return name, ""
	}
	if ch, ok := m["choices"].([]any); ok && len(ch) > 0 {
		if c0, ok := ch[0].(map[string]any); ok {
			if d, ok := c0["delta"].(map[string]any); ok {
				if s, ok := str(d["content"]); ok {
					return name, s
				}
			}
		}
	}
	if s, ok := str(m["delta"]); ok {
		return name, s
	}
	if name == "response.output_text.delta" {
		if s, ok := str(m["text"]); ok {
			return name, s
		}
	}
	if textEmpty {
		if s, ok := str(m["content"]); ok {
			return name, s
		}
		if s, ok := str(m["output"]); ok {
			return name, s
		}
	}
	return name, ""
}

// FuzzRunEvents reads arbitrary bytes as a run-events stream: no panic, every event is a JSON
// object with a name and a known kind, Terminal is consistent with the name, nothing follows
// a terminal event, and every failure is a classified *Error. Each frame's data is also fed
// to ParseRunEvent, which must agree with the stream.
func FuzzRunEvents(f *testing.F) {
	for _, b := range transcriptSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte("data: {\"command\": \"rm\", \"pattern_keys\": [\"x\"], \"event\": \"approval.request\", \"choices\": [\"once\", \"deny\"]}\n\n"))
	f.Add([]byte("data: {\"event\": \"approval.responded\", \"choice\": \"once\", \"resolved\": 1e300}\n\n"))
	f.Add([]byte("data: {\"event\": \"tool.completed\", \"tool\": 1, \"duration\": \"x\", \"error\": true}\n\ndata: {\"event\": \"run.failed\", \"error\": \"e\"}\n\n"))
	f.Add([]byte("data: {\"event\": \"run.completed\", \"usage\": [1]}\n\n: stream closed\n\n"))
	f.Add([]byte(": keepalive\n\ndata: {\"event\": \"\"}\n\n"))
	f.Add([]byte("data: {\"event\": \"subagent.complete\", \"cost_usd\": 0.25}\n\ndata: {\"event\": \"run.completed\", \"usage\": {\"input_tokens\": 1, \"output_tokens\": 2}}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es := newRunEventStream(context.Background(), io.NopCloser(bytes.NewReader(b)), 4096, 1<<20)
		defer es.Close()
		terminal := false
		for i := 0; ; i++ {
			ev, err := es.Next()
			if err == io.EOF {
				if !terminal {
					t.Fatal("EOF without a terminal event")
				}
				return
			}
			if err != nil {
				var he *Error
				if !errors.As(err, &he) || (he.Code != CodeInvalidResponse && he.Code != CodeStreamIncomplete) {
					t.Fatalf("unexpected error %T %v", err, err)
				}
				if _, again := es.Next(); again != err {
					t.Fatal("error not sticky")
				}
				return
			}
			if terminal {
				t.Fatal("event after a terminal event")
			}
			terminal = ev.Terminal
			if ev.Name == "" || !validKinds[ev.Kind] || !json.Valid(ev.Data) || ev.Data[0] != '{' {
				t.Fatalf("bad event %+v", ev)
			}
			if ev.Terminal != (ev.Kind == KindDone || ev.Kind == KindError) {
				t.Fatalf("terminal %v with kind %s", ev.Terminal, ev.Kind)
			}
			if (ev.Approval != nil) != (ev.Name == "approval.request") || (ev.Usage != nil && ev.Name != "run.completed") ||
				(ev.CostUSD != nil && (ev.Name != "subagent.complete" || !(*ev.CostUSD >= 0))) || ev.Resolved < 0 {
				t.Fatalf("fields of %s: %+v", ev.Name, ev)
			}
			again, err := ParseRunEvent(ev.Data)
			if err != nil || again.Name != ev.Name || again.Kind != ev.Kind || again.Delta != ev.Delta || again.Output != ev.Output {
				t.Fatalf("ParseRunEvent disagrees: %+v %v", again, err)
			}
			if i > 100 {
				t.Fatal("more events than the limit")
			}
		}
	})
}

// FuzzParseUsage reads arbitrary bytes as a Hermes usage object: no panic; on valid JSON the
// result agrees with encoding/json (the last of repeated members, input_tokens or its chat
// spelling prompt_tokens, integers only, total derived only when absent), and a usage is
// never returned for an object without both counts.
func FuzzParseUsage(f *testing.F) {
	for _, s := range []string{
		`{"prompt_tokens": 580, "completion_tokens": 7, "total_tokens": 587}`,
		`{"input_tokens": 3, "output_tokens": 4, "cost_usd": 1e-3}`, `{"input_tokens": 3}`,
		`{"input_tokens": 1.0, "output_tokens": 4}`, `{"input_tokens": 9007199254740993, "output_tokens": 0}`,
		`{"input_tokens": 3, "output_tokens": 4, "cost_usd": -1}`, `[]`, `{"input_tokens":1,"output_tokens":2,"input_tokens":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u := ParseUsage(b)
		if u == nil {
			return
		}
		if u.InputTokens < 0 || u.OutputTokens < 0 || u.TotalTokens < 0 || (u.CostUSD != nil && !(*u.CostUSD >= 0)) {
			t.Fatalf("negative usage %+v", u)
		}
		if !json.Valid(b) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var m map[string]any
		if dec.Decode(&m) != nil {
			t.Fatalf("usage from a non-object %s", b)
		}
		count := func(keys ...string) (int64, bool) {
			var last any
			var seen bool
			for _, k := range keys { // the member written last wins; both spellings are rare
				if v, ok := m[k]; ok {
					last, seen = v, true
				}
			}
			n, ok := last.(json.Number)
			if !seen || !ok {
				return 0, false
			}
			i, err := n.Int64()
			return i, err == nil
		}
		in, okIn := count("input_tokens", "prompt_tokens")
		out, okOut := count("output_tokens", "completion_tokens")
		if !okIn || !okOut {
			t.Fatalf("usage %+v from %s without both counts", u, b)
		}
		_, hasIn := m["input_tokens"]
		_, hasPrompt := m["prompt_tokens"]
		if !(hasIn && hasPrompt) && u.InputTokens != in {
			t.Fatalf("input %d, encoding/json %d (%s)", u.InputTokens, in, b)
		}
		_, hasOut := m["output_tokens"]
		_, hasCompl := m["completion_tokens"]
		if !(hasOut && hasCompl) && u.OutputTokens != out {
			t.Fatalf("output %d, encoding/json %d (%s)", u.OutputTokens, out, b)
		}
		if tot, ok := count("total_tokens"); ok && tot >= 0 && tot <= 1<<53 && u.TotalTokens != tot {
			t.Fatalf("total %d, encoding/json %d (%s)", u.TotalTokens, tot, b)
		}
		if _, has := m["total_tokens"]; !has && u.TotalTokens != u.InputTokens+u.OutputTokens {
			t.Fatalf("derived total %d (%s)", u.TotalTokens, b)
		}
		if u.CostUSD != nil {
			n, ok := m["cost_usd"].(json.Number)
			f, err := n.Float64()
			if !ok || err != nil || f != *u.CostUSD {
				t.Fatalf("cost %v, encoding/json %v (%s)", *u.CostUSD, m["cost_usd"], b)
			}
		}
	})
}
