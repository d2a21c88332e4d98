package main

import (
	"os"
	"testing"

	"fenceline.io/fenceline/pkg/fence/sanity"
)

// TestFenceSanity runs the fence extension's conformance suite against a
// driver started elsewhere; it compiles with this module's old pins.
func TestFenceSanity(t *testing.T) {
	ep := os.Getenv("CSI_ENDPOINT")
	if ep == "" {
		t.Skip("CSI_ENDPOINT not set")
	}
	sanity.Test(t, sanity.Config{ControllerEndpoint: ep})
}
