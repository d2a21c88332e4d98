package tgt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ErrNotInstalled is wrapped by the errors of a machine without tgt.
var ErrNotInstalled = errors.New("tgt is not installed")

// sbinDirs are searched after PATH: tgtd and tgtadm live in /usr/sbin,
// which a non-login shell's PATH may lack.
var sbinDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin"}

// lookTool finds a tgt program in PATH or the sbin directories.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range sbinDirs {
		if p, err := exec.LookPath(d + "/" + name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or %s: %w (install Debian's tgt package)", name, strings.Join(sbinDirs, ", "), ErrNotInstalled)
}

// Available reports whether tgtd and tgtadm are installed: nil, or an error
// wrapping ErrNotInstalled that says what to install.
func Available() error {
	for _, t := range []string{"tgtd", "tgtadm"} {
		if _, err := lookTool(t); err != nil {
			return err
		}
	}
	return nil
}

// admin runs tgtadm against one tgtd.
type admin struct {
	bin     string
	control int
	timeout time.Duration
}

// adminError is a tgtadm command that failed, with what it printed.
type adminError struct {
	args []string
	exit int
	out  string
	err  error
}

func (e *adminError) Error() string {
	if e.out != "" {
		return fmt.Sprintf("tgtadm %s: %s", strings.Join(e.args, " "), e.out)
	}
	return fmt.Sprintf("tgtadm %s: %v", strings.Join(e.args, " "), e.err)
}

func (e *adminError) Unwrap() error { return e.err }

// has reports whether tgtadm's message contains s.
func (e *adminError) has(s string) bool { return strings.Contains(e.out, s) }

// isAdminError reports whether err is a tgtadm failure whose message
// contains s.
func isAdminError(err error, s string) bool {
	var ae *adminError
	return errors.As(err, &ae) && ae.has(s)
}

// run runs tgtadm with the control port and args and returns its output.
func (a admin) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	full := append([]string{"-C", strconv.Itoa(a.control), "--lld", "iscsi"}, args...)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, a.bin, full...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		return out.String(), nil
	}
	ae := &adminError{args: args, out: strings.TrimSpace(out.String()), err: err}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		ae.exit = exit.ExitCode()
	}
	return "", ae
}

// targets lists every target of the daemon.
func (a admin) targets(ctx context.Context) ([]*Target, error) {
	out, err := a.run(ctx, "--mode", "target", "--op", "show")
	if err != nil {
		return nil, err
	}
	return ParseTargets(out)
}

// target returns the target named name, or nil if there is none.
func (a admin) target(ctx context.Context, name string) (*Target, error) {
	ts, err := a.targets(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if t.Name == name {
			return t, nil
		}
	}
	return nil, nil
}

// portals lists the portals the daemon listens on ("127.0.0.1:3260,1").
func (a admin) portals(ctx context.Context) ([]string, error) {
	out, err := a.run(ctx, "--mode", "portal", "--op", "show")
	if err != nil {
		return nil, err
	}
	var ps []string
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "Portal: "); ok {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// apply carries out one step of a cut on target tid.
func (a admin) apply(ctx context.Context, tid int, initiator string, s Step) error {
	t := strconv.Itoa(tid)
	switch s.Kind {
	case StepUnbind:
		_, err := a.run(ctx, "--mode", "target", "--op", "unbind", "--tid", t, "--initiator-name", initiator)
		return err
	case StepEndConnection:
		_, err := a.run(ctx, "--mode", "conn", "--op", "delete", "--tid", t, "--sid", strconv.Itoa(s.SID), "--cid", strconv.Itoa(s.CID))
		return err
	}
	return fmt.Errorf("unknown step %d", s.Kind)
}
