// Command hermes-bridge bridges NATS JetStream to Hermes Agent API servers.
//
//	hermes-bridge run                 the service
//	hermes-bridge call [flags]        publish one action and follow it
//	hermes-bridge watch <action_id>   follow an action's events and result
//	hermes-bridge pending             list the actions waiting for approval
//	hermes-bridge approve <action_id> show a parked action and approve it
//	hermes-bridge deny <action_id>    show a parked action and deny it
//	hermes-bridge cancel <action_id>  cancel an action
//	hermes-bridge steer <action_id> <text>  add text to a running governed run
//	hermes-bridge status <action_id>  what the bridges' records know about an action
//	hermes-bridge version
//
// Configuration comes from the environment (see `hermes-bridge run --help`).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/events"
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
	go func() {
		cancel(signalReceived{<-sigs})
		// The default behaviour is back, so a second signal kills the process even if
		// the graceful shutdown hangs.
		signal.Stop(sigs)
	}()
	os.Exit(Main(ctx, os.Args[1:], env.ToMap(os.Environ()), stdio{os.Stdin, os.Stdout, os.Stderr}))
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
	if c, ok := clientCommands[cmd]; ok {
		return c.main(ctx, cmd, rest, environ, io)
	}
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, environ, io)
	case "version", "--version":
		return cmdVersion(rest, io)
	case "help", "-h", "-help", "--help":
		return cmdHelp(rest, io)
	default:
		fmt.Fprintf(io.err, "hermes-bridge: unknown command %q\nRun 'hermes-bridge --help' for the list of commands.\n", cmd)
		return exitUsage
	}
}

// cmdOptions are the flags of the client commands; each command registers those it
// takes (clientCommand.flags).
type cmdOptions struct {
	endpoint, op, input, prompt, key, tenant, actionID string        // call
	reason, approver, choice                           string        // approve and deny
	decision                                           string        // events.DecisionApprove or events.DecisionDeny
	text                                               string        // steer: the text argument ("-": stdin)
	timeout, wait                                      time.Duration // timeout: call's deadline, the other commands' wait for an answer
	timeoutAlias                                       bool          // call: the deadline was given as --timeout
	structured, noFollow, jsonOut, eventsOut, yes      bool
	conn                                               connFlags
}

// clientCommand is a command that connects to NATS: its help, its flags (besides the
// connection flags every one takes) and what it does.
type clientCommand struct {
	usage, examples string
	flags           func(*flag.FlagSet, *cmdOptions)
	// takesID says the command takes one action id; one that takes none appends
	// argHint to the error for a positional argument.
	takesID bool
	// takesText says the action id is followed by one more argument, the text
	// (cmdOptions.text).
	takesText bool
	argHint   string
	// run does the command once its arguments are parsed; id is "" for a command that
	// takes none.
	run func(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int
}

var clientCommands = map[string]clientCommand{
	"call":    {usage: usageCall, examples: examplesCall, flags: callFlags, argHint: " (use --prompt or --input for the input)", run: cmdCall},
	"watch":   {usage: usageWatch, examples: examplesWatch, flags: followFlags, takesID: true, run: cmdWatch},
	"pending": {usage: usagePending, examples: examplesPending, flags: pendingFlags, run: cmdPending},
	"approve": {usage: usageApprove, examples: examplesApprove, flags: approveFlags, takesID: true, run: cmdApprove},
	"deny":    {usage: usageDeny, examples: examplesDeny, flags: denyFlags, takesID: true, run: cmdDeny},
	"cancel":  {usage: usageCancel, examples: examplesCancel, flags: cancelFlags, takesID: true, run: cmdCancel},
	"steer":   {usage: usageSteer, examples: examplesSteer, flags: steerFlags, takesID: true, takesText: true, run: cmdSteer},
	"status":  {usage: usageStatus, examples: examplesStatus, flags: statusFlags, takesID: true, run: cmdStatus},
}

// flagSet returns the command's flags, bound to o.
func (c clientCommand) flagSet(name string, o *cmdOptions) *flag.FlagSet {
	fs := newFlagSet(name)
	c.flags(fs, o)
	o.conn.register(fs)
	return fs
}

// help prints the command's help.
func (c clientCommand) help(w io.Writer, name string) {
	printFlagsHelp(w, c.usage, c.flagSet(name, &cmdOptions{}), connectionHelp+c.examples)
}

// main parses the arguments of command name (flags, and the action id when it takes
// one) and runs it.
func (c clientCommand) main(ctx context.Context, name string, args []string, environ map[string]string, sio stdio) int {
	var o cmdOptions
	pos, code, ok := parseCommand(name, c.flagSet(name, &o), args, sio, func() { c.help(sio.out, name) })
	switch {
	case !ok:
		return code
	case !c.takesID && len(pos) > 0:
		return usageError(sio.err, name, fmt.Sprintf("unexpected argument %q%s", pos[0], c.argHint))
	case !c.takesID:
		return c.run(ctx, "", &o, environ, sio)
	case len(pos) == 0:
		return usageError(sio.err, name, "missing the action id")
	case c.takesText && len(pos) == 1:
		return usageError(sio.err, name, "missing the text (or - to read it from stdin)")
	case c.takesText && len(pos) > 2:
		return usageError(sio.err, name, fmt.Sprintf("unexpected argument %q (%s takes an action id and one text; quote the text)", pos[2], name))
	case !c.takesText && len(pos) > 1:
		return usageError(sio.err, name, fmt.Sprintf("unexpected argument %q (%s takes one action id)", pos[1], name))
	case !events.ValidActionID(pos[0]):
		return usageError(sio.err, name, "the action id must match [A-Za-z0-9_-]{1,128}")
	}
	if c.takesText {
		o.text = pos[1]
	}
	return c.run(ctx, pos[0], &o, environ, sio)
}
