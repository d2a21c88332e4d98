package exec_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fenceline.io/fenceline/pkg/fenceagent/exec"
)

// refusal is a config change New must refuse.
type refusal struct {
	name    string
	mutate  func(*exec.Config)
	wantErr error  // nil: any error
	wantIn  string // a substring of the error
}

// refusals are the configs that would run something else than an
// installed fence agent, set what Fenceline sets, or weaken the status.
func refusals(t *testing.T) []refusal {
	notExec := filepath.Join(t.TempDir(), "fence_notexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(k, v string) func(*exec.Config) { return func(c *exec.Config) { c.Args = map[string]string{k: v} } }
	return []refusal{
		{"a path", func(c *exec.Config) { c.Agent = "/bin/sh" }, exec.ErrAgentNotAllowed, ""},
		{"a relative path", func(c *exec.Config) { c.Agent = "../testdata/fence_fake" }, exec.ErrAgentNotAllowed, ""},
		{"not a fence agent", func(c *exec.Config) { c.Agent = "sh" }, exec.ErrAgentNotAllowed, ""},
		{"shell syntax", func(c *exec.Config) { c.Agent = "fence_fake;id" }, exec.ErrAgentNotAllowed, ""},
		{"upper case", func(c *exec.Config) { c.Agent = "fence_Fake" }, exec.ErrAgentNotAllowed, ""},
		{"not in the allowed directories", func(c *exec.Config) { c.Dirs = []string{t.TempDir()} }, exec.ErrAgentNotFound, ""},
		{"not executable", func(c *exec.Config) { c.Agent, c.Dirs = "fence_notexec", []string{filepath.Dir(notExec)} }, exec.ErrAgentNotFound, ""},
		{"relative directory", func(c *exec.Config) { c.Dirs = []string{"testdata"} }, nil, "not absolute"},
		{"arg action", args("action", "reboot"), exec.ErrReservedArg, ""},
		{"arg ip", args("ip", "10.0.0.1"), exec.ErrReservedArg, ""},
		{"arg ipaddr alias", args("ipaddr", "10.0.0.1"), exec.ErrReservedArg, ""},
		{"arg login alias", args("login", "root"), exec.ErrReservedArg, ""},
		{"arg passwd alias", args("passwd", "x"), exec.ErrReservedArg, ""},
		{"arg password_script", args("password_script", "/bin/true"), exec.ErrReservedArg, ""},
		{"arg port (plug alias)", args("port", "2"), exec.ErrReservedArg, ""},
		{"arg ipmitool-path", args("ipmitool-path", "/bin/sh"), exec.ErrUnsafeArg, ""},
		{"arg ssh_path", args("ssh_path", "/bin/sh"), exec.ErrUnsafeArg, ""},
		{"arg ssh-options", args("ssh-options", "-oProxyCommand=id"), exec.ErrUnsafeArg, ""},
		{"arg exec", args("exec", "id"), exec.ErrUnsafeArg, ""},
		{"arg debug-file", args("debug-file", "/etc/passwd"), exec.ErrUnsafeArg, ""},
		{"arg missing-as-off", args("missing_as_off", "1"), exec.ErrUnsafeArg, ""},
		{"arg use-sudo", args("use-sudo", "1"), exec.ErrUnsafeArg, ""},
		{"arg method cycle", args("method", "cycle"), exec.ErrCycleRefused, ""},
		{"arg key with dashes", args("--lanplus", "1"), nil, "long options without dashes"},
		{"arg flag without a value", args("lanplus", ""), nil, "a flag takes 1"},
		{"arg value with a space", args("ipport", "623 -o x"), nil, "white space"},
		{"arg value with a newline", args("lanplus", "1\npassword-script=id"), nil, "white space"},
		{"address with a space", func(c *exec.Config) { c.Address = "10.0.0.1 -o" }, nil, "address"},
		{"address as an option", func(c *exec.Config) { c.Address = "-oProxyCommand" }, nil, "address"},
		{"address as a URL", func(c *exec.Config) { c.Address = "https://10.0.0.1" }, nil, "address"},
		{"no username", func(c *exec.Config) { c.Username = "" }, nil, "username"},
		{"password with a newline", func(c *exec.Config) { c.Password = "pw\naction=reboot" }, nil, "password"},
		{"plug with a newline", func(c *exec.Config) { c.Plug = "2\naction=reboot" }, nil, "plug"},
	}
}

// TestNewRefuses: each refusal fails New before anything runs.
func TestNewRefuses(t *testing.T) {
	testdata, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range refusals(t) {
		t.Run(tc.name, func(t *testing.T) {
			cfg := exec.Config{Agent: "fence_fake", Dirs: []string{testdata}, Address: "127.0.0.1", Username: "admin", Password: fakePassword,
				Args: map[string]string{"lanplus": "1"}}
			tc.mutate(&cfg)
			d, err := exec.New(cfg)
			if err == nil || d != nil {
				t.Fatalf("New = %v, %v; want an error", d, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("New: %v; want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("New: %v; want it to say %q", err, tc.wantIn)
			}
			assertNoSecret(t, "error", err.Error(), fakePassword)
		})
	}
}

// TestNewAccepts: FAR-style args, a plug, method onoff, and a password
// that needs quoting are fine.
func TestNewAccepts(t *testing.T) {
	testdata, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	cfg := exec.Config{Agent: "fence_fake", Dirs: []string{"/nonexistent", testdata}, Address: "[fd00::1]:8443", Plug: "vm 3",
		Username: "admin", Password: `" spaced pw "`,
		Args: map[string]string{"lanplus": "1", "ipport": "623", "ssl-insecure": "1", "systems-uri": "/redfish/v1/Systems/1", "method": "onoff", "cipher": "17", "privlvl": "operator"}}
	d, err := exec.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	cfg.Args["ssl-insecure"] = "0" // the device keeps its own copy
	if !strings.Contains(d.String(), "ssl-insecure=1") {
		t.Fatalf("a change to the caller's args reached the device: %s", d)
	}
	for _, s := range []string{d.String(), fmt.Sprintf("%v %+v %#v %v %+v %#v", cfg, cfg, cfg, d, d, d)} {
		assertNoSecret(t, "String", s, "spaced pw") // %#v quotes the whole password
		if !strings.Contains(s, "fence_fake") {
			t.Fatalf("String %q does not name the agent", s)
		}
	}
}
