// Package tgt is the mock driver's iSCSI backend: each volume is LUN 1 of
// its own target on a tgtd (Linux SCSI target framework, userspace, no
// kernel module) that the backend starts, owns and stops. A CSI node ID maps
// to an initiator name (InitiatorName); ControllerPublishVolume adds it to
// the target's ACL, a plain unpublish removes it, and a fence removes it and
// ends every live session of that initiator on the target before it
// answers OK (MethodACLSessions).
//
// The array (package array) keeps deciding everything, as it does for the
// memory backend; the backend only carries the decisions out on the target,
// through array.Storage. The decisions of the target side, what to do to cut
// an initiator off and whether the cut is in effect, are the pure functions
// PlanCut and CheckCut.
package tgt

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/mock-driver/tgt/initiator"
)

// Publish-context keys the backend adds to ControllerPublishVolume's answer:
// where the node logs in, and as whom.
const (
	PublishContextPortal    = "mock.fenceline.io/iscsi-portal"
	PublishContextTarget    = "mock.fenceline.io/iscsi-target"
	PublishContextLUN       = "mock.fenceline.io/iscsi-lun"
	PublishContextInitiator = "mock.fenceline.io/iscsi-initiator"
)

// Options configure a Backend.
type Options struct {
	// Dir holds the LUN files (sparse, one per volume) and tgtd's log.
	Dir string
	// Method is the fence method ("" is MethodACLSessions).
	Method FenceMethod
	// Host is the portal's address (127.0.0.1 when empty); the port is an
	// unprivileged free one, the last start's on Dir when it is free.
	Host string
	// FenceTimeout bounds how long a revoke or a fence may take to be
	// confirmed before it fails UNAVAILABLE (5 s when zero). The array's
	// next retry starts over.
	FenceTimeout time.Duration
}

// Backend is a running tgtd and the volumes on it. It is safe for concurrent
// use.
type Backend struct {
	opts   Options
	logger logr.Logger
	admin  admin
	portal string
	cmd    *exec.Cmd
	exited chan struct{}

	mu      sync.Mutex
	tids    map[string]int // volume ID -> target ID
	nextTID int
	ctrl    map[string]*initiator.Conn // target name -> the backend's session (MethodPR)
	stats   Stats

	stopOnce sync.Once
}

// Stats counts what the backend did, for logs and tests.
type Stats struct {
	// Fences is the number of fences confirmed.
	Fences int
	// SessionsEnded is the number of connections the backend deleted.
	SessionsEnded int
	// LastFence is how long the last confirmed fence took, from its first
	// listing to the listing that confirmed it.
	LastFence time.Duration
}

// errRetry marks a start that failed because a control port or portal
// port was taken: another attempt with other ports may succeed.
var errRetry = errors.New("port taken")

// Start starts a tgtd with its own control port and an unprivileged portal
// port, and returns once it serves exactly that portal. The logger comes
// from ctx. Stop it with Stop.
func Start(ctx context.Context, opts Options) (*Backend, error) {
	m, err := ParseFenceMethod(string(opts.Method))
	if err != nil {
		return nil, err
	}
	opts.Method = m
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.FenceTimeout == 0 {
		opts.FenceTimeout = 5 * time.Second
	}
	tgtd, err := lookTool("tgtd")
	if err != nil {
		return nil, err
	}
	tgtadm, err := lookTool("tgtadm")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "luns"), 0o750); err != nil {
		return nil, fmt.Errorf("create tgt backend directory: %w", err)
	}
	logger := klog.FromContext(ctx).WithValues("backend", "tgt")
	for attempt := 1; ; attempt++ {
		b, err := startDaemon(ctx, opts, logger, tgtd, tgtadm, attempt == 1)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, errRetry) || attempt == 5 {
			return nil, err
		}
		logger.V(2).Info("Starting tgtd again with other ports", "err", err)
	}
}

