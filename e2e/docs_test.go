package e2e_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/hermes-bridge/hermes-bridge/bridge"
)

// docFiles are the documents whose links, anchors and operation counts the tests keep true,
// relative to the repository root.
var docFiles = []string{"README.md", "schemas/README.md", "deploy/README.md", "e2e/bench/README.md"}

// fenceRE matches a fenced code block's opening or closing line (indented inside a list too).
var fenceRE = regexp.MustCompile("^\\s*```")

// proseLines returns the lines of a Markdown document outside fenced code blocks, with
// inline code spans blanked out (a link or a heading inside code is not one).
func proseLines(doc string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(doc, "\n") {
		if fenceRE.MatchString(l) {
			in = !in
			out = append(out, "")
			continue
		}
		if in {
			out = append(out, "")
			continue
		}
		out = append(out, codeSpanRE.ReplaceAllString(l, "``"))
	}
	return out
}

var codeSpanRE = regexp.MustCompile("`[^`]*`")

// headingAnchors returns the anchors GitHub gives the headings of doc: the heading text
// lowercased, code marks and punctuation dropped (letters, digits, '-' and '_' kept),
// spaces as '-', and "-1", "-2", ... after a repeated one.
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	in := false
	for _, l := range strings.Split(doc, "\n") {
		if fenceRE.MatchString(l) {
			in = !in
			continue
		}
		m := headingRE.FindStringSubmatch(l)
		if in || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

var (
	headingRE = regexp.MustCompile(`^#{1,6} (.+)$`)
	// linkRE matches an inline link or image: [text](target) or ![alt](target).
	linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
)

func readDoc(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	requireOK(t, err)
	return string(b)
}

// TestDocsLinks: every relative link of the documents names a file or directory of the
// repository, and every anchor a heading of the document it points into.
func TestDocsLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	requireOK(t, err)
	n := 0
	for _, name := range docFiles {
		doc := readDoc(t, root, name)
		for i, l := range proseLines(doc) {
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				n++
				where := name + ":" + strconv.Itoa(i+1)
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(root, name)
				if path != "" {
					file = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if rel, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(rel, "..") {
						t.Errorf("%s: link %s leaves the repository", where, target)
						continue
					}
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s: link %s: no such file or directory", where, target)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s: link %s: an anchor into a file that is not Markdown", where, target)
					continue
				}
				b, err := os.ReadFile(file)
				requireOK(t, err)
				if !headingAnchors(string(b))[anchor] {
					t.Errorf("%s: link %s: %s has no heading with the anchor #%s", where, target, filepath.Base(file), anchor)
				}
			}
		}
	}
	if n < 50 {
		t.Errorf("found %d relative links in %v; the documents link much more than that, so the parsing is broken", n, docFiles)
	}
}

// countRE matches a count of operations written in digits ("27 operations").
var countRE = regexp.MustCompile(`\b(\d+) operations\b`)

// opNameRE matches an operation name in code marks.
var opNameRE = regexp.MustCompile("`([a-z_]+)`")

// TestDocsOperationCounts: a count of operations in the documents is the number the
// bridge serves (bridge.Operations, what `hermes-bridge call --help` lists), the README's
// list names each of them once, and every list of the operations that need an idempotency
// key names exactly those whose Spec requires one.
func TestDocsOperationCounts(t *testing.T) {
	root, err := filepath.Abs("..")
	requireOK(t, err)
	ops := bridge.Operations()
	var all, keyed []string
	for _, s := range ops {
		all = append(all, s.Name)
		if s.KeyRequired {
			keyed = append(keyed, s.Name)
		}
	}
	slices.Sort(all)
	slices.Sort(keyed)
	namesIn := func(s string) []string {
		var names []string
		for _, m := range opNameRE.FindAllStringSubmatch(s, -1) {
			if _, ok := bridge.LookupOperation(m[1]); ok && !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
		slices.Sort(names)
		return names
	}
	counts := 0
	for _, name := range docFiles {
		doc := readDoc(t, root, name)
		for _, m := range countRE.FindAllStringSubmatch(doc, -1) {
			counts++
			if n, _ := strconv.Atoi(m[1]); n != len(ops) {
				t.Errorf("%s says %q; the bridge serves %d operations (bridge.Operations)", name, m[0], len(ops))
			}
		}
		// Every place that lists the operations an idempotency key is required for.
		for _, para := range strings.Split(doc, "\n\n") {
			for _, l := range strings.Split(para, "\n") {
				if strings.HasPrefix(l, "| `idempotency_key` |") || strings.Contains(l, "`call --key`") {
					if got := namesIn(para); !slices.Equal(got, keyed) {
						t.Errorf("%s lists %v as the operations that need an idempotency key; the code: %v\n%s", name, got, keyed, para)
					}
				}
			}
		}
	}
	if counts == 0 {
		t.Error("no document counts the operations; the README's wire contract should")
	}

	// The README's list of operations names each one.
	readme := readDoc(t, root, "README.md")
	_, list, ok := strings.Cut(readme, "operations** (")
	if !ok {
		t.Fatal("README.md has no list of the operations (**N operations** (...))")
	}
	list, _, _ = strings.Cut(list, "\n\n###")
	if got := namesIn(list); !slices.Equal(got, all) {
		t.Errorf("README.md lists the operations %v; the bridge serves %v", got, all)
	}

	// schemas/README.md's table: one row per operation, in the code's order, with its
	// method and route, whether it streams, is retry-safe and needs a key.
	schemasDoc := readDoc(t, root, "schemas/README.md")
	var rows [][]string
	for _, l := range strings.Split(schemasDoc, "\n") {
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) == 5 && strings.HasPrefix(l, "| `") {
			rows = append(rows, cells)
		}
	}
	if len(rows) != len(ops) {
		t.Fatalf("schemas/README.md's operations table has %d rows, the bridge serves %d operations", len(rows), len(ops))
	}
	yes := func(b bool, y, n string) string {
		if b {
			return y
		}
		return n
	}
	for i, s := range ops {
		r := rows[i]
		if want := "`" + s.Name + "`"; r[0] != want {
			t.Errorf("row %d of the operations table is %s, want %s", i+1, r[0], want)
			continue
		}
		if want := "`" + s.Method + " " + s.Path; s.Name != bridge.RunOperation && !strings.HasPrefix(r[1], want) {
			t.Errorf("%s: Hermes request %q, want %s`", s.Name, r[1], want)
		}
		if got, want := r[2], yes(s.Stream, "yes", ""); got != want {
			t.Errorf("%s: streams %q, want %q", s.Name, got, want)
		}
		if got, want := r[3], yes(s.Safe, "yes", "no"); got != want {
			t.Errorf("%s: retry-safe %q, want %q", s.Name, got, want)
		}
		if got, want := r[4], yes(s.KeyRequired, "**required**", "optional"); !strings.HasPrefix(got, want) {
			t.Errorf("%s: idempotency key %q, want %q", s.Name, got, want)
		}
	}
}
