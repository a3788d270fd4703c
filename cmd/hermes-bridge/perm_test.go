package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// violation is the error nats.go hands the error handler for the server's -ERR.
func violation(serverText string) error {
	return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, serverText)
}

func TestPermGuard(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	g := &permGuard{user: "dashboard", inbox: defaultInbox, cancel: cancel}

	if g.handle(errors.New("nats: slow consumer, messages dropped")) {
		t.Fatal("a slow consumer error was taken for a permission violation")
	}
	if ctx.Err() != nil {
		t.Fatal("context cancelled by another error")
	}

	// A tolerated subject calls its handler and leaves the command alone.
	var tolerated *permissionError
	stop := g.tolerateOn("$JS.API.CONSUMER.INFO.HERMES_ACTIONS.hermes-bridge", func(err error) { errors.As(err, &tolerated) })
	if !g.handle(violation(`Permissions Violation for Publish to "$JS.API.CONSUMER.INFO.HERMES_ACTIONS.hermes-bridge"`)) {
		t.Fatal("violation not recognised")
	}
	stop()
	if tolerated == nil || tolerated.Op != "publish" || ctx.Err() != nil {
		t.Fatalf("tolerated violation: %+v, ctx %v", tolerated, ctx.Err())
	}
	// ... also when it comes back as the connection's last error.
	if pe := g.unreported(violation(`Permissions Violation for Publish to "$JS.API.CONSUMER.INFO.HERMES_ACTIONS.hermes-bridge"`)); pe != nil {
		t.Fatalf("tolerated violation reported: %v", pe)
	}

	g.handle(violation(`Permissions Violation for Subscription to "_INBOX.abc.*"`))
	var pe *permissionError
	if !errors.As(context.Cause(ctx), &pe) || !errors.Is(context.Cause(ctx), nats.ErrPermissionViolation) {
		t.Fatalf("cause %v, want the permission error", context.Cause(ctx))
	}
	want := `permission denied on _INBOX.abc.*: NATS user "dashboard" may not subscribe to "_INBOX.abc.*"; its permissions do not allow the default inbox _INBOX.>: set NATS_INBOX_PREFIX (or --inbox-prefix)`
	if !strings.HasPrefix(pe.Error(), want) {
		t.Fatalf("message:\n%s\nwant prefix:\n%s", pe, want)
	}
	// The first violation is the one reported.
	g.handle(violation(`Permissions Violation for Publish to "hermes.cancel.x"`))
	if g.unreported(nil) != pe {
		t.Fatal("unreported: want the first violation")
	}
	if got := g.denied(nil); got != pe {
		t.Fatalf("denied: %v", got)
	}
	if g.unreported(nil) != nil {
		t.Fatal("a reported violation is still unreported")
	}

	// A violation that only the last error carries (its handler has not run yet).
	g2 := &permGuard{user: "", inbox: "_INBOX_agent_chat", cancel: func(error) {}}
	got := g2.denied(violation(`Permissions Violation for Publish to "hermes.actions.primary.models" using queue "q"`))
	if got == nil || got.Subject != "hermes.actions.primary.models" ||
		!strings.Contains(got.Error(), `this NATS user may not publish to "hermes.actions.primary.models"; the user's publish permissions lack it`) {
		t.Fatalf("denied from the last error: %v", got)
	}
	got = (&permGuard{inbox: "_INBOX_agent_chat"}).parse(violation(`Permissions Violation for Subscription to "_INBOX_agent_chat.xyz.*"`))
	if !strings.Contains(got.Error(), "its permissions do not allow the inbox prefix _INBOX_agent_chat: set NATS_INBOX_PREFIX") {
		t.Fatalf("custom inbox refused: %v", got)
	}
}
