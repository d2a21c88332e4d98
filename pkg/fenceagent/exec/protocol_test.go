package exec_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"fenceline.io/fenceline/pkg/fenceagent/exec"
	"fenceline.io/fenceline/pkg/fenceagent/power"
)

const fakePassword = "Fake-Pw-s3cr3t"

// fake is a device running testdata/fence_fake in mode, recording into a
// fresh directory, which it returns.
func fake(t *testing.T, mode string, mutate func(*exec.Config)) (*exec.Device, string) {
	t.Helper()
	testdata, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := exec.Config{Agent: "fence_fake", Dirs: []string{testdata}, Address: "127.0.0.1", Plug: "node-3",
		Username: "fence-admin", Password: fakePassword, Timeout: 10 * time.Second,
		Args: map[string]string{"record-dir": dir, "fake-mode": mode}}
	if mutate != nil {
		mutate(&cfg)
	}
	return newDevice(t, cfg), dir
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStdinProtocol: the options, credentials included, reach the agent
// on stdin, one key=value a line; its command line is the program alone
// and its environment holds nothing of ours.
func TestStdinProtocol(t *testing.T) {
	t.Setenv("FENCELINE_TEST_CANARY", "inherited")
	tests := []struct {
		action string
		call   func(*exec.Device, context.Context) error
	}{
		{"status", func(d *exec.Device, ctx context.Context) error { _, err := d.Status(ctx); return err }},
		{"off", (*exec.Device).Off},
		{"on", (*exec.Device).On},
	}
	for _, tc := range tests {
		t.Run(tc.action, func(t *testing.T) {
			// Spaces around it: fencing.py would trim them off unquoted.
			d, dir := fake(t, "on", func(c *exec.Config) { c.Password = " " + fakePassword + " " })
			if err := tc.call(d, context.Background()); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("action=%s\nip=127.0.0.1\nplug=node-3\nusername=fence-admin\npassword=\" %s \"\nfake-mode=on\nrecord-dir=%s\n", tc.action, fakePassword, dir)
			if got := readFile(t, filepath.Join(dir, "stdin."+tc.action)); got != want {
				t.Fatalf("stdin:\n%s\nwant:\n%s", got, want)
			}
			argv := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "argv"))), "\n")
			if len(argv) != 1 || filepath.Base(argv[0]) != "fence_fake" {
				t.Fatalf("argv %q: want the program alone", argv)
			}
			env := readFile(t, filepath.Join(dir, "env"))
			if strings.Contains(env, fakePassword) || strings.Contains(env, "FENCELINE_TEST_CANARY") {
				t.Fatalf("the agent's environment carries the password or the caller's environment:\n%s", env)
			}
		})
	}
}

// TestStatusExitCodes: exit 0 is On, exit 2 with "Status: OFF" is Off,
// and every other answer an error that never reads Off.
func TestStatusExitCodes(t *testing.T) {
	tests := []struct {
		mode      string
		want      power.State
		wantErr   error
		wantAuth  bool
		wantInErr string
	}{
		{mode: "on", want: power.StateOn},
		{mode: "off", want: power.StateOff},
		{mode: "exit2", want: power.StateUnknown, wantErr: exec.ErrAgent, wantInErr: "without a \"Status: OFF\" line"},
		{mode: "on-says-off", want: power.StateUnknown, wantErr: exec.ErrAgent, wantInErr: "exit 0"},
		{mode: "auth", want: power.StateUnknown, wantErr: exec.ErrAuth, wantAuth: true, wantInErr: "Unable to connect/login to fencing device"},
		{mode: "leak", want: power.StateUnknown, wantErr: exec.ErrAgent, wantInErr: "with password [redacted] refused"},
		{mode: "leak-long", want: power.StateUnknown, wantErr: exec.ErrAgent, wantInErr: "0 [redacte..."},
		{mode: "flood", want: power.StateUnknown, wantErr: exec.ErrAgent, wantInErr: "exit 1: exec: fence agent failed: Failed: the last line"},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			d, _ := fake(t, tc.mode, nil)
			got, err := d.Status(context.Background())
			if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Status = %s, %v; want %s, %v", got, err, tc.want, tc.wantErr)
			}
			if err == nil {
				return
			}
			msg := err.Error()
			if errors.Is(err, exec.ErrAuth) != tc.wantAuth || !strings.Contains(msg, tc.wantInErr) || len(msg) > 2048 {
				t.Fatalf("Status error %q (%d bytes): want ErrAuth %v and %q", msg, len(msg), tc.wantAuth, tc.wantInErr)
			}
			// Not even a part cut off by a length limit.
			assertNoSecret(t, "error", msg+fmt.Sprintf("%v %+v %#v", err, err, err), fakePassword[:5])
		})
	}
}

// TestOffExitCodeIsNoProof: an agent that exits 0 on off while its status
// stays on is not a fenced node; and the agent is run with action=off even
// when its device reads off (what the agent then does is its own).
func TestOffExitCodeIsNoProof(t *testing.T) {
	tests := []struct {
		mode       string
		wantErr    error
		wantOffRun bool
	}{
		{mode: "on", wantErr: power.ErrNotVerified, wantOffRun: true},
		{mode: "off", wantErr: nil, wantOffRun: true}, // reads off: off is still run
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			d, dir := fake(t, tc.mode, nil)
			o := power.Options{ActionTimeout: 5 * time.Second, VerifyTimeout: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond}
			res, err := power.PowerOff(context.Background(), d, o, time.Now)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) || power.Verified(res.Verified) != (tc.wantErr == nil) {
				t.Fatalf("PowerOff = %+v, %v; want %v", res, err, tc.wantErr)
			}
			_, statErr := os.Stat(filepath.Join(dir, "stdin.off"))
			if (statErr == nil) != tc.wantOffRun {
				t.Fatalf("agent run with action=off: %v, want %v", statErr == nil, tc.wantOffRun)
			}
		})
	}
}

// TestContextEndKillsProcessGroup: an agent that hangs is killed with its
// children when the context ends, and the call returns promptly.
func TestContextEndKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration // Config.Timeout
		ctxTime time.Duration // the caller's deadline
	}{
		{"caller's deadline", 10 * time.Second, time.Second},
		{"config timeout", time.Second, 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, dir := fake(t, "hang", func(c *exec.Config) { c.Timeout = tc.timeout })
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctxTime)
			defer cancel()
			start := time.Now()
			_, err := d.Status(ctx)
			if !errors.Is(err, exec.ErrAgent) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Status of a hung agent: %v; want ErrAgent and DeadlineExceeded", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("Status returned after %v", took)
			}
			for _, f := range []string{"pid", "child"} {
				pid, perr := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, f))))
				if perr != nil {
					t.Fatal(perr)
				}
				waitGone(t, pid)
			}
		})
	}
}

// waitGone fails unless pid is dead (gone or a zombie) within 5 s.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || syscall.Kill(pid, 0) != nil {
			return
		}
		// The third field is the state; Z is a zombie, dead but unreaped.
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs after the agent was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
