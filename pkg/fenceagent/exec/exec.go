// Package exec is a power.Device that runs a ClusterLabs fence agent
// (fence_ipmilan, fence_redfish, a PDU or hypervisor agent) for each
// Status, Off and On.
//
// The agent is a bare fence_* name looked up only in allow-listed
// directories. Its options, credentials included, go on its stdin in the
// agents' key=value protocol, one per line, never on its command line.
// Status maps the exit code (0 on, 2 off, with the agent's "Status:" line
// agreeing); Off's exit code proves nothing: power.PowerOff reads the
// state back. Each run is bounded, its output captured up to a limit, and
// its whole process group killed when it ends or its context does.
package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	osexec "os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/fenceagent/power"
)

// maxOutput is how much of an agent's stdout and of its stderr is kept.
const maxOutput = 64 << 10

// waitDelay is how long a killed agent's output pipes are waited for.
const waitDelay = 2 * time.Second

// agentEnv is the whole environment of an agent: nothing of the
// controller's (no proxy, no token) reaches it.
var agentEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "LC_ALL=C"}

// statusLine is the line fencing.py prints for action=status.
var statusLine = regexp.MustCompile(`(?mi)^Status: (ON|OFF)\s*$`)

// Device runs one node's fence agent.
type Device struct {
	cfg  Config
	path string
}

var _ power.Device = (*Device)(nil)

// New validates cfg and finds its agent.
func New(cfg Config) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	// The device keeps copies: a caller changing its map or slice later
	// must not bypass Validate.
	cfg.Args, cfg.Dirs = maps.Clone(cfg.Args), slices.Clone(cfg.Dirs)
	p, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	return &Device{cfg: cfg, path: p}, nil
}

// String describes the device without its credentials.
func (d *Device) String() string { return d.cfg.String() }

// GoString is String, so that %#v does not print the credentials either.
func (d *Device) GoString() string { return d.String() }

// Status runs action=status: exit 0 with "Status: ON" is On, exit 2 with
// "Status: OFF" is Off; anything else is an error wrapping ErrAgent.
func (d *Device) Status(ctx context.Context) (power.State, error) {
	r, err := d.run(ctx, "status")
	if err != nil {
		return power.StateUnknown, err
	}
	m := statusLine.FindStringSubmatch(string(r.stdout))
	said := ""
	if m != nil {
		said = strings.ToUpper(m[1])
	}
	switch {
	case r.code == 0 && said != "OFF":
		return power.StateOn, nil
	case r.code == 2 && said == "OFF":
		return power.StateOff, nil
	case r.code == 2:
		// Exit 2 is also a usage error for many programs: Off is only
		// taken when the agent says so too.
		return power.StateUnknown, d.fail("status", r, "exit 2 without a \"Status: OFF\" line")
	default:
		return power.StateUnknown, d.fail("status", r, "")
	}
}

// Off runs action=off. nil means the agent exited 0, not that the node is
// off: only a Status read back proves that.
func (d *Device) Off(ctx context.Context) error { return d.act(ctx, "off") }

// On runs action=on.
func (d *Device) On(ctx context.Context) error { return d.act(ctx, "on") }

func (d *Device) act(ctx context.Context, action string) error {
	r, err := d.run(ctx, action)
	if err != nil {
		return err
	}
	if r.code != 0 {
		return d.fail(action, r, "")
	}
	if action == "off" && bytes.Contains(r.stdout, alreadyOff) {
		// fencing.py read the device off and sent nothing; a device that
		// reads off wrongly is not powered off this way (see the docs).
		klog.FromContext(ctx).V(2).Info("Fence agent sent no off: its device already reads off", "agent", d.cfg.Agent, "address", d.cfg.Address)
	}
	return nil
}

// alreadyOff is what fencing.py prints when it skips an off because its
// status already reads off.
var alreadyOff = []byte("Success: Already OFF")

