// Package docsnippets runs the shell commands that README.md and docs/*.md
// tell an operator to run. Extract finds every command of their shell
// blocks; the package's tests classify each one through a single table,
// either run against a local world (test/world, installed the way the
// README installs Fenceline) or skipped with a reason, and fail on a
// command the table does not know, on a table entry no document holds any
// more, and on a command that does not work.
package docsnippets
