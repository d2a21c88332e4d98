package iscsi_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/test/iscsi"
)

// volumeSize keeps LUN files small: the checker reads the whole LUN.
const volumeSize = 1 << 20

// rig is the mock driver on the tgt backend with node-a and node-b, in
// real-array mode (a plain unpublish of a volume in use is carried out, as
// a real array does), with clients and a ledger of every write.
type rig struct {
	t      testing.TB
	ctx    context.Context
	dir    string
	cfg    driver.Config
	d      *driver.Driver
	ctrl   csi.ControllerClient
	nodes  map[string]csi.NodeClient
	ledger *iscsi.Ledger
}

func newRig(t testing.TB, method string) *rig {
	t.Helper()
	iscsi.Require(t)
	_, ctx := ktesting.NewTestContext(t)
	cfg := iscsi.TgtDriverConfig(t, method, "node-a", "node-b")
	dir := filepath.Dir(cfg.StateDir)
	r := &rig{t: t, ctx: ctx, dir: dir, cfg: cfg, ledger: iscsi.NewLedger()}
	r.start()
	return r
}

// start (re)starts the driver on r.cfg and dials it.
func (r *rig) start() {
	r.t.Helper()
	d, err := driver.Start(r.ctx, r.cfg)
	if err != nil {
		r.t.Fatalf("start the mock driver on tgt: %v", err)
	}
	r.t.Cleanup(d.Stop)
	r.d = d
	r.ctrl = csi.NewControllerClient(r.dial(d.Endpoint()))
	r.nodes = map[string]csi.NodeClient{}
	for n := range r.cfg.NodeEndpoints {
		r.nodes[n] = csi.NewNodeClient(r.dial(d.NodeEndpoint(n)))
	}
}

func (r *rig) dial(target string) *grpc.ClientConn {
	r.t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func rwo() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func (r *rig) volume(name string) string {
	r.t.Helper()
	resp, err := r.ctrl.CreateVolume(r.ctx, &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwo()},
		CapacityRange: &csi.CapacityRange{RequiredBytes: volumeSize},
	})
	if err != nil {
		r.t.Fatalf("CreateVolume: %v", err)
	}
	return resp.GetVolume().GetVolumeId()
}

func (r *rig) staging(node string) string { return filepath.Join(r.dir, node, "staging") }
func (r *rig) target(node string) string  { return filepath.Join(r.dir, node, "target") }

// publish runs ControllerPublishVolume and returns the error.
func (r *rig) publish(vol, node string) (iscsi.Options, error) {
	resp, err := r.ctrl.ControllerPublishVolume(r.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: node, VolumeCapability: rwo()})
	if err != nil {
		return iscsi.Options{}, err
	}
	return iscsi.FromPublishContext(resp.GetPublishContext())
}

// attach publishes, stages and publishes on the node, as the attacher and
// the kubelet would, and returns where the node logs in.
func (r *rig) attach(vol, node string) iscsi.Options {
	r.t.Helper()
	opts, err := r.publish(vol, node)
	if err != nil {
		r.t.Fatalf("ControllerPublishVolume %s to %s: %v", vol, node, err)
	}
	if _, err := r.nodes[node].NodeStageVolume(r.ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: r.staging(node), VolumeCapability: rwo()}); err != nil {
		r.t.Fatalf("NodeStageVolume on %s: %v", node, err)
	}
	if _, err := r.nodes[node].NodePublishVolume(r.ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: r.staging(node), TargetPath: r.target(node), VolumeCapability: rwo()}); err != nil {
		r.t.Fatalf("NodePublishVolume on %s: %v", node, err)
	}
	return opts
}

// cleanup is the returning node's kubelet: unforced NodeUnpublish and
// NodeUnstage.
func (r *rig) cleanup(vol, node string) {
	r.t.Helper()
	if _, err := r.nodes[node].NodeUnpublishVolume(r.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: r.target(node)}); err != nil {
		r.t.Fatalf("NodeUnpublishVolume on %s: %v", node, err)
	}
	if _, err := r.nodes[node].NodeUnstageVolume(r.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: r.staging(node)}); err != nil {
		r.t.Fatalf("NodeUnstageVolume on %s: %v", node, err)
	}
	r.ledger.Lifted(node)
}

// unpublish sends ControllerUnpublishVolume, fenced or not.
func (r *rig) unpublish(vol, node string, fenced bool) error {
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: node}
	fence.SetFence(req, fenced)
	_, err := r.ctrl.ControllerUnpublishVolume(r.ctx, req)
	return err
}

// login logs in and closes the session at the end of the test.
func (r *rig) login(opts iscsi.Options) *iscsi.Session {
	r.t.Helper()
	s, err := iscsi.Login(opts)
	if err != nil {
		r.t.Fatalf("login as %s: %v", opts.Initiator, err)
	}
	r.t.Cleanup(func() { _ = s.Close() })
	return s
}

// writer is node's workload through s over blocks [0, 64).
func (r *rig) writer(node string, gen uint64, s *iscsi.Session) *iscsi.Writer {
	return &iscsi.Writer{Session: s, Ledger: r.ledger, Stamp: iscsi.Stamp{Node: node, Boot: "boot-1", Generation: gen}, Span: 64}
}

// check reads the LUN through a fresh session with opts and returns the
// checker's violations.
func (r *rig) check(opts iscsi.Options) []string {
	r.t.Helper()
	img, err := iscsi.ReadAll(opts, 64)
	if err != nil {
		r.t.Fatalf("checker: %v", err)
	}
	return r.ledger.Check(img, len(img)/64)
}
