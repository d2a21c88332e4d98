package exec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// DefaultDirs is where agents are looked up when Config.Dirs is empty:
// Debian's and Red Hat's fence-agents packages install there.
var DefaultDirs = []string{"/usr/sbin"}

// DefaultTimeout bounds one agent run when Config.Timeout is zero. The
// caller's context (power.Options.ActionTimeout) is usually the tighter
// bound.
const DefaultTimeout = 30 * time.Second

// agentName is the only shape of agent name accepted, as the FenceClass
// CRD's exec.agent pattern.
var agentName = regexp.MustCompile(`^fence_[a-z0-9_]+$`)

// argKey is the shape of an Args key, as the FenceClass CRD's exec.args
// rule: a long option without its leading dashes.
var argKey = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// addressChars are the characters of a host name, an IPv4 or IPv6
// address, and an optional :port.
var addressChars = regexp.MustCompile(`^[A-Za-z0-9._:%\[\]-]+$`)

// reservedArgs are the options Fenceline sets itself (the action, the
// device address, the plug and the credentials) under every name
// fencing.py accepts for them on stdin: its long option and its internal
// key. Keys are compared with '_' read as '-'.
var reservedArgs = map[string]bool{
	"action": true, "ip": true, "ipaddr": true, "plug": true, "port": true, "nodename": true,
	"username": true, "login": true, "password": true, "passwd": true,
	"password-script": true, "passwd-script": true,
}

// unsafeArgs are options a FenceClass author must not set: each runs a
// program or a shell fragment of its choice, writes a file of its choice,
// reads a local secret, or weakens the status an agent reports.
var unsafeArgs = map[string]string{
	"exec":                    "runs a command",
	"ssh-options":             "is passed to ssh, which can run commands",
	"use-sudo":                "runs the agent's tools through sudo",
	"sudo":                    "runs the agent's tools through sudo",
	"debug-file":              "writes a file of the author's choice",
	"debug":                   "writes a file of the author's choice",
	"identity-file":           "reads a local private key: credentials come from the Secret",
	"snmp-priv-passwd":        "is a credential: credentials come from the Secret",
	"snmp-priv-passwd-script": "runs a command",
	"missing-as-off":          "reports a plug the device does not know as Off",
	"help":                    "prints usage instead of acting",
	"version":                 "prints the version instead of acting",
}

// Config is one node's fence device, driven through a ClusterLabs fence
// agent.
type Config struct {
	// Agent is the agent's bare name, e.g. fence_ipmilan; it must match
	// ^fence_[a-z0-9_]+$ and is looked up only in Dirs, never in PATH.
	Agent string
	// Dirs are the absolute directories an agent may be run from; default
	// DefaultDirs.
	Dirs []string
	// Address is the device's address, sent as ip= (host, IP address, or
	// host:port for the agents that accept it).
	Address string
	// Plug is the outlet, VM or system on the device, sent as plug=;
	// empty sends none.
	Plug string
	// Username and Password are the device credentials. They are sent on
	// the agent's stdin only, and never appear in an error or in String.
	Username, Password string
	// Args are further agent options, named as fence-agents-remediation
	// names them without the leading dashes (lanplus=1, ipport=623,
	// ssl-insecure=1, systems-uri=/redfish/v1/Systems/1). A flag takes 1;
	// values are not empty and hold no white space. The reserved and
	// unsafe options are refused.
	Args map[string]string
	// Timeout bounds one agent run; default DefaultTimeout. A caller's
	// earlier context deadline wins.
	Timeout time.Duration
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if len(c.Dirs) == 0 {
		c.Dirs = DefaultDirs
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports a config that cannot be run safely. Its errors never
// contain the credentials.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if !agentName.MatchString(c.Agent) || len(c.Agent) > 64 {
		errs = append(errs, fmt.Errorf("agent %q: %w", c.Agent, ErrAgentNotAllowed))
	}
	for _, d := range c.Dirs {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("agent directory %q is not absolute", d))
		}
	}
	if c.Address == "" || !addressChars.MatchString(c.Address) || strings.HasPrefix(c.Address, "-") {
		errs = append(errs, fmt.Errorf("address %q: want a host name or IP address, optionally with :port", c.Address))
	}
	if hasControl(c.Plug) {
		errs = append(errs, errors.New("plug holds a control character"))
	}
	if c.Username == "" || hasControl(c.Username) {
		errs = append(errs, errors.New("username is required and must not hold a control character"))
	}
	if hasControl(c.Password) {
		errs = append(errs, errors.New("password must not hold a control character"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", c.Timeout))
	}
	errs = append(errs, validateArgs(c.Args)...)
	if len(errs) > 0 {
		return fmt.Errorf("exec config: %w", errors.Join(errs...))
	}
	return nil
}

// validateArgs checks the Args keys and values; see Config.Args.
func validateArgs(args map[string]string) []error {
	var errs []error
	for _, k := range sortedKeys(args) {
		v := args[k]
		norm := strings.ReplaceAll(k, "_", "-")
		switch {
		case !argKey.MatchString(k):
			errs = append(errs, fmt.Errorf("arg %q: keys are long options without dashes", k))
		case reservedArgs[norm]:
			errs = append(errs, fmt.Errorf("arg %q: %w", k, ErrReservedArg))
		case unsafeArgs[norm] != "":
			errs = append(errs, fmt.Errorf("arg %q %s: %w", k, unsafeArgs[norm], ErrUnsafeArg))
		case strings.HasSuffix(norm, "-path") || strings.HasSuffix(norm, "-script"):
			errs = append(errs, fmt.Errorf("arg %q names a program to run: %w", k, ErrUnsafeArg))
		case norm == "method" && v != "onoff":
			errs = append(errs, fmt.Errorf("arg method=%q: %w", v, ErrCycleRefused))
		case v == "":
			// fencing.py ignores a flag without a value on stdin: FAR's
			// bare --lanplus would silently become IPMI v1.5.
			errs = append(errs, fmt.Errorf("arg %q has no value: a flag takes 1", k))
		case strings.IndexFunc(v, isSpaceOrControl) >= 0:
			// fence_ipmilan and others paste values into a command line
			// split on white space: a space would add arguments.
			errs = append(errs, fmt.Errorf("arg %q: values must not hold white space or control characters", k))
		}
	}
	return errs
}

// resolve finds the agent in the allowed directories: a regular,
// executable file named exactly Agent.
func (c Config) resolve() (string, error) {
	c = c.withDefaults()
	if !agentName.MatchString(c.Agent) {
		return "", fmt.Errorf("agent %q: %w", c.Agent, ErrAgentNotAllowed)
	}
	for _, d := range c.Dirs {
		p := filepath.Join(d, c.Agent)
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("agent %s in %v: %w", c.Agent, c.Dirs, ErrAgentNotFound)
}

// String describes the device without its credentials.
func (c Config) String() string {
	c = c.withDefaults()
	args := make([]string, 0, len(c.Args))
	for _, k := range sortedKeys(c.Args) {
		args = append(args, k+"="+c.Args[k])
	}
	return fmt.Sprintf("exec{agent: %s, dirs: %v, address: %s, plug: %q, args: [%s], timeout: %v}",
		c.Agent, c.Dirs, c.Address, c.Plug, strings.Join(args, " "), c.Timeout)
}

// GoString is String, so that %#v does not print the credentials either.
func (c Config) GoString() string { return c.String() }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}

func isSpaceOrControl(r rune) bool {
	return r <= 0x20 || r == 0x7f || r == 0x85 || r == 0xa0 || r == 0x2028 || r == 0x2029
}
