package bridge

// The Grafana dashboard (deploy/grafana/hermes-bridge.json) and the ServiceMonitor
// (deploy/kubernetes/servicemonitor.yaml) checked against the metrics newMetrics
// registers: names, types and labels. The rest of deploy/kubernetes is checked in
// cmd/hermes-bridge/kubernetes_test.go.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
)

// metricInfo is what a registered metric is named and labelled.
type metricInfo struct {
	histogram bool
	labels    []string // variable and constant labels
}

// recordingRegisterer records the collectors registered on it.
type recordingRegisterer struct{ cs []prometheus.Collector }

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.cs = append(r.cs, c)
	return nil
}
func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recordingRegisterer) Unregister(prometheus.Collector) bool    { return false }

var (
	descNameRE   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descConstRE  = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	descVarRE    = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	constLabelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)=`)
)

// bridgeMetrics returns every metric newMetrics registers (one endpoint configured),
// read from the collectors' descriptions: names and labels, whether a series exists yet
// or not.
func bridgeMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	rec := &recordingRegisterer{}
	eps := map[string]*endpoint{"primary": {brk: newBreaker(5, time.Second, time.Minute)}}
	if _, err := newMetrics(rec, eps); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricInfo{}
	for _, c := range rec.cs {
		_, hist := c.(*prometheus.HistogramVec)
		if _, ok := c.(prometheus.Histogram); ok {
			hist = true
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			m := descNameRE.FindStringSubmatch(s)
			if m == nil {
				t.Fatalf("cannot read a metric name from %s", s)
			}
			info := metricInfo{histogram: hist}
			if v := descVarRE.FindStringSubmatch(s); v != nil && v[1] != "" {
				for _, l := range strings.Split(v[1], ",") {
					info.labels = append(info.labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
				}
			}
			if cl := descConstRE.FindStringSubmatch(s); cl != nil {
				for _, l := range constLabelRE.FindAllStringSubmatch(cl[1], -1) {
					info.labels = append(info.labels, l[1])
				}
			}
			out[m[1]] = info
		}
	}
	if len(out) < 10 {
		t.Fatalf("read only %d metrics from newMetrics: %v", len(out), out)
	}
	return out
}

// targetLabels are the labels Prometheus (with the Prometheus Operator) puts on every
// scraped series.
var targetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// dashboardExceptions are bridge metrics the dashboard deliberately does not show.
var dashboardExceptions = []string{}

type grafanaPanel struct {
	ID         *int
	Type       string
	Title      string
	Datasource *struct{ Type, UID string }
	Targets    []struct {
		Expr       string
		Datasource *struct{ Type, UID string }
	}
	Panels []grafanaPanel // of a collapsed row
}

var (
	metricNameRE = regexp.MustCompile(`\b(hermes_bridge_[a-z_]+|go_[a-z_]+|process_[a-z_]+|up)\b`)
	selectorRE   = regexp.MustCompile(`\b([a-z_][a-z0-9_]*)\{([^}]*)\}`)
	matcherRE    = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"`)
	groupingRE   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// seriesName strips a histogram's series suffix; it reports whether there was one.
func seriesName(name string) (string, bool) {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok {
			return base, true
		}
	}
	return name, false
}

