// Package version holds the version string stamped into every Fenceline
// binary at build time.
package version

// Version is set by the linker (-X) from `git describe`; "dev" otherwise.
var Version = "dev"
