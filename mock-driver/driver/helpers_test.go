package driver_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
)

// world is a driver serving a controller endpoint and two node plugins,
// node-a and node-b, with clients for each.
type world struct {
	t      testing.TB
	ctx    context.Context
	dir    string
	cfg    driver.Config
	d      *driver.Driver
	ctrl   csi.ControllerClient
	ctrlCC *grpc.ClientConn
	nodes  map[string]*grpc.ClientConn
}

func newConfig(dir string) driver.Config {
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "ctrl.sock")
	cfg.NodeEndpoints = map[string]string{
		"node-a": "unix://" + filepath.Join(dir, "a.sock"),
		"node-b": "unix://" + filepath.Join(dir, "b.sock"),
	}
	return cfg
}

func newWorld(t testing.TB, mutate func(*driver.Config)) *world {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	w := &world{t: t, ctx: ctx, dir: t.TempDir()}
	w.cfg = newConfig(w.dir)
	if mutate != nil {
		mutate(&w.cfg)
	}
	w.start()
	return w
}

// start (re)starts the driver with w.cfg and dials every endpoint.
func (w *world) start() {
	w.t.Helper()
	d, err := driver.Start(w.ctx, w.cfg)
	if err != nil {
		w.t.Fatalf("start driver: %v", err)
	}
	w.t.Cleanup(d.Stop)
	w.d = d
	w.ctrlCC = dial(w.t, d.Endpoint())
	w.ctrl = csi.NewControllerClient(w.ctrlCC)
	w.nodes = map[string]*grpc.ClientConn{}
	for n := range w.cfg.NodeEndpoints {
		w.nodes[n] = dial(w.t, d.NodeEndpoint(n))
	}
}

func dial(t testing.TB, target string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", target, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func (w *world) node(n string) csi.NodeClient { return csi.NewNodeClient(w.nodes[n]) }

func rwoCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func (w *world) createVolume(name string) string {
	w.t.Helper()
	resp, err := w.ctrl.CreateVolume(w.ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwoCap()}})
	if err != nil {
		w.t.Fatalf("CreateVolume: %v", err)
	}
	return resp.GetVolume().GetVolumeId()
}

func (w *world) stagingPath(node string) string { return filepath.Join(w.dir, node, "staging") }
func (w *world) targetPath(node string) string  { return filepath.Join(w.dir, node, "pod", "mount") }

// attachAndMount runs ControllerPublish, NodeStage and NodePublish of the
// volume on node, failing the test on any error.
func (w *world) attachAndMount(volID, node string) {
	w.t.Helper()
	pub, err := w.ctrl.ControllerPublishVolume(w.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: volID, NodeId: node, VolumeCapability: rwoCap()})
	if err != nil {
		w.t.Fatalf("ControllerPublishVolume to %s: %v", node, err)
	}
	if _, err := w.node(node).NodeStageVolume(w.ctx, &csi.NodeStageVolumeRequest{
		VolumeId: volID, StagingTargetPath: w.stagingPath(node), VolumeCapability: rwoCap(), PublishContext: pub.GetPublishContext(),
	}); err != nil {
		w.t.Fatalf("NodeStageVolume on %s: %v", node, err)
	}
	if _, err := w.node(node).NodePublishVolume(w.ctx, &csi.NodePublishVolumeRequest{
		VolumeId: volID, StagingTargetPath: w.stagingPath(node), TargetPath: w.targetPath(node), VolumeCapability: rwoCap(), PublishContext: pub.GetPublishContext(),
	}); err != nil {
		w.t.Fatalf("NodePublishVolume on %s: %v", node, err)
	}
}

func (w *world) audit() []audit.Record {
	w.t.Helper()
	recs, err := audit.ReadFile(w.d.AuditPath())
	if err != nil {
		w.t.Fatal(err)
	}
	return recs
}

func wantCode(t testing.TB, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: got %s (%v), want %s", what, got, err, want)
	}
}
