package main

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/hermes-bridge/hermes-bridge/bridge/ui"
)

// uiEnabled reports whether run serves the dashboard at /ui: HERMES_BRIDGE_UI=true, or
// auto (the default) with the embedded server or a configured WebSocket URL. It needs
// the operations listener.
func (c *Config) uiEnabled() bool {
	if c.HTTPAddr == "" {
		return false
	}
	switch c.UI {
	case "true":
		return true
	case "auto":
		return !c.external() || c.UINATSURL != ""
	}
	return false
}

func (c *Config) validateUI(p *ConfigError) {
	switch c.UI {
	case "auto", "true", "false":
	default:
		p.add("HERMES_BRIDGE_UI=%s: must be auto, true or false", c.UI)
		return
	}
	if c.UI == "true" && c.HTTPAddr == "" {
		p.add("HERMES_BRIDGE_UI=true but HERMES_BRIDGE_HTTP_ADDR is empty: the dashboard is served by the operations listener")
	}
	if c.UI == "true" && c.external() && c.UINATSURL == "" {
		p.add("HERMES_BRIDGE_UI=true with NATS_URL or NATS_CONTEXT: set HERMES_BRIDGE_UI_NATS_URL to the WebSocket URL browsers reach the NATS servers at (wss://...)")
	}
	if c.UIWebSocketPort != -1 && (c.UIWebSocketPort < 1 || c.UIWebSocketPort > 65535) {
		p.add("HERMES_BRIDGE_UI_WS_PORT=%d: must be 1 to 65535, or -1 for a free port", c.UIWebSocketPort)
	}
	if c.UINATSURL != "" {
		for _, raw := range strings.Split(c.UINATSURL, ",") {
			raw = strings.TrimSpace(raw)
			u, err := url.Parse(raw)
			if err != nil || u.Host == "" || (u.Scheme != "ws" && u.Scheme != "wss") || u.User != nil {
				p.add("HERMES_BRIDGE_UI_NATS_URL=%s: each comma-separated entry must be a ws:// or wss:// URL without credentials, such as wss://nats.example.com:443", redactURL(raw))
			}
		}
	}
	if (c.UINATSUser == "") != (c.UINATSPasswordFile == "") {
		p.add("HERMES_BRIDGE_UI_NATS_USER and HERMES_BRIDGE_UI_NATS_PASSWORD_FILE must be set together")
	}
	p.file("HERMES_BRIDGE_UI_NATS_PASSWORD_FILE", c.UINATSPasswordFile)
	if !validInboxPrefix(c.UIInboxPrefix) {
		p.add("HERMES_BRIDGE_UI_INBOX_PREFIX=%s: %s", c.UIInboxPrefix, inboxPrefixRule)
	}
}

// uiConfig is what the page is told: the WebSocket URL(s) (HERMES_BRIDGE_UI_NATS_URL,
// else the embedded server's wsURL), names, and the dashboard credential only when one
// is configured. Never the bridge's own NATS credentials nor a Hermes key.
func (c *Config) uiConfig(wsURL string) (ui.Config, error) {
	uc := ui.Config{InboxPrefix: c.UIInboxPrefix, Prefix: c.Prefix, OutputStream: c.OutputStream, DLQStream: c.DLQStream}
	// The page replays results from an hour ago, or from as long ago as an action may
	// still wait for its decision, so that every parked action shows.
	if m := int(math.Ceil(c.ApprovalTTL.Minutes())); m > ui.DefaultHistoryMinutes {
		uc.HistoryMinutes = m
	}
	if c.UINATSURL != "" {
		for _, s := range strings.Split(c.UINATSURL, ",") {
			uc.Servers = append(uc.Servers, strings.TrimSpace(s))
		}
	} else if wsURL != "" {
		uc.Servers = []string{wsURL}
	}
	if c.UINATSUser != "" {
		pw, err := readSecretFile("HERMES_BRIDGE_UI_NATS_PASSWORD_FILE", c.UINATSPasswordFile)
		if err != nil {
			return ui.Config{}, err
		}
		uc.User, uc.Password = c.UINATSUser, pw
	}
	return uc, nil
}

// uiOrigins are the origins a browser shows for the operations listener at addr: the
// embedded server's WebSocket listener admits pages from these only, so a page from
// any other site open in the same browser cannot use the (user-less) embedded server.
func uiOrigins(addr string) []string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	if _, err := strconv.Atoi(port); err != nil {
		return nil
	}
	out := []string{"http://127.0.0.1:" + port, "http://localhost:" + port, "http://[::1]:" + port}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsLoopback() && !ip.IsUnspecified()) {
		out = append(out, fmt.Sprintf("http://%s", net.JoinHostPort(host, port)))
	}
	return out
}
