// Package fencesanity holds only tests: the fence-sanity conformance suite
// (fenceline.io/fenceline/pkg/fence/sanity and its fence-sanity command)
// run against the mock driver, through the Go API and through the command,
// with one socket and with split controller and node plugins, and against a
// mock that lies about UNPUBLISH_FENCE, which the suite must fail. The mock
// lists and lifts its fences by default, so the ListFences and LiftFence
// cases run; with those capabilities switched off they must skip.
package fencesanity
