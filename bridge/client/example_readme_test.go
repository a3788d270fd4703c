package client_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeShowsTheExample: the Go block of the README's "Publishing from Go" section is
// a part of ExampleClient, line for line (indentation aside), so the README cannot show
// code that does not run.
func TestReadmeShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Publishing from Go\n")
	if !ok {
		t.Fatal(`README.md has no "Publishing from Go" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the section has no Go block")
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	trim := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			out = append(out, strings.TrimSpace(l))
		}
		return strings.Join(out, "\n")
	}
	if !strings.Contains(trim(string(example)), strings.TrimSpace(trim(m[1]))) {
		t.Errorf("the README's Go block is not a part of ExampleClient in bridge/client/example_test.go:\n%s", m[1])
	}
}
