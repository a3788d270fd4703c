// Package browser holds the dashboard's headless-Chromium tests, in a module of their own
// so that chromedp is no requirement of the hermes-bridge module. The tests are black-box:
// they build the hermes-bridge binary of the enclosing repository (with -race), start
// `hermes-bridge run` as a process on loopback against the in-process fake Hermes of
// hermes/hermestest, and drive its /ui page in headless Chromium.
//
// Where Chromium is missing they skip, naming the apt command; HERMES_BRIDGE_UI_TEST=require
// (set by .ci/run) makes that a failure. Run them with `make ui-test`; `make test` runs them
// too.
package browser
