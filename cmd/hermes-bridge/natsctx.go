package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"
	"golang.org/x/net/proxy"
)

// natsContext is a natscli context (`nats context add`, `nats context select`): a named
// set of connection settings in natscli's configuration directory.
type natsContext struct {
	name, path string
	// how says how it was chosen: "--context", "NATS_CONTEXT", or "selected" (with
	// `nats context select`).
	how string
	c   contextSettings
}

// contextSettings is a context file as natscli writes it (natscli v0.5.0, whose
// library is jsm.go/natscontext): a JSON object of these members, unknown ones ignored.
// It is read here rather than with that library, which brings the whole of jsm.go
// (JetStream management, an expression engine) into the bridge's binary: 4 MB more of
// it, and 2 to 4 MiB more resident memory in every replica. TestContextFileOfNatscli
// reads the files natscli itself writes.
type contextSettings struct {
	URL           string `json:"url"`
	SocksProxy    string `json:"socks_proxy"`
	Token         string `json:"token"`
	User          string `json:"user"`
	Password      string `json:"password"`
	Creds         string `json:"creds"`
	NKey          string `json:"nkey"`
	Cert          string `json:"cert"`
	Key           string `json:"key"`
	CA            string `json:"ca"`
	NSCLookup     string `json:"nsc"`
	JSDomain      string `json:"jetstream_domain"`
	JSAPIPrefix   string `json:"jetstream_api_prefix"`
	JSEventPrefix string `json:"jetstream_event_prefix"`
	InboxPrefix   string `json:"inbox_prefix"`
	UserJWT       string `json:"user_jwt"`
	UserSeed      string `json:"user_seed"`
	TLSFirst      bool   `json:"tls_first"`
	WinCertStore  string `json:"windows_cert_store"`
}

// readContextFile reads the context file path as natscli does. Its file members (cert,
// key, ca, nkey, and creds, user_jwt and user_seed when they are paths) have $VAR and
// ${VAR} expanded from environ and a leading ~ as environ's HOME; a file:// URI is its
// path. The credentials may also be given as natscli v0.5 writes them with --embed
// (data:;base64,...) or as env://NAME: creds are then parsed into user_jwt and user_seed;
// user_jwt and user_seed given as paths are read. op:// and nsc:// are refused.
func readContextFile(path string, environ map[string]string) (contextSettings, error) {
	var c contextSettings
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"cert", &c.Cert}, {"key", &c.Key}, {"ca", &c.CA}, {"nkey", &c.NKey}} {
		content, p, err := contextRef(f.name, *f.v, environ)
		if err == nil && content != "" {
			err = fmt.Errorf("%s: only a file is supported here, not its content inline", f.name)
		}
		if err != nil {
			return c, err
		}
		*f.v = p
	}
	content, p, err := contextRef("creds", c.Creds, environ)
	if err != nil {
		return c, err
	}
	c.Creds = p
	if content != "" {
		if c.UserJWT, c.UserSeed, err = parseCreds(content); err != nil {
			return c, err
		}
	}
	for _, f := range []struct {
		name   string
		v      *string
		inline string // how the value itself starts (natscli before v0.5 kept them inline)
	}{{"user_jwt", &c.UserJWT, "eyJ"}, {"user_seed", &c.UserSeed, "SU"}} {
		if *f.v == "" || strings.HasPrefix(*f.v, f.inline) {
			continue
		}
		content, p, err := contextRef(f.name, *f.v, environ)
		if err != nil {
			return c, err
		}
		if content == "" {
			b, err := os.ReadFile(p)
			if err != nil {
				return c, fmt.Errorf("%s: %s", f.name, fileProblem(err))
			}
			content = string(b)
		}
		*f.v = strings.TrimSpace(content)
	}
	return c, nil
}

// contextRef resolves a context's credential or file member v: the content it holds
// (data:, env://) or the path it names (file://, or a plain path, expanded).
func contextRef(name, v string, environ map[string]string) (content, path string, err error) {
	scheme, rest, hasScheme := strings.Cut(v, ":")
	switch {
	case v == "":
		return "", "", nil
	case scheme == "data":
		meta, payload, ok := strings.Cut(rest, ",")
		if !ok {
			return "", "", fmt.Errorf("%s: a data: URI without data", name)
		}
		if !strings.HasSuffix(meta, ";base64") {
			s, err := url.PathUnescape(payload)
			return s, "", err
		}
		b, err := base64.StdEncoding.DecodeString(payload)
		if err != nil {
			return "", "", fmt.Errorf("%s: a data: URI that is not valid base64", name)
		}
		return string(b), "", nil
	case scheme == "env" && strings.HasPrefix(rest, "//"):
		k := strings.TrimPrefix(rest, "//")
		if environ[k] == "" {
			return "", "", fmt.Errorf("%s: env://%s names a variable that is not set", name, k)
		}
		return environ[k], "", nil
	case scheme == "file" && strings.HasPrefix(rest, "//"):
		return "", expandPath(strings.TrimPrefix(rest, "//"), environ), nil
	case hasScheme && (scheme == "op" || scheme == "nsc") && strings.HasPrefix(rest, "//"):
		return "", "", fmt.Errorf("%s: %s:// references are not supported by hermes-bridge: use a file", name, scheme)
	}
	return "", expandPath(v, environ), nil
}

