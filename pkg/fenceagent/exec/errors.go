package exec

import (
	"bytes"
	"errors"
	"regexp"
	"slices"
	"strings"
)

// The errors of this package, for errors.Is.
var (
	// ErrAgentNotAllowed: the agent name is not a bare fence_* name.
	ErrAgentNotAllowed = errors.New("exec: agent name must match ^fence_[a-z0-9_]+$")
	// ErrAgentNotFound: no executable of that name in the allowed
	// directories.
	ErrAgentNotFound = errors.New("exec: fence agent not installed in an allowed directory")
	// ErrReservedArg: an Args key sets what Fenceline sets itself.
	ErrReservedArg = errors.New("exec: the action, address, plug and credentials are set by Fenceline, not by args")
	// ErrUnsafeArg: an Args key would run a program, write a file, read a
	// local secret or weaken the status.
	ErrUnsafeArg = errors.New("exec: arg refused")
	// ErrCycleRefused: a power cycle turns the node back on by itself, so
	// its Off can never be read back (fence_ipmilan warns that with
	// method=cycle it may report success before the node is off).
	ErrCycleRefused = errors.New("exec: power cycle is not a fence action: it cannot be verified off; use method onoff")
	// ErrAgent is wrapped by every failed agent run: an exit code that is
	// not the action's success, or an answer that contradicts itself.
	ErrAgent = errors.New("exec: fence agent failed")
	// ErrAuth is also wrapped when the agent reported that the device
	// refused the login or the user's privileges.
	ErrAuth = errors.New("exec: the device refused the credentials or the privilege level")
)

// authMessages are what fencing.py prints when a device refuses the user
// (EC_LOGIN_DENIED, EC_INVALID_PRIVILEGES), and what agents relay from
// their device. fence_ipmilan cannot tell a refused password from a dead
// BMC (ipmitool fails alike and the agent reports "Unable to obtain correct
// plug status"): such runs wrap ErrAgent only.
var authMessages = []string{
	"unable to connect/login to fencing device",
	"does not have the correct privileges",
	"401 unauthorized",
	"403 forbidden",
	"authentication failed",
}

// isAuth reports whether an agent's output says the login was refused.
func isAuth(out string) bool {
	out = strings.ToLower(out)
	for _, m := range authMessages {
		if strings.Contains(out, m) {
			return true
		}
	}
	return false
}

// logPrefix is the time stamp fencing.py's log lines start with.
var logPrefix = regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d+ `)

// noise are lines that say nothing about the failure: fencing.py's usage
// hint after every error, and Python's deprecation warnings.
var noise = []string{"Please use '-h' for usage", "DeprecationWarning", "from pipes import quote"}

// lastLine is the last line of b that says something, without its time
// stamp, at most 512 bytes.
func lastLine(b []byte) string {
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(logPrefix.ReplaceAllString(strings.TrimSpace(lines[i]), ""))
		if l == "" || slices.ContainsFunc(noise, func(n string) bool { return strings.Contains(l, n) }) {
			continue
		}
		if len(l) > 512 {
			l = l[:512] + "..."
		}
		return l
	}
	return ""
}

// scrub masks the secrets in msg; strings under 3 bytes are left alone, as
// masking them would mangle ordinary words.
func scrub(msg string, secrets ...string) string {
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}

// tail is an io.Writer that keeps the last max bytes written to it.
type tail struct {
	max int
	buf []byte
	cut bool
}

func (t *tail) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		t.cut = true
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Bytes returns what was kept. When the start was cut, the first, partial
// line is dropped too: a secret cut in half would escape scrub.
func (t *tail) Bytes() []byte {
	b := t.buf
	if t.cut {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil
		}
		b = b[i+1:]
	}
	return bytes.Clone(b)
}