// The dashboard parses, every panel has a unique id and the datasource variable, every
// metric it queries is one the bridge (or its Go and process collectors) exports, with
// the labels the query uses, and every bridge metric is shown.
func TestDashboardMatchesMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "hermes-bridge.json"))
	noErr(t, err)
	var dash struct {
		UID           string
		Title         string
		SchemaVersion int
		Panels        []grafanaPanel
		Templating    struct {
			List []struct {
				Name, Type string
				Query      any
				Datasource *struct{ Type, UID string }
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/hermes-bridge.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" || dash.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and schemaVersion 36 or later", dash.UID, dash.Title, dash.SchemaVersion)
	}

	var exprs []string // every PromQL expression: targets and template queries
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			if v.Type != "datasource" || v.Query != "prometheus" {
				t.Errorf("variable datasource: type %q query %v, want a prometheus datasource variable", v.Type, v.Query)
			}
		default:
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
				t.Errorf("variable %s does not use the datasource variable", v.Name)
			}
			if q, ok := v.Query.(map[string]any); ok {
				s, _ := q["query"].(string)
				exprs = append(exprs, s)
			}
		}
	}
	for _, name := range []string{"datasource", "job", "endpoint"} {
		if !vars[name] {
			t.Errorf("the dashboard has no %s variable", name)
		}
	}

	var all []grafanaPanel
	for _, p := range dash.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	ids := map[int]string{}
	for _, p := range all {
		switch {
		case p.ID == nil:
			t.Errorf("panel %q has no id", p.Title)
		case ids[*p.ID] != "":
			t.Errorf("panels %q and %q share id %d", ids[*p.ID], p.Title, *p.ID)
		default:
			ids[*p.ID] = p.Title
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query names datasource %q, not the datasource variable", p.Title, tg.Datasource.UID)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}

	metrics, runtime := bridgeMetrics(t), runtimeMetrics(t)
	shown := map[string]bool{}
	for _, expr := range exprs {
		for _, m := range checkExpr(t, expr, metrics, runtime) {
			shown[m] = true
		}
	}
	var missing []string
	for name := range metrics {
		if !shown[name] && !slices.Contains(dashboardExceptions, name) {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard shows no panel for %v (add one, or list it in dashboardExceptions with the reason)", missing)
	}
}

// runtimeMetrics returns the names /metrics has besides the bridge's: the Go and process
// collectors of opshttp.NewRegistry, and up (set by Prometheus).
func runtimeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{"up": true}
	families, err := opshttp.NewRegistry().Gather()
	noErr(t, err)
	for _, f := range families {
		out[f.GetName()] = true
	}
	return out
}

// checkExpr checks a PromQL expression against the metrics: every name is exported (a
// histogram only through its series), every label a selector matches or the query
// groups by exists on its metrics. It returns the bridge metrics the expression uses.
func checkExpr(t *testing.T, expr string, metrics map[string]metricInfo, runtime map[string]bool) []string {
	t.Helper()
	if !balanced(expr) {
		t.Errorf("unbalanced brackets in: %s", expr)
	}
	var inExpr []string
	for _, m := range metricNameRE.FindAllString(expr, -1) {
		if !strings.HasPrefix(m, "hermes_bridge_") {
			if !runtime[m] {
				t.Errorf("%s is not a metric of /metrics (Go and process collectors), in: %s", m, expr)
			}
			continue
		}
		base, suffixed := seriesName(m)
		info, ok := metrics[base]
		switch {
		case !ok:
			t.Errorf("%s is not a metric the bridge registers (bridge/metrics.go), in: %s", m, expr)
		case info.histogram && !suffixed:
			t.Errorf("%s is a histogram: query %s_bucket, _sum or _count, in: %s", m, m, expr)
		case !info.histogram && suffixed:
			t.Errorf("%s: %s is not a histogram, in: %s", m, base, expr)
		}
		inExpr = append(inExpr, base)
	}
	has := func(metric, label string) bool {
		if info, ok := metrics[metric]; ok {
			return slices.Contains(info.labels, label) || label != "endpoint" && slices.Contains(targetLabels, label) ||
				info.histogram && label == "le"
		}
		return slices.Contains(targetLabels, label)
	}
	for _, sel := range selectorRE.FindAllStringSubmatch(expr, -1) {
		metric, _ := seriesName(sel[1])
		for _, m := range strings.Split(sel[2], ",") {
			if mm := matcherRE.FindStringSubmatch(m); mm != nil && !has(metric, mm[1]) {
				t.Errorf("%s has no label %s, in: %s", sel[1], mm[1], expr)
			}
		}
	}
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			l = strings.TrimSpace(l)
			if l != "" && len(inExpr) > 0 && !slices.ContainsFunc(inExpr, func(m string) bool { return has(m, l) }) {
				t.Errorf("no metric of the query has the label %s it groups by, in: %s", l, expr)
			}
		}
	}
	return inExpr
}

