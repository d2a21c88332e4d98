package controller

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/internal/fakewatch"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/attacher/csiclient"
	"fenceline.io/fenceline/pkg/names"
)

const (
	testDriver = driver.DefaultName
	testNode   = "node-1"
)

var testFinalizer = names.AttacherFinalizer(testDriver)

// env is one controller against a fake clientset, talking real gRPC over a
// unix socket to an in-process mock driver.
type env struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	ctrl     *Controller
	drv      *driver.Driver
	conn     *grpc.ClientConn
	recorder *captureRecorder
}

type envOptions struct {
	// noFence starts the mock driver without UNPUBLISH_FENCE.
	noFence bool
	// trivial pretends the driver has no PUBLISH_UNPUBLISH_VOLUME.
	trivial bool
	// minimal starts the mock driver with only CREATE_DELETE_VOLUME and
	// PUBLISH_UNPUBLISH_VOLUME; it refuses readonly publishes.
	minimal bool
	// blind runs the controller as RBAC without Nodes and CSIDrivers
	// leaves it; the API answers Forbidden to any read of them.
	blind bool
	// otherNodes are more nodes the array knows (their node IDs are their
	// names), for volumes that move.
	otherNodes []string
	// quietAttach runs the controller at the default of --attach-events
	// (off); the other tests record the Attached Event to see each attach.
	quietAttach bool
}

func newEnv(t *testing.T, o envOptions, objects ...runtime.Object) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "controller.sock")
	cfg.NodeEndpoints = map[string]string{testNode: "unix://" + filepath.Join(dir, "node.sock")}
	for _, n := range o.otherNodes {
		cfg.NodeEndpoints[n] = "unix://" + filepath.Join(dir, n+".sock")
	}
	cfg.Fence = !o.noFence
	cfg.MinimalController = o.minimal
	drv, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start mock driver: %v", err)
	}
	t.Cleanup(drv.Stop)
	conn, err := grpc.NewClient(drv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial mock driver: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	csiClient := csiclient.New(conn)
	caps, err := csiClient.Discover(ctx)
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	if caps.Fence.UnpublishFence == o.noFence {
		t.Fatalf("mock driver fence capability %v, want %v", caps.Fence.UnpublishFence, !o.noFence)
	}
	if o.trivial {
		caps.PublishUnpublish = false
	}
	client := fake.NewClientset(objects...)
	if o.blind {
		for _, res := range []string{"nodes", "csidrivers"} {
			client.PrependReactor("*", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
				t.Errorf("a blind attacher read %s (%s)", a.GetResource().Resource, a.GetVerb())
				return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("RBAC"))
			})
		}
	}
	watches := fakewatch.Track(client)
	factory := informers.NewSharedInformerFactory(client, 0)
	rec := &captureRecorder{}
	ctrl, err := New(Config{
		DriverName:         testDriver,
		Client:             client,
		CSI:                csiClient,
		Capabilities:       caps,
		Timeout:            5 * time.Second,
		RetryIntervalStart: 10 * time.Millisecond,
		RetryIntervalMax:   time.Second,
		Recorder:           rec,
		AttachEvents:       !o.quietAttach,
		Blind:              o.blind,
	}, factory)
	if err != nil {
		t.Fatalf("new controller: %v", err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel() // informers stop on ctx; Shutdown waits for them
		factory.Shutdown()
	})
	synced := factory.WaitForCacheSync(ctx.Done())
	for typ, ok := range synced {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	if err := watches.Wait(ctx, len(synced)); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, client: client, ctrl: ctrl, drv: drv, conn: conn, recorder: rec}
}

// createVolume creates a volume on the mock array and returns its ID.
func (e *env) createVolume(name string) string {
	e.t.Helper()
	resp, err := csi.NewControllerClient(e.conn).CreateVolume(e.ctx, &csi.CreateVolumeRequest{
		Name:               name,
		VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
	})
	if err != nil {
		e.t.Fatalf("CreateVolume: %v", err)
	}
	return resp.GetVolume().GetVolumeId()
}

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// stage stages the volume on testNode like a kubelet would, so that a plain
// unpublish is refused by the strict mock array.
func (e *env) stage(volumeID string, publishContext map[string]string) {
	e.t.Helper()
	conn, err := grpc.NewClient(e.drv.NodeEndpoint(testNode), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatalf("dial node: %v", err)
	}
	defer func() { _ = conn.Close() }()
	_, err = csi.NewNodeClient(conn).NodeStageVolume(e.ctx, &csi.NodeStageVolumeRequest{
		VolumeId:          volumeID,
		StagingTargetPath: e.t.TempDir(),
		VolumeCapability:  mountCapability(),
		PublishContext:    publishContext,
	})
	if err != nil {
		e.t.Fatalf("NodeStageVolume: %v", err)
	}
}

