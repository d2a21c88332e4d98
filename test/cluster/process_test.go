package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestProcessStopEndsGroup checks that Stop ends the process and whatever
// it forked (the whole process group), and that its output is in the log.
func TestProcessStopEndsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	// The shell ignores SIGTERM, so Stop must escalate to SIGKILL; its
	// background child must die with the group.
	p, err := StartProcess("sh", dir, "/bin/sh", "-c", `trap '' TERM; echo started; sleep 300 & echo $! > `+pidFile+`; wait`)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(data), "\n") {
			return false, nil
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("waiting for the child's PID: %v", err)
	}
	p.Stop(200 * time.Millisecond)
	if exited, _ := p.Exited(); !exited {
		t.Fatal("process still running after Stop")
	}
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return !alive(child), nil
	})
	if err != nil {
		t.Fatalf("forked child %d survived Stop", child)
	}
	log, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "started") {
		t.Fatalf("log %s lacks the process output:\n%s", p.LogPath, log)
	}
	p.Stop(time.Second) // idempotent
}

func TestFreePort(t *testing.T) {
	a, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if a <= 0 || a > 65535 {
		t.Fatalf("FreePort() = %d", a)
	}
}

// TestProcessRespawn checks that Respawn refuses a running process and,
// once it is killed, starts the same command again, appending to its log.
func TestProcessRespawn(t *testing.T) {
	dir := t.TempDir()
	p, err := StartProcess("sh", dir, "/bin/sh", "-c", "echo started; sleep 300")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Respawn(); err == nil {
		t.Fatal("Respawn of a running process succeeded, want an error")
	}
	waitStarts(t, p.LogPath, 1)
	p.Kill()
	next, err := p.Respawn()
	if err != nil {
		t.Fatal(err)
	}
	defer next.Stop(time.Second)
	if next.PID() == p.PID() {
		t.Fatalf("respawned process has the old PID %d", p.PID())
	}
	waitStarts(t, next.LogPath, 2)
	if exited, _ := next.Exited(); exited {
		t.Fatal("respawned process is not running")
	}
}

// waitStarts waits until the log at path shows n starts of the test's
// command.
func waitStarts(t *testing.T, path string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(path)
		return err == nil && strings.Count(string(data), "started\n") == n, nil
	})
	if err != nil {
		t.Fatalf("the log does not show %d start(s): %v", n, err)
	}
}

func TestRespawnIfExited(t *testing.T) {
	dir := t.TempDir()
	p, err := StartProcess("sched", dir, "/bin/sh", "-c", "echo started; sleep 300")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{}
	c.Track(p)
	t.Cleanup(func() {
		for _, q := range c.Processes() {
			q.Stop(time.Second)
		}
	})
	waitStarts(t, p.LogPath, 1)
	for _, name := range []string{"sched", "other"} {
		if ok, err := c.RespawnIfExited(name); ok || err != nil {
			t.Fatalf("RespawnIfExited(%s) = %v, %v; want nothing done for a running or unknown process", name, ok, err)
		}
	}
	p.Kill()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		exited, _ := p.Exited()
		return exited, nil
	}); err != nil {
		t.Fatal("the killed process did not exit")
	}
	ok, err := c.RespawnIfExited("sched")
	if !ok || err != nil {
		t.Fatalf("RespawnIfExited of an exited process = %v, %v; want it started again", ok, err)
	}
	procs := c.Processes()
	if len(procs) != 1 || procs[0] == p {
		t.Fatalf("tracked %v, want the new process in the old one's place", procs)
	}
	waitStarts(t, p.LogPath, 2)
}

// TestFreePortsDistinct: the ports of one call are distinct, however often
// the kernel hands out a port just released.
func TestFreePortsDistinct(t *testing.T) {
	for range 100 {
		ports, err := FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		if ports[0] == ports[1] || ports[0] == ports[2] || ports[1] == ports[2] {
			t.Fatalf("FreePorts(3) = %v: a port twice", ports)
		}
	}
}
