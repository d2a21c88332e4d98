package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Process is a child process started in its own process group, with its
// output in a log file. Stop ends the whole group, so helpers it forked die
// with it; the kernel also kills it if the parent dies (Pdeathsig), so that an
// interrupted test leaves nothing behind.
type Process struct {
	// Name is a short label used in errors and as the log file's base name.
	Name string
	// LogPath is the file receiving the process's stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProcess runs path with args, logging to <logDir>/<name>.log.
func StartProcess(name, logDir, path string, args ...string) (*Process, error) {
	return StartProcessIn("", name, logDir, path, args...)
}

// StartProcessIn is StartProcess with dir as the working directory ("" is
// this process's): for a program that may act on paths relative to it.
func StartProcessIn(dir, name, logDir, path string, args ...string) (*Process, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(logFile, "+ %s %q\n", path, args)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// PID returns the operating-system process ID (also the process group ID).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and its exit error if so.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL and waits for the process to be reaped. It is safe to call twice.
func (p *Process) Stop(grace time.Duration) {
	if exited, _ := p.Exited(); exited {
		// The leader is gone; make sure no group member outlives it.
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		return
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	<-p.done
}

// Kill ends the process group at once, like a power cut.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	<-p.done
}

// FreePort asks the kernel for an unused loopback TCP port. Another process
// may take it before it is used; callers that bind it retry on failure.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n distinct ports free on 127.0.0.1 now. Their listeners
// are held until all are picked: the kernel may hand a port just released
// to the next bind to port 0, so picking them one after the other can give
// one port twice (a process given it for two of its servers then fails to
// bind the second).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// errExited is returned by readiness checks when the process died while we
// were waiting for it.
var errExited = errors.New("process exited")

// waitReady polls check every interval until it returns nil, the process
// exits, or ctx ends.
func waitReady(ctx context.Context, p *Process, interval time.Duration, check func(context.Context) error) error {
	var last error
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s: %w (%v); see %s", p.Name, errExited, err, p.LogPath)
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last check: %v); see %s", p.Name, ctx.Err(), last, p.LogPath)
		case <-t.C:
		}
	}
}

// Respawn starts the same command again, with the same arguments and log
// file (appended to), as a supervisor restarts a crashed component. The
// old process must have ended (Kill it first).
func (p *Process) Respawn() (*Process, error) {
	if exited, _ := p.Exited(); !exited {
		return nil, fmt.Errorf("respawning %s: it is still running", p.Name)
	}
	return StartProcessIn(p.cmd.Dir, p.Name, filepath.Dir(p.LogPath), p.cmd.Path, p.cmd.Args[1:]...)
}
