package core

import (
	"encoding/json"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// The error objects the core settles with (schemas/README.md, "Results" codes).

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
// settled a result reached without calling Hermes. Nothing was sent, so it is
// retryable and certain.
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

func cancelledInfo(uncertain bool, msg string) *events.ErrorInfo {
	return &events.ErrorInfo{Code: "cancelled", Category: "policy", UncertainOutcome: uncertain, Message: msg}
}

// cancelledResult ends the job's action cancelled; uncertain when an unsafe call may
// have reached Hermes, else retryable (nothing was sent: the key is freed, schemas/README.md, "Delivery guarantees").
func cancelledResult(j *Job, mayHaveStarted bool) *events.Result {
	return &events.Result{ActionID: j.act.ID, CapabilityID: j.act.CapabilityID, Status: events.StatusCancelled,
		Output: json.RawMessage("null"), Error: notSentCancel(mayHaveStarted && !j.act.Op.Safe, "cancelled on request")}
}

// notSentCancel is a cancellation's error: retryable when nothing was sent.
func notSentCancel(uncertain bool, msg string) *events.ErrorInfo {
	info := cancelledInfo(uncertain, msg)
	info.Retryable = !uncertain
	return info
}

func approvalDenied(reason string) *events.ErrorInfo {
	info := &events.ErrorInfo{Code: "approval_denied", Category: "policy", Message: "the action was denied by its approver"}
	if reason != "" {
		info.Details = map[string]any{"reason": reason}
	}
	return info
}

func approvalMismatch() *events.ErrorInfo {
	return &events.ErrorInfo{Code: "approval_mismatch", Category: "policy",
		Message: "the approval's input_sha256 does not match the action's input"}
}

func approvalExpired() *events.ErrorInfo {
	return &events.ErrorInfo{Code: "approval_expired", Category: "policy",
		Message: "no approval decision arrived within the approval window"}
}

func idempotencyConflict(original string) *events.ErrorInfo {
	return &events.ErrorInfo{Code: "idempotency_conflict", Category: "policy",
		Message: "the idempotency key was already used with a different input",
		Details: map[string]any{"original_action_id": original}}
}
