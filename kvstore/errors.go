package kvstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sentinel errors. Match them with errors.Is; the returned errors also wrap
// the underlying nats.go error where there is one.
var (
	// ErrExists: Create found a live value under the key (the claim is held
	// by someone else). Wraps jetstream.ErrKeyExists.
	ErrExists = errors.New("kvstore: key exists")
	// ErrConflict: Update or Delete lost the compare-and-set (the key changed
	// since the caller's revision, or is gone). Wraps
	// jetstream.ErrKeyRevisionMismatch when nats.go reported it.
	ErrConflict = errors.New("kvstore: revision conflict")
	// ErrNotFound: the key has no live value (never written, deleted, or
	// expired by the bucket TTL).
	ErrNotFound = errors.New("kvstore: key not found")
	// ErrTooLarge: the encoded record exceeds the bucket's value limit or the
	// server's max payload. Returned errors are *TooLargeError when the size
	// is known. The caller may store a smaller record instead.
	ErrTooLarge = errors.New("kvstore: record too large")
	// ErrCorrupt: a stored value is not a readable record.
	ErrCorrupt = errors.New("kvstore: unreadable record")
	// ErrNoBucket: Open in bind-only mode found no bucket.
	ErrNoBucket = errors.New("kvstore: bucket does not exist")
	// ErrTTLShrink: a provisioning Open would shorten the TTL of a bucket that holds
	// values, and Config.AllowRetentionShrink is not set. Returned errors are
	// *TTLShrinkError.
	ErrTTLShrink = errors.New("kvstore: refusing to shorten the bucket TTL")
)

// TooLargeError reports an encoded record larger than the value limit.
// errors.Is(err, ErrTooLarge) is true for it.
type TooLargeError struct {
	Key   string
	Size  int // encoded record size in bytes
	Limit int // the limit in force; 0 when the server rejected the write
}

func (e *TooLargeError) Error() string {
	if e.Limit <= 0 {
		return fmt.Sprintf("kvstore: record for %s is %d bytes, over the server's limit", e.Key, e.Size)
	}
	return fmt.Sprintf("kvstore: record for %s is %d bytes, limit %d", e.Key, e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// TTLShrinkError reports a refused shortening of the bucket TTL: applied, it would
// make the server delete at once every value older than Requested.
// errors.Is(err, ErrTTLShrink) is true for it.
type TTLShrinkError struct {
	Bucket string
	// Current and Requested are the bucket's TTL and the configured one (0: no expiry).
	Current, Requested time.Duration
	// Values is how many values (revisions and delete markers) the bucket holds.
	Values uint64
}

func (e *TTLShrinkError) Error() string {
	return fmt.Sprintf("kvstore: bucket %s holds %d values with TTL %s; refusing to shorten it to %s, "+
		"which would delete those older than %s at once (set Config.AllowRetentionShrink to apply it)",
		e.Bucket, e.Values, ttlString(e.Current), ttlString(e.Requested), ttlString(e.Requested))
}

// Is makes errors.Is(err, ErrTTLShrink) true.
func (e *TTLShrinkError) Is(target error) bool { return target == ErrTTLShrink }

func ttlString(d time.Duration) string {
	if d == 0 {
		return "none (no expiry)"
	}
	return d.String()
}

// bucketError is returned by Open when binding to a missing bucket.
type bucketError struct {
	bucket string
	err    error
}

func (e *bucketError) Error() string {
	return "kvstore: bucket " + e.bucket + " does not exist; create it or enable provisioning"
}

func (e *bucketError) Unwrap() []error { return []error{ErrNoBucket, e.err} }

// isCASFailure reports whether err is a lost compare-and-set, whichever way
// nats.go or the server reported it (10071 on R1, 10164 on replicated).
func isCASFailure(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

// isTooLarge reports whether a publish failed for its size.
func isTooLarge(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// mapWriteErr turns a write error into the package's sentinels.
// casErr is the sentinel for a lost compare-and-set (ErrExists or ErrConflict).
func mapWriteErr(op, key string, size int, err error, casErr error) error {
	switch {
	case err == nil:
		return nil
	case isCASFailure(err):
		return fmt.Errorf("%w: %s %s: %w", casErr, op, key, err)
	case isTooLarge(err):
		return fmt.Errorf("%w: %w", &TooLargeError{Key: key, Size: size}, err)
	default:
		return fmt.Errorf("kvstore: %s %s: %w", op, key, err)
	}
}
