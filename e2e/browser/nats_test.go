package browser

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startNATS runs a nats-server in-process with the configuration file conf (its users,
// accounts and permissions), JetStream in a fresh store, clients on a free port of
// 127.0.0.1 and a WebSocket listener without TLS on another. Its log lines go to log,
// one per line. It returns the client and WebSocket URLs; the server is shut down at
// the end of the test.
func startNATS(t *testing.T, conf string, log *syncBuffer) (clientURL, wsURL string) {
	t.Helper()
	so, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server config %s: %v", conf, err)
	}
	so.Host, so.Port = "127.0.0.1", -1
	so.JetStream, so.StoreDir = true, t.TempDir()
	so.Websocket.Host, so.Websocket.Port, so.Websocket.NoTLS = "127.0.0.1", -1, true
	so.NoSigs, so.NoLog = true, true
	ns, err := server.NewServer(so)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	ns.SetLoggerV2(lineLogger{log}, false, false, false)
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats-server not ready for connections after 10s:\n%s", log.String())
	}
	v, err := ns.Varz(nil)
	if err != nil || v.Websocket.Port == 0 {
		t.Fatalf("nats-server has no WebSocket listener (%v)", err)
	}
	return ns.ClientURL(), fmt.Sprintf("ws://127.0.0.1:%d", v.Websocket.Port)
}

// lineLogger writes each server log line to w, after its level.
type lineLogger struct{ w io.Writer }

func (l lineLogger) logf(level, format string, v ...any) {
	fmt.Fprintf(l.w, "[%s] %s\n", level, strings.ReplaceAll(fmt.Sprintf(format, v...), "\n", " "))
}

func (l lineLogger) Noticef(format string, v ...any) { l.logf("INF", format, v...) }
func (l lineLogger) Warnf(format string, v ...any)   { l.logf("WRN", format, v...) }
func (l lineLogger) Errorf(format string, v ...any)  { l.logf("ERR", format, v...) }
func (l lineLogger) Fatalf(format string, v ...any)  { l.logf("FTL", format, v...) }
func (l lineLogger) Debugf(format string, v ...any)  { l.logf("DBG", format, v...) }
func (l lineLogger) Tracef(format string, v ...any)  { l.logf("TRC", format, v...) }
