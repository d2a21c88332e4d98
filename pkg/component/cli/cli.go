// Package cli holds the command-line conventions both Fenceline binaries
// share: exit codes, usage errors, signal handling, and the common flags
// (--feature-gates and the component-base logging flags).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

// Exit codes of both binaries.
const (
	// ExitOK: a clean stop (SIGTERM, SIGINT) or --version / --help.
	ExitOK = 0
	// ExitFailure: the component failed while running (lost its leader
	// Lease, could not reach what it needs); its pod is restarted.
	ExitFailure = 1
	// ExitUsage: the command line is wrong (unknown flag, positional
	// argument, invalid value or feature gate), as with Go's flag package;
	// a restart would not help.
	ExitUsage = 2
)

// usageError marks an error of the command line.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// UsageError marks err as an error of the command line (exit code 2). A
// nil err stays nil.
func UsageError(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// IsUsageError reports whether err, or an error it wraps, came from
// UsageError or from parsing flags.
func IsUsageError(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// Parse parses args on fs and rejects positional arguments: no Fenceline
// binary takes any, and a stray word (a flag missing its "--", a value
// after a boolean flag) would otherwise be silently ignored. Errors other
// than flag.ErrHelp are usage errors.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return UsageError(err)
	}
	if fs.NArg() > 0 {
		return UsageError(fmt.Errorf("unexpected positional arguments %q: flags take the form --name=value", fs.Args()))
	}
	return nil
}

// ExitCodeOf prints err to w, unless it is flag.ErrHelp (the usage was
// printed already), and returns the exit code for it: ExitOK for nil and
// flag.ErrHelp, ExitUsage for usage errors, ExitFailure otherwise.
func ExitCodeOf(w io.Writer, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case IsUsageError(err):
		_, _ = fmt.Fprintln(w, "Error:", err)
		return ExitUsage
	default:
		_, _ = fmt.Fprintln(w, "Error:", err)
		return ExitFailure
	}
}

// Run runs a component until SIGINT or SIGTERM (which cancel run's
// context) and returns its exit code: ExitOK when run returns nil,
// ExitUsage for a usage error, ExitFailure otherwise. run's context carries
// a logger named after the component.
func Run(component, version string, run func(context.Context) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName(component)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "version", version)
	err := run(ctx)
	switch {
	case err == nil:
		logger.Info("Stopped")
		return ExitOK
	case IsUsageError(err):
		logger.Error(err, "Invalid configuration")
		return ExitUsage
	default:
		logger.Error(err, "Component failed")
		return ExitFailure
	}
}
