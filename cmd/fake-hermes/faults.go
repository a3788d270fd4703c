package main

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// faultHelp is the --fault syntax, for the usage text.
const faultHelp = "inject a fault, `spec` = comma-separated key[=value] (repeatable; queued in order): " +
	"route=OP (an operation, e.g. chat_stream; without it every request matches, /health too), " +
	"times=N|every (1 when not given), delay=DURATION (slow headers), status=CODE (answer it at once, " +
	"Hermes's error body), reset (close the connection, no response), after=N (the stream effects " +
	"below after N events), drop (cut the connection), stall (hang), malformed (one broken frame), " +
	"oversized=BYTES (one huge frame)"

// parseFault reads one --fault spec into a hermestest.Fault (see faultHelp).
func parseFault(spec string) (hermestest.Fault, error) {
	var f hermestest.Fault
	if strings.TrimSpace(spec) == "" {
		return f, errors.New("empty fault")
	}
	effect := false
	for part := range strings.SplitSeq(spec, ",") {
		k, v, hasV := strings.Cut(strings.TrimSpace(part), "=")
		num := func() (int, error) {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%s=%q: want a non-negative integer", k, v)
			}
			return n, nil
		}
		flagOnly := func() error {
			if hasV {
				return fmt.Errorf("%s takes no value", k)
			}
			effect = true
			return nil
		}
		var err error
		switch k {
		case "route":
			if v == "" {
				err = errors.New("route= wants an operation name, e.g. chat_stream")
			}
			f.Route = v
		case "times":
			if v == "every" {
				f.Times = math.MaxInt
			} else {
				f.Times, err = num()
			}
		case "delay":
			f.Delay, err = time.ParseDuration(v)
			if err != nil || f.Delay <= 0 {
				err = fmt.Errorf("delay=%q: want a positive duration such as 2s", v)
			}
			effect = true
		case "status":
			f.Status, err = num()
			if err == nil && (f.Status < 100 || f.Status > 599) {
				err = fmt.Errorf("status=%d: want an HTTP status", f.Status)
			}
			if err == nil && http.StatusText(f.Status) == "" {
				err = fmt.Errorf("status=%d: not a known HTTP status", f.Status)
			}
			effect = true
		case "reset":
			f.Reset, err = true, flagOnly()
		case "after":
			f.AfterEvents, err = num()
		case "drop":
			f.Drop, err = true, flagOnly()
		case "stall":
			f.Stall, err = true, flagOnly()
		case "malformed":
			f.Malformed, err = true, flagOnly()
		case "oversized":
			f.Oversized, err = num()
			if err == nil && f.Oversized == 0 {
				err = errors.New("oversized=0: want a size in bytes")
			}
			effect = true
		default:
			err = fmt.Errorf("unknown key %q (route, times, delay, status, reset, after, drop, stall, malformed, oversized)", k)
		}
		if err != nil {
			return f, fmt.Errorf("--fault %q: %w", spec, err)
		}
	}
	if !effect {
		return f, fmt.Errorf("--fault %q: no effect (delay, status, reset, drop, stall, malformed or oversized)", spec)
	}
	return f, nil
}

// describeFault is one line saying what f does, for the start lines.
func describeFault(f hermestest.Fault) string {
	var what []string
	if f.Delay > 0 {
		what = append(what, "headers after "+f.Delay.String())
	}
	switch {
	case f.Reset:
		what = append(what, "connection reset")
	case f.Status != 0:
		what = append(what, fmt.Sprintf("HTTP %d", f.Status))
	}
	after := fmt.Sprintf(" after %d events", f.AfterEvents)
	if f.Drop {
		what = append(what, "dropped"+after)
	}
	if f.Stall {
		what = append(what, "stalled"+after)
	}
	if f.Malformed {
		what = append(what, "a malformed frame"+after)
	}
	if f.Oversized > 0 {
		what = append(what, fmt.Sprintf("a %d-byte frame", f.Oversized)+after)
	}
	reqs := "request"
	if f.Route != "" {
		reqs = f.Route + " request"
	}
	switch {
	case f.Times == math.MaxInt:
		reqs = "every " + reqs
	case f.Times > 1:
		reqs = fmt.Sprintf("the next %d %ss", f.Times, reqs)
	default:
		reqs = "the next " + reqs
	}
	return reqs + ": " + strings.Join(what, ", ")
}
