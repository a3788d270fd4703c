package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// defaultStatusTimeout bounds the wait for a bridge's answer to a status request.
const defaultStatusTimeout = 5 * time.Second

func statusFlags(fs *flag.FlagSet, o *cmdOptions) {
	fs.BoolVar(&o.jsonOut, "json", false, "print the bridge's reply as JSON")
	fs.DurationVar(&o.timeout, "timeout", defaultStatusTimeout, "how long to wait for the bridge's answer")
}

// cmdStatus asks the bridges' status endpoint (<prefix>.status) what the ledger knows
// about an action and prints it. Exit status: 0 when the action is known, 1 when it is
// unknown, 2 when no bridge answered, the request was refused or for usage errors.
func cmdStatus(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int {
	if o.timeout <= 0 {
		return usageError(sio.err, "status", "--timeout must be positive")
	}
	cl, closeConn, code := dialClient(ctx, "status", environ, o.conn, sio.err)
	if cl == nil {
		return code
	}
	defer closeConn()
	subject := cl.subjects.Status()
	body, _ := json.Marshal(events.StatusRequest{ActionID: id})
	rctx, cancel := context.WithTimeout(cl.ctx, o.timeout)
	msg, err := cl.nc.RequestWithContext(rctx, subject, body)
	cancel()
	if err != nil {
		return cl.requestFailed(ctx, sio.err, subject, o.timeout, err, " (a version with the status endpoint)")
	}
	if e := msg.Header.Get(micro.ErrorHeader); e != "" {
		fmt.Fprintf(sio.err, "hermes-bridge status: the bridge answered with an error (%s): %s\n",
			sanitize(msg.Header.Get(micro.ErrorCodeHeader)), sanitize(e))
		return exitUsage
	}
	var r events.StatusReply
	if err := json.Unmarshal(msg.Data, &r); err != nil || r.ActionID != id || r.State == "" {
		fmt.Fprintf(sio.err, "hermes-bridge status: unexpected reply on %s\n", subject)
		return exitUsage
	}
	if o.jsonOut {
		out, _ := json.Marshal(&r)
		fmt.Fprintln(sio.out, string(out))
	} else {
		printStatus(sio.out, &r)
	}
	if r.State == events.StateUnknown {
		return exitFailed
	}
	return exitOK
}

// requestFailed reports why a request of the command on subject got no answer (err, not
// nil) and returns the exit status: exitInterrupted when ctx ended, else exitUsage.
// which names what must run for a bridge to answer, after 'hermes-bridge run'.
func (cl *clientConn) requestFailed(ctx context.Context, stderr io.Writer, subject string, timeout time.Duration, err error, which string) int {
	switch {
	case cl.permissionDenied(stderr):
	case errors.Is(err, nats.ErrNoResponders):
		fmt.Fprintf(stderr, "hermes-bridge %s: no bridge answered on %s (no responders): is 'hermes-bridge run' running%s, with the same HERMES_BRIDGE_PREFIX?\n", cl.cmd, subject, which)
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "hermes-bridge %s: interrupted before a bridge answered\n", cl.cmd)
		return exitInterrupted
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		fmt.Fprintf(stderr, "hermes-bridge %s: no bridge answered on %s within %s\n", cl.cmd, subject, timeout)
	default:
		fmt.Fprintf(stderr, "hermes-bridge %s: %v\n", cl.cmd, err)
	}
	return exitUsage
}

// printStatus writes the human summary of r.
func printStatus(w io.Writer, r *events.StatusReply) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, sanitize(v)) }
	row("action", r.ActionID)
	row("state", r.State)
	if r.State == events.StateUnknown {
		tw.Flush()
		fmt.Fprintln(w, "(no record and no result: never seen by a bridge, or expired)")
		return
	}
	if r.CapabilityID != "" {
		row("capability", r.CapabilityID)
	}
	if r.Owner != "" {
		row("owner", r.Owner)
	}
	if r.Attempt > 0 {
		row("attempts", fmt.Sprint(r.Attempt))
	}
	if r.CreatedAt != "" {
		row("age", (time.Duration(r.AgeMS)*time.Millisecond).Round(time.Second).String()+" (created "+r.CreatedAt+")")
	}
	if r.CancelRequested {
		row("cancel", "requested")
	}
	if r.ApprovalExpiresAt != "" {
		row("approval", "waiting, expires "+r.ApprovalExpiresAt)
	}
	if r.Decision != "" {
		row("decision", r.Decision)
	}
	if res := r.Result; res != nil {
		s := res.Status
		if res.ErrorCode != "" {
			s += " (" + res.ErrorCode + ")"
		}
		if res.ReplayOf != nil {
			s += ", replay of " + *res.ReplayOf
		}
		row("result", s)
	}
	row("answered by", r.AnsweredBy+" (a possibly-stale read)")
	tw.Flush()
}

const usageStatus = `Usage:
  hermes-bridge status [flags] <action_id>

Asks a running bridge (the status endpoint of its NATS micro service, a request
on <prefix>.status; one replica answers) what its records know about an action:
its state (claimed, dispatched, released, settling, parked, settled, or
unknown), the replica that owns it, the attempts, its age, whether a cancel was
requested, the approval decision, and a summary of its result (status, error
code, replay_of). It never shows inputs, outputs or session ids. The answer is
a possibly-stale read, for information only; 'hermes-bridge watch' follows
the action itself.

Exit status: 0 when the action is known, 1 when it is unknown, 2 when no
bridge answered (none running, or --timeout passed), when the NATS user may
not send the request (permission denied), or for usage and connection errors.

Flags:
`

const examplesStatus = `
Examples:
  hermes-bridge status 3xTnq8v2Lk0aQ
  hermes-bridge status --json 3xTnq8v2Lk0aQ | jq -r .state
`
