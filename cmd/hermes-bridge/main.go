// Command hermes-bridge bridges NATS JetStream to Hermes Agent API servers.
//
//	hermes-bridge run                 the service
//	hermes-bridge call [flags]        publish one action and follow it
//	hermes-bridge watch <action_id>   follow an action's events and result
//	hermes-bridge pending             list the actions waiting for approval
//	hermes-bridge approve <action_id> show a parked action and approve it
//	hermes-bridge deny <action_id>    show a parked action and deny it
//	hermes-bridge cancel <action_id>  cancel an action
//	hermes-bridge status <action_id>  what the bridges' records know about an action
//	hermes-bridge version
//
// Configuration comes from the environment (see `hermes-bridge run --help`).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/caarlos0/env/v11"
	"github.com/rs/zerolog"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1   // the action failed, or `run` stopped on an error, or approve/deny/cancel found nothing to act on
	exitUsage       = 2   // usage, configuration or connection error
	exitCancelled   = 3   // the action was cancelled
	exitInterrupted = 130 // call/watch stopped following on SIGINT/SIGTERM
)

// stdio are the process streams, replaceable in tests.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

func init() {
	// Every duration in the logs carries its unit ("2s", not 2000).
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
}

func main() {
	// SIGINT or SIGTERM cancels ctx with a signalReceived cause (run logs it at once).
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		// After the first signal the default behaviour is back, so a second one kills
		// the process even if the graceful shutdown hangs.
		defer signal.Stop(sigs)
		select {
		case sig := <-sigs:
			cancel(signalReceived{sig})
		case <-done:
		}
	}()
	code := Main(ctx, os.Args[1:], env.ToMap(os.Environ()), stdio{os.Stdin, os.Stdout, os.Stderr})
	close(done)
	<-stopped
	cancel(nil)
	os.Exit(code)
}

// signalReceived is the cause of main's context when a signal stopped the process.
type signalReceived struct{ sig os.Signal }

func (s signalReceived) Error() string { return s.name() + " received" }

// name is the signal's conventional name: SIGINT, SIGTERM.
func (s signalReceived) name() string {
	switch s.sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.sig.String()
}

// Main dispatches the subcommand and returns the exit status.
func Main(ctx context.Context, args []string, environ map[string]string, io stdio) int {
	if len(args) == 0 {
		fmt.Fprint(io.err, usageTop)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, environ, io)
	case "call":
		return cmdCall(ctx, rest, environ, io)
	case "watch":
		return cmdWatch(ctx, rest, environ, io)
	case "pending":
		return cmdPending(ctx, rest, environ, io)
	case "approve":
		return cmdApprove(ctx, rest, environ, io)
	case "deny":
		return cmdDeny(ctx, rest, environ, io)
	case "cancel":
		return cmdCancel(ctx, rest, environ, io)
	case "status":
		return cmdStatus(ctx, rest, environ, io)
	case "version", "--version":
		return cmdVersion(rest, io)
	case "help", "-h", "-help", "--help":
		return cmdHelp(rest, io)
	default:
		fmt.Fprintf(io.err, "hermes-bridge: unknown command %q\nRun 'hermes-bridge --help' for the list of commands.\n", cmd)
		return exitUsage
	}
}
