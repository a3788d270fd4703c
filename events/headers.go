package events

import (
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

// needsPercentEncoding reports whether a header value must be percent-encoded
// per the CloudEvents NATS/HTTP binding: space, '"', '%' and anything outside
// printable ASCII.
func needsPercentEncoding(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '%' {
			return true
		}
	}
	return false
}

const upperhex = "0123456789ABCDEF"

// PercentEncodeHeader encodes a CloudEvents attribute value for a ce- header:
// space, '"', '%', control characters and every non-ASCII byte (of the UTF-8
// encoding) become %XX. Values that need no encoding are returned unchanged
// without allocating.
func PercentEncodeHeader(s string) string {
	if !needsPercentEncoding(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(upperhex[c>>4])
			b.WriteByte(upperhex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// decodeHeaderValue undoes the binding's encoding of one ce- header value: an
// RFC 7230 quoted-string is unquoted first, then one round of percent-decoding
// is applied, and the result must be valid UTF-8. The returned reason is
// empty on success and never contains the value.
func decodeHeaderValue(v string) (string, string) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		inner := v[1 : len(v)-1]
		if strings.IndexByte(inner, '\\') >= 0 {
			var b strings.Builder
			for i := 0; i < len(inner); i++ {
				c := inner[i]
				if c == '\\' {
					i++
					if i == len(inner) {
						return "", "has a dangling escape in a quoted value"
					}
					c = inner[i]
				}
				b.WriteByte(c)
			}
			inner = b.String()
		}
		v = inner
	}
	if strings.IndexByte(v, '%') >= 0 {
		b := make([]byte, 0, len(v))
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c != '%' {
				b = append(b, c)
				continue
			}
			if i+2 >= len(v) || !ishex(v[i+1]) || !ishex(v[i+2]) {
				return "", "has an invalid percent-encoding"
			}
			b = append(b, unhex(v[i+1])<<4|unhex(v[i+2]))
			i += 2
		}
		v = string(b)
	}
	if !utf8.ValidString(v) {
		return "", "is not valid UTF-8"
	}
	return v, ""
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
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
