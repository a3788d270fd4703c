// Package natsembed starts an embedded nats-server with JetStream enabled.
//
// It serves two callers: `hermes-bridge run` in local mode, which needs a
// broker without external infrastructure, and tests anywhere in the module,
// which need a real JetStream server on a random port with a temporary store
// (see [RunTest] and [Connect]).
//
// natsembed is a leaf package: it imports nothing from this module.
//
// # Restarts
//
// [Server.Restart] shuts the server down and starts a new one with the same
// options, the same store directory and the same client port (also when the
// first start used a random port), so file-backed streams and KV buckets
// survive and clients configured with reconnects find the server again.
//
// # One server per store directory
//
// A Server holds an exclusive lock on its store directory from Start to Shutdown
// (across Restart): a second Start on the same directory, in this process or another,
// fails at once with a [*StoreLockedError] naming the directory and the holder's pid
// and URL (see [ErrStoreLocked]). A killed process loses the lock with its life.
package natsembed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// DefaultReadyTimeout bounds how long Start waits for the server to accept
// client connections.
const DefaultReadyTimeout = 10 * time.Second

// ErrNotReady is returned (wrapped) by Start and Restart when the server did
// not come up: the port is in use, JetStream could not start, the store
// directory is unusable or held by another server (see [ErrStoreLocked]), or the
// server was not ready in time. The message carries the server's own reason.
var ErrNotReady = errors.New("natsembed: server did not start")

// Options configure an embedded server. The zero value is not usable:
// StoreDir is required.
type Options struct {
	// Host is the client listen address. Default "127.0.0.1".
	Host string
	// Port is the client port. 0 means the NATS default 4222; -1 picks a
	// random free port (see Server.Port and Server.ClientURL for the result).
	Port int
	// StoreDir is the JetStream file store directory. Required.
	StoreDir string
	// MaxPayload is the server's max_payload in bytes; 0 keeps the server
	// default (1 MiB).
	MaxPayload int32
	// ServerName is the server name; "" lets the server pick its id.
	ServerName string
	// ConfigFile is an optional nats-server configuration file (accounts,
	// users, permissions, limits). It is read first; the non-zero fields of
	// these Options then override it, and JetStream is always enabled.
	ConfigFile string
	// Logger receives the server's log lines. The zero value discards them.
	// Fatal lines are logged at error level; they never exit the process.
	Logger zerolog.Logger
	// ReadyTimeout bounds the wait for readiness; 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// WebSocketPort, when not 0, enables a NATS WebSocket listener without TLS on Host
	// (for browsers on this machine: the dashboard at /ui); -1 picks a free port (see
	// Server.WebSocketURL for the result). 0 (the default) listens for no WebSocket.
	// Without TLS it is meant for loopback only.
	WebSocketPort int
	// WebSocketAllowedOrigins, when not empty, is the list of origins (scheme://host:port)
	// whose browser pages may open the WebSocket listener; the Origin header of a
	// browser on any other page is refused. Empty allows every origin.
	WebSocketAllowedOrigins []string
}

// Server is a running embedded nats-server. Its methods are safe for
// concurrent use.
type Server struct {
	opts Options // as given, with defaults applied

	mu     sync.Mutex
	ns     *server.Server
	port   int // actual client port of the current (or last) instance
	wsPort int // actual WebSocket port, 0 when there is no WebSocket listener
	// lock is held from Start to Shutdown; nil after Shutdown. released is closed once
	// the lock given up by the last Shutdown is released (after the server stopped).
	lock     *dirLock
	released chan struct{}
}

// Start takes the lock on the store directory (creating it if needed), starts an
// embedded server with JetStream and waits until it accepts client connections
// (Options.ReadyTimeout, default 10 s). Errors wrap ErrNotReady and name the cause
// (for example "address already in use"); a directory held by another server is a
// [*StoreLockedError].
func Start(opts Options) (*Server, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("natsembed: StoreDir is required")
	}
	opts.Host = cmp.Or(opts.Host, "127.0.0.1")
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	lock, err := lockDir(opts.StoreDir)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, lock: lock}
	ns, port, err := start(opts, opts.Port, opts.WebSocketPort)
	if err != nil {
		lock.release()
		return nil, err
	}
	s.ns, s.port, s.wsPort = ns, port, wsPortOf(ns)
	lock.describe(s.clientURL())
	return s, nil
}

// serverOptions builds nats-server options for one start on port (and wsPort, when
// not 0).
func serverOptions(o Options, port, wsPort int) (*server.Options, error) {
	so := &server.Options{}
	if o.ConfigFile != "" {
		fo, err := server.ProcessConfigFile(o.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("natsembed: config file %s: %w", o.ConfigFile, err)
		}
		so = fo
	}
	so.Host = o.Host
	if port != 0 || o.ConfigFile == "" {
		so.Port = port
	}
	so.JetStream = true
	so.StoreDir = o.StoreDir
	if o.MaxPayload > 0 {
		so.MaxPayload = o.MaxPayload
	}
	so.ServerName = cmp.Or(o.ServerName, so.ServerName)
	if wsPort != 0 {
		so.Websocket.Host = o.Host
		so.Websocket.Port = wsPort
		so.Websocket.NoTLS = true
		so.Websocket.AllowedOrigins = o.WebSocketAllowedOrigins
	}
	so.NoSigs = true                  // the embedding process owns signals
	so.NoLog = true                   // logging goes through our adapter only
	so.Debug, so.Trace = false, false // no debug or protocol trace lines, whatever the config file says
	return so, nil
}

