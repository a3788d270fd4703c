package fastbatch

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Config says where a Publisher sends its control messages and what it does with an
// event the batch refuses.
type Config struct {
	// Control is the subject of the batch's commits and pings. The stream must
	// capture it, and it should carry nothing else: core subscribers of it receive
	// them.
	Control string
	// Controls is a subject pattern covering Control (and the control subjects of
	// other publishers on the connection): when the server denies the connection
	// publishing on a subject it matches, Control is taken as denied too.
	Controls string
	// Alone publishes, synchronously, an event the batch refused; it returns nil only
	// once the event is stored. The event keeps its headers (Nats-Msg-Id), so
	// publishing one already stored is a no-op.
	Alone func(ctx context.Context, m *nats.Msg) error
	// Log receives the publisher's lines about batches that end early or stall.
	Log zerolog.Logger
}

// Usable returns nil if c's publisher can use fast batches on stream s: the stream,
// as last described by the server (its cached info; a server before 2.14 leaves the
// flag out), allows batch publishing and captures c.Control, and the server has not
// denied nc publishing on c.Controls. Otherwise it returns why not, wrapping
// ErrRefused.
func (c Config) Usable(nc *nats.Conn, s jetstream.Stream) error {
	var info *jetstream.StreamInfo
	if s != nil {
		info = s.CachedInfo()
	}
	if info == nil || !info.Config.AllowBatchPublish {
		return &refusedError{reason: "the stream does not allow batch publishing (allow_batched)"}
	}
	if !slices.ContainsFunc(info.Config.Subjects, func(subj string) bool { return subjectMatches(subj, c.Control) }) {
		return &refusedError{reason: "the stream does not capture the batch subject " + c.Control}
	}
	if c.denied(nc.LastError()) {
		return c.deniedError()
	}
	return nil
}

// denied reports whether err (a connection's last error) is the server refusing a
// publish on a subject c.Controls matches: the user lacks the permission (a deployment
// that kept its earlier permissions), so every commit and ping would go unanswered.
func (c Config) denied(err error) bool {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	_, subject, ok := strings.Cut(err.Error(), `Publish to "`)
	subject, _, closed := strings.Cut(subject, `"`)
	return ok && closed && subjectMatches(c.Controls, subject)
}

func (c Config) deniedError() error {
	return &refusedError{reason: "the server denies publishing on " + c.Controls + " (permissions)"}
}

// subjectMatches reports whether the literal subject matches pattern (tokens, '*' for
// one token, '>' for one or more at the end).
func subjectMatches(pattern, subject string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case pt == ">":
			return !pmore && st != ""
		case pt != "*" && pt != st:
			return false
		case !pmore || !smore:
			return !pmore && !smore
		}
		pattern, subject = prest, srest
	}
}
