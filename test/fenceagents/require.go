// Package fenceagents holds test support for the tests that run the real
// ClusterLabs fence agents and their tools (ipmitool).
package fenceagents

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv is the environment variable CI sets after installing Debian's
// fence-agents and ipmitool: with it set, a missing tool fails the test
// instead of skipping it, so that a missing package never passes for
// coverage.
const RequireEnv = "FENCELINE_REQUIRE_FENCE_AGENTS"

// Require skips t unless bin (a name looked up in PATH, or a path) is
// installed, and fails it instead when RequireEnv is set. It returns the
// tool's path.
func Require(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%s is not installed, and %s is set", bin, RequireEnv)
		}
		t.Skipf("%s is not installed: install Debian's ipmitool and fence-agents to run this test (CI does)", bin)
	}
	return p
}
