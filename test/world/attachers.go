package world

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// AttacherLeaseDuration is the leader-election lease duration of the
// fenceline-attacher replicas with Options.AttacherReplicas (renew deadline
// 3/4 of it, retry period 500 ms), as for the controller's replicas: a
// killed leader is replaced within seconds. The heartbeat Lease follows it
// (the attacher trusts one renewal for the leader lease duration).
const AttacherLeaseDuration = 4 * time.Second

// attacherLeaderArgs are the flags that put a fenceline-attacher replica
// under leader election on upstream's Lease, external-attacher-leader-<driver>
// in the world's namespace (the namespace flag is among the defaults).
func attacherLeaderArgs() []string {
	return []string{
		"--leader-election",
		"--leader-election-lease-duration=" + AttacherLeaseDuration.String(),
		"--leader-election-renew-deadline=" + (AttacherLeaseDuration * 3 / 4).String(),
		"--leader-election-retry-period=500ms",
	}
}

// attacherGroup is the fenceline-attacher of one driver: one process, or
// replicas with leader election on that driver's Lease.
type attacherGroup struct {
	// Attacher is fenceline-attacher's process (nil when not started);
	// with Options.AttacherReplicas, one of Attachers.
	Attacher *cluster.Process
	// Attachers are the current fenceline-attacher replicas with
	// Options.AttacherReplicas (Attacher is one of them), else empty.
	Attachers []*cluster.Process
	// attacherName names the processes and their logs: empty for the
	// binary's own name (the first driver's).
	attacherName string
	// attacherBinary and attacherArgs are what every attacher replica
	// runs; attacherStarts counts the replicas started (log names).
	attacherBinary string
	attacherArgs   []string
	attacherStarts int
	// attacherLogs is what the attacher replicas' logs said about their
	// leadership (AttacherLeader).
	attacherLogs leaderLogs
}

// processes returns the group's current processes: every replica, else
// the one attacher (none without an attacher). The slice is a copy.
func (g *attacherGroup) processes() []*cluster.Process {
	if len(g.Attachers) > 0 {
		return slices.Clone(g.Attachers)
	}
	if g.Attacher == nil {
		return nil
	}
	return []*cluster.Process{g.Attacher}
}

// replace records that next (a restart) replaced old, in Attacher and in
// Attachers alike; it reports whether old was the group's.
func (g *attacherGroup) replace(old, next *cluster.Process) bool {
	found := false
	if g.Attacher == old {
		g.Attacher, found = next, true
	}
	if i := slices.Index(g.Attachers, old); i >= 0 {
		g.Attachers[i], found = next, true
	}
	return found
}

// startAttachers starts the group's fenceline-attacher (or binary) with
// args: one process without leader election when replicas is 0 or 1, as
// the world always did; otherwise that many replicas with leader election
// (startAttacherReplica), the first of them in Attacher.
func (w *World) startAttachers(ctx context.Context, g *attacherGroup, binary string, replicas int, args []string) error {
	if replicas <= 1 {
		p, err := w.startComponentAs(ctx, g.attacherName, binary, "attacher", AttacherServiceAccount, args)
		if err != nil {
			return err
		}
		g.Attacher = p
		return nil
	}
	if filepath.IsAbs(binary) {
		// LeadingAttacher reads fenceline-attacher's own log line and
		// per-process identity; another attacher has neither.
		return fmt.Errorf("attacher replicas run fenceline-attacher only, not %s", binary)
	}
	g.attacherBinary = binary
	g.attacherArgs = append(attacherLeaderArgs(), args...)
	for range replicas {
		if _, err := w.startAttacherReplica(ctx, g); err != nil {
			return err
		}
	}
	g.Attacher = g.Attachers[0]
	return nil
}

// StartAttacherReplica starts one more fenceline-attacher replica of the
// (first) driver with the flags of the others, as a Deployment replaces a
// killed pod; it logs to fenceline-attacher-<i>.log (i counts every
// replica this world started) and joins Attachers. Only a world with
// Options.AttacherReplicas has replicas.
func (w *World) StartAttacherReplica(ctx context.Context) (*cluster.Process, error) {
	return w.startAttacherReplica(ctx, &w.attacherGroup)
}

