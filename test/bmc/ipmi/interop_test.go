package ipmi

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIpmitool: ipmitool, the client behind fence_ipmilan, speaks to the
// simulator on every interface and cipher suite it serves. The password
// goes through the environment (-E), never the command line.
func TestIpmitool(t *testing.T) {
	requireTool(t, "ipmitool")
	tests := []struct {
		name    string
		args    []string
		faults  Faults
		wantOut string
		wantOn  bool
		wantErr bool
	}{
		{"lanplus suite 17 status", []string{"-I", "lanplus", "-C", "17", "chassis", "power", "status"}, Faults{}, "Chassis Power is on", true, false},
		{"lanplus suite 3 status", []string{"-I", "lanplus", "-C", "3", "chassis", "power", "status"}, Faults{}, "Chassis Power is on", true, false},
		{"lan status", []string{"-I", "lan", "chassis", "power", "status"}, Faults{}, "Chassis Power is on", true, false},
		{"lanplus power off", []string{"-I", "lanplus", "chassis", "power", "off"}, Faults{}, "Down/Off", false, false},
		{"lan power off", []string{"-I", "lan", "chassis", "power", "off"}, Faults{}, "Down/Off", false, false},
		{"accepted power off, stays on", []string{"-I", "lanplus", "chassis", "power", "off"}, Faults{IgnorePowerDown: true}, "Down/Off", true, false},
		{"rejected credentials", []string{"-I", "lanplus", "chassis", "power", "off"}, Faults{RejectAuth: true}, "", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := NewNode(true)
			s := start(t, Config{Power: node})
			if err := s.SetFaults(tc.faults); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"-H", s.Host(), "-p", strconv.Itoa(s.Port()), "-U", user, "-E", "-N", "1", "-R", "2"}, tc.args...)
			cmd := exec.CommandContext(ctx, "ipmitool", args...)
			cmd.Env = []string{"IPMI_PASSWORD=" + password}
			out, err := cmd.CombinedOutput()
			if (err != nil) != tc.wantErr || !strings.Contains(string(out), tc.wantOut) {
				t.Fatalf("ipmitool %v: %v\n%s\nwant error %v and %q", tc.args, err, out, tc.wantErr, tc.wantOut)
			}
			if node.On() != tc.wantOn || s.PoweredOn() != tc.wantOn {
				t.Fatalf("after ipmitool %v: BMC on=%v, %v; want on=%v", tc.args, s.PoweredOn(), node, tc.wantOn)
			}
		})
	}
}

// TestFenceIpmilan: the ClusterLabs agent fences through the simulator as
// through a real BMC: off (verified by its own status read), status, on.
// Its options, password included, go on stdin.
func TestFenceIpmilan(t *testing.T) {
	requireTool(t, "fence_ipmilan")
	requireTool(t, "ipmitool")
	node := NewNode(true)
	s := start(t, Config{Power: node})
	boot := node.BootID()
	tests := []struct {
		action   string
		wantExit int // fence agents: status exits 0 for on, 2 for off
		wantOn   bool
	}{
		{"status", 0, true},
		{"off", 0, false},
		{"status", 2, false},
		{"on", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.action, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "fence_ipmilan")
			cmd.Stdin = strings.NewReader("ip=" + s.Host() + "\nipport=" + strconv.Itoa(s.Port()) +
				"\nusername=" + user + "\npassword=" + password + "\nlanplus=1\naction=" + tc.action + "\n")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			exit := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				exit = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if exit != tc.wantExit || node.On() != tc.wantOn {
				t.Fatalf("fence_ipmilan %s: exit %d, %v\n%s\nwant exit %d, on=%v", tc.action, exit, node, out.String(), tc.wantExit, tc.wantOn)
			}
			if strings.Contains(out.String(), password) {
				t.Fatalf("fence_ipmilan printed the password:\n%s", out.String())
			}
		})
	}
	if node.BootID() == boot || node.Boots() != 2 {
		t.Fatalf("after off and on: %v, want a second boot with a new boot ID", node)
	}
}

// requireTool skips a test whose real client is not installed, unless
// FENCELINE_REQUIRE_FENCE_AGENTS is set (CI installs Debian's ipmitool and
// fence-agents and sets it), so that a missing package can never pass for
// coverage there.
func requireTool(t *testing.T, bin string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("FENCELINE_REQUIRE_FENCE_AGENTS") != "" {
			t.Fatalf("%s is not installed, and FENCELINE_REQUIRE_FENCE_AGENTS is set", bin)
		}
		t.Skipf("%s is not installed: install Debian's ipmitool and fence-agents to run this test (CI does)", bin)
	}
}
