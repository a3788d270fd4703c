// Package kvtest has in-memory implementations of the ledger's two stores, for tests of
// the ledger and of the packages built on it: [Records] is a [kvstore.Records] with the
// semantics of [kvstore.Store] on a JetStream bucket, and [Log] is a
// [kvstore.ResultLog] with those of [kvstore.JetStreamLog] on a stream.
//
// Both can be told to misbehave, one call at a time, the way the real ones can: a call
// that fails without effect ([Records.FailNext]), a write that is applied although its
// reply is lost ([Records.LoseAck]), a read that returns an older value than the latest
// ([Records.StaleGet], [Log.StaleLast]). A hook ([Records.OnCall]) runs at the start of
// every call, in the calling goroutine and before any scripted fault is taken, so that a
// test can stop a goroutine at an exact call, script a fault for that very call, or
// record the order of calls.
//
// # Lost replies
//
// [kvstore.Store.Create] recovers a lost reply by reading the key back and finding its
// own bytes, and [kvstore.JetStreamLog.Append] by retrying and finding its own message.
// These stores do not emulate that recovery: a lost reply scripted here is the case where
// the recovery failed too (the read-back timed out, the ctx ended), which is the case the
// ledger itself must survive. A recovered lost reply is indistinguishable from a success,
// so a test of it needs no fault at all.
//
// Both stores are safe for concurrent use.
package kvtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Op names a call, for faults, hooks and counters.
type Op string

// Calls of Records and Log.
const (
	OpCreate Op = "create"
	OpGet    Op = "get"
	OpUpdate Op = "update"
	OpDelete Op = "delete"
	OpWait   Op = "wait"
	OpKeys   Op = "keys"

	OpAppend       Op = "append"
	OpLast         Op = "last"
	OpWaitTerminal Op = "wait_terminal"
)

// ErrLostAck is wrapped by the error of a call whose write was applied but whose reply
// was lost ([Records.LoseAck], [Log.LoseAck]). It matches none of kvstore's sentinels,
// like the timeout a real lost reply gives.
var ErrLostAck = errors.New("kvtest: the write was applied but its reply was lost")

// ErrInjected is a ready-made error for FailNext.
var ErrInjected = errors.New("kvtest: injected failure")

// faultKind is what a scripted fault does.
type faultKind int

const (
	faultFail  faultKind = iota // return err, apply nothing
	faultLost                   // apply, then return an ErrLostAck error
	faultStale                  // a read returns the scripted old value
)

// fault is one scripted misbehaviour; key "" matches any key.
type fault struct {
	op    Op
	key   string
	kind  faultKind
	err   error
	value any // kvstore.Entry for Get, kvstore.LogEntry for Last
}

// faults is a FIFO of scripted faults, consumed by the first matching call.
type faults struct {
	list []fault
}

func (f *faults) add(x fault) { f.list = append(f.list, x) }

// take removes and returns the first fault for op on key.
func (f *faults) take(op Op, key string) (fault, bool) {
	for i, x := range f.list {
		if x.op == op && (x.key == "" || x.key == key) {
			f.list = slices.Delete(f.list, i, i+1)
			return x, true
		}
	}
	return fault{}, false
}

func (f *faults) pending() int { return len(f.list) }

// hooks holds the call hooks of a store.
type hooks struct {
	mu    sync.Mutex
	plain func(op Op, key string)
	ctx   func(ctx context.Context, op Op, key string)
}

func (h *hooks) set(f func(Op, string)) {
	h.mu.Lock()
	h.plain = f
	h.mu.Unlock()
}

func (h *hooks) setCtx(f func(context.Context, Op, string)) {
	h.mu.Lock()
	h.ctx = f
	h.mu.Unlock()
}

// call runs the hooks; called without the store's lock so that a hook may block or call
// the store.
func (h *hooks) call(ctx context.Context, op Op, key string) {
	h.mu.Lock()
	p, c := h.plain, h.ctx
	h.mu.Unlock()
	if p != nil {
		p(op, key)
	}
	if c != nil {
		c(ctx, op, key)
	}
}

// lostAck is the error of a write whose reply was lost.
func lostAck(op Op, key string) error {
	return fmt.Errorf("kvtest: %s %s: %w", op, key, ErrLostAck)
}

// matchFilter reports whether key matches a NATS subject filter ("park.>", "act.*").
func matchFilter(filter, key string) bool {
	if filter == "" || filter == ">" {
		return true
	}
	ft, kt := strings.Split(filter, "."), strings.Split(key, ".")
	for i, f := range ft {
		if f == ">" {
			return len(kt) > i
		}
		if i >= len(kt) || (f != "*" && f != kt[i]) {
			return false
		}
	}
	return len(ft) == len(kt)
}