func (w *World) startAttacherReplica(ctx context.Context, g *attacherGroup) (*cluster.Process, error) {
	if g.attacherArgs == nil {
		return nil, fmt.Errorf("no fenceline-attacher replicas in this world (Options.AttacherReplicas)")
	}
	base := g.attacherName
	if base == "" {
		base = "fenceline-attacher"
	}
	name := fmt.Sprintf("%s-%d", base, g.attacherStarts)
	g.attacherStarts++
	p, err := w.startComponentAs(ctx, name, g.attacherBinary, "attacher", AttacherServiceAccount, g.attacherArgs)
	if err != nil {
		return nil, err
	}
	g.Attachers = append(g.Attachers, p)
	return p, nil
}

// KillAttacherReplica ends the current replica p (of any driver's
// attacher) with SIGKILL and starts it again with the same flags and log
// file, as a Deployment replaces a killed pod: the new process has an
// identity of its own and competes for the Lease once the killed leader's
// has expired. Attacher follows when it was p. It returns the new process.
func (w *World) KillAttacherReplica(p *cluster.Process) (*cluster.Process, error) {
	if !slices.Contains(w.AttacherProcesses(), p) {
		return nil, fmt.Errorf("%s is not a current fenceline-attacher process", p.Name)
	}
	next, err := w.respawn(p)
	if err != nil {
		return nil, err
	}
	w.replaceAttacherProcess(p, next)
	return next, nil
}

// AttacherProcesses returns the current fenceline-attacher processes of
// every driver, the first driver's first: every replica with
// Options.AttacherReplicas, else each driver's one attacher (none without
// an attacher). The slice is a copy.
func (w *World) AttacherProcesses() []*cluster.Process {
	out := w.attacherGroup.processes()
	if w.Second != nil {
		out = append(out, w.Second.processes()...)
	}
	return out
}

// AttacherProcessesOf returns the current fenceline-attacher processes of
// the driver named driver (a copy), nil for a driver the world does not run.
func (w *World) AttacherProcessesOf(driver string) []*cluster.Process {
	v, err := w.driver(driver)
	if err != nil {
		return nil
	}
	return v.attachers.processes()
}

// AttacherOf returns the fenceline-attacher process of the driver named
// driver (Attacher for the first), nil for a driver the world does not run.
func (w *World) AttacherOf(driver string) *cluster.Process {
	v, err := w.driver(driver)
	if err != nil {
		return nil
	}
	return v.attachers.Attacher
}

// AttacherRestarted records that next, a restart of the attacher process
// old by its supervisor (a Deployment's), runs in its place, in Attacher
// and in Attachers alike, whichever driver's it is.
func (w *World) AttacherRestarted(old, next *cluster.Process) { w.replaceAttacherProcess(old, next) }

// replaceAttacherProcess records that next (a restart) replaced old, in
// its driver's Attacher and Attachers alike.
func (w *World) replaceAttacherProcess(old, next *cluster.Process) {
	if !w.attacherGroup.replace(old, next) && w.Second != nil {
		w.Second.replace(old, next)
	}
}

// LeadingAttacher waits until a running replica of the (first) driver's
// Attachers holds the attacher's leader-election Lease and returns it
// (AttacherLeader). After the leader was killed this finds its successor
// once it took the Lease. Errors are looked past until the deadline (a
// fault may be restarting the API server); the last one is reported with
// it.
func (w *World) LeadingAttacher(ctx context.Context, timeout time.Duration) (*cluster.Process, error) {
	return w.LeadingAttacherOf(ctx, DriverName, timeout)
}

