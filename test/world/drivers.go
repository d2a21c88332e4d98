package world

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/kubelet"
)

// SecondDriverName is the CSI driver name of the second mock driver
// (Options.SecondDriver).
const SecondDriverName = "mock2.fenceline.io"

// SecondStorageClassName is the StorageClass of the second mock driver's
// volumes.
const SecondStorageClassName = "mock2-rwo"

// MockDriver is the second mock CSI driver of a world (Options.SecondDriver):
// a storage backend of its own beside the first, with its own process,
// sockets, state directory (and so audit log), CSIDriver object,
// StorageClass and fenceline-attacher. The first driver's parts are the
// World's own fields (Driver, ControllerSocket, NodeSockets, StateDir,
// Attacher, Attachers), as in a world of one driver.
type MockDriver struct {
	// Name is the CSI driver name, SecondDriverName.
	Name string
	// Options are the driver's; SafeDetach annotates its CSIDriver.
	Options DriverOptions
	// Process is the mock-driver process.
	Process *cluster.Process
	// ControllerSocket is its controller endpoint (unix://...).
	ControllerSocket string
	// NodeSockets are its node endpoints by node name.
	NodeSockets map[string]string
	// StateDir is its state directory, where its audit log is.
	StateDir string
	// StorageClass is the StorageClass of its volumes.
	StorageClass string
	// attacherGroup is its fenceline-attacher: Attacher, and Attachers
	// with Options.AttacherReplicas.
	attacherGroup
}

// driverView is one driver's parts, wherever the World keeps them, for
// the helpers that act on a driver by name.
type driverView struct {
	name             string
	proc             **cluster.Process
	controllerSocket string
	nodeSockets      map[string]string
	stateDir         string
	storageClass     string
	attachers        *attacherGroup
}

// DriverNames returns the CSI driver names of the world's mock drivers,
// the first one (DriverName) first.
func (w *World) DriverNames() []string {
	if w.Second == nil {
		return []string{DriverName}
	}
	return []string{DriverName, w.Second.Name}
}

// driver returns the parts of the mock driver name.
func (w *World) driver(name string) (driverView, error) {
	switch {
	case name == DriverName:
		return driverView{name: name, proc: &w.Driver, controllerSocket: w.ControllerSocket, nodeSockets: w.NodeSockets,
			stateDir: w.StateDir, storageClass: StorageClassName, attachers: &w.attacherGroup}, nil
	case w.Second != nil && name == w.Second.Name:
		d := w.Second
		return driverView{name: name, proc: &d.Process, controllerSocket: d.ControllerSocket, nodeSockets: d.NodeSockets,
			stateDir: d.StateDir, storageClass: d.StorageClass, attachers: &d.attacherGroup}, nil
	}
	return driverView{}, fmt.Errorf("no mock driver %q in this world (it runs %v)", name, w.DriverNames())
}

// StorageClassOf returns the StorageClass of driver's volumes ("" for a
// driver the world does not run).
func (w *World) StorageClassOf(driver string) string {
	v, err := w.driver(driver)
	if err != nil {
		return ""
	}
	return v.storageClass
}

// otherKubeletDrivers are the drivers beyond the first whose volumes node's
// kubelet stand-in mounts, each through its own node socket.
func (w *World) otherKubeletDrivers(node string) []kubelet.Driver {
	if w.Second == nil {
		return nil
	}
	return []kubelet.Driver{{Name: w.Second.Name, Endpoint: w.Second.NodeSockets[node]}}
}

