package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
)

// publishTimeout bounds connecting and publishing (not following).
const publishTimeout = 15 * time.Second

// waitHintAfter is how long call and watch wait for the first news of an action (an
// event, a result, a pending approval) before they say on stderr what they are waiting
// for; a variable so that tests can shorten it.
var waitHintAfter = 5 * time.Second

// hintLookupTimeout bounds the lookups behind a hint.
const hintLookupTimeout = 3 * time.Second

// followFlags are the flags of watch, and of call besides its own.
func followFlags(fs *flag.FlagSet, o *cmdOptions) {
	fs.BoolVar(&o.jsonOut, "json", false, "print only the result, as JSON (no streamed text)")
	fs.BoolVar(&o.eventsOut, "events", false, "print each event as a JSON line, then the result as a JSON line")
	fs.DurationVar(&o.wait, "wait", 0, "stop waiting for the result after this long (exit 2); 0 waits until it settles")
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

func callFlags(fs *flag.FlagSet, o *cmdOptions) {
	fs.StringVar(&o.endpoint, "endpoint", "primary", "Hermes endpoint id")
	fs.StringVar(&o.op, "op", "chat_stream", "operation: "+opNames(false))
	fs.StringVar(&o.input, "input", "", "operation input: a JSON object, @file to read it from a file, or - for stdin")
	fs.StringVar(&o.prompt, "prompt", "", `shortcut for --input '{"prompt": TEXT}'`)
	fs.StringVar(&o.key, "key", "", "idempotency key (required by "+opNames(true)+")")
	fs.DurationVar(&o.timeout, "deadline", 0, "the action's deadline, e.g. 90s (sent as timeout_ms; default: the bridge's, 60s JSON / 300s streams)")
	fs.Var(durationAlias{&o.timeout, &o.timeoutAlias}, "timeout", "the earlier name of --deadline, still accepted: a `duration` (the other commands' --timeout is how long they wait for an answer)")
	fs.StringVar(&o.tenant, "tenant", "", "tenant id of the action")
	fs.StringVar(&o.actionID, "action-id", "", "action id (default: a random one)")
	fs.BoolVar(&o.structured, "structured", false, "publish in CloudEvents structured content mode (default binary)")
	fs.BoolVar(&o.noFollow, "no-follow", false, "print the action id and exit without following it")
	followFlags(fs, o)
}

// opNames joins the names of the operations, or with keyOnly of those that need an
// idempotency key.
func opNames(keyOnly bool) string {
	var names []string
	for _, s := range bridge.Operations() {
		if s.KeyRequired || !keyOnly {
			names = append(names, s.Name)
		}
	}
	return strings.Join(names, ", ")
}

func cmdCall(ctx context.Context, _ string, o *cmdOptions, environ map[string]string, sio stdio) int {
	action, err := o.action(sio.in)
	if err != nil {
		return usageError(sio.err, "call", err.Error())
	}
	if o.timeoutAlias {
		fmt.Fprintln(sio.err, "hermes-bridge call: note: --timeout is the action's deadline here, now spelled --deadline; the other commands' --timeout is how long they wait for an answer")
	}
	if o.jsonOut && o.eventsOut {
		return usageError(sio.err, "call", "--json and --events exclude each other")
	}
	var ack jetstream.PubAck
	popts := []client.PublishOption{client.WithPubAck(&ack)}
	if o.actionID != "" {
		popts = append(popts, client.WithActionID(o.actionID))
	}
	if o.structured {
		popts = append(popts, client.WithStructuredMode())
	}

	cl, closeConn, code := dialClient(ctx, "call", environ, o.conn, sio.err)
	if cl == nil {
		return code
	}
	defer closeConn()

	pctx, cancel := context.WithTimeout(cl.ctx, publishTimeout)
	id, err := cl.c.Publish(pctx, o.endpoint, o.op, *action, popts...)
	cancel()
	if err != nil {
		return cl.failed(sio.err, "hermes-bridge call: publish: %v\n", explainPublish(err, cl.subjects.Action(o.endpoint, o.op)))
	}
	if o.noFollow {
		fmt.Fprintln(sio.out, id)
		return exitOK
	}
	if !o.jsonOut && !o.eventsOut {
		fmt.Fprintf(sio.err, "action %s published on %s at %s\n", id, cl.subjects.Action(o.endpoint, o.op), cl.server)
	}
	return follow(ctx, cl, id, o, sio, true, cl.callHint(id, &ack))
}

func cmdWatch(ctx context.Context, id string, o *cmdOptions, environ map[string]string, sio stdio) int {
	if o.jsonOut && o.eventsOut {
		return usageError(sio.err, "watch", "--json and --events exclude each other")
	}
	cl, closeConn, code := dialClient(ctx, "watch", environ, o.conn, sio.err)
	if cl == nil {
		return code
	}
	defer closeConn()
	return follow(ctx, cl, id, o, sio, true, cl.watchHint(id))
}

// action builds the action from the flags; errors are usage errors.
func (o *cmdOptions) action(stdin io.Reader) (*events.Action, error) {
	spec, ok := bridge.LookupOperation(o.op)
	if !ok {
		return nil, fmt.Errorf("unknown operation %q; one of: %s", o.op, opNames(false))
	}
	if !events.ValidEndpointID(o.endpoint) {
		return nil, fmt.Errorf("--endpoint %q must match [a-z0-9_-]{1,128}", o.endpoint)
	}
	if o.actionID != "" && !events.ValidActionID(o.actionID) {
		return nil, errors.New("--action-id must match [A-Za-z0-9_-]{1,128}")
	}
	a := &events.Action{IdempotencyKey: o.key, TenantID: o.tenant}
	switch {
	case o.prompt != "" && o.input != "":
		return nil, errors.New("--prompt and --input exclude each other")
	case o.prompt != "":
		a.Input, _ = json.Marshal(map[string]string{"prompt": o.prompt})
	case o.input != "":
		in, err := readInput(o.input, stdin)
		if err != nil {
			return nil, err
		}
		a.Input = in
	default:
		a.Input = json.RawMessage(`{}`)
	}
	if spec.KeyRequired && o.key == "" {
		return nil, fmt.Errorf("--op %s needs an idempotency key: add --key", o.op)
	}
	if len(o.key) > events.MaxIdempotencyKeyLen || strings.IndexFunc(o.key, unicode.IsControl) >= 0 {
		return nil, fmt.Errorf("--key must be at most %d characters without control characters", events.MaxIdempotencyKeyLen)
	}
	if len(o.tenant) > events.MaxTenantIDLen || strings.IndexFunc(o.tenant, unicode.IsControl) >= 0 {
		return nil, fmt.Errorf("--tenant must be at most %d characters without control characters", events.MaxTenantIDLen)
	}
	if o.timeout != 0 {
		ms := o.timeout.Milliseconds()
		if ms < 1 || ms > events.MaxTimeoutMS {
			return nil, errors.New("--deadline must be between 1ms and 24h")
		}
		a.TimeoutMS = &ms
	}
	if o.wait < 0 {
		return nil, errors.New("--wait must not be negative")
	}
	return a, nil
}

// readInput reads --input: literal JSON, @file, or - for stdin. It must be an object.
func readInput(v string, stdin io.Reader) (json.RawMessage, error) {
	var data []byte
	var err error
	src := "--input"
	switch {
	case v == "-":
		src = "--input - (stdin)"
		data, err = io.ReadAll(io.LimitReader(stdin, 16<<20))
	case strings.HasPrefix(v, "@"):
		src = "--input " + v
		data, err = os.ReadFile(v[1:])
		if err != nil {
			return nil, fmt.Errorf("%s: %s", src, fileProblem(err))
		}
	default:
		data = []byte(v)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", src, err)
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		return nil, fmt.Errorf("%s is not valid JSON", src)
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("%s must be a JSON object", src)
	}
	return json.RawMessage(data), nil
}

// clientConn is the connected client (package client) of one command.
type clientConn struct {
	c        *client.Client
	subjects events.Subjects
	js       jetstream.JetStream
	nc       *nats.Conn
	cfg      *Config
	cmd      string // the command's name, for messages
	// ctx is the command's context, cancelled with a *permissionError as its cause when
	// the server refuses a message or subscription of the connection: NATS operations
	// use it, so a refusal ends them at once instead of at their timeout.
	ctx   context.Context
	guard *permGuard
	// server says where the connection goes: the URL without credentials, and the NATS
	// context it came from.
	server string
}

// dialClient connects for a client command: to the server and with the credentials the
// flags conn, the environment and a NATS context give (see resolveConn). Before that it
// warns on stderr about each HERMES_* or NATS_* variable that no setting reads. On
// failure it prints the reason and returns nil and the exit status. The returned
// function closes the connection (and warns about a permission violation no error has
// reported).
func dialClient(ctx context.Context, cmd string, environ map[string]string, conn connFlags, stderr io.Writer) (*clientConn, func(), int) {
	if err := conn.check(); err != nil {
		return nil, nil, usageError(stderr, cmd, err.Error())
	}
	cfg, err := LoadConfig(environ)
	all := &ConfigError{}
	if err != nil {
		errors.As(err, &all)
	}
	specs, _, _ := cfg.EndpointSpecs() // only for the variables an endpoints file names
	for _, u := range unknownVariables(environ, specs) {
		fmt.Fprintf(stderr, "hermes-bridge %s: warning: %s\n", cmd, u.message())
	}
	nctx, err := loadNATSContext(environ, conn.context, true)
	if err != nil {
		fmt.Fprintf(stderr, "hermes-bridge %s: %v\n", cmd, err)
		return nil, nil, exitUsage
	}
	cfg.natsCtx = nctx
	all.merge(cfg.ValidateClient())
	nconn, err := resolveConn(cfg, conn, nctx)
	all.merge(err)
	if err := all.err(); err != nil {
		fmt.Fprintf(stderr, "hermes-bridge %s: %v\n", cmd, err)
		return nil, nil, exitUsage
	}
	url := nconn.url
	if url == "" {
		if url, err = cfg.clientURL(); err != nil {
			fmt.Fprintf(stderr, "hermes-bridge %s: %v\n", cmd, err)
			return nil, nil, exitUsage
		}
	}
	for _, n := range nconn.notes {
		fmt.Fprintf(stderr, "hermes-bridge %s: note: %s\n", cmd, n)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly, NoColor: !isTerminal(stderr)}).Level(zerolog.WarnLevel).
		With().Timestamp().Logger()
	gctx, cancelCause := context.WithCancelCause(ctx)
	guard := &permGuard{user: nconn.user, inbox: cmp.Or(nconn.inboxPrefix, defaultInbox), cancel: cancelCause}
	// A permission violation is not logged: the command reports it.
	opts, err := nconn.natsOptions("hermes-bridge-cli", clientLiveness, log, guard.handle)
	if err != nil {
		cancelCause(nil)
		fmt.Fprintf(stderr, "hermes-bridge %s: %v\n", cmd, err)
		return nil, nil, exitUsage
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		hint := ""
		if nconn.url == "" {
			hint = " (is 'hermes-bridge run' running? set NATS_URL, --server or --context for another server)"
		}
		cancelCause(nil)
		fmt.Fprintf(stderr, "hermes-bridge %s: cannot connect to NATS at %s: %v%s\n", cmd, nconn.describe(url), err, hint)
		return nil, nil, exitUsage
	}
	js, _ := jetstream.New(nc) // fails only on an option, and none is given
	subjects := events.Subjects{Prefix: cfg.Prefix}
	c := client.New(js, client.WithSubjects(subjects), client.WithOutputStream(cfg.OutputStream))
	cl := &clientConn{c: c, subjects: subjects, js: js, nc: nc, cfg: cfg, cmd: cmd, ctx: gctx, guard: guard, server: nconn.describe(url)}
	closeConn := func() {
		if nc.FlushTimeout(time.Second) == nil {
			if pe := guard.unreported(nc.LastError()); pe != nil {
				fmt.Fprintf(stderr, "hermes-bridge %s: warning: %v\n", cmd, pe)
			}
		}
		nc.Close()
		cancelCause(nil)
	}
	return cl, closeConn, exitOK
}

