package differential

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// settleTimeout bounds every wait for an outcome. Retries run at most every
// second (--retry-interval-max), so an outcome that takes longer is a
// failure, not a slow machine.
const settleTimeout = 45 * time.Second

// side is one attacher with its own CSI driver: the same scenarios run on
// both sides at once, in one API server, told apart by the driver name
// (spec.attacher) and the prefix of every object name.
type side struct {
	// label is "upstream" or "fenceline".
	label string
	// prefix starts every object name of this side.
	prefix string
	// driverName is this side's CSI driver name.
	driverName string
	drv        *driver.Driver
	ctrl       csi.ControllerClient
	client     kubernetes.Interface
	// volumes maps a scenario to its volume ID on this side's array.
	volumes map[string]string
}

// name is the name of a scenario's objects (Node, CSINode, PV, VA) on s.
func (s *side) name(sc string) string { return s.prefix + "-" + sc }

// nodeID is the scenario's CSI node ID; the same on both sides, since each
// side has its own array.
func nodeID(sc string) string { return "n-" + sc }

// reinstalledID is the scenario's node ID after the node was re-installed.
func reinstalledID(sc string) string { return nodeID(sc) + "-new" }

// unknownID is a node ID no array knows.
const unknownID = "n-unknown"

// replaceCSINode replaces the node's CSINode by one with another node ID for
// the driver (a CSINode's driver entries are immutable; kubelet re-creates
// it, e.g. after a re-install).
func (s *side) replaceCSINode(ctx context.Context, t *testing.T, node, id string) {
	t.Helper()
	if err := s.client.StorageV1().CSINodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("%s: delete CSINode: %v", s.label, err)
	}
	s.create(ctx, t, testobj.CSINode(node, s.driverName, id))
}

// startSide starts a mock driver advertising only what an attach needs (no
// PUBLISH_READONLY, no LIST_VOLUMES_PUBLISHED_NODES, no fence) with one node
// per scenario, and creates its CSIDriver.
func startSide(ctx context.Context, t *testing.T, c *cluster.Cluster, label, prefix string, scenarios []scenario) *side {
	t.Helper()
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.Name = prefix + ".diff.fenceline.io"
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "c.sock")
	cfg.Fence, cfg.ForceUnpublish, cfg.MinimalController = false, false, true
	cfg.NodeEndpoints = map[string]string{}
	for i, sc := range scenarios {
		cfg.NodeEndpoints[nodeID(sc.name)] = "unix://" + filepath.Join(dir, fmt.Sprintf("n%d.sock", i))
		if sc.detach == reinstalledDetach {
			cfg.NodeEndpoints[reinstalledID(sc.name)] = "unix://" + filepath.Join(dir, fmt.Sprintf("n%d-new.sock", i))
		}
	}
	drv, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s mock driver: %v", label, err)
	}
	t.Cleanup(drv.Stop)
	conn, err := grpc.NewClient(drv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s mock driver: %v", label, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s := &side{label: label, prefix: prefix, driverName: cfg.Name, drv: drv, ctrl: csi.NewControllerClient(conn),
		client: c.Client(), volumes: map[string]string{}}
	s.create(ctx, t, testobj.AttachRequired(testobj.CSIDriver(s.driverName, nil), true))
	return s
}

// startAttacher runs bin with the flags both attachers share, against s's
// driver, as the cluster admin.
func (s *side) startAttacher(t *testing.T, c *cluster.Cluster, bin string) {
	t.Helper()
	p, err := cluster.StartProcess(s.label+"-attacher", c.LogDir(), bin,
		"--kubeconfig="+c.AdminKubeconfig(),
		"--csi-address="+strings.TrimPrefix(s.drv.Endpoint(), "unix://"),
		"--leader-election-namespace=default",
		"--timeout=5s",
		"--retry-interval-start=100ms",
		"--retry-interval-max=1s",
		"--v=4",
	)
	if err != nil {
		t.Fatalf("start %s attacher: %v", s.label, err)
	}
	c.Track(p)
}

// create creates API objects, failing the test on error.
func (s *side) create(ctx context.Context, t *testing.T, objs ...any) {
	t.Helper()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *v1.Node:
			_, err = s.client.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{})
		case *storagev1.CSINode:
			_, err = s.client.StorageV1().CSINodes().Create(ctx, o, metav1.CreateOptions{})
		case *storagev1.CSIDriver:
			_, err = s.client.StorageV1().CSIDrivers().Create(ctx, o, metav1.CreateOptions{})
		case *v1.PersistentVolume:
			_, err = s.client.CoreV1().PersistentVolumes().Create(ctx, o, metav1.CreateOptions{})
		case *storagev1.VolumeAttachment:
			_, err = s.client.StorageV1().VolumeAttachments().Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unsupported object %T", o)
		}
		if err != nil {
			t.Fatalf("%s: create %T: %v", s.label, o, err)
		}
	}
}

// createVolume creates the scenario's volume on s's array.
func (s *side) createVolume(ctx context.Context, t *testing.T, sc string) string {
	t.Helper()
	resp, err := s.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "vol-" + sc,
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		t.Fatalf("%s: CreateVolume %s: %v", s.label, sc, err)
	}
	s.volumes[sc] = resp.GetVolume().GetVolumeId()
	return s.volumes[sc]
}

// failNext makes the next call of method on s's driver fail with
// UNAVAILABLE.
func (s *side) failNext(method string) {
	s.drv.Faults().Set([]faults.Fault{faults.FailNext(method, 1, codes.Unavailable)})
}

