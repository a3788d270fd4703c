package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

// manyParked is the number of parked actions from which pending says on stderr
// that it is reading them.
const manyParked = 50

// defaultCancelTimeout bounds the wait for the bridge's answer to a cancel request.
const defaultCancelTimeout = 5 * time.Second

func approveFlags(fs *flag.FlagSet, o *cmdOptions) {
	decideFlags(fs, o, "why (recorded with the decision)")
	fs.BoolVar(&o.noFollow, "no-follow", false, "publish the decision and exit without following the action")
	fs.BoolVar(&o.jsonOut, "json", false, "print the request on stderr and only the result, as JSON, on stdout")
	fs.DurationVar(&o.wait, "wait", 0, "stop waiting for the result after this long (exit 2); 0 waits until it settles")
	fs.StringVar(&o.choice, "choice", "", "for a run's tool approval: once (the default), session or always (ignored by parked actions)")
}

func denyFlags(fs *flag.FlagSet, o *cmdOptions) {
	decideFlags(fs, o, "why the action is denied (required)")
}

// decideFlags are the flags approve and deny share; reason is the usage of --reason.
func decideFlags(fs *flag.FlagSet, o *cmdOptions, reason string) {
	fs.StringVar(&o.reason, "reason", "", reason)
	fs.StringVar(&o.approver, "approver", "", "who decides (default: $USER, else \"cli\")")
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
}

func pendingFlags(fs *flag.FlagSet, o *cmdOptions) {
	fs.BoolVar(&o.jsonOut, "json", false, "print a JSON array instead of a table")
}

func cancelFlags(fs *flag.FlagSet, o *cmdOptions) {
	fs.DurationVar(&o.timeout, "timeout", defaultCancelTimeout, "how long to wait for the bridge's answer")
}

