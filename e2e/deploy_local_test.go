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

// documentedServerCommand returns the variables and the arguments of the nats-server
// command line that deploy/README.md gives for trying conf locally ("[VAR=value ...]
// nats-server -c deploy/<conf> ..." or the same with "go run
// github.com/nats-io/nats-server/v2").
func documentedServerCommand(t *testing.T, conf string) (env map[string]string, args []string) {
	t.Helper()
	readme, err := os.ReadFile("../deploy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^((?:[A-Z_]+=\S+ )*)(?:nats-server|go run github\.com/nats-io/nats-server/v2) (-c deploy/` +
		regexp.QuoteMeta(conf) + ` .*-p .*)$`)
	m := re.FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatalf("deploy/README.md has no command line running deploy/%s locally", conf)
	}
	env = map[string]string{}
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env, strings.Fields(m[2])
}

// TestDeployConfigRunsLocally (issue 13): deploy/nats-server.conf, as it is, runs next to
// `make run` (which holds 127.0.0.1:4222 and ./data/nats) with the flags deploy/README.md
// documents: nats-server's own flag parsing (server.ConfigureOptions, what its main
// calls) lets them override the file's listen address and store_dir. The server then
// starts (on a free port and a temporary store instead of the documented ones, which
// may be taken on this machine) and the bridge's user can use JetStream.
func TestDeployConfigRunsLocally(t *testing.T) {
	for _, conf := range []string{"nats-server.conf", "nats-server-teams.conf"} {
		t.Run(conf, func(t *testing.T) {
			env, args := documentedServerCommand(t, conf)
			for k, v := range env {
				t.Setenv(k, v)
			}
			for i, a := range args {
				if strings.HasPrefix(a, "deploy/") {
					args[i] = "../" + a // the test runs in e2e/
				}
			}
			body, err := os.ReadFile(args[1])
			if err != nil {
				t.Fatal(err)
			}
			vars := map[string]bool{}
			for _, m := range regexp.MustCompile(`password: \$([A-Z_]+)`).FindAllStringSubmatch(string(body), -1) {
				vars[m[1]] = true
			}
			for v := range vars {
				t.Setenv(v, "local-"+strings.ToLower(v))
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
			if opts.Host != "127.0.0.1" {
				t.Errorf("listen address %q, want loopback for a local try", opts.Host)
			}
			if opts.StoreDir == "" || strings.HasPrefix(opts.StoreDir, "/var/") || filepath.Clean(opts.StoreDir) == "data/nats" {
				t.Errorf("store dir %q: want a local directory apart from make run's ./data/nats", opts.StoreDir)
			}
			if !opts.JetStream {
				t.Errorf("JetStream is off")
			}

			opts.Port, opts.StoreDir, opts.NoSigs, opts.NoLog = -1, t.TempDir(), true, true
			ns, err := server.NewServer(opts)
			if err != nil {
				t.Fatal(err)
			}
			ns.Start()
			defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
			if !ns.ReadyForConnections(10 * time.Second) {
				t.Fatal("not ready")
			}
			user, pw := "bridge", "local-bridge_password"
			if conf == "nats-server-teams.conf" {
				user, pw = "bridge-a", "local-team_a_bridge_password"
			}
			nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, pw))
			if err != nil {
				t.Fatalf("connect as %s: %v", user, err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "HERMES_DLQ", Subjects: []string{"hermes.dlq"}}); err != nil {
				t.Fatalf("%s provisions a stream: %v", user, err)
			}
		})
	}
}
