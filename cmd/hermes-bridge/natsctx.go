package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/jsm.go/natscontext"
)

// natsContext is a natscli context (`nats context add`, `nats context select`): a named
// set of connection settings in natscli's configuration directory, read with natscli's
// own library (jsm.go/natscontext).
type natsContext struct {
	name, path string
	// how says how it was chosen: "--context", "NATS_CONTEXT", or "selected" (with
	// `nats context select`).
	how string
	c   *natscontext.Context
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
	c, err := natscontext.NewFromFile(n.path)
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
