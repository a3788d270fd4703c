package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
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

// section cuts the section of a Markdown document that starts with heading, up to the next
// heading of the same level; "" when there is none.
func section(doc, heading string) string {
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return ""
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	after, _, _ = strings.Cut(after, "\n"+level)
	return after
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(name)))
	noErr(t, err)
	return string(b)
}

// Every variable of the Config struct appears in `run --help`; deploy/README.md's
// Configuration reference carries the generated table as it is, and every row of the
// README's Configuration essentials is that table's row for its variable, word for word.
func TestEveryVariableDocumented(t *testing.T) {
	var help strings.Builder
	printRunHelp(&help)
	for _, f := range configFields() {
		if !strings.Contains(help.String(), f.Key) {
			t.Errorf("run --help does not list %s", f.Key)
		}
	}
	table := configTable()
	if ref := section(readRepoFile(t, "deploy/README.md"), "## Configuration reference"); !strings.Contains(ref, table) {
		t.Errorf("deploy/README.md's Configuration reference does not hold the table of testdata/configuration.md as it is; paste it there:\n%s", table)
	}
	rows := map[string]bool{}
	for _, l := range strings.Split(table, "\n") {
		rows[l] = true
	}
	essentials := section(readRepoFile(t, "README.md"), "## Configuration essentials")
	n := 0
	for _, l := range strings.Split(essentials, "\n") {
		if strings.HasPrefix(l, "| `") {
			n++
			if !rows[l] {
				t.Errorf("README.md Configuration essentials: the row\n%s\nis not the row of testdata/configuration.md for its variable", l)
			}
		}
	}
	if n < 10 {
		t.Errorf("README.md Configuration essentials has %d variable rows; want the essential ones (at least 10)", n)
	}
}

// Names that look like settings but are not Config's: resource names, examples, variables
// of other programs, and the OpenTelemetry SDK's own.
var notSettings = map[string]string{
	"HERMES_":                        "the start of HERMES_* (the variables run reads)",
	"NATS_":                          "the start of NATS_*",
	"OTEL_":                          "the start of OTEL_*",
	"HERMES_BRIDGE_":                 "the start of HERMES_BRIDGE_*_STREAM",
	"HERMES_BRIDGE_ACK_WIAT":         "the misspelling in the example of the unknown-variable warning",
	"HERMES_BRIDGE_PORT":             "a Kubernetes service link variable, which run warns about",
	"HERMES_BRIDGE_SERVICE_HOST":     "a Kubernetes service link variable, which run warns about",
	"HERMES_BRIDGE_UI_TEST":          "read by the dashboard's browser tests (e2e/browser)",
	"HERMES_BRIDGE_UI_ARTIFACTS":     "read by the dashboard's browser tests (e2e/browser)",
	"HERMES_BRIDGE_CRASH_AT":         "read by -tags faulthooks builds",
	"HERMES_RESEARCH_KEY":            "the example of an endpoint's api_key_env",
	"NATS_CONTEXT":                   "natscli's context variable",
	"OTEL_BSP_MAX_QUEUE_SIZE":        "read by the OpenTelemetry SDK itself",
	"OTEL_BSP_SCHEDULE_DELAY":        "read by the OpenTelemetry SDK itself",
	"OTEL_EXPORTER_OTLP_CERTIFICATE": "read by the OpenTelemetry SDK itself",
	"OTEL_EXPORTER_OTLP_COMPRESSION": "read by the OpenTelemetry SDK itself",
	"OTEL_EXPORTER_OTLP_TIMEOUT":     "read by the OpenTelemetry SDK itself",
}

// TestDocsNameRealVariables: every HERMES_*, NATS_* and OTEL_* name in the documents is a
// setting of Config (or a resource name among their defaults, or one of notSettings), so a
// misspelt or mangled variable name in the documentation fails.
func TestDocsNameRealVariables(t *testing.T) {
	known := map[string]bool{}
	for _, f := range configFields() {
		known[f.Key] = true
		known[f.Default] = true // stream, bucket and consumer names: HERMES_ACTIONS, ...
	}
	re := regexp.MustCompile(`\b(?:HERMES|NATS|OTEL)_[A-Z0-9_]*`)
	for _, doc := range []string{"README.md", "schemas/README.md", "deploy/README.md", "e2e/bench/README.md"} {
		for _, name := range re.FindAllString(readRepoFile(t, doc), -1) {
			if !known[name] && notSettings[name] == "" {
				t.Errorf("%s names %s, which is no setting of hermes-bridge (cmd/hermes-bridge/config.go)", doc, name)
			}
		}
	}
}
