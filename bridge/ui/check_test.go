package ui_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/bridge/ui"
)

// TestCheckOrigin: a probe tells apart a WebSocket listener that admits the page's
// origin, one that refuses it (403, allowed_origins), and one that is not there; the
// refusal names the origin and the setting to change.
func TestCheckOrigin(t *testing.T) {
	s := natsembed.RunTest(t, func(o *natsembed.Options) {
		o.WebSocketPort, o.WebSocketAllowedOrigins = -1, []string{"http://127.0.0.1:9464"}
	})
	ws := s.WebSocketURL()
	ctx := context.Background()
	if c := ui.CheckOrigin(ctx, ws, "http://127.0.0.1:9464"); c.Result != ui.CheckAccepted || c.Status != http.StatusSwitchingProtocols {
		t.Errorf("allowed origin: %+v", c)
	}
	c := ui.CheckOrigin(ctx, ws, "http://127.0.0.1:9465")
	if c.Result != ui.CheckOriginRefused || c.Status != http.StatusForbidden ||
		!strings.Contains(c.Message, `add "http://127.0.0.1:9465" to allowed_origins`) || !strings.Contains(c.Message, ws) {
		t.Errorf("refused origin: %+v", c)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "ws://" + ln.Addr().String()
	ln.Close()
	if c := ui.CheckOrigin(ctx, closed, "http://127.0.0.1:9464"); c.Result != ui.CheckUnreachable || !strings.Contains(c.Message, closed) {
		t.Errorf("nothing listening: %+v", c)
	}
	if c := ui.CheckOrigin(ctx, "http://example.com", "http://127.0.0.1:9464"); c.Result != ui.CheckFailed {
		t.Errorf("not a WebSocket URL: %+v", c)
	}

	// The page asks /ui/check with its own origin.
	h := ui.New()
	if r := get(t, h, "GET", "/ui/check?origin=http://127.0.0.1:9465"); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("before Set: %d", r.StatusCode)
	}
	h.Set(ui.Config{Servers: []string{ws}})
	r := get(t, h, "GET", "/ui/check?origin=http%3A%2F%2F127.0.0.1%3A9465")
	var checks []ui.Check
	if err := json.Unmarshal([]byte(body(t, r)), &checks); err != nil || r.StatusCode != 200 || len(checks) != 1 ||
		checks[0].Result != ui.CheckOriginRefused || checks[0].Origin != "http://127.0.0.1:9465" || r.Header.Get("Cache-Control") != "no-store" ||
		r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Content-Security-Policy") != ui.CSP([]string{ws}) {
		t.Fatalf("/ui/check: %d %+v %v", r.StatusCode, checks, err)
	}
	for _, bad := range []string{"", "javascript:alert(1)", "http://127.0.0.1:9465/path", "ftp://h", "http://u:p@h", "http://h?x=1", "http%3A%2F%2Fh%0D%0AX%3A1"} {
		if r := get(t, h, "GET", "/ui/check?origin="+bad); r.StatusCode != http.StatusBadRequest {
			t.Errorf("origin %q: %d, want 400", bad, r.StatusCode)
		}
	}
}