// va reads a VolumeAttachment; nil when it is gone.
func (s *side) va(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	va, err := s.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return va, err
}

// pv reads a PersistentVolume; nil when it is gone.
func (s *side) pv(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	pv, err := s.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pv, err
}

// waitVA waits until the scenario's VolumeAttachment (nil when gone)
// satisfies done.
func (s *side) waitVA(ctx context.Context, t *testing.T, sc, what string, done func(*storagev1.VolumeAttachment) bool) {
	t.Helper()
	var last *storagev1.VolumeAttachment
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, settleTimeout, true, func(ctx context.Context) (bool, error) {
		va, err := s.va(ctx, s.name(sc))
		if err != nil {
			return false, err
		}
		last = va
		return done(va), nil
	})
	if err != nil {
		t.Fatalf("%s, scenario %s: VolumeAttachment never %s: %v; last seen: %+v", s.label, sc, what, err, last)
	}
}

// waitPV waits until the scenario's PV (nil when gone) satisfies done.
func (s *side) waitPV(ctx context.Context, t *testing.T, sc, what string, done func(*v1.PersistentVolume) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, settleTimeout, true, func(ctx context.Context) (bool, error) {
		pv, err := s.pv(ctx, s.name(sc))
		if err != nil {
			return false, err
		}
		return done(pv), nil
	})
	if err != nil {
		t.Fatalf("%s, scenario %s: PV never %s: %v", s.label, sc, what, err)
	}
}

// outcome is what a scenario leaves behind, normalised so that both sides
// compare equal when they behave alike: names without the side's prefix,
// this side's finalizer as <attacher>, no timestamps or resourceVersions,
// error messages (worded differently by each attacher) reduced to their
// presence.
type outcome map[string]string

// outcomeOf reads the scenario's VolumeAttachment, PV and the driver's
// audit of its volume.
func (s *side) outcomeOf(ctx context.Context, t *testing.T, sc string) outcome {
	t.Helper()
	out := outcome{}
	va, err := s.va(ctx, s.name(sc))
	if err != nil {
		t.Fatalf("%s: read VA: %v", s.label, err)
	}
	out["va.exists"] = fmt.Sprint(va != nil)
	if va != nil {
		out["va.deleting"] = fmt.Sprint(va.DeletionTimestamp != nil)
		out["va.attached"] = fmt.Sprint(va.Status.Attached)
		out["va.attachmentMetadata"] = fmt.Sprint(len(va.Status.AttachmentMetadata) > 0)
		out["va.attachError"] = errorOf(va.Status.AttachError)
		out["va.detachError"] = errorOf(va.Status.DetachError)
		out["va.finalizers"] = s.finalizers(va.Finalizers)
		out["va.annotations"] = annotations(va.Annotations)
	}
	pv, err := s.pv(ctx, s.name(sc))
	if err != nil {
		t.Fatalf("%s: read PV: %v", s.label, err)
	}
	out["pv.exists"] = fmt.Sprint(pv != nil)
	if pv != nil {
		out["pv.finalizers"] = s.finalizers(pv.Finalizers)
	}
	out["calls"] = s.calls(t, sc)
	return out
}

func errorOf(e *storagev1.VolumeError) string {
	switch {
	case e == nil:
		return "none"
	case e.Message == "":
		return "empty message"
	}
	return "message"
}

func (s *side) finalizers(fs []string) string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		if f == names.AttacherFinalizer(s.driverName) {
			f = "<attacher>"
		}
		out = append(out, f)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func annotations(a map[string]string) string {
	out := make([]string, 0, len(a))
	for k, v := range a {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// okCalls counts the successful calls of method the driver received for
// the scenario's volume.
func (s *side) okCalls(t *testing.T, sc, method string) int {
	t.Helper()
	vol, ok := s.volumes[sc]
	if !ok {
		return 0
	}
	recs, err := audit.ReadFile(s.drv.AuditPath())
	if err != nil {
		t.Fatalf("%s: read audit log: %v", s.label, err)
	}
	return audit.Count(recs, audit.Volume(vol), audit.Method(method), audit.OK())
}

// calls renders the driver's publish and unpublish calls of the scenario's
// volume, in order.
func (s *side) calls(t *testing.T, sc string) string {
	t.Helper()
	vol, ok := s.volumes[sc]
	if !ok {
		return ""
	}
	recs, err := audit.ReadFile(s.drv.AuditPath())
	if err != nil {
		t.Fatalf("%s: read audit log: %v", s.label, err)
	}
	var out []string
	for _, r := range audit.Filter(recs, audit.Volume(vol)) {
		if r.Method != "ControllerPublishVolume" && r.Method != "ControllerUnpublishVolume" {
			continue
		}
		call := fmt.Sprintf("%s(%s)=%s fence=%v", r.Method, r.NodeID, r.Code, r.Fence)
		if len(out) > 0 && out[len(out)-1] == call {
			// Repeats of one call are collapsed: how often a failing call
			// is retried depends on timing, and a repeated successful
			// call changes nothing (both are idempotent). Upstream
			// sometimes publishes twice: the update event of its own
			// finalizer write re-queues the VA, and the second sync still
			// sees attached=false in its cache. Fenceline skips syncs on
			// versions its own writes replaced; see "Differences from
			// upstream" in docs/attacher.md.
			continue
		}
		out = append(out, call)
	}
	return strings.Join(out, "; ")
}
