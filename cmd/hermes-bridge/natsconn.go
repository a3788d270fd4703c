package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
)

// natsConn is where and how a command connects to NATS. Each setting comes from the
// first of: the command's flags, the environment (NATS_URL, NATS_USER, ...), a NATS
// context (see resolveConn). The credentials are taken as a whole from one of them: a
// user and password from the flags replace credentials set in the environment, and a
// context's credentials are used only when neither the flags nor the environment set
// any. Likewise the client certificate and its key.
type natsConn struct {
	// url is the server list; "" when none is set: `run` starts its embedded server,
	// the client commands connect to it (Config.clientURL).
	url                                       string
	creds, nkey, user, password, passwordFile string
	token, tokenFile                          string
	jwt, seed                                 string // a context's user_jwt and user_seed
	tlsCA, tlsCert, tlsKey                    string
	tlsFirst                                  bool
	inboxPrefix                               string
	dialer                                    nats.CustomDialer // a context's SOCKS proxy, nil for none
	// urlFrom and authFrom say where the URL and the credentials came from: "env",
	// "flags", or the context's label.
	urlFrom, authFrom string
	ctx               *natsContext // the context used, nil for none
	// notes are what the command should say on stderr before it connects: a setting of
	// the environment that overrides a context named for the command.
	notes []string
}

