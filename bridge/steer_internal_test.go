package bridge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
)

// TestSteerRefusal: each answer of POST /v1/runs/{run_id}/steer that is not a 200 maps to
// its refusal code; a 404 or 405 from a Hermes without the route (aiohttp's text page) is
// steer_unsupported, as a missing run_steer capability is.
func TestSteerRefusal(t *testing.T) {
	envelope := func(code string) string {
		return `{"error":{"message":"m","type":"invalid_request_error","code":"` + code + `"}}`
	}
	for _, tc := range []struct {
		name   string
		status int
		ctype  string
		body   string
		want   string
	}{
		{"no route (404 text)", 404, "text/plain", "404: Not Found", events.SteerUnsupported},
		{"no route (405 text)", 405, "text/plain", "405: Method Not Allowed", events.SteerUnsupported},
		{"405 with an envelope", 405, "application/json", envelope("method_not_allowed"), events.SteerUnsupported},
		{"run unknown", 404, "application/json", envelope("run_not_found"), events.SteerNotRunning},
		{"not running", 409, "application/json", envelope("run_not_accepting_steer"), events.SteerNotRunning},
		{"agent declined", 409, "application/json", envelope("steer_not_accepted"), events.SteerNotAccepted},
		{"blank", 400, "application/json", envelope("invalid_steer_input"), events.SteerInvalid},
		{"server error", 500, "application/json", envelope("steer_failed"), events.SteerFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/runs/run_1/steer" || r.Method != http.MethodPost {
					t.Errorf("request %s %s", r.Method, r.URL.Path)
				}
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := hermes.New(srv.URL, hermes.WithAPIKey("k"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.RunSteer(ctx, "run_1", "focus")
			if err == nil {
				t.Fatal("RunSteer succeeded")
			}
			if code, reason := steerRefusal(err); code != tc.want || reason == "" {
				t.Fatalf("refusal %q (%q), want %q; error %v", code, reason, tc.want, err)
			}
		})
	}
}
