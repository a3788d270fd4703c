package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// options are the bench's flags.
type options struct {
	Duration     time.Duration // scenario 1 measuring window per mode (all rounds together)
	Warmup       time.Duration // scenario 1 warm-up before a mode's first window
	Rounds       int           // scenario 1: the modes are measured in this many interleaved rounds
	SerialWindow time.Duration // scenario 1: window per mode and round at one action in flight (0: no such pass)
	Concurrency  int
	Events       int           // scenario 2 SSE events in the stream
	Streams      int           // scenario 3 concurrent streams
	StreamEvents int           // scenario 3 SSE events per stream
	DupActions   int           // scenario 4 actions
	DupKeys      int           // scenario 4 idempotency keys
	RSSDuration  time.Duration // scenario 5: load on the bridge process
	BridgeBin    string        // scenario 5: the hermes-bridge binary ("": built from the repository)
	Scenarios    []string
	JSONPath     string
	MarkdownPath string
	CPUProfile   string
	MemProfile   string
	MutexProfile string
	Store        string // file or memory
	Tracing      string // the bridge's tracer provider: noop, off or otlp
	NoMetrics    bool   // the bridge runs without its metrics registry
	Strict       bool   // exit 3 when a target fails
}

// Row is one figure: the bridge's value, its floor and the ratio bridge/floor.
type Row struct {
	Scenario  string   `json:"scenario"`
	Metric    string   `json:"metric"`
	Unit      string   `json:"unit"`
	Bridge    float64  `json:"bridge"`
	Floor     *float64 `json:"floor,omitempty"`
	FloorName string   `json:"floor_name,omitempty"`
	Ratio     *float64 `json:"ratio,omitempty"` // bridge / floor
	Target    string   `json:"target,omitempty"`
	Pass      *bool    `json:"pass,omitempty"`
}

// ScenarioReport is one scenario's figures.
type ScenarioReport struct {
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	Params  map[string]any `json:"params"`
	Figures []Row          `json:"figures"`
	Notes   []string       `json:"notes,omitempty"`
	Errors  []string       `json:"errors,omitempty"`
	Elapsed float64        `json:"elapsed_s"`
}

func (s *ScenarioReport) row(r Row) *Row {
	r.Scenario = s.ID + " " + s.Name
	if r.Floor != nil && *r.Floor != 0 {
		v := r.Bridge / *r.Floor
		r.Ratio = &v
	}
	s.Figures = append(s.Figures, r)
	return &s.Figures[len(s.Figures)-1]
}

func (s *ScenarioReport) errorf(format string, args ...any) {
	s.Errors = append(s.Errors, fmt.Sprintf(format, args...))
}

func f64(v float64) *float64 { return &v }
func boolp(v bool) *bool     { return &v }

// Machine describes where the figures were taken.
type Machine struct {
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPUModel   string `json:"cpu_model"`
}

// Report is bench.json.
type Report struct {
	Machine   Machine          `json:"machine"`
	Store     string           `json:"store"`
	StartedAt time.Time        `json:"started_at"`
	Elapsed   float64          `json:"elapsed_s"`
	Params    map[string]any   `json:"params"`
	Notes     []string         `json:"notes"`
	Scenarios []ScenarioReport `json:"scenarios"`
}

func machine() Machine {
	return Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUModel: cpuModel()}
}

// String describes the machine: cores, GOMAXPROCS, Go version, platform and CPU model.
func (m Machine) String() string {
	return fmt.Sprintf("%d cores (GOMAXPROCS %d), %s %s/%s, %s", m.Cores, m.GOMAXPROCS, m.GoVersion, m.GOOS, m.GOARCH, m.CPUModel)
}

// failed lists the figures that missed their target.
func (r *Report) failed() []string {
	var out []string
	for _, s := range r.Scenarios {
		for _, f := range s.Figures {
			if f.Pass != nil && !*f.Pass {
				out = append(out, f.Scenario+": "+f.Metric)
			}
		}
	}
	return out
}

