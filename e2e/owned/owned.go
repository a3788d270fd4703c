// Package owned counts the goroutines that belong to a part of a process, for the
// bench and the tests that measure what each part costs. A part runs under a pprof
// label (pprof.Do); goroutines inherit the labels of the goroutine that starts them,
// so everything the part starts, down to its HTTP transports' connection goroutines,
// carries the label.
package owned

import (
	"bytes"
	"runtime/pprof"
	"strconv"
	"strings"
)

// Goroutines returns how many goroutines alive now carry the pprof label key=value.
func Goroutines(key, value string) (int, error) {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return 0, err
	}
	// Records are "<count> @ <pcs>", then "# labels: {...}" when the stack has labels.
	want := strconv.Quote(key) + ":" + strconv.Quote(value)
	n, count := 0, 0
	for line := range strings.SplitSeq(b.String(), "\n") {
		if c, _, ok := strings.Cut(line, " @ "); ok {
			count, _ = strconv.Atoi(c)
		} else if strings.HasPrefix(line, "# labels: ") && strings.Contains(line, want) {
			n += count
		}
	}
	return n, nil
}