// LeadingAttacherOf is LeadingAttacher for the driver named driver.
func (w *World) LeadingAttacherOf(ctx context.Context, driver string, timeout time.Duration) (*cluster.Process, error) {
	var leader *cluster.Process
	var last error
	err := WaitFor(ctx, timeout, "a leading fenceline-attacher replica of "+driver, func(ctx context.Context) (bool, error) {
		leader, last = w.AttacherLeaderOf(ctx, driver, w.AttacherProcessesOf(driver))
		return leader != nil, nil
	})
	if err != nil && last != nil {
		return nil, fmt.Errorf("%w (last error: %w)", err, last)
	}
	return leader, err
}

// AttacherLeader returns the process among replicas that holds the (first)
// driver's attacher leader-election Lease now: see AttacherLeaderOf.
func (w *World) AttacherLeader(ctx context.Context, replicas []*cluster.Process) (*cluster.Process, error) {
	return w.AttacherLeaderOf(ctx, DriverName, replicas)
}

// AttacherLeaderOf returns the process among replicas that holds the
// leader-election Lease of driver's attacher now: the one that runs and
// logged "Became leader" with the Lease's holder identity since it
// started. Each identity is the host name and a per-process ID, so a
// replica that led before a restart (its log appended to), a killed
// leader whose Lease has not expired yet, or another driver's replica
// matches no running process: then, and while nobody holds the Lease, it
// returns nil. replicas is read, never kept (callers that change it
// concurrently pass a copy).
func (w *World) AttacherLeaderOf(ctx context.Context, driver string, replicas []*cluster.Process) (*cluster.Process, error) {
	v, err := w.driver(driver)
	if err != nil {
		return nil, err
	}
	lease, err := w.Cluster.Client().CoordinationV1().Leases(Namespace).Get(ctx, names.AttacherLeaseName(driver), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the leader Lease of %s's attacher: %w", driver, err)
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if holder == "" {
		return nil, nil
	}
	for _, p := range replicas {
		if exited, _ := p.Exited(); exited {
			continue
		}
		ids, err := v.attachers.attacherLogs.ledAs(p)
		if err != nil {
			return nil, err
		}
		if slices.Contains(ids, holder) {
			return p, nil
		}
	}
	return nil, nil
}

// leaderLogs reads the attacher replicas' logs for the identities they
// became leader under, each only once: a log grows for the whole episode,
// and the leader is looked for many times a second.
type leaderLogs struct {
	mu    sync.Mutex
	scans map[*cluster.Process]*logScan
}

// logScan is how far a process's log was read, and what it said so far.
type logScan struct {
	offset int64
	ids    []string
}

// ledAs returns the identities under which p became leader, reading what
// p's log gained since the last call.
func (l *leaderLogs) ledAs(p *cluster.Process) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.scans == nil {
		l.scans = map[*cluster.Process]*logScan{}
	}
	sc := l.scans[p]
	if sc == nil {
		sc = &logScan{}
		l.scans[p] = sc
	}
	f, err := os.Open(p.LogPath)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p.LogPath, err)
	}
	defer f.Close()
	rest, err := io.ReadAll(io.NewSectionReader(f, sc.offset, 1<<62))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p.LogPath, err)
	}
	// Whole lines only: the rest of a line being written is read next time.
	n := bytes.LastIndexByte(rest, '\n') + 1
	sc.ids = ledAs(sc.ids, rest[:n])
	sc.offset += int64(n)
	return sc.ids, nil
}

// becameLeaderIdentity matches the leader elector's "Became leader" line
// (pkg/component/leader) and captures the identity it names.
var becameLeaderIdentity = regexp.MustCompile(`"Became leader".* identity="([^"]*)"`)

// ledAs returns the identities a process became leader under, given ids,
// those of the log's lines before, and lines, the whole lines that follow.
// A restart (cluster.Process.Respawn) appends to the same log after a
// "+ <command>" line: what came before it was another process's, whose
// identities are not the new one's.
func ledAs(ids []string, lines []byte) []string {
	for line := range bytes.Lines(lines) {
		if bytes.HasPrefix(line, []byte("+ ")) {
			ids = nil
			continue
		}
		if m := becameLeaderIdentity.FindSubmatch(line); m != nil {
			ids = append(ids, string(m[1]))
		}
	}
	return ids
}
