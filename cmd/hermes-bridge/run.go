package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
	"github.com/hermes-bridge/hermes-bridge/bridge/ui"
)

// Shutdown bounds after the bridge's Run has returned.
const (
	drainTimeout       = 10 * time.Second
	serverStopTimeout  = 15 * time.Second
	embeddedServerName = "hermes-bridge"
)

func cmdRun(ctx context.Context, args []string, environ map[string]string, io stdio) int {
	pos, code, ok := parseCommand("run", newFlagSet("run"), args, io, func() { printRunHelp(io.out) })
	switch {
	case !ok:
		return code
	case len(pos) > 0:
		return usageError(io.err, "run", fmt.Sprintf("unexpected argument %q (run takes no arguments; configure it with environment variables)", pos[0]))
	}

	p, err := prepareRun(environ)
	if err != nil {
		fmt.Fprintf(io.err, "hermes-bridge run: %v\n", err)
		return exitUsage
	}
	log := newLogger(p.cfg, io.err, p.replicaID)
	if p.bridge.Hook != nil {
		log.Warn().Str("setting", environ["HERMES_BRIDGE_CRASH_AT"]).Msg("fault injection is active: this test build kills itself on purpose")
	}
	if err := runService(ctx, p, log, io.err, nil); err != nil {
		log.Error().Err(err).Msg("hermes-bridge stopped on an error")
		fmt.Fprintf(io.err, "hermes-bridge run: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// runPlan is a validated `run` configuration.
type runPlan struct {
	cfg       *Config
	conn      *natsConn // where the bridge connects; its url is "" for the embedded server
	specs     []EndpointSpec
	defaulted bool // no endpoint configured: the local default is used
	keys      *keyring
	replicaID string
	bridge    bridge.Config
	unknown   []unknownVar // HERMES_* and NATS_* variables no setting reads
	// selected is the NATS context selected with `nats context select`, which run does
	// not use (it says so); "" when none is, or when NATS_CONTEXT or NATS_URL is set.
	selected string
}

// prepareRun parses and validates everything `run` needs and reads the key files.
// The error lists every problem found, naming variables and files, never secrets.
func prepareRun(environ map[string]string) (*runPlan, error) {
	cfg, err := LoadConfig(environ)
	all := &ConfigError{}
	if err != nil {
		errors.As(err, &all)
	}
	// Only a context named by NATS_CONTEXT: the selected one would turn the embedded
	// server of a workstation into someone else's without a word.
	nctx, err := loadNATSContext(environ, "", false)
	all.merge(err)
	cfg.natsCtx = nctx
	conn, err := resolveConn(cfg, connFlags{}, nctx)
	all.merge(err)
	specs, defaulted, specsErr := cfg.EndpointSpecs()
	all.merge(cfg.ValidateRun(specs))
	if specsErr != nil {
		all.merge(specsErr)
	} else {
		all.merge(validateSpecs(specs, cfg.EndpointsFile != "", environ))
	}
	if err := all.err(); err != nil {
		return nil, err
	}
	keys, err := newKeyring(specs, environ)
	if err != nil {
		return nil, err
	}
	replica := cmp.Or(cfg.ReplicaID, nuid.Next())
	eps := make([]bridge.Endpoint, 0, len(specs))
	for _, s := range specs {
		ep := bridge.Endpoint{ID: s.ID, BaseURL: s.BaseURL, TenantID: s.TenantID, MaxConcurrency: s.MaxConcurrency,
			KeyHint: s.keyHint(cfg.EndpointsFile != ""), KeySource: s.keySource()}
		if ks := keys.source(s.ID); ks != nil {
			ep.Key = ks.Key
		}
		eps = append(eps, ep)
	}
	bc := cfg.BridgeConfig(eps, replica)
	hook, err := crashHook(environ)
	if err != nil {
		return nil, err
	}
	bc.Hook = hook
	bc.Version = versionString()
	selected := ""
	if !cfg.external() {
		selected = selectedContext(natsConfigDir(environ))
	}
	return &runPlan{cfg: cfg, conn: conn, specs: specs, defaulted: defaulted, keys: keys, replicaID: replica, bridge: bc,
		unknown: unknownVariables(environ, specs), selected: selected}, nil
}

// newLogger returns the root logger: JSON or console lines (see Config.consoleLog) on w
// with the service and replica fields. cfg is validated (its log level parses).
func newLogger(cfg *Config, w io.Writer, replica string) zerolog.Logger {
	lvl, _ := zerolog.ParseLevel(strings.ToLower(cfg.LogLevel))
	out := w
	if cfg.consoleLog(w) {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().
		Str("service", "hermes-bridge").Str("replica", replica).Logger()
}

// runService runs the bridge until ctx is cancelled: embedded server (if any), NATS
// connection, SIGHUP key reloads, bridge. Shutdown order: the bridge drains its
// in-flight actions, then the connection drains, then the embedded server stops.
// ready, if non-nil, is called with the NATS URL once connected (tests use it).
func runService(parent context.Context, p *runPlan, log zerolog.Logger, stderr io.Writer, ready func(natsURL string)) (err error) {
	cfg := p.cfg
	if cfg.consoleLog(stderr) {
		// A person reads it: only what differs from the defaults.
		log.Info().Interface("config", cfg.DumpChanged(p.specs)).Str("version", versionString()).
			Msg("starting hermes-bridge (settings that differ from the defaults; HERMES_BRIDGE_LOG_FORMAT=json logs them all)")
	} else {
		log.Info().Interface("config", cfg.Dump(p.specs)).Str("version", versionString()).Msg("starting hermes-bridge")
	}
	logUnknownVariables(log, p.unknown)
	if p.selected != "" {
		log.Info().Str("nats_context", p.selected).Msgf("NATS context %q is selected ('nats context select'), but run does not use the selected context: "+
			"it starts the embedded server; set NATS_CONTEXT=%s to connect to that context's server", p.selected, p.selected)
	}
	// Say at once that a shutdown began, and how long it may take, before anything
	// else sees it: the service runs on ctx, which ends only after that line (with the
	// same cause), so the line always comes first.
	ctx, stopWork := context.WithCancelCause(context.WithoutCancel(parent))
	defer stopWork(nil)
	stopped := make(chan struct{})
	stopLog := context.AfterFunc(parent, func() {
		defer close(stopped)
		logShutdown(log, context.Cause(parent), p.bridge.WithDefaults().ShutdownGrace)
		stopWork(context.Cause(parent))
	})
	defer func() {
		if !stopLog() {
			<-stopped
		}
	}()
	// The operations listener outlives the bridge: registered first, it stops last,
	// and /readyz says 503 through the whole shutdown.
	var running atomic.Pointer[bridge.Bridge]
	reg := opshttp.NewRegistry()
	var page *ui.Handler // the dashboard, configured once its WebSocket URL is known
	if cfg.uiEnabled() {
		page = ui.New()
	}
	opsAddr := ""
	if cfg.HTTPAddr != "" {
		ops, err := startOps(cfg.HTTPAddr, reg, &running, page, log, stderr)
		if err != nil {
			return err
		}
		if ops == nil {
			page = nil
		} else {
			opsAddr = ops.Addr()
			defer func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opsStopTimeout)
				defer cancel()
				if serr := ops.Shutdown(sctx); serr != nil {
					log.Warn().Err(serr).Msg("operations HTTP listener did not stop cleanly")
				}
			}()
		}
	}
	if p.defaulted {
		log.Warn().Str("endpoint", p.specs[0].ID).Str("base_url", DefaultHermesURL).
			Msg("neither HERMES_ENDPOINTS_FILE nor HERMES_URL is set; using the local Hermes default " + DefaultHermesURL)
	}
	for _, s := range p.specs {
		if s.APIKeyFile == "" && s.APIKeyEnv == "" && s.apiKey == "" {
			log.Warn().Str("endpoint", s.ID).Msg("endpoint has no API key; requests are sent without authentication (fine for a keyless test server only); " +
				s.keyHint(cfg.EndpointsFile != ""))
		}
	}

	url := p.conn.url
	embeddedWS := ""
	if url == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("HERMES_BRIDGE_DATA_DIR=%s: cannot create the data directory: %s", cfg.DataDir, fileProblem(err))
		}
		srvLog := log.With().Str("component", "nats-server").Logger()
		if srvLog.GetLevel() < zerolog.WarnLevel {
			srvLog = srvLog.Level(zerolog.WarnLevel) // the server's notices are many; debug shows them
			if cfg.LogLevel == "debug" || cfg.LogLevel == "trace" {
				srvLog = srvLog.Level(zerolog.DebugLevel)
			}
		}
		eo := natsembed.Options{
			Host: cfg.NATSHost, Port: cfg.NATSPort, StoreDir: cfg.DataDir,
			ServerName: embeddedServerName, Logger: srvLog,
		}
		if page != nil && cfg.UINATSURL == "" {
			// The dashboard reads over WebSocket; only pages from /ui's own origin may
			// open it (the embedded server has no users: every client may do anything).
			eo.WebSocketPort, eo.WebSocketAllowedOrigins = cfg.UIWebSocketPort, uiOrigins(opsAddr)
		}
		srv, err := natsembed.Start(eo)
		if le := (*natsembed.StoreLockedError)(nil); errors.As(err, &le) {
			return storeInUse(le, err)
		}
		if err != nil {
			hint := ""
			switch {
			case strings.Contains(err.Error(), "websocket") && strings.Contains(err.Error(), "address already in use"):
				hint = fmt.Sprintf(" (the dashboard's WebSocket port HERMES_BRIDGE_UI_WS_PORT=%d is taken: set another, -1 for a free one, or HERMES_BRIDGE_UI=false)", cfg.UIWebSocketPort)
			case strings.Contains(err.Error(), "address already in use"):
				hint = " (another NATS server or hermes-bridge is using it: stop it, set HERMES_BRIDGE_NATS_PORT, or set NATS_URL to use that server)"
			}
			return fmt.Errorf("embedded NATS server on %s: %w%s", net.JoinHostPort(cfg.NATSHost, strconv.Itoa(cfg.NATSPort)), err, hint)
		}
		// Stops LAST: registered first, so it runs after the connection has drained.
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serverStopTimeout)
			defer cancel()
			if serr := srv.Shutdown(sctx); serr != nil {
				log.Warn().Err(serr).Msg("embedded NATS server did not stop in time")
			} else {
				log.Info().Msg("embedded NATS server stopped")
			}
		}()
		url = srv.ClientURL()
		fmt.Fprintf(stderr, "embedded NATS server listening on %s (store %s)\n", url, cfg.DataDir)
		log.Info().Str("url", url).Str("store", cfg.DataDir).Msg("embedded NATS server started")
		embeddedWS = srv.WebSocketURL()
	}
	if page != nil {
		uc, err := cfg.uiConfig(embeddedWS)
		if err != nil {
			return err
		}
		page.Set(uc)
		how := "as user " + uc.User
		if uc.User == "" {
			how = "no user"
			if !cfg.external() {
				how += ": the embedded server has none, fine on loopback; its WebSocket listener admits only this page's origin"
			}
		}
		fmt.Fprintf(stderr, "dashboard on http://%s/ui/ (NATS over %s, %s)\n", opsAddr, strings.Join(uc.Servers, ","), how)
		log.Info().Str("url", "http://"+opsAddr+"/ui/").Strs("nats_ws", uc.Servers).Bool("credential", uc.User != "").Msg("dashboard served")
	}

	// The bridge's one connection, to the embedded server or NATS_URL: it gives a server
	// that stops answering up, and reconnects, within the claim lease (see
	// bridge.NATSLiveness).
	connLog := log.With().Str("component", "nats").Logger()
	live := bridge.NATSLiveness(p.bridge.WithDefaults().Lease)
	opts, err := p.conn.natsOptions("hermes-bridge", live, connLog, nil)
	if err != nil {
		return err
	}
	closed := make(chan struct{})
	opts = append(opts, nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	wait := time.Duration(0) // the embedded server is up: no retry
	if cfg.external() {
		wait = cfg.NATSConnectWait
	}
	nc, err := connectFirst(ctx, url, opts, wait, connLog)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", p.conn.describe(url), err)
	}
	defer func() {
		if derr := nc.Drain(); derr != nil && !errors.Is(derr, nats.ErrConnectionClosed) {
			log.Warn().Err(derr).Msg("NATS drain failed")
			nc.Close()
		}
		select {
		case <-closed:
		case <-time.After(drainTimeout):
			log.Warn().Str("timeout", drainTimeout.String()).Msg("NATS connection did not drain in time; closing")
			nc.Close()
		}
	}()
	ev := log.Info()
	if p.conn.ctx != nil {
		ev = ev.Str("nats_context", p.conn.ctx.name).Str("nats_context_file", p.conn.ctx.path)
	}
	ev.Str("url", redactURL(nc.ConnectedUrl())).Str("server", nc.ConnectedServerName()).
		Str("ping_interval", live.PingInterval.String()).Str("dead_server_after", live.DeadServerDetection().String()).
		Msg("connected to NATS")
	if ready != nil {
		ready(url)
	}

	bc := p.bridge
	bc.Metrics = reg
	tp, stopTracing, err := setupTracing(ctx, cfg, versionString(), p.replicaID, log)
	if err != nil {
		return err
	}
	defer stopTracing(ctx) // after the bridge has stopped, before the connection drains
	bc.TracerProvider = tp
	b, err := bridge.New(nc, bc, log)
	if err != nil {
		return err
	}
	running.Store(b)

	hupCtx, stopHUP := context.WithCancel(ctx)
	hupDone := make(chan struct{})
	go func() {
		defer close(hupDone)
		reloadOnHUP(hupCtx, p.keys, log)
	}()
	defer func() { stopHUP(); <-hupDone }()

	if err := b.Run(ctx); err != nil {
		return err
	}
	log.Info().Msg("bridge stopped; draining the NATS connection")
	return nil
}