// AuditOf reads the audit log of the mock driver named driver.
func (w *World) AuditOf(driver string) ([]audit.Record, error) {
	v, err := w.driver(driver)
	if err != nil {
		return nil, err
	}
	recs, err := audit.ReadFile(filepath.Join(v.stateDir, "audit.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("reading the audit log of driver %s: %w", driver, err)
	}
	return recs, nil
}

// Audits reads every mock driver's audit log, by driver name. Volume
// handles are a driver's own: two drivers may use the same one, so each
// log is judged on its own.
func (w *World) Audits() (map[string][]audit.Record, error) {
	out := map[string][]audit.Record{}
	for _, d := range w.DriverNames() {
		recs, err := w.AuditOf(d)
		if err != nil {
			return nil, err
		}
		out[d] = recs
	}
	return out, nil
}

// KillDriver ends the (first) mock driver with SIGKILL, as a crash of the
// array's plugin does, and starts it again on the same sockets and state
// directory; it returns once every endpoint answers again. Calls in flight
// fail; what the array persisted stays.
func (w *World) KillDriver(ctx context.Context) error { return w.KillDriverOf(ctx, DriverName) }

// KillDriverOf is KillDriver for the mock driver named driver.
func (w *World) KillDriverOf(ctx context.Context, driver string) error {
	v, err := w.driver(driver)
	if err != nil {
		return err
	}
	if *v.proc == nil {
		return fmt.Errorf("mock driver %s is not running in this world", driver)
	}
	p, err := w.respawn(*v.proc)
	if err != nil {
		return err
	}
	*v.proc = p
	return waitEndpoints(ctx, p, v.controllerSocket, v.nodeSockets)
}

// SetDriverFaults replaces every fault-injection rule of the (first) mock
// driver, e.g. faults.FailNext("ControllerUnpublishVolume", 2,
// codes.Unavailable) or faults.LoseAnswers("ControllerUnpublishVolume",
// 1); no rules clears them.
func (w *World) SetDriverFaults(ctx context.Context, rules ...faults.Fault) error {
	return w.SetDriverFaultsOf(ctx, DriverName, rules...)
}

// SetDriverFaultsOf is SetDriverFaults for the mock driver named driver.
func (w *World) SetDriverFaultsOf(ctx context.Context, driver string, rules ...faults.Fault) error {
	v, err := w.driver(driver)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(v.controllerSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", v.controllerSocket, err)
	}
	defer conn.Close()
	if err := client.SetFaults(ctx, conn, rules...); err != nil {
		return fmt.Errorf("setting the faults of driver %s: %w", driver, err)
	}
	return nil
}

// startDrivers starts the mock driver (and the second one with
// Options.SecondDriver) and creates their CSIDriver objects.
func (w *World) startDrivers(ctx context.Context, opts Options) error {
	p, ctrl, err := w.startDriver(ctx, "mock-driver", DriverName, filepath.Join(w.Cluster.Dir(), "sock"), w.StateDir, w.NodeSockets, opts.Driver)
	if err != nil {
		return err
	}
	w.Driver, w.ControllerSocket = p, ctrl
	if err := w.createCSIDriver(ctx, DriverName, opts.Driver); err != nil {
		return err
	}
	if opts.SecondDriver == nil {
		return nil
	}
	d := &MockDriver{
		Name: SecondDriverName, Options: *opts.SecondDriver, NodeSockets: map[string]string{},
		StateDir: filepath.Join(w.Cluster.Dir(), "mock2"), StorageClass: SecondStorageClassName,
		attacherGroup: attacherGroup{attacherName: "fenceline-attacher-mock2"},
	}
	w.Second = d
	if d.Process, d.ControllerSocket, err = w.startDriver(ctx, "mock-driver-mock2", d.Name, filepath.Join(w.Cluster.Dir(), "sock2"), d.StateDir, d.NodeSockets, d.Options); err != nil {
		return err
	}
	return w.createCSIDriver(ctx, d.Name, d.Options)
}

// startDriver runs bin/mock-driver as the CSI driver name, as process
// proc, with its controller socket and one socket per node (recorded in
// nodeSockets) in sockDir, and returns it with its controller endpoint
// once every endpoint answers.
func (w *World) startDriver(ctx context.Context, proc, name, sockDir, stateDir string, nodeSockets map[string]string, o DriverOptions) (*cluster.Process, string, error) {
	bin, err := cluster.Binary("mock-driver")
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(sockDir, 0o755); err != nil {
		return nil, "", fmt.Errorf("creating socket directory: %w", err)
	}
	ctrl := "unix://" + filepath.Join(sockDir, "controller.sock")
	args := []string{
		"--endpoint=" + ctrl,
		"--state-dir=" + stateDir,
		"--name=" + name,
		"--fence=" + strconv.FormatBool(!o.NoFence),
		"--force-unpublish=" + strconv.FormatBool(!o.NoForceUnpublish),
		"--unpublish-mode=" + string(o.unpublishMode()),
		"--no-attach=" + strconv.FormatBool(o.NoAttach),
	}
	for _, n := range slices.Concat(w.Nodes, w.realNames) {
		nodeSockets[n] = "unix://" + filepath.Join(sockDir, n+".sock")
		args = append(args, "--node-endpoint="+n+"="+nodeSockets[n])
	}
	p, err := cluster.StartProcess(proc, w.Cluster.LogDir(), bin, append(args, o.Args...)...)
	if err != nil {
		return nil, "", err
	}
	w.Cluster.Track(p)
	if err := waitEndpoints(ctx, p, ctrl, nodeSockets); err != nil {
		return p, ctrl, err
	}
	return p, ctrl, nil
}

// waitEndpoints waits until the driver process p answers on its controller
// endpoint and every node endpoint.
func waitEndpoints(ctx context.Context, p *cluster.Process, ctrl string, nodeSockets map[string]string) error {
	for _, ep := range append([]string{ctrl}, slices.Collect(maps.Values(nodeSockets))...) {
		if err := WaitDriverReady(ctx, p, ep); err != nil {
			return err
		}
	}
	return nil
}
