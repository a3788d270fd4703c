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
	fs.BoolVar(&o.noFollow, "no-follow", false, "exit once the decision took effect, without following the action")
	fs.BoolVar(&o.jsonOut, "json", false, "print the request on stderr and only the result, as JSON, on stdout (with --no-follow: the first output after the decision)")
	fs.DurationVar(&o.wait, "wait", 0, "once the decision took effect, stop waiting for the result after this long (exit 2); 0 waits until it settles")
	fs.StringVar(&o.choice, "choice", "", "for a run's tool approval: once (the default), session or always (ignored by parked actions)")
}

func denyFlags(fs *flag.FlagSet, o *cmdOptions) {
	decideFlags(fs, o, "why the action is denied (required)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the request on stderr and the first output after the decision (a parked action's failed result), as JSON, on stdout")
}

// decideFlags are the flags approve and deny share; reason is the usage of --reason.
func decideFlags(fs *flag.FlagSet, o *cmdOptions, reason string) {
	fs.StringVar(&o.reason, "reason", "", reason)
	fs.StringVar(&o.approver, "approver", "", "who decides (default: $USER, else \"cli\")")
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
	fs.DurationVar(&o.timeout, "timeout", defaultDecideTimeout, "how long to wait for the decision to take effect (the action's next output, or the decision's dead letter)")
}

func pendingFlags(fs *flag.FlagSet, o *cmdOptions) {
	fs.BoolVar(&o.jsonOut, "json", false, "print a JSON array instead of a table")
	fs.DurationVar(&o.timeout, "timeout", publishTimeout, "how long to wait for the reads of the bucket and the results")
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
	if o.timeout <= 0 {
		return usageError(sio.err, "approve", "--timeout must be positive")
	}
	o.decision = events.DecisionApprove
	return decide(ctx, id, o, environ, sio)
}

func cmdDeny(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int {
	if strings.TrimSpace(o.reason) == "" {
		return usageError(sio.err, "deny", "--reason is required")
	}
	if o.timeout <= 0 {
		return usageError(sio.err, "deny", "--timeout must be positive")
	}
	o.decision = events.DecisionDeny
	return decide(ctx, id, o, environ, sio)
}

// pendingRequest is the output of a pending_approval result (schemas/README.md, "Approvals").
type pendingRequest struct {
	CapabilityID string          `json:"capability_id"`
	Input        json.RawMessage `json:"input"`
	InputSHA256  string          `json:"input_sha256"`
	ExpiresAt    string          `json:"expires_at"`
	RunID        string          `json:"run_id"`   // a governed run's tool approval
	Approval     *runApproval    `json:"approval"` // a governed run's tool approval
}

// runApproval is the approval member of a run's pending_approval output: the tool
// approval as Hermes described it (tool data: shown to the operator, never logged).
type runApproval struct {
	Index       int      `json:"index"`
	Command     string   `json:"command"`
	Description string   `json:"description"`
	Choices     []string `json:"choices"`
	RequestID   string   `json:"request_id"`
}

// decide implements approve and deny: show the pending request, confirm, publish the
// decision, wait for its effect (see awaitEffect) and report it and, for approve,
// follow the action to its result. A dead-lettered decision is reported with the
// bridge's reason (exit 1).
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
	res, resSeq, code := lastResult(rctx, cl, id, sio.err)
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
	dlq, err := cl.watchDLQ()
	if err != nil {
		return cl.failed(sio.err, "hermes-bridge %s: subscribe to %s: %v\n", cmd, cl.subjects.DLQ(), err)
	}
	defer dlq.stop()
	var ack jetstream.PubAck
	pctx, cancel := context.WithTimeout(cl.ctx, publishTimeout)
	err = cl.c.Decide(pctx, id, events.Approval{
		Decision:    o.decision,
		Approver:    approver,
		Reason:      o.reason,
		InputSHA256: req.InputSHA256,
		Choice:      o.choice,
		RequestID:   requestIDOf(&req),
	}, client.WithPubAck(&ack))
	cancel()
	subj := cl.subjects.Approvals(id)
	if err != nil {
		return cl.failed(sio.err, "hermes-bridge %s: publish the decision: %v\n", cmd, explainPublish(err, subj))
	}
	fmt.Fprintf(sio.err, "%s: decision published on %s; waiting for it to take effect\n", past(o.decision), subj)
	ectx, cancel := context.WithTimeout(cl.ctx, o.timeout)
	askSHA := ""
	if req.Approval != nil {
		askSHA = req.InputSHA256
	}
	eff, err := awaitEffect(ectx, cl, id, resSeq, askSHA, &ack, dlq, o.timeout, sio.err)
	cancel()
	switch {
	case err != nil:
		return cl.noEffect(ctx, sio.err, id, &ack, dlq, o.timeout, err)
	case eff.dlqReason != "":
		fmt.Fprintf(sio.err, "hermes-bridge %s: the bridge dead-lettered the decision (stream %s, message %d): %s; it had no effect on action %s\n",
			cmd, ack.Stream, ack.Sequence, sanitize(eff.dlqReason), id)
		return exitFailed
	}
	if o.decision == events.DecisionApprove && !o.noFollow {
		fmt.Fprintf(sio.err, "approved: the decision took effect; following action %s\n", id)
		// As watch does, without the pending_approval note (the decision was just taken).
		return follow(ctx, cl, id, o, sio, false, nil)
	}
	return reportEffect(sio, id, o, eff)
}

