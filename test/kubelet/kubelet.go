// Package kubelet is a kubelet stand-in for one KWOK node in end-to-end
// tests. KWOK simulates heartbeats and pod status but no volumes; this
// package adds the storage half of a kubelet: it reports the node's
// volumesInUse, stages and publishes the CSI volumes of the node's pods
// through that node's socket of the driver once their VolumeAttachment is
// attached, marks the pods' volumes mounted (which lets KWOK start them),
// writes to every published volume periodically, and cleans up volumes
// whose pods are gone.
//
// A power cut (PowerOff) partitions the stand-in from the API server. With
// Config.ZombieWrites the writers keep going, like a node that lost its
// network to the control plane but not to storage: exactly what fencing
// must stop. PowerOn is a reboot: writers stop, and volumes whose pods left
// the node meanwhile get NodeUnpublish/NodeUnstage, the node-side clean-up
// that lifts a fence.
//
// Partition and Heal play the other way back: a network partition that
// heals with the node still running (same boot ID, mounts and writers
// intact). Heal reports Ready and volumesInUse in one status update, as a
// kubelet does, and then cleans up like any kubelet.
//
// Shutdown is a graceful node shutdown (KEP-2000) as the kubelet's node
// shutdown manager runs it, ending in a power-off (see shutdown.go).
//
// Like the upstream kubelet, the stand-in never sends the fence extension's
// force field; Config.ForceCleanup turns it on for the clean-up after a
// reboot, for tests of a CO that knows the extension.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/test/iscsi"
)

// Config configures a stand-in.
type Config struct {
	// NodeName is the Node (and CSI node ID) the stand-in plays.
	NodeName string
	// Client talks to the API server as this node's kubelet would.
	Client kubernetes.Interface
	// Driver is the CSI driver name whose volumes the stand-in mounts.
	Driver string
	// Endpoint is the node's driver socket, "unix:///path".
	Endpoint string
	// OtherDrivers are more CSI drivers whose volumes the stand-in mounts,
	// each through its own node socket, as a kubelet serves every driver
	// registered on its node.
	OtherDrivers []Driver
	// DataDir holds the staging and target paths.
	DataDir string
	// WriteInterval is the period of data-plane writes per volume
	// (DefaultWriteInterval when zero).
	WriteInterval time.Duration
	// ZombieWrites keeps writing to published volumes while the node is
	// powered off (partitioned from the API server but not from storage).
	ZombieWrites bool
	// HeldOpen models a process outside the pod's containers (a backup
	// agent, a stuck I/O in the kernel) that holds a published volume open
	// and keeps writing: the clean-up of a volume whose pod left stops its
	// writer only once NodeUnpublishVolume succeeded, not before. The
	// default is the kubelet's order: containers stopped, then unmounted.
	HeldOpen bool
	// ForceCleanup sends force=true on the clean-up of volumes that were in
	// use before a reboot. The upstream kubelet never does, so the default
	// is off and the driver must treat an unforced clean-up of a fenced
	// volume as the one that lifts the fence.
	ForceCleanup bool
	// Ledgers records the stamped block writes to volumes the tgt backend
	// serves, one ledger per volume (LedgerKey), for the byte checker;
	// share one between the stand-ins of a cluster, since a volume moves
	// between nodes. Nil gives the stand-in a book of its own.
	Ledgers *iscsi.Book
	// ResyncInterval is how often the stand-in reconciles without an event,
	// to notice a VolumeAttachment becoming attached (DefaultResyncInterval
	// when zero).
	ResyncInterval time.Duration
}

// Driver is a CSI driver of the node beyond Config.Driver.
type Driver struct {
	// Name is the CSI driver name.
	Name string
	// Endpoint is the node's socket of that driver, "unix:///path".
	Endpoint string
}

// Defaults for Config.
const (
	DefaultWriteInterval  = 200 * time.Millisecond
	DefaultResyncInterval = 500 * time.Millisecond
)

// Write records one data-plane write attempt.
type Write struct {
	// Sent is when the write was sent, Time when the driver answered.
	Sent, Time time.Time
	// VolumeID is the volume written to, and Driver its CSI driver.
	VolumeID string
	Driver   string
	// Seq numbers the writes of this stand-in, from 1.
	Seq int
	// PoweredOn is false for writes while the node is cut off from the API
	// server: a zombie's after PowerOff, or a partitioned node's.
	PoweredOn bool
	// Err is the driver's answer; nil when the write was accepted.
	Err error
}

