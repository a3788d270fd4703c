package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is one child process (a nats-server or a hermes-bridge run). Its output goes to
// its own log file; one goroutine waits for it and closes done.
type proc struct {
	name    string // n0, b1#2 (replica b1, second instance)
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	paused  atomic.Bool
}

// startProc starts bin with args and env, output appended to logPath. The child is
// killed if this program dies (Pdeathsig).
func startProc(name, bin string, args, env []string, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// pause sends SIGSTOP; resume SIGCONT.
func (p *proc) pause() error {
	p.paused.Store(true)
	return p.cmd.Process.Signal(syscall.SIGSTOP)
}

func (p *proc) resume() error {
	err := p.cmd.Process.Signal(syscall.SIGCONT)
	p.paused.Store(false)
	return err
}

// kill sends SIGKILL (after SIGCONT if paused) and waits for the process to end.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	if p.paused.Load() {
		_ = p.resume()
	}
	<-p.done
}

// terminate sends SIGTERM and waits up to timeout, then kills.
func (p *proc) terminate(timeout time.Duration) {
	if p.exited() {
		return
	}
	if p.paused.Load() {
		_ = p.resume()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
	}
}

// waitFor polls ready every 50ms until it reports true; it fails when the process
// exits first or timeout passes. what says what ready waits for.
func (p *proc) waitFor(ctx context.Context, timeout time.Duration, what string, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ready() {
		if p.exited() {
			return fmt.Errorf("%s exited before %s (log %s)", p.name, what, p.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not %s within %s (log %s)", p.name, what, timeout, p.logPath)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// ---- NATS nodes ----

type natsNode struct {
	name string
	port int // client port
	conf string
	dir  string
	proc *proc
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// setupNodes writes the configuration of n clustered nodes under dir.
func setupNodes(dir string, n int) ([]*natsNode, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])))
	}
	var nodes []*natsNode
	for i := range n {
		nd := &natsNode{name: fmt.Sprintf("n%d", i), port: ports[i], dir: filepath.Join(dir, fmt.Sprintf("n%d", i))}
		if err := os.MkdirAll(nd.dir, 0o700); err != nil {
			return nil, err
		}
		nd.conf = filepath.Join(nd.dir, "node.conf")
		text := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:%d"
jetstream { store_dir: %q }
cluster { name: chaos, listen: "127.0.0.1:%d", routes: [%s] }
`, nd.name, nd.port, filepath.Join(nd.dir, "js"), ports[n+i], strings.Join(routes, ", "))
		if err := os.WriteFile(nd.conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		nodes = append(nodes, nd)
	}
	return nodes, nil
}

// start starts the node's server and waits until its client port accepts connections.
func (w *world) startNode(ctx context.Context, nd *natsNode) error {
	p, err := startProc(nd.name, w.natsBin, []string{"-c", nd.conf}, []string{"PATH=" + os.Getenv("PATH")},
		filepath.Join(nd.dir, "server.log"))
	if err != nil {
		return err
	}
	nd.proc = p
	addr := fmt.Sprintf("127.0.0.1:%d", nd.port)
	return p.waitFor(ctx, 30*time.Second, "its client port was open", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

// ---- bridge replicas ----

type bridgeSlot struct {
	id       string // replica id b1, b2, b3
	slot     int
	instance int
	proc     *proc
}

// startBridge starts a new instance of a replica slot and waits until it has bound
// the consumer.
func (w *world) startBridge(ctx context.Context, b *bridgeSlot) error {
	b.instance++
	name := fmt.Sprintf("%s#%d", b.id, b.instance)
	var urls []string
	for i := range w.nodes {
		urls = append(urls, w.nodes[(b.slot+i)%len(w.nodes)].url())
	}
	fakeURL, err := w.fakeURL(name)
	if err != nil {
		return err
	}
	workers := fmt.Sprint(w.opt.workers)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"NATS_URL=" + strings.Join(urls, ","),
		"HERMES_URL=" + fakeURL,
		"HERMES_API_KEY=" + w.fake.APIKey(),
		"HERMES_BRIDGE_REPLICAS=3",
		"HERMES_BRIDGE_REPLICA_ID=" + b.id,
		"HERMES_BRIDGE_ACK_WAIT=" + w.opt.ackWait.String(),
		"HERMES_BRIDGE_SHUTDOWN_GRACE=5s",
		"HERMES_BRIDGE_BREAKER_THRESHOLD=1000",
		"HERMES_BRIDGE_LOG_LEVEL=info",
		"HERMES_MAX_CONCURRENCY=" + workers,
		"HERMES_BRIDGE_WORKERS=" + workers,
		"HERMES_BRIDGE_MAX_ACK_PENDING=" + fmt.Sprint(3*w.opt.workers),
	}
	p, err := startProc(name, w.bridgeBin, []string{"run"}, env, filepath.Join(w.dir, fmt.Sprintf("bridge-%s-%d.log", b.id, b.instance)))
	if err != nil {
		return err
	}
	b.proc = p
	const started = `"message":"bridge started"`
	return p.waitFor(ctx, 60*time.Second, "it logged "+started, func() bool {
		b, err := os.ReadFile(p.logPath)
		return err == nil && strings.Contains(string(b), started)
	})
}
