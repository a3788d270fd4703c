package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// permissionError is a permission violation the NATS server reported for a message or
// a subscription of this connection. The server refuses such a message silently for
// the sender (a request just gets no reply); it reports the violation asynchronously,
// so the commands watch for it instead of waiting out a timeout.
type permissionError struct {
	Op      string // "publish" or "subscribe"
	Subject string
	user    string // NATS_USER, "" when unknown
	inbox   string // the connection's inbox prefix (default _INBOX)
	err     error  // nats.go's error, wrapping nats.ErrPermissionViolation
}

// who names the NATS user refused: "NATS user \"dashboard\"", or "this NATS user".
func (e *permissionError) who() string {
	if e.user == "" {
		return "this NATS user"
	}
	return fmt.Sprintf("NATS user %q", e.user)
}

func (e *permissionError) Error() string {
	msg := fmt.Sprintf("permission denied on %s: %s may not %s to %q", e.Subject, e.who(), e.Op, e.Subject)
	switch {
	case e.Op == "subscribe" && strings.HasPrefix(e.Subject, e.inbox+"."):
		if e.inbox == defaultInbox {
			msg += "; its permissions do not allow the default inbox " + e.inbox + ".>"
		} else {
			msg += "; its permissions do not allow the inbox prefix " + e.inbox
		}
		msg += ": set NATS_INBOX_PREFIX (or --inbox-prefix) to the user's inbox prefix (deploy/README.md lists each role's, e.g. _INBOX_dashboard)"
	default:
		msg += fmt.Sprintf("; the user's %s permissions lack it: add it, or use a user whose role includes this command (deploy/README.md)", e.Op)
	}
	return msg
}

// Unwrap returns nats.go's error (errors.Is(err, nats.ErrPermissionViolation) holds).
func (e *permissionError) Unwrap() error { return e.err }

// defaultInbox is nats.go's inbox prefix when none is configured.
const defaultInbox = "_INBOX"

var violationRE = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// permGuard turns the asynchronous permission violations of one connection into the
// error of the command that caused them: the first one cancels the command's context
// with the violation as its cause. Violations on subjects tolerated with tolerate go to
// their own handler instead.
type permGuard struct {
	user, inbox string
	cancel      context.CancelCauseFunc

	mu       sync.Mutex
	first    *permissionError
	reported bool
	tolerate map[string]func(error)
}

// parse returns err as a permissionError, or nil if it is not a permission violation.
func (g *permGuard) parse(err error) *permissionError {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	pe := &permissionError{Op: "publish", Subject: "(unknown subject)", user: g.user, inbox: g.inbox, err: err}
	if m := violationRE.FindStringSubmatch(err.Error()); m != nil {
		pe.Subject = m[2]
		if m[1] == "Subscription" {
			pe.Op = "subscribe"
		}
	}
	return pe
}

// handle is called with every asynchronous error of the connection; it reports whether
// err was a permission violation.
func (g *permGuard) handle(err error) bool {
	pe := g.parse(err)
	if pe == nil {
		return false
	}
	g.mu.Lock()
	f, tolerated := g.tolerate[pe.Subject]
	if !tolerated && g.first == nil {
		g.first = pe
	}
	g.mu.Unlock()
	switch {
	case !tolerated:
		g.cancel(pe)
	case f != nil:
		f(pe)
	}
	return true
}

// tolerateOn makes a violation on subject call f with its *permissionError instead of
// failing the command, until the returned function is called (after which such a
// violation is ignored). f may be the cancel function of a context.WithCancelCause.
func (g *permGuard) tolerateOn(subject string, f func(error)) (stop func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tolerate == nil {
		g.tolerate = map[string]func(error){}
	}
	g.tolerate[subject] = f
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.tolerate[subject] = nil
	}
}

// denied returns the violation that failed the command, if any, and marks it reported.
// lastErr is the connection's last error: the server sends its -ERR for a refused
// message before it answers a later PING, and nats.go records it as the last error
// before it queues the asynchronous handler, so after a flush it is there even if the
// handler has not run yet.
func (g *permGuard) denied(lastErr error) *permissionError {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.noteLocked(lastErr)
	if g.first != nil {
		g.reported = true
	}
	return g.first
}

// unreported returns a violation (seen so far, or lastErr) that no command error has
// reported.
func (g *permGuard) unreported(lastErr error) *permissionError {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.noteLocked(lastErr)
	if g.reported {
		return nil
	}
	return g.first
}

// noteLocked records lastErr as the first violation when it is one, none was seen
// and its subject is not tolerated.
func (g *permGuard) noteLocked(lastErr error) {
	if g.first != nil {
		return
	}
	if pe := g.parse(lastErr); pe != nil {
		if _, tolerated := g.tolerate[pe.Subject]; !tolerated {
			g.first = pe
		}
	}
}