// permissionDenied prints the permission violation that failed the command and reports
// whether there was one. Call it when a NATS operation failed: it first makes sure the
// server's report of a refused message has arrived (see permGuard.denied).
func (cl *clientConn) permissionDenied(stderr io.Writer) bool {
	_ = cl.nc.FlushTimeout(time.Second)
	pe := cl.guard.denied(cl.nc.LastError())
	if pe == nil {
		return false
	}
	fmt.Fprintf(stderr, "hermes-bridge %s: %v\n", cl.cmd, pe)
	return true
}

// failed reports a NATS operation that failed the command: the permission violation
// behind it when there is one (see permissionDenied), else the message format prints.
// It returns exitUsage.
func (cl *clientConn) failed(stderr io.Writer, format string, a ...any) int {
	if !cl.permissionDenied(stderr) {
		fmt.Fprintf(stderr, format, a...)
	}
	return exitUsage
}

func explainPublish(err error, subject string) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no stream captures %s: is 'hermes-bridge run' running (it provisions the streams), with the same HERMES_BRIDGE_PREFIX?", subject)
	}
	return err
}

// follow prints the action's output until it settles and maps the result to the exit
// status. notePending says whether a pending_approval result is printed with how to
// decide it. hint, when not nil, says, when nothing has come after waitHintAfter, what
// the command waits for and why it may not come.
func follow(ctx context.Context, cl *clientConn, id string, o *cmdOptions, sio stdio, notePending bool, hint func(context.Context) string) int {
	fctx := cl.ctx
	if o.wait > 0 {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(cl.ctx, o.wait)
		defer cancel()
	}
	p := newPrinter(sio.out, sio.err, o)
	news := make(chan struct{})
	var newsOnce sync.Once
	sawNews := func() { newsOnce.Do(func() { close(news) }) }
	onEvent := func(ev *events.EventData) error {
		sawNews()
		return p.event(ev)
	}
	var onPending func(*events.Result)
	if notePending {
		onPending = func(r *events.Result) {
			sawNews()
			p.pending(r)
		}
	}
	stopHint := func() {}
	if hint != nil {
		hctx, cancel := context.WithCancel(fctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.waitHint(hctx, id, o.wait, news, hint)
		}()
		stopHint = func() { cancel(); <-done }
	}
	res, err := cl.c.Follow(fctx, id, onEvent, onPending)
	stopHint()
	p.endText()
	switch {
	case err == nil:
	case cl.permissionDenied(sio.err):
		return exitUsage
	case ctx.Err() != nil:
		fmt.Fprintf(sio.err, "stopped following action %s; it goes on: hermes-bridge watch %s\n", id, id)
		return exitInterrupted
	case fctx.Err() != nil:
		fmt.Fprintf(sio.err, "no result for action %s within --wait %s; it may still run: hermes-bridge watch %s\n", id, o.wait, id)
		return exitUsage
	case errors.Is(err, client.ErrOutputStreamNotFound):
		fmt.Fprintf(sio.err, "hermes-bridge: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(sio.err, "hermes-bridge: following action %s: %v\n", id, err)
		return exitUsage
	}
	if err := p.result(res); err != nil {
		fmt.Fprintf(sio.err, "hermes-bridge: %v\n", err)
		return exitUsage
	}
	return statusCode(res.Status)
}

func statusCode(status string) int {
	switch status {
	case events.StatusCompleted:
		return exitOK
	case events.StatusCancelled:
		return exitCancelled
	default:
		return exitFailed
	}
}

// Output modes.
const (
	modeText   = iota // streamed text, then the pretty result
	modeJSON          // only the pretty result
	modeEvents        // one JSON line per event and per result
)

// printer writes what call and watch show. Each event is written with one Write on
// the unbuffered stdout, so text appears as it arrives.
type printer struct {
	out, err io.Writer
	mode     int
	midLine  bool // text written without a final newline
}

func newPrinter(out, errw io.Writer, o *cmdOptions) *printer {
	p := &printer{out: out, err: errw}
	switch {
	case o.eventsOut:
		p.mode = modeEvents
	case o.jsonOut:
		p.mode = modeJSON
	}
	return p
}

func (p *printer) event(ev *events.EventData) error {
	switch p.mode {
	case modeEvents:
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		_, err = p.out.Write(append(b, '\n'))
		return err
	case modeText:
		if ev.Text == "" {
			return nil
		}
		if _, err := io.WriteString(p.out, ev.Text); err != nil {
			return err
		}
		p.midLine = !strings.HasSuffix(ev.Text, "\n")
	}
	return nil
}

func (p *printer) pending(r *events.Result) {
	if p.mode == modeEvents {
		if b, err := json.Marshal(r); err == nil {
			p.out.Write(append(b, '\n'))
		}
		return
	}
	p.endText()
	var out pendingRequest
	_ = json.Unmarshal(r.Output, &out)
	what := "approval"
	if out.Approval != nil {
		what = "a tool approval of its run"
	}
	fmt.Fprintf(p.err, "action %s is waiting for %s (input_sha256 %s, expires %s); review and decide it with:\n"+
		"  hermes-bridge approve %s\n  hermes-bridge deny %s --reason \"...\"\n",
		r.ActionID, what, sanitize(out.InputSHA256), sanitize(out.ExpiresAt), r.ActionID, r.ActionID)
}

// waitHint waits for news until waitHintAfter has passed, then prints what hint says
// (unless news came meanwhile or ctx ended).
func (p *printer) waitHint(ctx context.Context, id string, wait time.Duration, news <-chan struct{}, hint func(context.Context) string) {
	t := time.NewTimer(waitHintAfter)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-news:
		return
	case <-t.C:
	}
	body := hint(ctx)
	select {
	case <-ctx.Done():
		return
	case <-news:
		return
	default:
	}
	until := "(Ctrl-C stops following; the action goes on)"
	if wait > 0 {
		until = fmt.Sprintf("(until --wait %s)", wait)
	}
	fmt.Fprintf(p.err, "action %s: no event or result after %s; still waiting %s\n%s", id, waitHintAfter, until, body)
}