// connFlags are the connection flags of every client command, named as natscli names
// them.
type connFlags struct {
	server, inboxPrefix, context string
	creds, user, password        string
	tlsCert, tlsKey, tlsCA       string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", "", "NATS URL(s), comma-separated (default: NATS_URL, else the NATS context's, else the embedded server of 'run')")
	fs.StringVar(&c.context, "context", "", "natscli context to connect with (default: NATS_CONTEXT, else the one selected with 'nats context select')")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials file (JWT and nkey seed); replaces NATS_* and context credentials")
	fs.StringVar(&c.user, "user", "", "NATS user name (with --password); replaces NATS_* and context credentials")
	fs.StringVar(&c.password, "password", "", "NATS password of --user (visible to other local users in the process list: prefer NATS_PASSWORD_FILE or a context)")
	fs.StringVar(&c.tlsCert, "tlscert", "", "PEM client certificate for mutual TLS (with --tlskey)")
	fs.StringVar(&c.tlsKey, "tlskey", "", "PEM private key of --tlscert")
	fs.StringVar(&c.tlsCA, "tlsca", "", "PEM file of the CA(s) that sign the NATS server certificate")
	fs.StringVar(&c.inboxPrefix, "inbox-prefix", "", "inbox prefix of the connection (default: NATS_INBOX_PREFIX, else the context's, else _INBOX); a NATS user limited to its own inbox needs it, e.g. _INBOX_dashboard")
}

// connectionHelp is the part of every client command's help that says where it connects.
const connectionHelp = `
Connecting to NATS. Each setting comes from the first of:
  1. the flags: --server, --creds, --user/--password, --tlscert/--tlskey, --tlsca,
     --inbox-prefix;
  2. the environment: NATS_URL, NATS_CREDS, NATS_NKEY, NATS_USER with
     NATS_PASSWORD(_FILE), NATS_TOKEN(_FILE), NATS_TLS_CERT/NATS_TLS_KEY,
     NATS_TLS_CA, NATS_INBOX_PREFIX;
  3. a natscli context: --context NAME, else NATS_CONTEXT, else the one selected
     with 'nats context select' (its url, user/password, token, creds, nkey,
     user_jwt/user_seed, cert/key, ca, inbox_prefix, tls_first, socks_proxy);
  4. the embedded server of 'hermes-bridge run'
     (nats://HERMES_BRIDGE_NATS_HOST:HERMES_BRIDGE_NATS_PORT), without credentials.
The credentials are taken whole from the first source that sets any; so is the
client certificate with its key. Passwords and tokens are never printed.
`

// check returns the usage error of flags that do not go together, or of an inbox
// prefix that is not one; nil when there is none.
func (f connFlags) check() error {
	switch {
	case f.creds != "" && (f.user != "" || f.password != ""):
		return errors.New("--creds and --user/--password exclude each other: use one")
	case f.user != "" && f.password == "":
		return errors.New("--user needs --password")
	case f.password != "" && f.user == "":
		return errors.New("--password needs --user")
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return errors.New("--tlscert and --tlskey go together")
	case f.inboxPrefix != "" && !validInboxPrefix(f.inboxPrefix):
		return fmt.Errorf("--inbox-prefix %q %s", f.inboxPrefix, inboxPrefixRule)
	}
	return nil
}

// resolveConn returns where and how a client command, or `run` (f zero), connects: the
// flags f (checked with check) over the environment's cfg over the context nctx (nil
// for none). The error lists the files of the flags and every problem of the context,
// naming the flag or the context; cfg's own problems are ValidateClient's and
// ValidateRun's.
func resolveConn(cfg *Config, f connFlags, nctx *natsContext) (*natsConn, error) {
	c := &natsConn{
		url: cfg.NATSURL, creds: cfg.NATSCreds, nkey: cfg.NATSNKey, user: cfg.NATSUser, password: cfg.NATSPassword,
		passwordFile: cfg.NATSPasswordFile, token: cfg.NATSToken, tokenFile: cfg.NATSTokenFile,
		tlsCA: cfg.NATSTLSCA, tlsCert: cfg.NATSTLSCert, tlsKey: cfg.NATSTLSKey, inboxPrefix: cfg.NATSInboxPrefix,
		urlFrom: "env", authFrom: "env", ctx: nctx,
	}
	var p ConfigError
	if f.server != "" {
		checkNATSURLs(&p, "--server", f.server)
		c.url, c.urlFrom = f.server, "flags"
	}
	if f.creds != "" || f.user != "" || f.password != "" {
		p.file("--creds", f.creds)
		c.creds, c.nkey, c.user, c.password, c.passwordFile, c.token, c.tokenFile = f.creds, "", f.user, f.password, "", "", ""
		c.authFrom = "flags"
	}
	if f.tlsCert != "" || f.tlsKey != "" {
		p.file("--tlscert", f.tlsCert)
		p.file("--tlskey", f.tlsKey)
		c.tlsCert, c.tlsKey = f.tlsCert, f.tlsKey
	}
	if f.tlsCA != "" {
		p.file("--tlsca", f.tlsCA)
		c.tlsCA = f.tlsCA
	}
	if f.inboxPrefix != "" {
		c.inboxPrefix = f.inboxPrefix
	}
	if nctx != nil {
		c.useContext(nctx, &p)
	}
	return c, p.err()
}

// hasAuth reports whether any credential is set.
func (c *natsConn) hasAuth() bool {
	return c.creds != "" || c.nkey != "" || c.user != "" || c.password != "" || c.passwordFile != "" ||
		c.token != "" || c.tokenFile != "" || c.jwt != ""
}

// useContext fills what the flags and the environment left unset from the context n,
// adding the problems of its settings to p.
func (c *natsConn) useContext(n *natsContext, p *ConfigError) {
	x, label := n.c, n.label()
	if err := x.validate(); err != nil {
		p.add("%s (%s): %v", label, n.path, err)
	}
	unsupported := map[string]string{
		"jetstream_domain": x.JSDomain, "jetstream_api_prefix": x.JSAPIPrefix, "jetstream_event_prefix": x.JSEventPrefix,
		"windows_cert_store": x.WinCertStore, "nsc": x.NSCLookup,
	}
	for _, k := range []string{"jetstream_domain", "jetstream_api_prefix", "jetstream_event_prefix", "windows_cert_store", "nsc"} {
		if unsupported[k] != "" {
			p.add("%s (%s) sets %s, which hermes-bridge does not support: connect with a context without it", label, n.path, k)
		}
	}
	if c.url == "" {
		c.url, c.urlFrom = x.serverURL(), label
		checkNATSURLs(p, label+" url", c.url)
	} else if n.explicit() {
		from := "NATS_URL"
		if c.urlFrom == "flags" {
			from = "--server"
		}
		c.notes = append(c.notes, fmt.Sprintf("%s overrides the server of %s (%s)", from, label, redactURLs(x.serverURL())))
	}
	if !c.hasAuth() {
		c.authFrom = label
		switch {
		case x.User != "":
			c.user, c.password = x.User, x.Password
		case x.Creds != "":
			c.creds = x.Creds
			p.file(label+" creds", c.creds)
		case x.NKey != "":
			c.nkey = x.NKey
			p.file(label+" nkey", c.nkey)
		case x.UserJWT != "" && x.UserSeed == "":
			p.add("%s (%s): user_jwt without user_seed is not supported by hermes-bridge", label, n.path)
		case x.UserJWT != "":
			c.jwt, c.seed = x.UserJWT, x.UserSeed
		}
		c.token = x.Token
	}
	if c.tlsCA == "" && x.CA != "" {
		c.tlsCA = x.CA
		p.file(label+" ca", c.tlsCA)
	}
	if c.tlsCert == "" && c.tlsKey == "" && (x.Cert != "" || x.Key != "") {
		if x.Cert == "" || x.Key == "" {
			p.add("%s (%s): cert and key go together", label, n.path)
		}
		c.tlsCert, c.tlsKey = x.Cert, x.Key
		p.file(label+" cert", c.tlsCert)
		p.file(label+" key", c.tlsKey)
	}
	if c.inboxPrefix == "" && x.InboxPrefix != "" {
		c.inboxPrefix = x.InboxPrefix
		if !validInboxPrefix(c.inboxPrefix) {
			p.add("%s (%s): inbox_prefix %q %s", label, n.path, c.inboxPrefix, inboxPrefixRule)
		}
	}
	c.tlsFirst = x.TLSFirst
	if x.SocksProxy != "" {
		c.dialer = socksDialer{proxy: x.SocksProxy}
	}
}

// source names where the setting of the given kind came from, for messages: "NATS_NKEY"
// (env), "--creds" (flags), `NATS context "x" nkey`.
func source(from, env, flagName, setting string) string {
	switch from {
	case "env":
		return env
	case "flags":
		return flagName
	}
	return from + " " + setting
}

// describe says where the connection goes, for messages: the URL without credentials and
// the context it came from.
func (c *natsConn) describe(servers string) string {
	s := redactURLs(servers)
	if c.urlFrom != "env" && c.urlFrom != "flags" && c.ctx != nil {
		s += " (" + c.ctx.label() + ", " + c.ctx.path + ")"
	}
	return s
}

// checkNATSURLs adds a problem for each entry of the comma-separated list that is not a
// NATS URL; key names the setting.
func checkNATSURLs(p *ConfigError, key, list string) {
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		full := raw
		if !strings.Contains(full, "://") {
			full = "nats://" + full
		}
		u, err := url.Parse(full)
		switch {
		case raw == "" || err != nil || u.Host == "":
			p.add("%s=%s: each comma-separated entry must be a URL such as nats://host:4222", key, redactURL(raw))
		case u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss":
			p.add("%s=%s: scheme must be nats, tls, ws or wss", key, redactURL(raw))
		}
	}
}

