package hermes

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestSSEReaderLinesLongerThanBuffer: lines longer than the reader's buffer, and line
// ends falling on its boundary, are read whole, however the body is split into reads.
func TestSSEReaderLinesLongerThanBuffer(t *testing.T) {
	long := strings.Repeat("x", 3*sseBufferSize+7)
	edge := strings.Repeat("y", sseBufferSize-len("data: ")-1) // "data: "+edge+"\r" fills the first buffer; "\n" comes next
	body := "data: " + edge + "\r\n\r\n" + "event: a\ndata: " + long + "\ndata: b\n\n" + "data: " + long
	want := []string{edge, long + "\nb", long}
	for name, r := range map[string]func() io.Reader{
		"whole":    func() io.Reader { return strings.NewReader(body) },
		"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) },
	} {
		t.Run(name, func(t *testing.T) {
			rd := newSSEReader(r(), 0, 0)
			for i, w := range want {
				f, err := rd.next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !bytes.Equal(f.data, []byte(w)) {
					t.Fatalf("frame %d: data of %d bytes, want %d", i, len(f.data), len(w))
				}
			}
			if _, err := rd.next(); err != io.EOF {
				t.Fatalf("after the last frame: %v, want io.EOF", err)
			}
		})
	}
}
