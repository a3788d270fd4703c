package events

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// Header names written on every output message.
const (
	HeaderSpecVersion = "ce-specversion"
	HeaderID          = "ce-id"
	HeaderSource      = "ce-source"
	HeaderType        = "ce-type"
	HeaderTime        = "ce-time"
	HeaderSubject     = "ce-subject"
	HeaderTraceparent = "ce-traceparent"
	HeaderTracestate  = "ce-tracestate"
	HeaderContentType = "content-type"
	HeaderMsgID       = "Nats-Msg-Id"

	// HeaderDurationMs, an extension outside the CloudEvent attributes, is set on a
	// terminal result message when the bridge knows when its action was published: the
	// milliseconds from the action message's JetStream timestamp (in the actions stream)
	// to the result. Absent on results settled by an approval decision, the parked-action
	// sweeper or a cancel (optional: readers must not depend on it).
	HeaderDurationMs = "Hermes-Bridge-Duration-Ms"

	// Plain W3C trace-context headers (per-hop context for NATS tracing and
	// for subscribers that are not CloudEvents-aware).
	HeaderW3CTraceparent = "traceparent"
	HeaderW3CTracestate  = "tracestate"
)

// ContentTypeJSON is the content type of binary-mode data.
const ContentTypeJSON = "application/json"

// ContentTypeCloudEventsJSON is the content type of structured-mode events.
const ContentTypeCloudEventsJSON = "application/cloudevents+json"

// PercentEncodeHeader encodes a CloudEvents attribute value for a ce- header
// (the CloudEvents NATS/HTTP binding): space, '"', '%', control characters and
// every non-ASCII byte (of the UTF-8 encoding) become %XX. A value that needs
// no encoding is returned as it is, without allocating.
func PercentEncodeHeader(s string) string {
	var b []byte // nil until a byte needs encoding
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c > ' ' && c < 0x7f && c != '"' && c != '%':
			if b != nil {
				b = append(b, c)
			}
		default:
			if b == nil {
				b = append(make([]byte, 0, len(s)+16), s[:i]...)
			}
			b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		}
	}
	if b == nil {
		return s
	}
	return string(b)
}

// decodeHeaderValue undoes the binding's encoding of one ce- header value: an
// RFC 7230 quoted-string is unquoted first, then one round of percent-decoding
// is applied, and the result must be valid UTF-8. The returned reason is
// empty on success and never contains the value.
func decodeHeaderValue(v string) (string, string) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		for i := 1; i < len(v)-1; i++ {
			if v[i] == '\\' {
				if i++; i == len(v)-1 {
					return "", "has a dangling escape in a quoted value"
				}
			}
			b.WriteByte(v[i])
		}
		v = b.String()
	}
	if strings.IndexByte(v, '%') >= 0 {
		var err error
		if v, err = url.PathUnescape(v); err != nil { // %XX only: '+' stays '+'
			return "", "has an invalid percent-encoding"
		}
	}
	if !utf8.ValidString(v) {
		return "", "is not valid UTF-8"
	}
	return v, ""
}

// hasPrefixFold reports whether s starts with prefix, ASCII case-insensitively.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// Headers the bridge adds to a dead-lettered copy on the DLQ subject (see
// schemas/dlq.schema.json). The original headers and payload are kept.
const (
	HeaderDLQReason    = "Hermes-Dlq-Reason"
	HeaderDLQSubject   = "Hermes-Dlq-Subject"
	HeaderDLQStream    = "Hermes-Dlq-Stream"
	HeaderDLQStreamSeq = "Hermes-Dlq-Stream-Seq"
	// HeaderDLQTime is when the bridge dead-lettered the message: RFC 3339 in UTC, by
	// the bridge's clock.
	HeaderDLQTime = "Hermes-Dlq-Time"
	// HeaderDLQTruncated is set (to the message's size in bytes) on a copy whose
	// message was too large to be copied with the DLQ headers: the copy carries the
	// headers only; the message stays in its stream at Hermes-Dlq-Stream-Seq while
	// the stream keeps it.
	HeaderDLQTruncated = "Hermes-Dlq-Truncated"
)
