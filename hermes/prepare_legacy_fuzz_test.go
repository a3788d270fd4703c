package hermes

import (
	"bytes"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"testing"
)

// FuzzPrepareLegacy is a differential test of Prepare against its copy from before the
// allocation work (prepare_legacy_test.go): for any operation, input, idempotency key and
// extra header, the same error (type and contents) or the same Prepared (spec, method,
// path, headers, body bytes and max events). Seeds: the cases of prepare_test.go and FuzzPrepare.
func FuzzPrepareLegacy(f *testing.F) {
	all := append(append([]Spec(nil), operations...), runOperations...)
	index := map[string]uint8{}
	for i, s := range all {
		index[s.Name] = uint8(i)
	}
	for _, name := range []string{"prepare_test.go", "fuzz_test.go"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, m := range regexp.MustCompile("op: \"([a-z_]+)\", in: `([^`]*)`").FindAllStringSubmatch(string(b), -1) {
			f.Add(index[m[1]], []byte(m[2]), "k", "traceparent", "00-1")
		}
		for _, m := range regexp.MustCompile("\\{([0-9]+), `([^`]*)`\\}").FindAllStringSubmatch(string(b), -1) {
			var op uint8
			for _, c := range m[1] {
				op = op*10 + uint8(c-'0')
			}
			f.Add(op, []byte(m[2]), "k", "X-Trace", "v")
		}
	}
	for _, s := range []string{`{"prompt":"bench c-1"}`, `{"prompt":"a\"b\\c\u2028<>&\u00e9"}`, "{\"prompt\":\"\xff\"}", `{"prompt":" "}`,
		`{"prompt":"x","prompt":"y"}`, `{"prompt":"x","model":null}`, `{"prompt":"x","messages":null,"query":null}`, ` { "prompt" : "x" , "a" : [ 1 , 2 ] } `,
		`{"messages":[{"role":"user","content":"x"}],"stream":"yes","model":"m"}`, `{"prompt":"x","session_id":"s\u0000"}`, `{"prompt":1}`,
		`{"prompt":"x","\u0073tream":true}`, `{"prompt":"x"} `, `{"prompt":"x"}x`, `{}`, `null`, ``, `[]`, `{"input":"bench r-1","model":"hermes-agent"}`} {
		for _, op := range []string{"chat", "chat_stream", "responses", "session_chat", "run_start"} {
			f.Add(index[op], []byte(s), "k-c-1", "traceparent", "00-1")
		}
	}
	f.Add(index["chat"], []byte(`{"prompt":"x"}`), "", "", "")
	f.Add(index["chat"], []byte(`{"prompt":"x"}`), "bad\nkey", "Accept", "x")
	f.Add(index["chat"], []byte(`{"prompt":"x"}`), "k", "bad name", "x")
	f.Add(index["chat"], []byte(`{"prompt":"x"}`), "k", "x-custom", "bad\x00value")
	f.Fuzz(func(t *testing.T, opi uint8, in []byte, key, hname, hval string) {
		req := Request{Operation: all[int(opi)%len(all)].Name, Input: in, IdempotencyKey: key}
		if hname != "" {
			req.Header = http.Header{hname: {hval}}
		}
		got, gerr := Prepare(req)
		want, werr := legacyPrepare(req)
		if !reflect.DeepEqual(gerr, werr) {
			t.Fatalf("%s %q: error %#v, legacy %#v", req.Operation, in, gerr, werr)
		}
		if gerr != nil {
			return
		}
		if got.Spec != want.Spec || got.Method != want.Method || got.Path != want.Path || got.MaxEvents != want.MaxEvents ||
			!reflect.DeepEqual(got.Header, want.Header) || !bytes.Equal(got.Body, want.Body) || (got.Body == nil) != (want.Body == nil) {
			t.Fatalf("%s %q:\n got %+v body %q\nwant %+v body %q", req.Operation, in, got, got.Body, want, want.Body)
		}
	})
}
