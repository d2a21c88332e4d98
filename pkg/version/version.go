// Package version holds the version string stamped into every Fenceline
// binary at build time, and what the Go toolchain recorded about the build.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is set by the linker (-X) from `git describe`; "dev" otherwise.
var Version = "dev"

// Commit returns the VCS revision the binary was built from, with
// "-dirty" when the tree had local changes, or "unknown" when the build
// recorded none (go run, tests, a build outside a checkout).
func Commit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return commitOf(info.Settings)
}

func commitOf(settings []debug.BuildSetting) string {
	rev, dirty := "", false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "-dirty"
	}
	return rev
}

// String is what --version prints after the program's name: the version,
// the commit and the Go version, e.g. "v0.1.0 (commit 1b22e38..., go1.26.1)".
func String() string {
	return Version + " (commit " + Commit() + ", " + runtime.Version() + ")"
}