// endText ends a line of streamed text.
func (p *printer) endText() {
	if p.midLine {
		io.WriteString(p.out, "\n")
		p.midLine = false
	}
}

func (p *printer) result(r *events.Result) error {
	if r.ReplayOf != nil {
		// The bridge did not run it: its idempotency key was an earlier action's.
		fmt.Fprintf(p.err, "action %s is a replay of action %s (same idempotency key): the bridge did not call Hermes again; the result below is %s's (hermes-bridge watch %s)\n",
			r.ActionID, sanitize(*r.ReplayOf), sanitize(*r.ReplayOf), sanitize(*r.ReplayOf))
	}
	var b []byte
	var err error
	if p.mode == modeEvents {
		b, err = json.Marshal(r)
	} else {
		p.endText()
		b, err = json.MarshalIndent(r, "", "  ")
	}
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if _, err := p.out.Write(append(b, '\n')); err != nil {
		return err
	}
	if p.mode == modeText && r.Status != events.StatusCompleted && r.Error != nil {
		fmt.Fprintf(p.err, "action %s %s: %s: %s\n", r.ActionID, r.Status, r.Error.Code, r.Error.Message)
	}
	return nil
}

// durationAlias is a second name of a duration flag: setting it sets *d and *used.
type durationAlias struct {
	d    *time.Duration
	used *bool
}

func (a durationAlias) String() string {
	if a.d == nil {
		return "0s"
	}
	return a.d.String()
}

func (a durationAlias) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("parse error")
	}
	*a.d, *a.used = v, true
	return nil
}

// Get makes flagValueError describe a wrong value as a duration's.
func (a durationAlias) Get() any { return *a.d }
