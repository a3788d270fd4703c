package main

// deploy/helm/nats-values.yaml checked against the key paths of the official NATS Helm
// chart's values.yaml, kept in deploy/helm/testdata: a key the chart does not have is
// ignored by helm without a word, so a misspelt or outdated key would silently not apply.

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

var (
	helmDir = filepath.Join("..", "..", "deploy", "helm")
	// chartValues regenerates the key paths from a values.yaml of the chart, e.g.
	// go test ./cmd/hermes-bridge -run TestHelmValuesKeys -chart-values /tmp/values.yaml
	// (then update the version and commit in the file's header by hand).
	chartValues = flag.String("chart-values", "", "rewrite deploy/helm/testdata/nats-chart-keys.txt from this values.yaml of the NATS Helm chart")
)

// chartKeysFile holds one key path a line; a path ending in " {}" is a map the chart leaves
// to the user (its default is {}: merge, topologySpreadConstraints, env, ...), under which
// any key is valid. Lines starting with # are comments.
var chartKeysFile = filepath.Join(helmDir, "testdata", "nats-chart-keys.txt")

// yamlPaths walks a decoded YAML document and calls visit for every key path, with
// whether its value is an empty map. Lists are leaves.
func yamlPaths(v any, path []string, visit func(path []string, emptyMap bool)) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, child := range m {
		p := append(slices.Clone(path), k)
		cm, isMap := child.(map[string]any)
		visit(p, isMap && len(cm) == 0)
		yamlPaths(child, p, visit)
	}
}

func readYAML(t *testing.T, file string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(readText(t, file)), &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v
}

// TestHelmValuesKeys: every key of deploy/helm/nats-values.yaml is one the chart reads
// (or lies under a map the chart leaves to the user).
func TestHelmValuesKeys(t *testing.T) {
	if *chartValues != "" {
		header, _, _ := strings.Cut(readText(t, chartKeysFile), "\n\n")
		var lines []string
		yamlPaths(readYAML(t, *chartValues), nil, func(p []string, empty bool) {
			l := strings.Join(p, ".")
			if empty {
				l += " {}"
			}
			lines = append(lines, l)
		})
		slices.Sort(lines)
		noErr(t, os.WriteFile(chartKeysFile, []byte(header+"\n\n"+strings.Join(lines, "\n")+"\n"), 0o644))
	}
	keys, free := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(readText(t, chartKeysFile), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if p, ok := strings.CutSuffix(l, " {}"); ok {
			free[p] = true
			l = p
		}
		keys[l] = true
	}
	if len(keys) < 100 {
		t.Fatalf("%s holds %d key paths; want the chart's (several hundred)", chartKeysFile, len(keys))
	}
	values := filepath.Join(helmDir, "nats-values.yaml")
	n := 0
	yamlPaths(readYAML(t, values), nil, func(p []string, _ bool) {
		for i := 1; i < len(p); i++ {
			if free[strings.Join(p[:i], ".")] {
				return // under a map the chart leaves to the user
			}
		}
		n++
		if k := strings.Join(p, "."); !keys[k] {
			t.Errorf("%s: %s is not a key of the NATS chart's values.yaml (%s); helm would ignore it", values, k, chartKeysFile)
		}
	})
	if n == 0 {
		t.Fatalf("%s has no keys", values)
	}
}

func readText(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	noErr(t, err)
	return string(b)
}