// parseCreds returns the user JWT and nkey seed of a credentials file's content.
func parseCreds(content string) (userJWT, seed string, err error) {
	userJWT, err = nkeys.ParseDecoratedJWT([]byte(content))
	if err != nil {
		return "", "", errors.New("creds: not a NATS credentials file")
	}
	kp, err := nkeys.ParseDecoratedNKey([]byte(content))
	if err != nil {
		return "", "", errors.New("creds: no user nkey seed in the credentials")
	}
	b, err := kp.Seed()
	if err != nil {
		return "", "", errors.New("creds: no user nkey seed in the credentials")
	}
	return userJWT, string(b), nil
}

// expandPath is natscli's expansion of a context's file path: variables from environ,
// then a leading ~ as its HOME.
func expandPath(p string, environ map[string]string) string {
	p = os.Expand(p, func(k string) string { return environ[k] })
	if h := environ["HOME"]; h != "" && strings.HasPrefix(p, "~") {
		p = h + p[1:]
	}
	return p
}

// serverURL is the context's server, natscli's default when it names none.
func (c contextSettings) serverURL() string {
	if c.URL != "" {
		return c.URL
	}
	return "nats://127.0.0.1:4222"
}

// validate refuses what natscli itself refuses: more than one kind of credential.
func (c contextSettings) validate() error {
	n := 0
	for _, s := range []string{c.User, c.Creds, c.NKey, c.NSCLookup, c.UserJWT} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return errors.New("too many kinds of credentials: choose one of user, creds, nkey, nsc, user_jwt")
	}
	return nil
}

// socksDialer dials through the SOCKS5 proxy of a context's socks_proxy (a URL).
type socksDialer struct{ proxy string }

// Dial connects to address through the proxy.
func (d socksDialer) Dial(network, address string) (net.Conn, error) {
	u, err := url.Parse(d.proxy)
	if err != nil {
		return nil, fmt.Errorf("socks_proxy: %w", err)
	}
	p, err := proxy.FromURL(u, proxy.Direct)
	if err != nil {
		return nil, fmt.Errorf("socks_proxy: %w", err)
	}
	return p.Dial(network, address)
}

// label names the context in messages: `NATS context "staging"`.
func (n *natsContext) label() string { return fmt.Sprintf("NATS context %q", n.name) }

// explicit reports whether the context was named for this command (--context or
// NATS_CONTEXT), not merely selected.
func (n *natsContext) explicit() bool { return n.how != "selected" }

// natsConfigDir is natscli's configuration directory as natscli finds it, but from
// environ: $XDG_CONFIG_HOME/nats, else $HOME/.config/nats; "" when neither is set.
func natsConfigDir(environ map[string]string) string {
	if x := environ["XDG_CONFIG_HOME"]; x != "" {
		return filepath.Join(x, "nats")
	}
	if h := environ["HOME"]; h != "" {
		return filepath.Join(h, ".config", "nats")
	}
	return ""
}

// selectedContext is the name `nats context select` recorded in dir, "" for none.
func selectedContext(dir string) string {
	if dir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// knownContexts lists the contexts of dir, sorted.
func knownContexts(dir string) []string {
	entries, _ := os.ReadDir(filepath.Join(dir, "context"))
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// loadNATSContext returns the context a command connects with: the one named by flag
// (--context), else by NATS_CONTEXT, else, when useSelected, the one selected with
// `nats context select`; nil when none is. A context that is named but cannot be read
// is an error, which names the context and its file, never a secret of it.
func loadNATSContext(environ map[string]string, flag string, useSelected bool) (*natsContext, error) {
	dir := natsConfigDir(environ)
	n := &natsContext{name: flag, how: "--context"}
	switch {
	case flag != "":
	case environ["NATS_CONTEXT"] != "":
		n.name, n.how = environ["NATS_CONTEXT"], "NATS_CONTEXT"
	case useSelected:
		n.name, n.how = selectedContext(dir), "selected"
	}
	if n.name == "" {
		return nil, nil
	}
	from := n.how
	if from == "selected" {
		from = "selected with 'nats context select' in " + filepath.Join(dir, "context.txt")
	}
	if !validContextName(n.name) {
		return nil, fmt.Errorf("NATS context %q (%s): not a context name", n.name, from)
	}
	if dir == "" {
		return nil, fmt.Errorf("NATS context %q (%s): neither XDG_CONFIG_HOME nor HOME is set, so natscli's configuration directory is unknown", n.name, from)
	}
	n.path = filepath.Join(dir, "context", n.name+".json")
	if _, err := os.Stat(n.path); err != nil {
		msg := fmt.Sprintf("NATS context %q (%s) not found: no %s", n.name, from, n.path)
		if !errors.Is(err, os.ErrNotExist) {
			msg = fmt.Sprintf("NATS context %q (%s): %s: %s", n.name, from, n.path, fileProblem(err))
		}
		if known := knownContexts(dir); len(known) > 0 {
			msg += "; known contexts: " + strings.Join(known, ", ")
		} else {
			msg += " ('nats context add' creates one)"
		}
		return nil, errors.New(msg)
	}
	c, err := readContextFile(n.path, environ)
	if err != nil {
		return nil, fmt.Errorf("NATS context %q (%s): cannot read %s: %s", n.name, from, n.path, contextProblem(err))
	}
	n.c = c
	return n, nil
}

// validContextName is natscli's rule for a context name.
func validContextName(name string) bool {
	return !strings.Contains(name, "..") && !strings.ContainsAny(name, `/\`)
}

// contextProblem is why a context file could not be read, without its content: a JSON
// syntax error says where only.
func contextProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
	}
	return err.Error()
}