// past is the decision as the outcome's word: approved, denied.
func past(decision string) string {
	if decision == events.DecisionDeny {
		return "denied"
	}
	return "approved"
}

// reportEffect says what the decision o.decision led to (eff, not a dead letter) and
// returns the exit status: that of the result when the action settled (a deny that
// settled it approval_denied is 0), else 0. With --json, stdout gets eff's output.
func reportEffect(sio stdio, id string, o *cmdOptions, eff *decisionEffect) int {
	word := past(o.decision)
	if o.jsonOut {
		var b []byte
		if eff.result != nil {
			b, _ = json.MarshalIndent(eff.result, "", "  ")
		} else {
			b, _ = json.Marshal(eff.event)
		}
		fmt.Fprintf(sio.out, "%s\n", b)
	}
	r := eff.result
	switch {
	case r == nil:
		fmt.Fprintf(sio.err, "%s: the decision took effect: action %s goes on (hermes-bridge watch %s follows it)\n", word, id, id)
		return exitOK
	case r.Status == events.StatusPendingApproval:
		fmt.Fprintf(sio.err, "%s: the decision took effect: action %s goes on and waits for its next approval (hermes-bridge approve %s)\n", word, id, id)
		return exitOK
	case !events.Terminal(r.Status):
		fmt.Fprintf(sio.err, "%s: the decision took effect: action %s goes on\n", word, id)
		return exitOK
	}
	msg := fmt.Sprintf("%s: action %s settled %s", word, id, r.Status)
	if r.Error != nil {
		msg += fmt.Sprintf(" (%s: %s)", r.Error.Code, r.Error.Message)
	}
	fmt.Fprintln(sio.err, sanitize(msg))
	if o.decision == events.DecisionDeny && r.Error != nil && r.Error.Code == "approval_denied" {
		return exitOK
	}
	return statusCode(r.Status)
}

// requestIDOf is the request_id a decision on req names: that of a run's tool approval
// when Hermes gave one, else "".
func requestIDOf(req *pendingRequest) string {
	if req.Approval == nil {
		return ""
	}
	return req.Approval.RequestID
}

// lastResult reads the last result of the action from the output stream, and its
// sequence there. On a problem it prints it and returns nil and the exit status.
func lastResult(ctx context.Context, cl *clientConn, id string, stderr io.Writer) (*events.Result, uint64, int) {
	stream, err := cl.js.Stream(ctx, cl.cfg.OutputStream)
	if err != nil && cl.permissionDenied(stderr) {
		return nil, 0, exitUsage
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		fmt.Fprintf(stderr, "hermes-bridge: output stream %s not found: is 'hermes-bridge run' running (it provisions the streams), with the same HERMES_BRIDGE_OUTPUT_STREAM?\n", cl.cfg.OutputStream)
		return nil, 0, exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "hermes-bridge: output stream %s: %v\n", cl.cfg.OutputStream, err)
		return nil, 0, exitUsage
	}
	subj := cl.subjects.Results(id)
	m, err := stream.GetLastMsgForSubject(ctx, subj)
	if err != nil && cl.permissionDenied(stderr) {
		return nil, 0, exitUsage
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		fmt.Fprintf(stderr, "no pending approval for action %s (no result on %s); 'hermes-bridge pending' lists the parked actions\n", id, subj)
		return nil, 0, exitFailed
	}
	if err != nil {
		fmt.Fprintf(stderr, "hermes-bridge: read the last result of action %s: %v\n", id, err)
		return nil, 0, exitUsage
	}
	res, err := events.DecodeResult(m.Header, m.Data)
	if err == nil {
		err = client.ResolveResult(ctx, cl.js, res)
	}
	if err != nil {
		return nil, 0, cl.failed(stderr, "hermes-bridge: the last result of action %s: %v\n", id, err)
	}
	return res, m.Sequence, exitOK
}