// result is one finished agent run.
type result struct {
	code           int
	stdout, stderr []byte
}

// run runs the agent once with action and the config's options on stdin.
// Its error is a run that could not start or did not finish (context
// ended, timeout, killed); an exit code is the caller's to judge.
func (d *Device) run(ctx context.Context, action string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	cmd := osexec.CommandContext(ctx, d.path)
	cmd.Args = []string{d.path} // nothing but the program on the command line
	cmd.Env = agentEnv
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(d.stdin(action))
	stdout, stderr := &tail{max: maxOutput}, &tail{max: maxOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		// The agent is gone; so must be any helper it left behind.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	pw := d.cfg.Password
	r := result{stdout: []byte(scrub(string(stdout.Bytes()), pw)), stderr: []byte(scrub(string(stderr.Bytes()), pw))}
	klog.FromContext(ctx).V(4).Info("Fence agent run", "agent", d.cfg.Agent, "action", action, "address", d.cfg.Address,
		"exitCode", cmd.ProcessState.ExitCode(), "duration", time.Since(start), "lastOutput", lastLine(r.stderr))
	var ee *osexec.ExitError
	switch {
	case ctx.Err() != nil:
		err = context.Cause(ctx)
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
		return r, nil
	case err == nil:
		return r, nil
	}
	// Not run to its end: killed at the deadline, by a signal, or never
	// started.
	err = fmt.Errorf("%s %s at %s: %w: %w", d.cfg.Agent, action, d.cfg.Address, ErrAgent, err)
	if m := lastLine(r.stderr); m != "" {
		err = fmt.Errorf("%w (last output: %s)", err, m)
	}
	return r, d.wrap(err)
}

// stdin is the agent's input: one key=value per line.
func (d *Device) stdin(action string) []byte {
	var b bytes.Buffer
	line := func(k, v string) { b.WriteString(k + "=" + quote(v) + "\n") }
	line("action", action)
	line("ip", d.cfg.Address)
	if d.cfg.Plug != "" {
		line("plug", d.cfg.Plug)
	}
	line("username", d.cfg.Username)
	line("password", d.cfg.Password)
	for _, k := range sortedKeys(d.cfg.Args) {
		line(k, d.cfg.Args[k])
	}
	return b.Bytes()
}

// quote protects a value from fencing.py's stdin parser, which trims the
// line and strips one pair of enclosing double quotes: such values are
// sent inside one more pair.
func quote(v string) string {
	if strings.TrimSpace(v) != v || (len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"') {
		return `"` + v + `"`
	}
	return v
}

// fail is the error of a run that exited but failed: the exit code and
// the agent's last stderr line, or stdout's if stderr is empty.
func (d *Device) fail(action string, r result, why string) error {
	msg := lastLine(r.stderr)
	if msg == "" {
		msg = lastLine(r.stdout)
	}
	if why != "" {
		msg = why + ": " + msg
	}
	var err error
	if isAuth(string(r.stderr) + string(r.stdout)) {
		err = fmt.Errorf("%s %s at %s: exit %d: %w: %w: %s", d.cfg.Agent, action, d.cfg.Address, r.code, ErrAgent, ErrAuth, msg)
	} else {
		err = fmt.Errorf("%s %s at %s: exit %d: %w: %s", d.cfg.Agent, action, d.cfg.Address, r.code, ErrAgent, msg)
	}
	return d.wrap(err)
}

// wrap masks the credentials in err's message; errors.Is sees through it.
func (d *Device) wrap(err error) error {
	return &scrubbed{err: err, msg: scrub(err.Error(), d.cfg.Password)}
}

// scrubbed is an error whose message has the credentials masked.
type scrubbed struct {
	err error
	msg string
}

func (e *scrubbed) Error() string { return e.msg }

// GoString keeps %#v from printing the wrapped chain.
func (e *scrubbed) GoString() string { return e.msg }

func (e *scrubbed) Unwrap() error { return e.err }