// natsOptions builds the client options of c: name, reconnects forever, how a server
// that stops answering is given up and how soon a server is tried again (live),
// credentials and TLS, and handlers that log connection changes and asynchronous errors
// (those handled, when not nil, reports as handled are not logged). Secret files are
// read here; errors name the file and where it was set, never its content.
func (c *natsConn) natsOptions(name string, live bridge.Liveness, log zerolog.Logger, handled func(error) bool) ([]nats.Option, error) {
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.Timeout(5 * time.Second),
	}, live.Options()...)
	opts = append(opts,
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() || nc.IsDraining() {
				return // our own shutdown
			}
			ev := log.Warn()
			if err != nil {
				ev = ev.Err(err)
			}
			ev.Msg("NATS disconnected; reconnecting")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", redactURL(nc.ConnectedUrl())).Msg("NATS reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if handled != nil && handled(err) {
				return
			}
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("NATS asynchronous error")
		}),
	)
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: cannot read an nkey seed from this file", source(c.authFrom, "NATS_NKEY", "--nkey", "nkey"), c.nkey)
		}
		opts = append(opts, o)
	}
	if c.jwt != "" {
		opts = append(opts, nats.UserJWTAndSeed(c.jwt, c.seed))
	}
	if c.user != "" {
		pw, err := secretOrFile(c.password, "NATS_PASSWORD_FILE", c.passwordFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(c.user, pw))
	}
	if c.token != "" || c.tokenFile != "" {
		tok, err := secretOrFile(c.token, "NATS_TOKEN_FILE", c.tokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Token(tok))
	}
	if c.inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.inboxPrefix))
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	if c.tlsFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	if c.dialer != nil {
		opts = append(opts, nats.SetCustomDialer(c.dialer))
	}
	return opts, nil
}