// Kubelet is a running stand-in. Its methods are safe for concurrent use.
type Kubelet struct {
	cfg Config
	// drivers are the node's CSI drivers by name, Config.Driver's among
	// them.
	drivers map[string]*nodeDriver

	mu          sync.Mutex
	powered     bool
	partitioned bool               // cut off by Partition: running, writers intact
	apiCtx      context.Context    // the current powered-on period
	apiCancel   context.CancelFunc // ends it
	apiDone     chan struct{}
	shutdown    *shutdownState     // a graceful shutdown, from its start to the next power-on
	vols        map[volKey]*volume // by driver and volume handle
	inUse       []string           // volumesInUse last reported
	writes      []Write
	seq         int
	boot        int // counts power-ons: the boot ID of stamped blocks
	generation  uint64
	stopped     bool
	writersWG   sync.WaitGroup
	baseCtx     context.Context
	cancel      context.CancelFunc
}

// Start connects to the node's driver sockets and powers the node on. Stop
// ends it.
func Start(ctx context.Context, cfg Config) (*Kubelet, error) {
	if cfg.NodeName == "" || cfg.Client == nil || cfg.Driver == "" || cfg.Endpoint == "" || cfg.DataDir == "" {
		return nil, errors.New("kubelet stand-in: NodeName, Client, Driver, Endpoint and DataDir are required")
	}
	if cfg.WriteInterval <= 0 {
		cfg.WriteInterval = DefaultWriteInterval
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.Ledgers == nil {
		cfg.Ledgers = &iscsi.Book{}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("kubelet stand-in %s: %w", cfg.NodeName, err)
	}
	drivers, err := connectDrivers(cfg)
	if err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), klog.FromContext(ctx).WithValues("node", cfg.NodeName)))
	k := &Kubelet{
		cfg:     cfg,
		drivers: drivers,
		vols:    map[volKey]*volume{},
		baseCtx: base,
		cancel:  cancel,
	}
	if err := k.PowerOn(); err != nil {
		k.Stop()
		return nil, err
	}
	return k, nil
}

// PowerOff cuts the node off from the API server. Its writers keep going
// only with Config.ZombieWrites, also when the node was partitioned: the
// power cut ends the partition.
func (k *Kubelet) PowerOff() {
	if k.cutOff(k.cfg.ZombieWrites, false) {
		klog.FromContext(k.baseCtx).Info("Kubelet stand-in powered off", "zombieWrites", k.cfg.ZombieWrites)
	}
}

// Partition cuts the node off from the API server while it keeps running:
// its writers keep going whatever Config.ZombieWrites says, and its mounts
// stay. Heal ends the partition; PowerOn instead reboots the node.
func (k *Kubelet) Partition() {
	if k.cutOff(true, true) {
		klog.FromContext(k.baseCtx).Info("Kubelet stand-in partitioned from the API server")
	}
}

// cutOff ends the powered-on period; it reports false if the node was
// already off. A power cut of a partitioned node (its BMC powering it off)
// ends the partition: the node no longer runs, so its writers stop unless
// keepWriters, and only PowerOn brings it back.
func (k *Kubelet) cutOff(keepWriters, partitioned bool) bool {
	k.mu.Lock()
	if !k.powered {
		cut := k.partitioned && !partitioned
		if cut {
			k.partitioned = false
			if !keepWriters {
				k.stopWritersLocked()
			}
		}
		k.mu.Unlock()
		return cut
	}
	k.powered, k.partitioned = false, partitioned
	cancel, done := k.apiCancel, k.apiDone
	if !keepWriters {
		k.stopWritersLocked()
	}
	k.mu.Unlock()
	cancel()
	<-done
	return true
}

// PowerOn reboots the node: every writer stops (processes do not survive a
// reboot), every volume is mounted again or, if its pod left the node,
// cleaned up with force; then the stand-in reconnects to the API server.
func (k *Kubelet) PowerOn() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return errors.New("kubelet stand-in stopped")
	}
	if k.powered {
		return nil
	}
	k.stopWritersLocked()
	k.boot++
	k.shutdown = nil // a new boot is not shutting down
	// Others (the companion controller) may have edited volumesInUse while
	// the node was away: report afresh.
	k.inUse = nil
	for _, v := range k.vols {
		v.rebooted = true
		v.published = false
	}
	if err := k.connectLocked(); err != nil {
		return err
	}
	klog.FromContext(k.baseCtx).Info("Kubelet stand-in powered on")
	return nil
}

