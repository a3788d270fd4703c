package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Pace of connectFirst's attempts and of its log lines.
var (
	connectRetryFirst = 250 * time.Millisecond // the wait after the first failure; it doubles
	connectRetryMax   = 2 * time.Second        // the longest wait between attempts
	connectLogEvery   = 5 * time.Second        // at most one log line per this while retrying
)

// connectFirst makes run's first connection to the server at url. A server that is not
// up yet (the connection is refused, unreachable or not answered) is tried again, at
// growing intervals, until wait has passed since the first attempt; 0 tries once. The
// first failure is logged at once and the next ones at most every connectLogEvery; the
// give-up is logged too. A failure that no retry cures (the server refused the
// credentials, TLS failed, a credentials file cannot be read) and the end of ctx stop
// at once. The error says how long it tried.
func connectFirst(ctx context.Context, url string, opts []nats.Option, wait time.Duration, log zerolog.Logger) (*nats.Conn, error) {
	start := time.Now()
	delay := connectRetryFirst
	var logged time.Time
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			if attempt > 1 {
				log.Info().Int("attempts", attempt).Str("after", time.Since(start).Round(time.Millisecond).String()).
					Msg("NATS is reachable now; connected")
			}
			return nc, nil
		}
		elapsed := time.Since(start)
		if !retryableConnect(err) {
			return nil, err
		}
		if elapsed+delay > wait {
			if attempt == 1 && wait == 0 {
				return nil, err
			}
			log.Error().Err(err).Int("attempts", attempt).Str("waited", elapsed.Round(time.Millisecond).String()).
				Str("url", redactURLs(url)).Msg("giving up: NATS did not become reachable within HERMES_BRIDGE_NATS_CONNECT_WAIT")
			return nil, fmt.Errorf("%w (tried %d times for %s: HERMES_BRIDGE_NATS_CONNECT_WAIT=%s)", err, attempt, elapsed.Round(time.Second), wait)
		}
		if logged.IsZero() || time.Since(logged) >= connectLogEvery {
			log.Warn().Err(err).Int("attempt", attempt).Str("url", redactURLs(url)).
				Str("gives_up_in", (wait - elapsed).Round(time.Second).String()).Msg("NATS is not reachable yet; retrying")
			logged = time.Now()
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (stopped while waiting for NATS: %w)", err, context.Cause(ctx))
		case <-t.C:
		}
		delay = min(2*delay, connectRetryMax)
	}
}

// retryableConnect reports whether a failed connection may succeed later without a
// change of configuration: not when the server refused the credentials, TLS failed,
// or a file the options name cannot be read.
func retryableConnect(err error) bool {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired), errors.Is(err, nats.ErrSecureConnRequired),
		errors.Is(err, nats.ErrSecureConnWanted), errors.Is(err, nats.ErrPermissionViolation),
		errors.Is(err, os.ErrNotExist), errors.Is(err, os.ErrPermission),
		errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &verify):
		return false
	}
	return true
}