// panelTitleRE matches a panel title in the alerts table: *Title*.
var panelTitleRE = regexp.MustCompile(`\*([^*|]+)\*`)

// deploy/README.md's suggested alerts query metrics the bridge exports, with their labels,
// and the table below them names, for each alert, panels (*in italics*) the dashboard has.
func TestSuggestedAlertsMatchDashboard(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "deploy", "README.md"))
	noErr(t, err)
	_, section, ok := strings.Cut(string(readme), "\n### Suggested alerts\n")
	if !ok {
		t.Fatal("deploy/README.md has no Suggested alerts section")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	_, block, _ := strings.Cut(section, "```yaml\n")
	block, table, _ := strings.Cut(block, "```")
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(block), &rules); err != nil {
		t.Fatalf("deploy/README.md Suggested alerts: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "hermes-bridge.json"))
	noErr(t, err)
	var dash struct{ Panels []grafanaPanel }
	noErr(t, json.Unmarshal(raw, &dash))
	metrics, runtime := bridgeMetrics(t), runtimeMetrics(t)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			checkExpr(t, r.Expr, metrics, runtime)
			var row string
			for _, line := range strings.Split(table, "\n") {
				if strings.HasPrefix(line, "| `"+r.Alert+"` |") {
					row = line
				}
			}
			if row == "" {
				t.Errorf("alert %s: the table under Suggested alerts names no panel for it", r.Alert)
				continue
			}
			titles := panelTitleRE.FindAllStringSubmatch(row, -1)
			if len(titles) == 0 {
				t.Errorf("alert %s: %q names no panel (*title*)", r.Alert, row)
			}
			for _, title := range titles {
				if !slices.ContainsFunc(dash.Panels, func(p grafanaPanel) bool { return p.Type != "row" && p.Title == title[1] }) {
					t.Errorf("alert %s: the dashboard has no panel %q", r.Alert, title[1])
				}
			}
		}
	}
	if n == 0 {
		t.Error("deploy/README.md Suggested alerts: no rule found")
	}
}

// balanced reports whether the brackets of a PromQL expression pair up (outside strings).
// It is no PromQL parser (github.com/prometheus/prometheus is too large a dependency for
// this), but it catches a query cut while editing.
func balanced(expr string) bool {
	var stack []rune
	inString := false
	for i, r := range expr {
		switch {
		case r == '"' && (i == 0 || expr[i-1] != '\\'):
			inString = !inString
		case inString:
		case r == '(' || r == '{' || r == '[':
			stack = append(stack, r)
		case r == ')' || r == '}' || r == ']':
			open := map[rune]rune{')': '(', '}': '{', ']': '['}[r]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !inString
}

// The bridge's labels survive the scrape: where one shares its name with a label the
// Prometheus Operator sets on the target (the endpoint label, the Service port's name),
// the ServiceMonitor honours the scraped one, and no bridge label could override the
// target's identity (job, instance, namespace, service, pod, container).
func TestServiceMonitorKeepsBridgeLabels(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "kubernetes", "servicemonitor.yaml"))
	noErr(t, err)
	var sm struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Endpoints []struct {
				Port        string `yaml:"port"`
				HonorLabels bool   `yaml:"honorLabels"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	noErr(t, yaml.Unmarshal(raw, &sm))
	if sm.Kind != "ServiceMonitor" || len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("servicemonitor.yaml: kind %q with %d endpoints", sm.Kind, len(sm.Spec.Endpoints))
	}
	var clash []string
	for name, info := range bridgeMetrics(t) {
		for _, l := range info.labels {
			switch {
			case l == "endpoint":
				clash = append(clash, name)
			case slices.Contains(targetLabels, l):
				t.Errorf("%s has a label %s: with honorLabels it would replace the target's", name, l)
			}
		}
	}
	if len(clash) == 0 {
		return
	}
	sort.Strings(clash)
	for _, e := range sm.Spec.Endpoints {
		if !e.HonorLabels {
			t.Errorf("ServiceMonitor endpoint %q: set honorLabels: true, or Prometheus renames the endpoint label of %v to exported_endpoint", e.Port, clash)
		}
	}
}