// connectLocked starts a powered-on period: informers and reconcile loop.
func (k *Kubelet) connectLocked() error {
	ctx, cancel := context.WithCancel(k.baseCtx)
	done := make(chan struct{})
	if err := k.startAPILocked(ctx, done); err != nil {
		cancel()
		return err
	}
	k.powered, k.partitioned, k.apiCtx, k.apiCancel, k.apiDone = true, false, ctx, cancel, done
	return nil
}

// Heal ends a Partition without a reboot: the node keeps its boot ID, its
// mounts and its writers. Like a kubelet whose API server is back, it first
// reports Ready and volumesInUse (what it still has mounted) in one status
// update, then resumes: volumes whose pods left meanwhile are cleaned up
// without force, and a volume fenced meanwhile keeps refusing the writers'
// I/O until then.
func (k *Kubelet) Heal(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.stopped:
		return errors.New("kubelet stand-in stopped")
	case k.powered:
		return nil
	case !k.partitioned:
		return fmt.Errorf("kubelet stand-in %s: Heal after a power-off; use PowerOn", k.cfg.NodeName)
	}
	inUse := k.mountedLocked()
	if err := k.reportHealedLocked(ctx, inUse); err != nil {
		return err
	}
	k.inUse = inUse
	if err := k.connectLocked(); err != nil {
		return err
	}
	klog.FromContext(k.baseCtx).Info("Kubelet stand-in partition healed", "volumesInUse", inUse)
	return nil
}

// Partitioned reports whether the node is cut off by Partition.
func (k *Kubelet) Partitioned() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.partitioned
}

// Powered reports whether the node is powered on.
func (k *Kubelet) Powered() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.powered
}

// Writes returns every write attempt so far, oldest first.
func (k *Kubelet) Writes() []Write {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Write(nil), k.writes...)
}

// Published returns the handles of the volumes currently published on the
// node (with a running writer when powered on).
func (k *Kubelet) Published() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for key, v := range k.vols {
		if v.published {
			out = append(out, key.handle)
		}
	}
	return out
}

// Stop ends the stand-in without node-side clean-up, like pulling the plug
// for good, and closes its connection to the driver.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.stopped = true
	powered := k.powered
	cancel, done := k.apiCancel, k.apiDone
	k.powered = false
	k.stopWritersLocked()
	k.mu.Unlock()
	if powered {
		cancel()
		<-done
	}
	k.writersWG.Wait()
	k.cancel()
	for _, d := range k.drivers {
		_ = d.conn.Close()
	}
}

// nodeDriver is one CSI driver of the node: its node socket's connection
// and what its CSIDriver object said last.
type nodeDriver struct {
	name string
	// primary is Config.Driver, whose paths are the stand-in's own.
	primary bool
	conn    *grpc.ClientConn
	node    csi.NodeClient
	// noAttach records that the driver's CSIDriver says attachRequired:
	// false, as last seen: its volumes have no VolumeAttachment to wait
	// for and, like every non-attachable volume, are not reported in
	// volumesInUse. Guarded by Kubelet.mu.
	noAttach bool
}

// connectDrivers connects to the node socket of every driver of cfg.
func connectDrivers(cfg Config) (map[string]*nodeDriver, error) {
	out := map[string]*nodeDriver{}
	for i, d := range append([]Driver{{Name: cfg.Driver, Endpoint: cfg.Endpoint}}, cfg.OtherDrivers...) {
		if d.Name == "" || d.Endpoint == "" || out[d.Name] != nil {
			closeDrivers(out)
			return nil, fmt.Errorf("kubelet stand-in %s: driver %d (%q at %q): want a name of its own and an endpoint", cfg.NodeName, i, d.Name, d.Endpoint)
		}
		conn, err := grpc.NewClient(d.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeDrivers(out)
			return nil, fmt.Errorf("kubelet stand-in %s: connecting to %s: %w", cfg.NodeName, d.Endpoint, err)
		}
		out[d.Name] = &nodeDriver{name: d.Name, primary: i == 0, conn: conn, node: csi.NewNodeClient(conn)}
	}
	return out, nil
}

func closeDrivers(drivers map[string]*nodeDriver) {
	for _, d := range drivers {
		_ = d.conn.Close()
	}
}