// printRequest shows what the approver decides on.
func printRequest(w io.Writer, id string, req *pendingRequest, now time.Time) {
	var b strings.Builder
	fmt.Fprintf(&b, "action %s waits for approval\n", id)
	fmt.Fprintf(&b, "  capability:   %s\n", sanitize(req.CapabilityID))
	fmt.Fprintf(&b, "  input_sha256: %s\n", sanitize(req.InputSHA256))
	if a := req.Approval; a != nil {
		fmt.Fprintf(&b, "  run_id:       %s\n", sanitize(req.RunID))
		fmt.Fprintf(&b, "  tool approval %d of the run\n", a.Index)
		if a.RequestID != "" {
			fmt.Fprintf(&b, "  request_id:   %s\n", sanitize(a.RequestID))
		}
		fmt.Fprintf(&b, "  command:      %s\n", sanitize(a.Command))
		fmt.Fprintf(&b, "  description:  %s\n", sanitize(a.Description))
		fmt.Fprintf(&b, "  choices:      %s\n", sanitize(strings.Join(a.Choices, ", ")))
	}
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

// parkedAction is one line of `pending`: a parked action (kind "parked") or a governed
// run waiting for a tool approval (kind "run_approval", with the run's fields).
type parkedAction struct {
	Kind         string    `json:"kind"`
	ActionID     string    `json:"action_id"`
	CapabilityID string    `json:"capability_id"`
	InputSHA256  string    `json:"input_sha256"`
	ExpiresAt    time.Time `json:"expires_at"`
	Expired      bool      `json:"expired"`
	// A run's tool approval: its endpoint, run, index in the run, Hermes's request_id
	// ("" before Hermes 0.21), the command, description and choices of its
	// approval.request (tool data: printed for the operator, never logged), and since
	// when it waits (its pending_approval result's time).
	Endpoint    string     `json:"endpoint,omitempty"`
	RunID       string     `json:"run_id,omitempty"`
	Index       int        `json:"index,omitempty"`
	RequestID   string     `json:"request_id,omitempty"`
	Command     string     `json:"command,omitempty"`
	Description string     `json:"description,omitempty"`
	Choices     []string   `json:"choices,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
}

// Kinds of `pending` lines.
const (
	kindParked      = "parked"
	kindRunApproval = "run_approval"
)

func cmdPending(ctx context.Context, _ string, o *cmdOptions, environ map[string]string, sio stdio) int {
	if o.timeout <= 0 {
		return usageError(sio.err, "pending", "--timeout must be positive")
	}
	cl, closeConn, code := dialClient(ctx, "pending", environ, o.conn, sio.err)
	if cl == nil {
		return code
	}
	defer closeConn()
	lctx, cancel := context.WithTimeout(cl.ctx, o.timeout)
	defer cancel()
	list, err := listParked(lctx, cl, sio.err)
	if err != nil {
		return cl.failed(sio.err, "hermes-bridge pending: %v\n", err)
	}
	runs, err := listWaitingRuns(lctx, cl, sio.err)
	if err != nil {
		return cl.failed(sio.err, "hermes-bridge pending: %v\n", err)
	}
	list = append(list, runs...)
	now := time.Now()
	for i := range list {
		list[i].Expired = !now.Before(list[i].ExpiresAt)
	}
	if o.jsonOut {
		b, _ := json.MarshalIndent(list, "", "  ")
		fmt.Fprintf(sio.out, "%s\n", b)
		return exitOK
	}
	parked := slices.DeleteFunc(slices.Clone(list), func(p parkedAction) bool { return p.Kind != kindParked })
	if len(parked) == 0 {
		fmt.Fprintln(sio.out, "no parked actions")
	} else {
		tw := tabwriter.NewWriter(sio.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ACTION\tCAPABILITY\tEXPIRES\tINPUT_SHA256")
		for _, p := range parked {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", sanitize(p.ActionID), sanitize(p.CapabilityID), expiresCell(p, now), sanitize(shortSum(p.InputSHA256)))
		}
		tw.Flush()
	}
	if len(runs) == 0 {
		return exitOK
	}
	// Runs waiting for a tool approval: one line each, the tool's command and
	// description (as Hermes gave them) indented under it.
	fmt.Fprintln(sio.out, "\nruns waiting for a tool approval:")
	tw := tabwriter.NewWriter(sio.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tENDPOINT\tREQUEST_ID\tWAITING\tEXPIRES\tCHOICES")
	for _, p := range runs {
		waiting := "-"
		if p.Since != nil {
			waiting = "for " + now.Sub(*p.Since).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sanitize(p.ActionID), sanitize(p.Endpoint), sanitize(cmp.Or(p.RequestID, "-")),
			waiting, expiresCell(p, now), sanitize(strings.Join(p.Choices, ",")))
	}
	tw.Flush()
	for _, p := range runs {
		fmt.Fprintf(sio.out, "  %s: %s\n    %s\n", sanitize(p.ActionID), sanitize(p.Command), sanitize(p.Description))
	}
	return exitOK
}

func expiresCell(p parkedAction, now time.Time) string {
	if p.Expired {
		return "expired"
	}
	return "in " + p.ExpiresAt.Sub(now).Round(time.Second).String()
}

func shortSum(sum string) string {
	if len(sum) > 12 {
		return sum[:12] + "…"
	}
	return sum
}

// listWaitingRuns reads the ask.<action_id>.<k> index of the KV bucket (governed runs
// waiting for their tool approval k) and, for each action's latest entry, its last
// result: an entry is listed only while that result is the pending_approval message of
// approval k (the index is not the truth: an entry a crash left behind names an
// approval answered since, or a run that ended, and is skipped). Soonest expiry first.
func listWaitingRuns(ctx context.Context, cl *clientConn, stderr io.Writer) ([]parkedAction, error) {
	bucket := cl.cfg.Bucket
	store, err := kvstore.Open(ctx, cl.js, kvstore.Config{Bucket: bucket})
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", bucket, err)
	}
	keys, err := store.Keys(ctx, "ask.>")
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("list ask.>: %w", ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", bucket, err)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	latest := map[string]kvstore.Record{} // action id → its latest entry
	for _, k := range keys {
		e, err := store.Get(ctx, k)
		if errors.Is(err, kvstore.ErrNotFound) {
			continue // answered meanwhile
		}
		if err != nil {
			return nil, err
		}
		r := e.Record
		if r.ActionID == "" || r.ApprovalSeq < 1 {
			continue
		}
		if cur, ok := latest[r.ActionID]; !ok || r.ApprovalSeq > cur.ApprovalSeq {
			latest[r.ActionID] = r
		}
	}
	list := []parkedAction{}
	if len(latest) == 0 {
		return list, nil
	}
	stream, err := cl.js.Stream(ctx, cl.cfg.OutputStream)
	if err != nil {
		return nil, fmt.Errorf("output stream %s: %w", cl.cfg.OutputStream, err)
	}
	for id, r := range latest {
		m, err := stream.GetLastMsgForSubject(ctx, cl.subjects.Results(id))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // its pending message is not published yet
		}
		if err != nil {
			return nil, fmt.Errorf("the last result of action %s: %w", id, err)
		}
		res, err := events.DecodeResult(m.Header, m.Data)
		if err == nil {
			err = client.ResolveResult(ctx, cl.js, res)
		}
		if err != nil {
			fmt.Fprintf(stderr, "hermes-bridge pending: the last result of action %s cannot be read (%v); not listed\n", id, err)
			continue
		}
		var req pendingRequest
		if res.Status != events.StatusPendingApproval || json.Unmarshal(res.Output, &req) != nil ||
			req.Approval == nil || req.Approval.Index != r.ApprovalSeq {
			continue // answered and ended, or a later approval's message: not this entry's
		}
		endpoint, _, _ := events.ParseCapabilityID(r.CapabilityID)
		since := m.Time
		p := parkedAction{Kind: kindRunApproval, ActionID: id, CapabilityID: cmp.Or(req.CapabilityID, r.CapabilityID),
			InputSHA256: req.InputSHA256, ExpiresAt: r.ExpiresAt, Endpoint: endpoint, RunID: cmp.Or(req.RunID, r.RunID),
			Index: r.ApprovalSeq, RequestID: cmp.Or(req.Approval.RequestID, r.ApprovalRequestID),
			Command: req.Approval.Command, Description: req.Approval.Description, Choices: req.Approval.Choices, Since: &since}
		if t, err := time.Parse(time.RFC3339Nano, req.ExpiresAt); err == nil {
			p.ExpiresAt = t
		}
		list = append(list, p)
	}
	slices.SortStableFunc(list, func(a, b parkedAction) int {
		if c := a.ExpiresAt.Compare(b.ExpiresAt); c != 0 {
			return c
		}
		return strings.Compare(a.ActionID, b.ActionID)
	})
	return list, nil
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
		list = append(list, parkedAction{Kind: kindParked, ActionID: id, CapabilityID: r.CapabilityID, InputSHA256: r.InputSHA256, ExpiresAt: r.ExpiresAt})
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
Then the governed runs waiting for a tool approval: action id, endpoint, the
request_id Hermes gave (v0.21 and later), how long it waits, time left, the
choices, and the tool's command and description as Hermes gave them. It reads
the park.<action_id> and ask.<action_id>.<k> entries of the KV bucket
HERMES_BRIDGE_BUCKET (default HERMES_IDEMPOTENCY) and, for a run, its last
result. --json prints one array; each element's kind is parked or
run_approval. 'hermes-bridge approve <action_id>' shows the full request.

Connects like 'hermes-bridge call' (see "Connecting to NATS" below).

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
<prefix>.approvals.<action_id>. Then it waits, up to --timeout, for the
decision to take effect: the action's next output, or the bridge's dead letter
of the decision, whose reason it prints (exit 1). Then it follows the action to
its result like 'hermes-bridge watch' (--no-follow skips this). For a governed run that waits
for a tool approval it answers the run's latest request, naming its request_id
where Hermes gave one (a request answered meanwhile is then not touched: the
bridge logs the decision as stale); --choice session or always approves the
tool for the rest of the run or for good (default once).

The request is read from the action's pending_approval result in the output
stream HERMES_BRIDGE_OUTPUT_STREAM (default HERMES_OUTPUT). When stdin is not a
terminal there is nobody to confirm: add --yes after reviewing the request
(for example with 'hermes-bridge approve ID < /dev/null', which only shows it).

Exit status: 0 when the action completed (with --no-follow: when the decision
took effect), 1 when it failed, when it was already settled, when it has no
pending approval, when the decision was not confirmed or was dead-lettered, 3
when it was cancelled, 2 when the decision had no effect within --timeout (no
bridge running?) and for usage or connection errors, 130 when interrupted.

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
confirmation, and publishes a deny decision on <prefix>.approvals.<action_id>.
Then it waits, up to --timeout, for the decision to take effect and says what
it was: the bridge settles a parked action failed with approval_denied; a
governed run goes on without the tool. A decision the bridge dead-lettered is
reported with the bridge's reason. --reason is required.

Exit status: 0 when the decision took effect, 1 when the action was already
settled, has no pending approval, settled otherwise meanwhile, or when the
decision was not confirmed or was dead-lettered, 2 when it had no effect within
--timeout (no bridge running?) and for usage or connection errors, 130 when
interrupted.

Flags:
`

const examplesDeny = `
Examples:
  hermes-bridge deny 3xTnq8v2Lk0aQ --reason "wrong session"
  hermes-bridge deny 3xTnq8v2Lk0aQ --reason "not during the freeze" --approver alice --yes
  hermes-bridge deny 3xTnq8v2Lk0aQ --reason "duplicate" --yes --json | jq .error.code
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
