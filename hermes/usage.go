package hermes

import (
	"bytes"
	"math"
	"strconv"
)

// Usage is the token usage Hermes reported for one agent turn or run, in one shape for every
// route: chat completions' prompt_tokens and completion_tokens are InputTokens and
// OutputTokens. CostUSD is nil when Hermes reported no cost.
type Usage struct {
	InputTokens  int64    `json:"input_tokens"`
	OutputTokens int64    `json:"output_tokens"`
	TotalTokens  int64    `json:"total_tokens"`
	CostUSD      *float64 `json:"cost_usd,omitempty"`
}

// RunUsage is the token usage of a finished run: the same shape as [Usage].
type RunUsage = Usage

// usageOps are the JSON operations whose body's usage is the work of this call (an agent
// turn). Reads of earlier work (response_get, run_status, session_get) report figures that
// were already counted when the work was done, so they get no Result.Usage.
func usageOp(op string) bool {
	return op == "chat" || op == "responses" || op == "session_chat"
}

// ParseUsage reads a Hermes usage object: input_tokens (or prompt_tokens), output_tokens (or
// completion_tokens), total_tokens (input + output when Hermes omits it) and an optional
// cost_usd. It returns nil unless b is a JSON object whose input and output counts are
// non-negative integers: a usage Hermes did not report is never made up as zeros. A cost that
// is not a finite non-negative number is left out.
func ParseUsage(b []byte) *Usage {
	var in, out, total, cost []byte
	eachMember(b, func(k, v []byte) {
		switch string(k) {
		case "input_tokens", "prompt_tokens":
			in = v
		case "output_tokens", "completion_tokens":
			out = v
		case "total_tokens":
			total = v
		case "cost_usd":
			cost = v
		}
	})
	u := &Usage{}
	var ok bool
	if u.InputTokens, ok = tokenCount(in); !ok {
		return nil
	}
	if u.OutputTokens, ok = tokenCount(out); !ok {
		return nil
	}
	if u.TotalTokens, ok = tokenCount(total); !ok {
		u.TotalTokens = u.InputTokens + u.OutputTokens
	}
	if c, ok := costOf(cost); ok {
		u.CostUSD = &c
	}
	return u
}

// tokenCount reads a non-negative JSON integer (at most 2^53, what a float keeps exactly).
func tokenCount(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 16 || v[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n > 1<<53 {
		return 0, false
	}
	return n, true
}

// costOf reads a finite non-negative JSON number.
func costOf(v []byte) (float64, bool) {
	if len(v) == 0 || len(v) > 32 || v[0] == '-' || v[0] == '"' || bytes.ContainsAny(v, "nN") {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f < 0 {
		return 0, false
	}
	return f, true
}

// bodyUsage is the usage member of a JSON body (nil when it has none).
func bodyUsage(b []byte) *Usage {
	var raw []byte
	eachMember(b, func(k, v []byte) {
		if string(k) == "usage" {
			raw = v
		}
	})
	if raw == nil {
		return nil
	}
	return ParseUsage(raw)
}

// usageState gathers a stream's usage: the usage member of its final event (a chat finish
// chunk, a session run.completed, a run's run.completed) or of a Responses terminal event's
// response, and the cost_usd of each subagent.complete of a run.
type usageState struct {
	usage   *Usage
	cost    float64
	hasCost bool
}

// observe reads the usage of one event; it parses nothing unless the event carries usage, is
// a Responses terminal event or a subagent.complete.
func (u *usageState) observe(p *probe, name string, terminal bool, data []byte) {
	if p.usage != nil {
		if x := ParseUsage(p.usage); x != nil {
			u.usage = x
		}
	}
	if terminal && p.response != nil && (name == "response.completed" || name == "response.failed" || name == "response.incomplete") {
		if x := bodyUsage(p.response); x != nil {
			u.usage = x
		}
	}
	if name == "subagent.complete" {
		if c, ok := subagentCost(data); ok {
			u.cost += c
			u.hasCost = true
		}
	}
}

// subagentCost is the cost_usd member of a subagent event.
func subagentCost(data []byte) (float64, bool) {
	var raw []byte
	eachMember(data, func(k, v []byte) {
		if string(k) == "cost_usd" {
			raw = v
		}
	})
	return costOf(raw)
}

// result is the stream's usage: the reported tokens with the subagents' summed cost unless
// the final event reported a cost itself; nil when no event reported usage.
func (u *usageState) result() *Usage {
	if u.usage == nil {
		return nil
	}
	out := *u.usage
	if out.CostUSD == nil && u.hasCost {
		c := u.cost
		out.CostUSD = &c
	}
	return &out
}
