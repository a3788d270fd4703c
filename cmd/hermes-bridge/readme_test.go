package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/configuration.md from the Config struct tags")

// configTable renders the README "Configuration" table from the Config struct tags,
// the single source of names, defaults and meanings.
func configTable() string {
	var b strings.Builder
	b.WriteString("| Variable | Default | Meaning |\n|---|---|---|\n")
	for _, f := range configFields() {
		def := "—"
		if f.Default != "" {
			def = "`" + f.Default + "`"
		}
		// Escape what Markdown would read as a table cell end or an HTML tag.
		desc := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(f.Desc)
		if f.Secret {
			desc += " (secret: never logged)"
		}
		b.WriteString("| `" + f.Key + "` | " + def + " | " + desc + " |\n")
	}
	return b.String()
}

// The generated table is checked in (testdata/configuration.md) and is what the
// README's Configuration section carries: `go test -run TestConfigTable -update`
// regenerates it after a change to the struct tags.
func TestConfigTable(t *testing.T) {
	golden := filepath.Join("testdata", "configuration.md")
	got := configTable()
	if *update {
		noErr(t, os.MkdirAll("testdata", 0o755))
		noErr(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestConfigTable -update)", err)
	}
	if string(want) != got {
		t.Fatalf("%s is stale; run: go test ./cmd/hermes-bridge -run TestConfigTable -update\ngot:\n%s", golden, got)
	}
}

// Every variable of the Config struct appears in the README's Configuration
// section (once the README has one) and in `run --help`.
func TestEveryVariableDocumented(t *testing.T) {
	var help strings.Builder
	printRunHelp(&help)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	var section string
	if err == nil {
		if _, after, ok := strings.Cut(string(readme), "\n## Configuration"); ok {
			section, _, _ = strings.Cut(after, "\n## ")
		}
	}
	for _, f := range configFields() {
		if !strings.Contains(help.String(), f.Key) {
			t.Errorf("run --help does not list %s", f.Key)
		}
		if section != "" && !strings.Contains(section, "`"+f.Key+"`") {
			t.Errorf("README.md Configuration section does not list `%s`", f.Key)
		}
	}
	if section == "" {
		t.Log("README.md has no Configuration section yet; checked run --help only")
	}
}
