package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium. Without it the browser tests skip, saying how to
// install it, so that make test passes on a machine with Go alone; with
// HERMES_BRIDGE_UI_TEST=require (set by .ci/run, which installs chromium) they fail
// instead, so CI cannot pass without running them.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const how = "headless Chromium is not installed: apt-get install -y chromium chromium-driver (.ci/run does it)"
	if os.Getenv("HERMES_BRIDGE_UI_TEST") == "require" {
		t.Fatal(how + "; HERMES_BRIDGE_UI_TEST=require")
	}
	t.Skip(how + "; set HERMES_BRIDGE_UI_TEST=require to make this a failure")
	return ""
}

// uiArtifacts is where the browser test saves its screenshots: $HERMES_BRIDGE_UI_ARTIFACTS,
// else a temporary directory.
func uiArtifacts(t *testing.T) string {
	dir := os.Getenv("HERMES_BRIDGE_UI_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is one headless Chromium tab with polling helpers.
type browser struct {
	t      *testing.T
	ctx    context.Context
	dir    string
	logs   *syncBuffer
	cancel []context.CancelFunc
	errs   *syncBuffer
}

func newBrowser(t *testing.T, ctx context.Context, logs *syncBuffer) *browser {
	t.Helper()
	b := &browser{t: t, dir: uiArtifacts(t), logs: logs, errs: &syncBuffer{}}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1366, 900))...)
	bctx, cancelB := chromedp.NewContext(alloc, chromedp.WithErrorf(func(f string, a ...any) { fmt.Fprintf(b.errs, f+"\n", a...) }))
	bctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	b.ctx, b.cancel = bctx, []context.CancelFunc{cancelT, cancelB, cancelAlloc}
	return b
}

func (b *browser) close() {
	for _, c := range b.cancel {
		c()
	}
	if s := b.errs.String(); s != "" {
		b.t.Logf("chromedp errors: %s", s)
	}
}

// shot saves a screenshot of the whole page into the artifacts directory.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
}

// poll evaluates js (an expression) until it is true (20 s at most), failing with what
// the page and the logs say.
func (b *browser) poll(what, js string) {
	b.t.Helper()
	ok, err := chromedp.Run(b.ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil || !ok {
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.t.Fatalf("waiting for %s: %v\npage:\n%s\nlogs:\n%s", what, err, body, b.logs.String())
	}
}

// str evaluates js to a string.
func (b *browser) str(js string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: %v", js, err)
	}
	return s
}