// stdinIsTerminal reports whether r is a terminal; replaced in tests.
var stdinIsTerminal = func(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func cmdApprove(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int {
	if o.wait < 0 {
		return usageError(sio.err, "approve", "--wait must not be negative")
	}
	o.decision = events.DecisionApprove
	return decide(ctx, id, o, environ, sio)
}

func cmdDeny(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int {
	if strings.TrimSpace(o.reason) == "" {
		return usageError(sio.err, "deny", "--reason is required")
	}
	o.decision = events.DecisionDeny
	return decide(ctx, id, o, environ, sio)
}

// pendingRequest is the output of a pending_approval result (CONTRACT §7).
type pendingRequest struct {
	CapabilityID string          `json:"capability_id"`
	Input        json.RawMessage `json:"input"`
	InputSHA256  string          `json:"input_sha256"`
	ExpiresAt    string          `json:"expires_at"`
}

// decide implements approve and deny: show the pending request, confirm, publish
// the decision and, for approve, follow the action to its result.
func decide(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int {
	cmd := o.decision // the command is named after the decision
	switch o.choice {
	case "", events.ChoiceOnce, events.ChoiceSession, events.ChoiceAlways:
	default:
		return usageError(sio.err, cmd, "--choice must be once, session or always")
	}
	if len(o.reason) > 1024 || strings.IndexFunc(o.reason, unicode.IsControl) >= 0 {
		return usageError(sio.err, cmd, "--reason must be at most 1024 characters without control characters")
	}
	approver := cmp.Or(o.approver, environ["USER"], "cli")
	if len(approver) > 256 || strings.IndexFunc(approver, unicode.IsControl) >= 0 {
		return usageError(sio.err, cmd, "--approver must be at most 256 characters without control characters")
	}
	cl, closeConn, code := dialClient(ctx, cmd, environ, o.conn, sio.err)
	if cl == nil {
		return code
	}
	defer closeConn()

	rctx, cancel := context.WithTimeout(cl.ctx, publishTimeout)
	res, code := lastResult(rctx, cl, id, sio.err)
	cancel()
	if res == nil {
		return code
	}
	if events.Terminal(res.Status) {
		msg := fmt.Sprintf("action %s is already settled: %s", id, res.Status)
		if res.Error != nil {
			msg += fmt.Sprintf(" (%s: %s)", res.Error.Code, res.Error.Message)
		}
		fmt.Fprintf(sio.err, "%s; nothing to %s. Its result: hermes-bridge watch %s\n", sanitize(msg), cmd, id)
		return exitFailed
	}
	var req pendingRequest
	if err := json.Unmarshal(res.Output, &req); err != nil || req.InputSHA256 == "" {
		fmt.Fprintf(sio.err, "hermes-bridge %s: the pending_approval result of action %s has no readable request (input_sha256 missing)\n", cmd, id)
		return exitFailed
	}
	if req.CapabilityID == "" {
		req.CapabilityID = res.CapabilityID
	}
	show := sio.out
	if o.jsonOut {
		show = sio.err
	}
	printRequest(show, id, &req, time.Now())

	switch {
	case o.yes:
	case !stdinIsTerminal(sio.in):
		fmt.Fprintf(sio.err, "hermes-bridge %s: stdin is not a terminal, so the decision cannot be confirmed; review the request above and add --yes\n", cmd)
		return exitUsage
	case !confirm(sio, fmt.Sprintf("%s %s for action %s? [y/N] ", o.decision, sanitize(req.CapabilityID), id)):
		fmt.Fprintf(sio.err, "not confirmed; no decision was published\n")
		return exitFailed
	}
	pctx, cancel := context.WithTimeout(cl.ctx, publishTimeout)
	err := cl.c.Decide(pctx, id, events.Approval{
		Decision:    o.decision,
		Approver:    approver,
		Reason:      o.reason,
		InputSHA256: req.InputSHA256,
		Choice:      o.choice,
	})
	cancel()
	subj := cl.subjects.Approvals(id)
	if err != nil {
		return cl.failed(sio.err, "hermes-bridge %s: publish the decision: %v\n", cmd, explainPublish(err, subj))
	}
	if o.decision == events.DecisionDeny {
		fmt.Fprintf(sio.err, "denied: decision published on %s; the action settles failed (approval_denied)\n", subj)
		return exitOK
	}
	fmt.Fprintf(sio.err, "approved: decision published on %s\n", subj)
	if o.noFollow {
		fmt.Fprintf(sio.err, "follow it with: hermes-bridge watch %s\n", id)
		return exitOK
	}
	// Follow as watch does, without the pending_approval note (the decision was just published).
	return follow(ctx, cl, id, o, sio, false, nil)
}

// lastResult reads the last result of the action from the output stream. On a
// problem it prints it and returns nil and the exit status.
func lastResult(ctx context.Context, cl *clientConn, id string, stderr io.Writer) (*events.Result, int) {
	stream, err := cl.js.Stream(ctx, cl.cfg.OutputStream)
	if err != nil && cl.permissionDenied(stderr) {
		return nil, exitUsage
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		fmt.Fprintf(stderr, "hermes-bridge: output stream %s not found: is 'hermes-bridge run' running (it provisions the streams), with the same HERMES_BRIDGE_OUTPUT_STREAM?\n", cl.cfg.OutputStream)
		return nil, exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "hermes-bridge: output stream %s: %v\n", cl.cfg.OutputStream, err)
		return nil, exitUsage
	}
	subj := cl.subjects.Results(id)
	m, err := stream.GetLastMsgForSubject(ctx, subj)
	if err != nil && cl.permissionDenied(stderr) {
		return nil, exitUsage
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		fmt.Fprintf(stderr, "no pending approval for action %s (no result on %s); 'hermes-bridge pending' lists the parked actions\n", id, subj)
		return nil, exitFailed
	}
	if err != nil {
		fmt.Fprintf(stderr, "hermes-bridge: read the last result of action %s: %v\n", id, err)
		return nil, exitUsage
	}
	res, err := events.DecodeResult(m.Header, m.Data)
	if err == nil {
		err = client.ResolveResult(ctx, cl.js, res)
	}
	if err != nil {
		return nil, cl.failed(stderr, "hermes-bridge: the last result of action %s: %v\n", id, err)
	}
	return res, exitOK
}

// printRequest shows what the approver decides on.
func printRequest(w io.Writer, id string, req *pendingRequest, now time.Time) {
	var b strings.Builder
	fmt.Fprintf(&b, "action %s waits for approval\n", id)
	fmt.Fprintf(&b, "  capability:   %s\n", sanitize(req.CapabilityID))
	fmt.Fprintf(&b, "  input_sha256: %s\n", sanitize(req.InputSHA256))
	exp := sanitize(req.ExpiresAt)
	if t, err := time.Parse(time.RFC3339Nano, req.ExpiresAt); err == nil {
		exp += " (" + expiresIn(t, now) + ")"
	}
	fmt.Fprintf(&b, "  expires_at:   %s\n", exp)
	b.WriteString("  input:\n    ")
	var in bytes.Buffer
	if len(req.Input) == 0 || json.Indent(&in, req.Input, "    ", "  ") != nil {
		in.Reset()
		in.Write(req.Input)
	}
	b.WriteString(escapeInvisible(in.String()))
	b.WriteString("\n")
	io.WriteString(w, b.String())
}

// expiresIn says when t is, seen from now: "in 14m32s" or "expired 3s ago".
func expiresIn(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d <= 0 {
		return "expired " + (-d).String() + " ago"
	}
	return "in " + d.String()
}

// escapeInvisible writes every rune of s that is not printable (control, format
// such as bidi overrides, invalid UTF-8) other than a newline as a \uXXXX escape.
// In indented JSON such runes can only stand inside strings, where the escape means
// the same, so the approver sees exactly what the input holds.
func escapeInvisible(s string) string {
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == '\n' || (r != utf8.RuneError && unicode.IsPrint(r)):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\ufffd`)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// sanitize makes a value from the wire safe to print on one line.
func sanitize(s string) string {
	return strings.ReplaceAll(escapeInvisible(s), "\n", `\n`)
}

// confirm asks question on stderr and reads the answer from stdin.
func confirm(sio stdio, question string) bool {
	io.WriteString(sio.err, question)
	line, err := bufio.NewReader(sio.in).ReadString('\n')
	if err != nil && line == "" {
		io.WriteString(sio.err, "\n")
		return false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// parkedAction is one line of `pending`.
type parkedAction struct {
	ActionID     string    `json:"action_id"`
	CapabilityID string    `json:"capability_id"`
	InputSHA256  string    `json:"input_sha256"`
	ExpiresAt    time.Time `json:"expires_at"`
	Expired      bool      `json:"expired"`
}

func cmdPending(ctx context.Context, _ string, o *cmdOptions, environ map[string]string, sio stdio) int {
	cl, closeConn, code := dialClient(ctx, "pending", environ, o.conn, sio.err)
	if cl == nil {
		return code
	}
	defer closeConn()
	lctx, cancel := context.WithTimeout(cl.ctx, publishTimeout)
	defer cancel()
	list, err := listParked(lctx, cl, sio.err)
	if err != nil {
		return cl.failed(sio.err, "hermes-bridge pending: %v\n", err)
	}
	now := time.Now()
	for i := range list {
		list[i].Expired = !now.Before(list[i].ExpiresAt)
	}
	if o.jsonOut {
		b, _ := json.MarshalIndent(list, "", "  ")
		fmt.Fprintf(sio.out, "%s\n", b)
		return exitOK
	}
	if len(list) == 0 {
		fmt.Fprintln(sio.out, "no parked actions")
		return exitOK
	}
	tw := tabwriter.NewWriter(sio.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tCAPABILITY\tEXPIRES\tINPUT_SHA256")
	for _, p := range list {
		exp := "expired"
		if !p.Expired {
			exp = "in " + p.ExpiresAt.Sub(now).Round(time.Second).String()
		}
		sum := p.InputSHA256
		if len(sum) > 12 {
			sum = sum[:12] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", sanitize(p.ActionID), sanitize(p.CapabilityID), exp, sanitize(sum))
	}
	tw.Flush()
	return exitOK
}

// listParked reads the park.<id> index of the KV bucket, soonest expiry first.
func listParked(ctx context.Context, cl *clientConn, stderr io.Writer) ([]parkedAction, error) {
	bucket := cl.cfg.Bucket
	store, err := kvstore.Open(ctx, cl.js, kvstore.Config{Bucket: bucket})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("KV bucket %s not found: is 'hermes-bridge run' running (it provisions the bucket), with the same HERMES_BRIDGE_BUCKET?", bucket)
	}
	if err != nil {
		return nil, err
	}
	keys, err := store.Keys(ctx, kvstore.ParkKey(">"))
	if err == nil && ctx.Err() != nil { // a listing cut short ends without an error
		err = fmt.Errorf("list %s: %w", kvstore.ParkKey(">"), ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", bucket, err)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys) // the lister may report a key twice
	if len(keys) >= manyParked {
		fmt.Fprintf(stderr, "reading %d parked actions...\n", len(keys))
	}
	list := []parkedAction{} // pending --json prints [] for none
	for _, k := range keys {
		e, err := store.Get(ctx, k)
		if errors.Is(err, kvstore.ErrNotFound) {
			continue // decided or expired meanwhile
		}
		if err != nil {
			return nil, err
		}
		r := e.Record
		id := r.ActionID
		if id == "" {
			id = strings.TrimPrefix(k, kvstore.ParkKey(""))
		}
		list = append(list, parkedAction{ActionID: id, CapabilityID: r.CapabilityID, InputSHA256: r.InputSHA256, ExpiresAt: r.ExpiresAt})
	}
	slices.SortStableFunc(list, func(a, b parkedAction) int {
		if c := a.ExpiresAt.Compare(b.ExpiresAt); c != 0 {
			return c
		}
		return strings.Compare(a.ActionID, b.ActionID)
	})
	return list, nil
}

func cmdCancel(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int {
	if o.timeout <= 0 {
		return usageError(sio.err, "cancel", "--timeout must be positive")
	}
	cl, closeConn, code := dialClient(ctx, "cancel", environ, o.conn, sio.err)
	if cl == nil {
		return code
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(cl.ctx, o.timeout)
	r, err := cl.c.Cancel(cctx, id)
	cancel()
	if err != nil {
		return cl.requestFailed(ctx, sio.err, cl.subjects.Cancel(id), o.timeout, err, "")
	}
	switch r.State {
	case events.CancelCancelled:
		fmt.Fprintln(sio.out, "cancelled")
		return exitOK
	case events.CancelAlreadySettled:
		fmt.Fprintln(sio.out, "already settled")
		return exitOK
	case events.CancelUnknown:
		fmt.Fprintln(sio.out, "unknown (the bridge has no record of this action; if it is still queued it will not run)")
		return exitFailed
	default:
		fmt.Fprintf(sio.err, "hermes-bridge cancel: unexpected reply state %q\n", sanitize(r.State))
		return exitUsage
	}
}

const usagePending = `Usage:
  hermes-bridge pending [flags]

Lists the actions parked for an approval (response_delete and session_delete
without a valid pre-approval), soonest expiry first: action id, capability,
time left to decide, and the start of the input_sha256 the decision must carry.
It reads the park.<action_id> entries of the KV bucket HERMES_BRIDGE_BUCKET
(default HERMES_IDEMPOTENCY). 'hermes-bridge approve <action_id>' shows the
full request.

Connects like 'hermes-bridge call' (NATS_URL, or the embedded server of 'run').

Flags:
`

const examplesPending = `
Examples:
  hermes-bridge pending
  hermes-bridge pending --json | jq -r '.[] | select(.expired | not) | .action_id'
`

const usageApprove = `Usage:
  hermes-bridge approve [flags] <action_id>

Shows the request of a parked action (its capability, its input, the
input_sha256 and when the approval window ends), asks for confirmation, and
publishes an approve decision carrying that input_sha256 on
<prefix>.approvals.<action_id>. Then it follows the action to its result like
'hermes-bridge watch' (--no-follow skips this). For a governed run that waits
for a tool approval it answers the run's latest request; --choice session or
always approves the tool for the rest of the run or for good (default once).

The request is read from the action's pending_approval result in the output
stream HERMES_BRIDGE_OUTPUT_STREAM (default HERMES_OUTPUT). When stdin is not a
terminal there is nobody to confirm: add --yes after reviewing the request
(for example with 'hermes-bridge approve ID < /dev/null', which only shows it).

Exit status: 0 when the action completed, 1 when it failed, when it was already
settled, when it has no pending approval or when the decision was not
confirmed, 3 when it was cancelled, 2 for usage or connection errors, 130 when
interrupted while following.

Flags:
`

const examplesApprove = `
Examples:
  hermes-bridge approve 3xTnq8v2Lk0aQ
  hermes-bridge approve 3xTnq8v2Lk0aQ --reason "ticket OPS-42" --approver alice
  hermes-bridge approve 3xTnq8v2Lk0aQ --yes --no-follow   # in a script, after review
  hermes-bridge approve 3xTnq8v2Lk0aQ --yes --json | jq .status
  hermes-bridge approve clean-build-42 --choice session   # a run's tool approval
`

const usageDeny = `Usage:
  hermes-bridge deny [flags] --reason <text> <action_id>

Shows the request of a parked action like 'hermes-bridge approve', asks for
confirmation, and publishes a deny decision on <prefix>.approvals.<action_id>;
the bridge settles the action failed with approval_denied. --reason is required.

Exit status: 0 when the decision was published, 1 when the action was already
settled, has no pending approval or the decision was not confirmed, 2 for
usage or connection errors.

Flags:
`

const examplesDeny = `
Examples:
  hermes-bridge deny 3xTnq8v2Lk0aQ --reason "wrong session"
  hermes-bridge deny 3xTnq8v2Lk0aQ --reason "not during the freeze" --approver alice --yes
`

const usageCancel = `Usage:
  hermes-bridge cancel [flags] <action_id>

Asks the bridge to cancel an action (a request on <prefix>.cancel.<action_id>)
and prints its answer:
  cancelled        the action was queued or running and is cancelled; a running
                   call is aborted and settles cancelled
  already settled  the action had its result already; nothing changed
  unknown          the bridge has no record of the action; if it is still
                   queued it will not run

Exit status: 0 for cancelled and already settled, 1 for unknown, 2 when no
bridge answered (none running, or --timeout passed), when the NATS user may
not send the request (permission denied), or for usage and connection errors.

Flags:
`

const examplesCancel = `
Examples:
  hermes-bridge cancel 3xTnq8v2Lk0aQ
  hermes-bridge cancel --timeout 10s 3xTnq8v2Lk0aQ
  hermes-bridge cancel 3xTnq8v2Lk0aQ && hermes-bridge watch --json 3xTnq8v2Lk0aQ
`