func fmtVal(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.2f ms", v)
	case "µs":
		return fmt.Sprintf("%.1f µs", v)
	case "s":
		return fmt.Sprintf("%.2f s", v)
	case "KiB":
		return fmt.Sprintf("%.1f KiB", v)
	case "MiB":
		return fmt.Sprintf("%.1f MiB", v)
	case "count", "":
		return fmt.Sprintf("%.0f", v)
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

// writeTable prints the aligned table.
func (r *Report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "hermes-bridge bench: %s; JetStream store: %s\n\n", r.Machine, r.Store)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t")+"\t")
	for _, s := range r.Scenarios {
		for _, f := range s.Figures {
			c := f.cells()
			for i := range c {
				c[i] = orDash(c[i])
			}
			fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
		}
	}
	_ = tw.Flush()
	for _, s := range r.Scenarios {
		for _, n := range s.Notes {
			fmt.Fprintf(w, "  [%s] %s\n", s.ID, n)
		}
		for _, e := range s.Errors {
			fmt.Fprintf(w, "  [%s] ERROR: %s\n", s.ID, e)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	fmt.Fprintf(w, "\nratio = bridge / floor (throughputs: higher is better; times and latencies: lower is better). Total %.1f s.\n", r.Elapsed)
}

var tableHeader = []string{"scenario", "metric", "bridge", "floor", "floor is", "ratio", "target", "pass"}

// cells is one figure as table cells, "" where there is nothing to show.
func (f Row) cells() []string {
	floor, ratio, pass := "", "", ""
	if f.Floor != nil {
		floor = fmtVal(*f.Floor, f.Unit)
	}
	if f.Ratio != nil && !math.IsInf(*f.Ratio, 0) && !math.IsNaN(*f.Ratio) {
		ratio = fmt.Sprintf("%.2f", *f.Ratio)
	}
	if f.Pass != nil {
		pass = map[bool]string{true: "PASS", false: "FAIL"}[*f.Pass]
	}
	return []string{f.Scenario, f.Metric, fmtVal(f.Bridge, f.Unit), floor, f.FloorName, ratio, f.Target, pass}
}

// writeMarkdown writes the figures as a Markdown table (the one e2e/bench/README.md's
// current figures show), preceded by a line naming the machine and followed by the notes.
func (r *Report) writeMarkdown(path string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s; JetStream store: %s; %s\n\n", r.Machine, r.Store, r.StartedAt.UTC().Format(time.DateOnly))
	b.WriteString("| " + strings.Join(tableHeader, " | ") + " |\n")
	b.WriteString(strings.Repeat("|---", len(tableHeader)) + "|\n")
	for _, s := range r.Scenarios {
		for _, f := range s.Figures {
			c := f.cells()
			for i := range c {
				c[i] = strings.ReplaceAll(c[i], "|", "\\|")
			}
			b.WriteString("| " + strings.Join(c, " | ") + " |\n")
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (r *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// statusLog prints progress lines on stderr.
type statusLog struct {
	w     io.Writer
	start time.Time
	mu    sync.Mutex
}

func (s *statusLog) printf(format string, args ...any) {
	if s == nil || s.w == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "[bench %6.1fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// profiler writes CPU and heap profiles of the bridge's measuring windows, one file per tag:
// cpu.prof -> cpu-chat-r1.prof.
type profiler struct {
	cpu, mem string
	st       *statusLog
	cur      *os.File
	written  []string
}

func tagged(path, tag string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + tag + ext
}

func (p *profiler) startCPU(tag string) {
	if p == nil || p.cpu == "" {
		return
	}
	f, err := os.Create(tagged(p.cpu, tag))
	if err != nil {
		p.st.printf("cpu profile: %v", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		p.st.printf("cpu profile: %v", err)
		_ = f.Close()
		return
	}
	p.cur = f
}

func (p *profiler) stopCPU() {
	if p == nil || p.cur == nil {
		return
	}
	pprof.StopCPUProfile()
	_ = p.cur.Close()
	p.written = append(p.written, p.cur.Name())
	p.cur = nil
}

// mutexProfile samples lock contention for the whole run (one event in mutexFraction)
// and returns the function that writes the profile.
func mutexProfile(path string, st *statusLog) (write func() (string, error)) {
	if path == "" {
		return func() (string, error) { return "", nil }
	}
	const mutexFraction = 5
	prev := runtime.SetMutexProfileFraction(mutexFraction)
	return func() (string, error) {
		defer runtime.SetMutexProfileFraction(prev)
		f, err := os.Create(path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		if err := pprof.Lookup("mutex").WriteTo(f, 0); err != nil {
			return "", err
		}
		return path, nil
	}
}

// heap writes a heap profile with -memprofile (mem.prof -> mem-<tag>.prof).
func (p *profiler) heap(tag string) { p.write("heap", tag) }

// goroutines writes, with -memprofile, a goroutine profile (mem.prof ->
// mem-<tag>-goroutines.prof): where the goroutines of the moment wait.
func (p *profiler) goroutines(tag string) { p.write("goroutine", tag+"-goroutines") }

func (p *profiler) write(profile, tag string) {
	if p == nil || p.mem == "" {
		return
	}
	name := tagged(p.mem, tag)
	f, err := os.Create(name)
	if err != nil {
		p.st.printf("%s profile: %v", profile, err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup(profile).WriteTo(f, 0); err != nil {
		p.st.printf("%s profile: %v", profile, err)
		return
	}
	p.written = append(p.written, name)
}
