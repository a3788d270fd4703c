package bridge

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// failedResult is a terminal failed result of j carrying info.
func failedResult(j *job, info *events.ErrorInfo) *events.Result {
	return &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: "failed", Error: info}
}

func invalidAction(field, reason string) *events.ErrorInfo {
	return &events.ErrorInfo{Code: "invalid_action", Category: "permanent", Message: "invalid action: " + events.FieldReason(field, reason),
		Details: map[string]any{"field": field, "reason": reason}}
}

// actionErrorInfo turns a decoding or schema error into invalid_action with its field.
func actionErrorInfo(err error) *events.ErrorInfo {
	var ae *events.ActionError
	if errors.As(err, &ae) {
		return invalidAction(ae.Field, ae.Reason)
	}
	var ve *schemas.ValidationError
	if errors.As(err, &ve) {
		return invalidAction(ve.Field, ve.Reason)
	}
	return invalidAction("", err.Error())
}

// outcomeUnknown ends an unsafe action taken over from a delivery that had marked it
// dispatched and then stopped renewing its claim before its result was stored: its
// replica stopped or was paused past the lease, or could not reach NATS to store what
// Hermes answered. The taker cannot tell which, and never resends.
func outcomeUnknown() *events.ErrorInfo {
	return &events.ErrorInfo{Code: "outcome_unknown", Category: "temporary", UncertainOutcome: true,
		Message: "the replica that sent the request stopped renewing its claim before its result was stored " +
			"(it stopped, was paused, or could not reach NATS); the request may have reached Hermes and is not resent. " +
			"Reconcile before acting again",
		Details: map[string]any{"reason": "owner_lost"}}
}

// interruptedSettle ends an action taken over from a replica that stopped while it
// settled a result reached without calling Hermes (an invalid action is validated
// again and gets its own result; this is for the rest, such as a retry budget spent
// on certain failures). Nothing was sent, so it is retryable and certain.
func interruptedSettle() *events.ErrorInfo {
	return &events.ErrorInfo{Code: "internal", Category: "connector", Retryable: true,
		Message: "the replica that settled this action without calling Hermes stopped renewing its claim before it stored the result; nothing was sent",
		Details: map[string]any{"reason": "interrupted_settle"}}
}

// endpointPaused ends an action whose endpoint stays paused by its circuit breaker past
// the action's deadline. Nothing was sent, so a retry later is safe.
func endpointPaused(lastCode string) *events.ErrorInfo {
	if lastCode == "" {
		lastCode = "remote_unavailable"
	}
	return &events.ErrorInfo{Code: lastCode, Category: "temporary", Retryable: true,
		Message: "the endpoint is paused after repeated failures and stays paused past the action's deadline",
		Details: map[string]any{"reason": "endpoint_paused"}}
}

func deadlineExceeded(uncertain bool) *events.ErrorInfo {
	return &events.ErrorInfo{Code: "deadline_exceeded", Category: "temporary", UncertainOutcome: uncertain,
		Message: "the action's deadline passed"}
}

// clientErrorInfo maps any error of the Hermes client to the contract's error object.
// safe is the operation's retry safety.
func clientErrorInfo(err error, safe bool) *events.ErrorInfo {
	var ie *hermes.InputError
	if errors.As(err, &ie) {
		return invalidAction(ie.Field, ie.Reason)
	}
	var he *hermes.Error
	if !errors.As(err, &he) {
		return &events.ErrorInfo{Code: "internal", Category: "connector", Message: "internal error",
			UncertainOutcome: !safe}
	}
	info := &events.ErrorInfo{
		Code:             he.Code,
		Message:          he.Message,
		Category:         he.Category,
		Retryable:        he.Retryable(safe),
		UncertainOutcome: !safe && !he.NotStarted,
		HTTPStatus:       he.HTTPStatus,
		RetryAfterMS:     he.RetryAfter.Milliseconds(),
	}
	if len(he.Details) > 0 || he.RemoteCode != "" {
		info.Details = make(map[string]any, len(he.Details)+1)
		for k, v := range he.Details {
			info.Details[k] = v
		}
		if he.RemoteCode != "" {
			info.Details["remote_code"] = he.RemoteCode
		}
	}
	return info
}

// resultOf builds the terminal result of a Hermes call.
func resultOf(j *job, res *hermes.Result, err error) *events.Result {
	r := &events.Result{ActionID: j.actionID, CapabilityID: j.capID, Status: "completed"}
	if res != nil {
		r.Output = res.Output
		if res.Status != "" {
			r.Status = res.Status
		}
	}
	if err != nil {
		r.Error = clientErrorInfo(err, j.safe())
		if r.Error.Code == hermes.CodeAuthentication && j.ep != nil && j.ep.cfg.KeyHint != "" {
			r.Error.Message += "; " + j.ep.cfg.KeyHint
		}
		if r.Status == "completed" {
			r.Status = "failed"
		}
		if r.Error.Code == "cancelled" {
			r.Status = "cancelled"
		}
	}
	if len(r.Output) == 0 {
		r.Output = json.RawMessage("null")
	}
	return r
}

// backoff is bounded exponential backoff with full jitter on attempt (1-based),
// never shorter than retryAfter.
func backoff(base, maxDelay time.Duration, attempt int, retryAfter time.Duration) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base << min(attempt-1, 20)
	if d > maxDelay || d <= 0 {
		d = maxDelay
	}
	d = d/2 + rand.N(d/2+1)
	if d < retryAfter {
		d = retryAfter
	}
	return d
}