// opsStopTimeout bounds the operations listener's shutdown.
const opsStopTimeout = 5 * time.Second

// errStarting is what /readyz says before the bridge exists.
var errStarting = errors.New("starting")

// startOps starts the operations listener on addr: /metrics from reg, /healthz, and
// /readyz from the bridge that running holds once it exists. When addr is the default
// and its port is taken (a second replica on this machine), it logs so and returns
// nil, nil: run goes on without it. An address that was set must bind.
func startOps(addr string, reg *prometheus.Registry, running *atomic.Pointer[bridge.Bridge], page *ui.Handler, log zerolog.Logger, stderr io.Writer) (*opshttp.Server, error) {
	ready := func(ctx context.Context) error {
		b := running.Load()
		if b == nil {
			return errStarting
		}
		return b.Health(ctx)
	}
	h := opshttp.Handler(reg, ready)
	if page != nil {
		mux := http.NewServeMux()
		mux.Handle("/ui", page)
		mux.Handle("/ui/", page)
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound)) // a browser at the bare address wants the page
		mux.Handle("/", h)
		h = mux
	}
	ops, err := opshttp.Listen(addr, h)
	if err != nil {
		if addr == DefaultHTTPAddr && errors.Is(err, syscall.EADDRINUSE) {
			without, origin := "/metrics, /healthz and /readyz", ""
			if page != nil {
				without += ", and without the dashboard"
				origin = " (a NATS WebSocket listener other than the embedded server's must allow the page's origin, http://127.0.0.1:9465, in its allowed_origins)"
			}
			log.Warn().Str("addr", addr).Msg("the default operations HTTP address is in use (another replica on this machine?); " +
				"running without " + without + ": set HERMES_BRIDGE_HTTP_ADDR to another address to have them")
			// Said on the terminal too: the JSON line is easy to miss among the others.
			fmt.Fprintf(stderr, "NO operations HTTP listener: %s is in use (another hermes-bridge on this machine?); running without %s. "+
				"Set HERMES_BRIDGE_HTTP_ADDR to a free address, e.g. HERMES_BRIDGE_HTTP_ADDR=127.0.0.1:9465%s\n", addr, without, origin)
			return nil, nil
		}
		return nil, fmt.Errorf("HERMES_BRIDGE_HTTP_ADDR=%s: cannot listen: %w (set another address, or empty to turn the listener off)", addr, err)
	}
	fmt.Fprintf(stderr, "operations HTTP listener on http://%s (/metrics, /healthz, /readyz)\n", ops.Addr())
	log.Info().Str("addr", ops.Addr()).Msg("operations HTTP listener started")
	return ops, nil
}

