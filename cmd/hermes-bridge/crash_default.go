//go:build !faulthooks

package main

import "github.com/hermes-bridge/hermes-bridge/bridge"

// crashHook is the fault-injection hook of test builds (see crash_faulthooks.go);
// release builds have none.
func crashHook(map[string]string) (func(bridge.Point, string), error) { return nil, nil }

// testBuildVariables are the variables only test builds read; release builds have none.
var testBuildVariables []string