// startDaemon makes one attempt at starting tgtd.
func startDaemon(ctx context.Context, opts Options, logger logr.Logger, tgtd, tgtadm string, samePortal bool) (*Backend, error) {
	// The control "port" only names tgtd's socket and lock file under
	// /var/run/tgtd; a random one keeps backends of parallel tests apart,
	// and tgtd's lock catches the rare clash.
	control := 1000 + rand.IntN(31000) // tgtd takes at most 32767
	port, err := freePort(opts.Host)
	if samePortal {
		port, err = portalPort(opts, logger)
	}
	if err != nil {
		return nil, err
	}
	portal := net.JoinHostPort(opts.Host, strconv.Itoa(port))
	logPath := filepath.Join(opts.Dir, "tgtd.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open tgtd log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(tgtd, "-f", "-C", strconv.Itoa(control), "--iscsi", "portal="+portal)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The daemon must not outlive its driver: a SIGKILLed mock driver
	// would otherwise leave a target serving its volumes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start tgtd: %w", err)
	}
	b := &Backend{
		opts: opts, logger: logger.WithValues("portal", portal, "controlPort", control),
		admin:  admin{bin: tgtadm, control: control, timeout: 5 * time.Second},
		portal: portal, cmd: cmd, exited: make(chan struct{}), tids: map[string]int{}, nextTID: 1,
		ctrl: map[string]*initiator.Conn{},
	}
	go func() { _ = cmd.Wait(); close(b.exited) }()
	if err := b.awaitReady(ctx, logPath); err != nil {
		b.kill()
		return nil, err
	}
	if err := os.WriteFile(portalFile(opts), []byte(strconv.Itoa(port)+"\n"), 0o640); err != nil {
		b.kill()
		return nil, fmt.Errorf("recording the portal port: %w", err)
	}
	b.logger.Info("tgtd started", "pid", cmd.Process.Pid, "method", opts.Method, "log", logPath)
	return b, nil
}

// portalFile records the portal's port in Dir.
func portalFile(opts Options) string { return filepath.Join(opts.Dir, "portal-port") }

// portalPort is the port a backend started before on Dir served, when it
// is free, so that a restarted driver answers where its nodes' sessions
// and publish contexts point, as an array's portal stays put; else a free
// one.
func portalPort(opts Options, logger logr.Logger) (int, error) {
	if b, err := os.ReadFile(portalFile(opts)); err == nil {
		if port, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && port > 0 {
			if l, err := net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(port))); err == nil {
				_ = l.Close()
				return port, nil
			}
			logger.Info("The portal port of the last start is taken: serving another; sessions and publish contexts naming the old one will not reconnect", "port", port)
		}
	}
	return freePort(opts.Host)
}

// awaitReady waits until tgtd answers on its control port, then checks that
// it listens on exactly its own portal: a tgtd that cannot bind the portal
// port falls back to the default 0.0.0.0:3260 and keeps running.
func (b *Backend) awaitReady(ctx context.Context, logPath string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-b.exited:
			log, _ := os.ReadFile(logPath)
			if strings.Contains(string(log), "another tgtd is using") {
				return fmt.Errorf("control port %d: %w", b.admin.control, errRetry)
			}
			return fmt.Errorf("tgtd exited at start: %s", lastLines(string(log), 5))
		default:
		}
		_, err := b.admin.run(ctx, "--mode", "sys", "--op", "show")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tgtd did not answer on control port %d within 10s: %w", b.admin.control, err)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	ps, err := b.admin.portals(ctx)
	if err != nil {
		return err
	}
	if len(ps) != 1 || ps[0] != b.portal+",1" {
		return fmt.Errorf("tgtd listens on %q, not only on %s: %w", ps, b.portal, errRetry)
	}
	return nil
}

// Portal returns the host:port initiators log in to.
func (b *Backend) Portal() string { return b.portal }

// ControlPort returns tgtd's control port, for `tgtadm -C <port>` by hand.
func (b *Backend) ControlPort() int { return b.admin.control }

// Method returns the fence method.
func (b *Backend) Method() FenceMethod { return b.opts.Method }

// Stats returns what the backend did so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Stop deletes every target (ending their sessions) and stops tgtd, killing
// it if it does not exit within 5 seconds. It is safe to call more than
// once.
func (b *Backend) Stop() {
	b.stopOnce.Do(func() {
		ctx := context.Background()
		b.mu.Lock()
		for name := range b.ctrl {
			b.dropControllerSession(name)
		}
		for vol, tid := range b.tids {
			if _, err := b.admin.run(ctx, "--mode", "target", "--op", "delete", "--force", "--tid", strconv.Itoa(tid)); err != nil {
				b.logger.Error(err, "Deleting target at stop", "volume", vol)
			}
		}
		b.mu.Unlock()
		// tgtd ignores SIGTERM; this is its own way to shut down.
		if _, err := b.admin.run(ctx, "--mode", "sys", "--op", "delete"); err != nil {
			b.logger.Error(err, "Asking tgtd to shut down")
		}
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			b.logger.Info("tgtd did not exit within 5s; killing it")
		}
		b.kill()
		b.logger.Info("tgtd stopped")
	})
}

// kill kills tgtd if it still runs, waits for it and removes its control
// socket and lock file, which tgtd leaves behind.
func (b *Backend) kill() {
	_ = b.cmd.Process.Kill()
	<-b.exited
	sock := fmt.Sprintf("/var/run/tgtd/socket.%d", b.admin.control)
	for _, p := range []string{sock, sock + ".lock"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.logger.Error(err, "Removing tgtd's control file", "path", p)
		}
	}
}

// freePort returns a TCP port on host that was free a moment ago. tgtd's
// portal check in awaitReady catches the race with another taker.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free portal port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}