// logShutdown logs the start of a graceful shutdown: its cause (the signal), the grace
// in-flight actions get, and what happens after it.
func logShutdown(log zerolog.Logger, cause error, grace time.Duration) {
	ev := log.Info().Str("grace", grace.String())
	what := "shutdown requested (" + cause.Error() + ")"
	var sig signalReceived
	if errors.As(cause, &sig) {
		ev = ev.Str("signal", sig.name())
		what = sig.Error()
	}
	ev.Msg(what + ": shutting down; no new actions are fetched, in-flight actions have " + grace.String() +
		" (HERMES_BRIDGE_SHUTDOWN_GRACE) to finish, then those still running are released to another replica" +
		" (or settle outcome_unknown if an unsafe call was cut off); send the signal again to stop at once")
}

// reloadOnHUP re-reads every key file on SIGHUP until ctx is done.
func reloadOnHUP(ctx context.Context, keys *keyring, log zerolog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reloadLoop(ctx, hup, keys, log)
}

// reloadLoop reloads the keys each time hup delivers, until ctx is done.
func reloadLoop(ctx context.Context, hup <-chan os.Signal, keys *keyring, log zerolog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if n, err := keys.Reload(); err != nil {
				log.Error().Err(err).Int("reloaded", n).Msg("some endpoint keys could not be reloaded")
			} else {
				log.Info().Int("reloaded", n).Msgf("reloaded %d endpoint keys", n)
			}
		}
	}
}

// redactURLs redacts every URL of a comma-separated list.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i := range parts {
		parts[i] = redactURL(strings.TrimSpace(parts[i]))
	}
	return strings.Join(parts, ",")
}

// isTerminal reports whether w is a terminal (colors only then).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// storeInUse explains a data directory that another process's embedded server holds
// (err wraps le) and what to do instead.
func storeInUse(le *natsembed.StoreLockedError, err error) error {
	url := cmp.Or(le.URL, "<the first one's NATS URL>")
	return fmt.Errorf("embedded NATS server: %w. Two servers must never share a data directory (it would be corrupted): "+
		"for a second replica on this machine set NATS_URL=%s to use the first one's server, "+
		"or set HERMES_BRIDGE_DATA_DIR to another directory for a separate bridge", err, url)
}