// start creates, starts and waits for one server instance.
func start(o Options, port, wsPort int) (*server.Server, int, error) {
	so, err := serverOptions(o, port, wsPort)
	if err != nil {
		return nil, 0, err
	}
	ns, err := server.NewServer(so)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	lg := &logAdapter{l: o.Logger}
	ns.SetLoggerV2(lg, false, false, false)

	// Start is synchronous up to the accept loop: a listen failure or a
	// JetStream failure has been reported through Fatalf when it returns.
	ns.Start()
	msg := lg.fatal()
	if msg == "" && !ns.ReadyForConnections(o.ReadyTimeout) {
		msg = cmp.Or(lg.fatal(), fmt.Sprintf("not ready for connections after %s", o.ReadyTimeout))
	}
	if msg == "" && !ns.JetStreamEnabled() {
		msg = "JetStream not enabled"
	}
	if msg != "" {
		shutdown(ns)
		return nil, 0, fmt.Errorf("%w: %s", ErrNotReady, msg)
	}
	actual := port
	if a, ok := ns.Addr().(*net.TCPAddr); ok {
		actual = a.Port
	}
	return ns, actual, nil
}

// wsPortOf returns the port of ns's WebSocket listener, 0 when it has none.
func wsPortOf(ns *server.Server) int {
	v, err := ns.Varz(nil)
	if err != nil {
		return 0
	}
	return v.Websocket.Port
}

func shutdown(ns *server.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
}

// NATS returns the current nats-server instance (it changes on Restart).
func (s *Server) NATS() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns
}

// Port returns the actual client port (stable across Restart).
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// ClientURL returns the URL clients connect to, e.g. "nats://127.0.0.1:4222".
// It stays the same across Restart.
func (s *Server) ClientURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientURL()
}

// clientURL is ClientURL with s.mu held.
func (s *Server) clientURL() string { return s.url("nats", s.port) }

// url is scheme://host:port for clients of this machine: a wildcard listen address
// is reached on loopback.
func (s *Server) url(scheme string, port int) string {
	host := s.opts.Host
	if host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// WebSocketURL returns the URL browsers connect to over WebSocket, e.g.
// "ws://127.0.0.1:4223", or "" when Options.WebSocketPort is 0. It stays the same
// across Restart.
func (s *Server) WebSocketURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wsPort == 0 {
		return ""
	}
	return s.url("ws", s.wsPort)
}

// Shutdown stops the server gracefully (JetStream state is flushed to the
// store) and waits until it has stopped or ctx is done, in which case it
// returns ctx.Err() while the shutdown continues in the background.
// Shutting down a stopped server is a no-op. The store directory's lock is
// released once the server has stopped.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	ns, lock := s.ns, s.lock
	var released chan struct{}
	if lock != nil {
		released = make(chan struct{})
		s.lock, s.released = nil, released
	}
	s.mu.Unlock()
	return shutdownCtx(ctx, ns, func() {
		if lock != nil {
			lock.release()
			close(released)
		}
	})
}

// shutdownCtx stops ns and then runs after (if not nil), waiting for both until ctx
// is done; they go on in the background after that.
func shutdownCtx(ctx context.Context, ns *server.Server, after func()) error {
	if ns == nil {
		if after != nil {
			after()
		}
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		shutdown(ns)
		if after != nil {
			after()
		}
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Restart shuts the current instance down (bounded by ctx) and starts a new
// one with identical options on the same port and store directory, keeping the
// directory's lock (after Shutdown it takes the lock again, and fails with a
// [*StoreLockedError] if another server took the directory meanwhile). On error
// the server stays stopped; Restart may be called again.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := shutdownCtx(ctx, s.ns, nil); err != nil {
		return err
	}
	if s.lock == nil {
		if s.released != nil {
			select {
			case <-s.released:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		lock, err := lockDir(s.opts.StoreDir)
		if err != nil {
			return err
		}
		s.lock = lock
		defer func() {
			if s.ns == nil || !s.ns.Running() {
				// Not started: give the directory up again, as Shutdown would have.
				s.lock.release()
				s.lock = nil
			}
		}()
	}
	// The old listener is closed; the port may take a moment to be
	// bindable again, so retry briefly within ctx.
	for attempt := 0; ; attempt++ {
		ns, port, err := start(s.opts, s.port, s.wsPort)
		if err == nil {
			s.ns, s.port = ns, port
			s.lock.describe(s.clientURL())
			return nil
		}
		if attempt >= 20 || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logAdapter forwards nats-server log lines to zerolog and remembers the
// first fatal line so Start can report it.
type logAdapter struct {
	l zerolog.Logger

	mu       sync.Mutex
	firstErr string
}

var _ server.Logger = (*logAdapter)(nil)

func (a *logAdapter) fatal() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.firstErr
}

func (a *logAdapter) Noticef(format string, v ...any) { a.l.Info().Msgf(format, v...) }
func (a *logAdapter) Warnf(format string, v ...any)   { a.l.Warn().Msgf(format, v...) }
func (a *logAdapter) Errorf(format string, v ...any)  { a.l.Error().Msgf(format, v...) }
func (a *logAdapter) Debugf(format string, v ...any)  { a.l.Debug().Msgf(format, v...) }
func (a *logAdapter) Tracef(format string, v ...any)  { a.l.Trace().Msgf(format, v...) }

// Fatalf logs at error level and records the message; it never exits.
func (a *logAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.mu.Lock()
	if a.firstErr == "" {
		a.firstErr = msg
	}
	a.mu.Unlock()
	a.l.Error().Bool("fatal", true).Msg(msg)
}
