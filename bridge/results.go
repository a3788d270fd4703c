package bridge

import (
	"encoding/json"
	"errors"
	"maps"

	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// failedOf is a terminal failed result of d's action carrying info.
func failedOf(d *driver, info *events.ErrorInfo) *events.Result {
	return &events.Result{ActionID: d.id, CapabilityID: d.act.capID, Status: events.StatusFailed, Error: info}
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
		maps.Copy(info.Details, he.Details)
		if he.RemoteCode != "" {
			info.Details["remote_code"] = he.RemoteCode
		}
	}
	return info
}

// resultOf builds the terminal result of a Hermes call: a stream cut off by a cancel or
// its deadline keeps the aggregate of the events streamed so far as its output.
func resultOf(d *driver, res *hermes.Result, err error) *events.Result {
	r := &events.Result{ActionID: d.id, CapabilityID: d.act.capID, Status: events.StatusCompleted}
	if res != nil {
		r.Output = res.Output
		if res.Status != "" {
			r.Status = res.Status
		}
		r.Usage = usageOf(res.Usage)
	}
	if he, ok := errors.AsType[*hermes.Error](err); ok && res == nil && he.Partial != nil {
		// A stream cut off by a cancel or the deadline: the text streamed so far.
		r.Output, r.Usage = he.Partial.Output, usageOf(he.Partial.Usage)
	}
	if err != nil {
		r.Error = clientErrorInfo(err, d.act.spec.Safe)
		if r.Error.Code == hermes.CodeAuthentication && d.act.ep != nil && d.act.ep.cfg.KeyHint != "" {
			r.Error.Message += "; " + d.act.ep.cfg.KeyHint
		}
		if r.Status == events.StatusCompleted {
			r.Status = events.StatusFailed
		}
		if r.Error.Code == hermes.CodeCancelled {
			r.Status = events.StatusCancelled
		}
	}
	if len(r.Output) == 0 {
		r.Output = json.RawMessage("null")
	}
	return r
}

// usageOf is the result's usage for what Hermes reported (nil when it reported none).
func usageOf(u *hermes.Usage) *events.Usage {
	if u == nil {
		return nil
	}
	return &events.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.TotalTokens, CostUSD: u.CostUSD}
}
