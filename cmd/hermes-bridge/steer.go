package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// defaultSteerTimeout bounds the wait for the bridge's answer to a steer request (the
// bridge asks Hermes before it answers).
const defaultSteerTimeout = 15 * time.Second

func steerFlags(fs *flag.FlagSet, o *cmdOptions) {
	fs.DurationVar(&o.timeout, "timeout", defaultSteerTimeout, "how long to wait for the bridge's answer")
}

// steerText returns the text argument, read from stdin when it is "-".
func steerText(arg string, stdin io.Reader) (string, error) {
	if arg != "-" {
		return arg, nil
	}
	data, err := io.ReadAll(io.LimitReader(stdin, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading the text from stdin: %w", err)
	}
	return strings.TrimRight(string(data), "\r\n"), nil
}

func cmdSteer(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int {
	if o.timeout <= 0 {
		return usageError(sio.err, "steer", "--timeout must be positive")
	}
	text, err := steerText(o.text, sio.in)
	if err != nil {
		return usageError(sio.err, "steer", err.Error())
	}
	if err := events.CheckSteerText(text); err != nil {
		var ae *events.ActionError
		if errors.As(err, &ae) {
			return usageError(sio.err, "steer", "the text "+ae.Reason)
		}
		return usageError(sio.err, "steer", err.Error())
	}
	cl, closeConn, code := dialClient(ctx, "steer", environ, o.conn, sio.err)
	if cl == nil {
		return code
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(cl.ctx, o.timeout)
	r, err := cl.c.Steer(cctx, id, text)
	cancel()
	if err != nil {
		return cl.requestFailed(ctx, sio.err, cl.subjects.Steer(id), o.timeout, err, "")
	}
	switch r.State {
	case events.SteerAccepted:
		fmt.Fprintln(sio.out, "accepted (queued for the run's agent; text it never reads comes back as pending_steer in the result)")
		return exitOK
	case events.SteerRefused:
		fmt.Fprintf(sio.err, "hermes-bridge steer: refused: %s: %s\n", sanitize(r.Code), sanitize(r.Reason))
		return exitFailed
	default:
		fmt.Fprintf(sio.err, "hermes-bridge steer: unexpected reply state %q\n", sanitize(r.State))
		return exitUsage
	}
}

const usageSteer = `Usage:
  hermes-bridge steer [flags] <action_id> <text>
  hermes-bridge steer [flags] <action_id> -        (the text from stdin)

Adds text to the running governed run (operation run) of an action: a request
on <prefix>.steer.<action_id> that the replica following the run forwards to
Hermes (POST /v1/runs/{run_id}/steer, Hermes v0.21 or later). Hermes queues the
text for the run's agent, which reads it at its next step; text it never reads
comes back in the result as output.pending_steer. The text is not logged.

Prints accepted, or the refusal's code and reason on stderr:
  not_running        the run has not started, waits for a tool approval, is
                     stopping, or is over
  not_a_run          the action is not a governed run
  unknown            the bridge has no record of the action
  steer_unsupported  the endpoint does not support steer (Hermes before v0.21)
  not_accepted       the run's agent declined the text
  invalid_request    the text is blank or too long (at most 8000 characters)
  failed             the request to Hermes failed; the text may have reached
                     the run

Exit status: 0 when accepted, 1 when refused, 2 when no bridge answered (none
running, or --timeout passed), when the NATS user may not send the request
(permission denied), or for usage and connection errors.

Flags:
`

const examplesSteer = `
Examples:
  hermes-bridge steer 3xTnq8v2Lk0aQ "focus on the failing tests first"
  echo "use the staging database" | hermes-bridge steer 3xTnq8v2Lk0aQ -
  hermes-bridge steer --timeout 30s 3xTnq8v2Lk0aQ "stop after the summary"
`
