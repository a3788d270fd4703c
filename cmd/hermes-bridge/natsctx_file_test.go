package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContextFileOfNatscli reads the context files natscli v0.5.0 itself wrote
// (testdata/natscli-contexts, made with `nats context add`; each file's $HOME replaced
// by /HOME, and u.creds a throwaway user's credentials made for this test):
//
//	nats context add all --server nats://a:4222,nats://b:4222 --user u --password p \
//	  --tlscert $HOME/c.pem --tlskey $HOME/k.pem --tlsca $HOME/ca.pem --tlsfirst \
//	  --socks-proxy socks5://127.0.0.1:1080 --inbox-prefix _INBOX_x
//	nats context add creds --creds '~/u.creds'
//	nats context add embedded --creds $HOME/u.creds --embed
//	nats context add jwt --jwt '~/u.jwt' --seed '~/u.seed'
//	nats context add nkey --nkey '$HOME/u.nk'
func TestContextFileOfNatscli(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("testdata", "natscli-contexts"))
	noErr(t, err)
	environ := map[string]string{"HOME": dir}
	read := func(name string) contextSettings {
		t.Helper()
		// The files name /HOME: point it at the directory holding u.creds and the rest.
		b, err := os.ReadFile(filepath.Join(dir, name+".json"))
		noErr(t, err)
		p := filepath.Join(t.TempDir(), name+".json")
		noErr(t, os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/HOME", dir)), 0o600))
		c, err := readContextFile(p, environ)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return c
	}
	creds, err := os.ReadFile(filepath.Join(dir, "u.creds"))
	noErr(t, err)
	wantJWT, wantSeed, err := parseCreds(string(creds))
	noErr(t, err)
	if !strings.HasPrefix(wantJWT, "eyJ") || !strings.HasPrefix(wantSeed, "SU") {
		t.Fatalf("u.creds parsed as %.8s..., %.2s...", wantJWT, wantSeed)
	}

	all := read("all")
	for k, v := range map[string][2]string{
		"url": {all.serverURL(), "nats://a:4222,nats://b:4222"}, "user": {all.User, "u"}, "password": {all.Password, "p"},
		"cert": {all.Cert, filepath.Join(dir, "c.pem")}, "key": {all.Key, filepath.Join(dir, "k.pem")},
		"ca": {all.CA, filepath.Join(dir, "ca.pem")}, "socks_proxy": {all.SocksProxy, "socks5://127.0.0.1:1080"},
		"inbox_prefix": {all.InboxPrefix, "_INBOX_x"},
	} {
		if v[0] != v[1] {
			t.Errorf("all: %s = %q, want %q", k, v[0], v[1])
		}
	}
	if !all.TLSFirst {
		t.Error("all: tls_first not read")
	}
	if c := read("creds"); c.Creds != filepath.Join(dir, "u.creds") || c.UserJWT != "" {
		t.Errorf("creds: creds %q (want the path, ~ expanded), user_jwt %q", c.Creds, c.UserJWT)
	}
	if c := read("embedded"); c.Creds != "" || c.UserJWT != wantJWT || c.UserSeed != wantSeed {
		t.Errorf("embedded (--embed, a data: URI): creds %q, user_jwt %.12q, user_seed set %v; want the JWT and seed of u.creds",
			c.Creds, c.UserJWT, c.UserSeed == wantSeed)
	}
	if c := read("jwt"); c.UserJWT != wantJWT || c.UserSeed != wantSeed {
		t.Errorf("jwt (user_jwt and user_seed as paths): user_jwt %.12q, seed read %v", c.UserJWT, c.UserSeed == wantSeed)
	}
	if c := read("nkey"); c.NKey != filepath.Join(dir, "u.nk") {
		t.Errorf("nkey: %q, want $HOME expanded", c.NKey)
	}
	if c := (contextSettings{}); c.serverURL() != "nats://127.0.0.1:4222" {
		t.Errorf("no url: %q, want natscli's default", c.serverURL())
	}
}

// TestContextRefs covers the credential references natscli v0.5 knows, and refuses
// the ones hermes-bridge does not resolve, without echoing a secret.
func TestContextRefs(t *testing.T) {
	environ := map[string]string{"HOME": "/home/u", "CREDS": "secret-content", "D": "sub"}
	for _, c := range []struct {
		v, content, path, err string
	}{
		{v: "~/x.creds", path: "/home/u/x.creds"},
		{v: "$HOME/${D}/x", path: "/home/u/sub/x"},
		{v: "file://~/x", path: "/home/u/x"},
		{v: "data:;base64,aGVsbG8=", content: "hello"},
		{v: "data:,a%20b", content: "a b"},
		{v: "env://CREDS", content: "secret-content"},
		{v: "env://NOPE", err: "env://NOPE names a variable that is not set"},
		{v: "op://vault/item", err: "op:// references are not supported"},
		{v: "nsc://op/acct/user", err: "nsc:// references are not supported"},
		{v: "data:;base64,!!", err: "not valid base64"},
	} {
		content, path, err := contextRef("creds", c.v, environ)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "secret-content") {
				t.Errorf("%s: error %v, want one saying %q", c.v, err, c.err)
			}
		case err != nil || content != c.content || path != c.path:
			t.Errorf("%s: (%q, %q, %v), want (%q, %q)", c.v, content, path, err, c.content, c.path)
		}
	}
}
