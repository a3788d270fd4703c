package e2e_test

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// documentedServerCommand returns the arguments of the nats-server command line that
// deploy/README.md gives for running conf ("nats-server -c deploy/<conf> ..." or the same
// with "go run github.com/nats-io/nats-server/v2").
func documentedServerCommand(t *testing.T, conf string) []string {
	t.Helper()
	readme, err := os.ReadFile("../deploy/README.md")
	requireOK(t, err)
	re := regexp.MustCompile(`(?m)^(?:nats-server|go run github\.com/nats-io/nats-server/v2) (-c deploy/` +
		regexp.QuoteMeta(conf) + `(?: .*)?)$`)
	m := re.FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatalf("deploy/README.md has no command line running deploy/%s", conf)
	}
	return strings.Fields(m[1])
}

// TestDeployConfigRunsLocally (issue 13): deploy/nats-server.conf (and the teams file)
// can be tried next to `make run`, which holds 127.0.0.1:4222 and ./data/nats, with the
// command lines deploy/README.md gives: their -local companions include the production
// file as it is and change only listen and store_dir (nats-server's -sd flag cannot
// replace a store_dir written in a file). The command line goes through nats-server's own
// parsing (server.ConfigureOptions, what its main calls); the server then starts (on a
// free port and a temporary store instead of the documented ones, which may be taken on
// this machine) and the bridge's user provisions a stream.
func TestDeployConfigRunsLocally(t *testing.T) {
	for _, tt := range []struct{ local, prod, user, passwordVar string }{
		{"nats-server-local.conf", "nats-server.conf", "bridge", "BRIDGE_PASSWORD"},
		{"nats-server-teams-local.conf", "nats-server-teams.conf", "bridge-a", "TEAM_A_BRIDGE_PASSWORD"},
	} {
		t.Run(tt.local, func(t *testing.T) {
			args := documentedServerCommand(t, tt.local)
			for i, a := range args {
				if strings.HasPrefix(a, "deploy/") {
					args[i] = "../" + a // the test runs in e2e/
				}
			}
			local, err := os.ReadFile(args[1])
			requireOK(t, err)
			if !regexp.MustCompile(`(?m)^include \./` + regexp.QuoteMeta(tt.prod) + `$`).Match(local) {
				t.Fatalf("%s does not include %s (a copy would drift from it)", tt.local, tt.prod)
			}
			prod, err := os.ReadFile("../deploy/" + tt.prod)
			requireOK(t, err)
			for _, m := range regexp.MustCompile(`password: \$([A-Z_]+)`).FindAllStringSubmatch(string(prod), -1) {
				t.Setenv(m[1], "local-"+strings.ToLower(m[1]))
			}
			fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			opts, err := server.ConfigureOptions(fs, args, func() {}, func() {}, func() {})
			if err != nil {
				t.Fatalf("nats-server %s: %v", strings.Join(args, " "), err)
			}
			if opts.Port == 4222 || opts.Port == 0 {
				t.Errorf("port %d: clashes with make run's embedded server on 4222", opts.Port)
			}
			wantEq(t, opts.Host, "127.0.0.1", "listen address %q, want loopback for a local try")
			if opts.StoreDir == "" || strings.HasPrefix(opts.StoreDir, "/var/") || filepath.Clean(opts.StoreDir) == "data/nats" {
				t.Errorf("store dir %q: want a local directory apart from make run's ./data/nats", opts.StoreDir)
			}
			if !opts.JetStream || len(opts.Accounts) < 2 {
				t.Errorf("JetStream %v, %d accounts: the production file's content is missing", opts.JetStream, len(opts.Accounts))
			}

			opts.Port, opts.StoreDir, opts.NoSigs, opts.NoLog = -1, t.TempDir(), true, true
			ns, err := server.NewServer(opts)
			requireOK(t, err)
			ns.Start()
			defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
			if !ns.ReadyForConnections(10 * time.Second) {
				t.Fatal("not ready")
			}
			nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(tt.user, "local-"+strings.ToLower(tt.passwordVar)))
			if err != nil {
				t.Fatalf("connect as %s: %v", tt.user, err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "HERMES_DLQ", Subjects: []string{"hermes.dlq"}}); err != nil {
				t.Fatalf("%s provisions a stream: %v", tt.user, err)
			}
		})
	}
}