// va returns the VolumeAttachment from the fake API.
func (e *env) va(name string) *storagev1.VolumeAttachment {
	e.t.Helper()
	va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get VA: %v", err)
	}
	return va
}

func (e *env) pv(name string) *v1.PersistentVolume {
	e.t.Helper()
	pv, err := e.client.CoreV1().PersistentVolumes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get PV: %v", err)
	}
	return pv
}

// waitCached waits until the informer cache holds the API's current state
// of the VolumeAttachment, so that a sync acts on it. The fake clientset
// sets no resourceVersions, so the objects are compared instead.
func (e *env) waitCached(name string) {
	e.t.Helper()
	want := stripped(e.va(name))
	err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		va, err := e.ctrl.vaLister.Get(name)
		return err == nil && equality.Semantic.DeepEqual(stripped(va), want), nil
	})
	if err != nil {
		e.t.Fatalf("VA %s never reached the cache in its current state: %v", name, err)
	}
}

func stripped(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment {
	va = va.DeepCopy()
	va.ManagedFields = nil
	return va
}

// waitNodeCached waits until the cache has the API's version of the Node.
func (e *env) waitNodeCached(name string) {
	e.t.Helper()
	node, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get node: %v", err)
	}
	err = wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		n, err := e.ctrl.nodeLister.Get(name)
		return err == nil && equality.Semantic.DeepEqual(n.Spec, node.Spec) && equality.Semantic.DeepEqual(n.Status, node.Status), nil
	})
	if err != nil {
		e.t.Fatalf("node %s never reached the cache: %v", name, err)
	}
}

// sync runs one sync of the VolumeAttachment on the current cache.
func (e *env) sync(name string) error {
	e.t.Helper()
	e.waitCached(name)
	return e.ctrl.syncVA(e.ctx, name)
}

// updateVA changes the VolumeAttachment in the fake API.
func (e *env) updateVA(name string, mutate func(*storagev1.VolumeAttachment)) {
	e.t.Helper()
	va := e.va(name)
	mutate(va)
	if _, err := e.client.StorageV1().VolumeAttachments().Update(e.ctx, va, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("update VA %s: %v", name, err)
	}
}

// updateNode changes the Node in the fake API.
func (e *env) updateNode(name string, mutate testobj.NodeOption) {
	e.t.Helper()
	node, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get node %s: %v", name, err)
	}
	mutate(node)
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("update node %s: %v", name, err)
	}
}

// markDeleting sets deletionTimestamp as the API server would on delete of
// an object with finalizers (the fake clientset deletes at once instead).
func (e *env) markDeleting(name string) {
	e.t.Helper()
	e.updateVA(name, func(va *storagev1.VolumeAttachment) {
		va.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now().Add(-time.Second)))
	})
}

// audit returns the mock driver's audit records for one method.
func (e *env) audit(method string) []audit.Record {
	e.t.Helper()
	recs, err := audit.ReadFile(e.drv.AuditPath())
	if err != nil {
		e.t.Fatalf("read audit log: %v", err)
	}
	return audit.Filter(recs, audit.Method(method))
}

// events drains the recorded events and returns those on objects other
// than claims as "Type Reason" strings; claimEvents_test.go looks at the
// claims' own.
func (e *env) events() []string {
	var out []string
	for _, ev := range e.recorder.take() {
		if ev.Object.Kind != "PersistentVolumeClaim" {
			out = append(out, ev.Type+" "+ev.Reason)
		}
	}
	return out
}

// --- object builders ---

func pvFor(name, volumeID string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: testDriver, VolumeHandle: volumeID,
			}},
		},
	}
}

func vaFor(name, pv, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver,
			NodeName: node,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)},
		},
	}
}

func csiNodeFor(node, nodeID string) *storagev1.CSINode {
	return &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: testDriver, NodeID: nodeID}}},
	}
}

// Ready conditions of test nodes that are not Ready (testobj.Node is Ready
// by default).
var (
	unknown  = testobj.UnknownSince(testobj.Epoch)
	notReady = testobj.NotReadySince(testobj.Epoch)
)

// safeDetachDriver is the test driver's CSIDriver, opted into safe detach.
func safeDetachDriver() *storagev1.CSIDriver {
	return testobj.CSIDriver(testDriver, map[string]string{names.SafeDetachAnnotation: "true"})
}

// waitCSINodeID waits until the cached CSINode gives the driver this ID.
func (e *env) waitCSINodeID(node, id string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return e.ctrl.csiNodeID(node) == id, nil
	})
	if err != nil {
		e.t.Fatalf("CSINode %s never showed node ID %s in the cache", node, id)
	}
}
