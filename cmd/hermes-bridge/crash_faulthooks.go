//go:build faulthooks

package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hermes-bridge/hermes-bridge/bridge"
)

// crashEnv names the fault-injection setting of binaries built with -tags faulthooks
// (the kill tests in e2e build one). Its value is "<point>", "<point>:<n>" or
// "<point>:<n>:stop": the process kills itself with SIGKILL (with ":stop", freezes
// itself with SIGSTOP, as a paused replica, until the test sends SIGCONT) the n-th time
// (default 1) any action reaches that bridge.Point. Release binaries are built without
// the tag and ignore it.
const crashEnv = "HERMES_BRIDGE_CRASH_AT"

// testBuildVariables are the variables only test builds read (see unknownVariables).
var testBuildVariables = []string{crashEnv}

// crashHook returns the hook that crashHook's setting asks for, or nil.
func crashHook(environ map[string]string) (func(bridge.Point, string), error) {
	v := environ[crashEnv]
	if v == "" {
		return nil, nil
	}
	name, nth, _ := strings.Cut(v, ":")
	nth, mode, _ := strings.Cut(nth, ":")
	if mode != "" && mode != "stop" {
		return nil, fmt.Errorf("%s=%s: the mode after the count must be stop", crashEnv, v)
	}
	n := 1
	if nth != "" {
		var err error
		if n, err = strconv.Atoi(nth); err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%s: the count after ':' must be a positive integer", crashEnv, v)
		}
	}
	point := bridge.Point(name)
	if !slices.Contains(bridge.Points(), point) {
		return nil, fmt.Errorf("%s=%s: unknown point (one of %v)", crashEnv, v, bridge.Points())
	}
	var seen atomic.Int64
	return func(p bridge.Point, _ string) {
		if p == point && seen.Add(1) == int64(n) {
			if mode == "stop" {
				// The kernel stops the threads of a process one by one, so the goroutine
				// that sent SIGSTOP could run on for a while (under load, long enough to
				// write a record); it waits for SIGCONT, so that it carries on only as a
				// replica paused here would.
				cont := make(chan os.Signal, 1)
				signal.Notify(cont, syscall.SIGCONT)
				defer signal.Stop(cont)
				fmt.Fprintf(os.Stderr, "%s: stopping the process at %s #%d\n", crashEnv, p, n)
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				<-cont
				return // SIGCONT: carry on as a replica that was paused here
			}
			fmt.Fprintf(os.Stderr, "%s: killing the process at %s #%d\n", crashEnv, p, n)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never return: the signal is on its way
		}
	}, nil
}
