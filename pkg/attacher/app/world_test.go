package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/attacher/app"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// world is one scenario: its own node, CSINode, volume, PV and VA names, a
// mock driver and (once started) an attacher.
type world struct {
	ctx                    context.Context
	client                 kubernetes.Interface
	drv                    *driver.Driver
	conn                   *grpc.ClientConn
	node, pv, va, volumeID string
}

func newWorld(t *testing.T, client kubernetes.Interface, name string, fence bool) *world {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	w := &world{ctx: ctx, client: client, node: "node-" + name, pv: "pv-" + name, va: "va-" + name}
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "c.sock")
	cfg.NodeEndpoints = map[string]string{w.node: "unix://" + filepath.Join(dir, "n.sock")}
	cfg.Fence = fence
	drv, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start mock driver: %v", err)
	}
	t.Cleanup(drv.Stop)
	w.drv = drv
	w.conn = dial(t, drv.Endpoint())
	resp, err := csi.NewControllerClient(w.conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "vol-" + name, VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
	})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	w.volumeID = resp.GetVolume().GetVolumeId()

	node, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set node Ready: %v", err)
	}
	if _, err := client.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: w.node},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver.DefaultName, NodeID: w.node}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CSINode: %v", err)
	}
	return w
}

func dial(t *testing.T, endpoint string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// startAttacher runs the attacher in-process until the scenario ends.
func (w *world) startAttacher(t *testing.T, config *rest.Config, retryStart time.Duration) {
	t.Helper()
	w.startAttacherWith(t, config, func(o *app.Options) {
		o.RetryIntervalStart = retryStart
		o.RetryIntervalMax = max(retryStart, 5*time.Minute)
	})
}

// startAttacherWith runs the attacher in-process with adjusted options and
// returns a function that stops it and waits for it to return; it also runs
// when the scenario ends.
func (w *world) startAttacherWith(t *testing.T, config *rest.Config, mutate func(*app.Options)) (stop func()) {
	t.Helper()
	opts := app.DefaultOptions()
	opts.RestConfig = config
	opts.CSIAddress = w.drv.Endpoint()
	opts.KubeAPIQPS, opts.KubeAPIBurst = 50, 100
	mutate(&opts)
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, opts) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("attacher: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// withLeaderElection makes the attacher compete for the lease as identity,
// with short timings.
func withLeaderElection(o *app.Options, identity string) {
	o.LeaderElection = true
	o.LeaderElectionNamespace = namespace
	o.LeaderElectionIdentity = identity
	o.LeaderElectionLeaseDuration = 4 * time.Second
	o.LeaderElectionRenewDeadline = 3 * time.Second
	o.LeaderElectionRetryPeriod = time.Second
}

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func (w *world) createPV(t *testing.T, finalizers []string) {
	t.Helper()
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: w.pv, Finalizers: finalizers},
		Spec: v1.PersistentVolumeSpec{
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driver.DefaultName, VolumeHandle: w.volumeID,
			}},
		},
	}
	if _, err := w.client.CoreV1().PersistentVolumes().Create(w.ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PV: %v", err)
	}
}

func vaObject(name, pv, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: driver.DefaultName, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)},
		},
	}
}

// attach creates the PV and VA and waits until the attacher attached it.
func (w *world) attach(t *testing.T) *storagev1.VolumeAttachment {
	t.Helper()
	w.createPV(t, nil)
	if _, err := w.client.StorageV1().VolumeAttachments().Create(w.ctx, vaObject(w.va, w.pv, w.node), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VA: %v", err)
	}
	var out *storagev1.VolumeAttachment
	err := wait.PollUntilContextTimeout(w.ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		va, err := w.client.StorageV1().VolumeAttachments().Get(ctx, w.va, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		out = va
		return va.Status.Attached, nil
	})
	if err != nil {
		t.Fatalf("VA %s not attached: %v (last %+v)", w.va, err, out)
	}
	return out
}

// stage stages the volume on the node, so that a plain unpublish is refused.
func (w *world) stage(t *testing.T, publishContext map[string]string) {
	t.Helper()
	_, err := csi.NewNodeClient(dial(t, w.drv.NodeEndpoint(w.node))).NodeStageVolume(w.ctx, &csi.NodeStageVolumeRequest{
		VolumeId: w.volumeID, StagingTargetPath: t.TempDir(), VolumeCapability: mountCapability(), PublishContext: publishContext,
	})
	if err != nil {
		t.Fatalf("NodeStageVolume: %v", err)
	}
}

// taintOutOfService adds the out-of-service taint to the world's node.
// Scenarios that need the taint in the attacher's cache by the time the VA
// is deleted taint before starting the attacher, whose cache sync then
// includes it: the Node and VolumeAttachment watches are separate streams,
// so a taint written just before the delete may reach the attacher after
// it. (That order is its own scenario: a plain unpublish, then a fenced one
// once the taint arrives.)
func (w *world) taintOutOfService(t *testing.T) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := w.client.CoreV1().Nodes().Get(w.ctx, w.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = append(node.Spec.Taints, v1.Taint{Key: names.OutOfServiceTaint, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute})
		_, err = w.client.CoreV1().Nodes().Update(w.ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("taint node: %v", err)
	}
}

func (w *world) deleteVA(t *testing.T) {
	t.Helper()
	if err := w.client.StorageV1().VolumeAttachments().Delete(w.ctx, w.va, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete VA: %v", err)
	}
}

func (w *world) waitVAGone(t *testing.T, d time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 50*time.Millisecond, d, true, func(ctx context.Context) (bool, error) {
		_, err := w.client.StorageV1().VolumeAttachments().Get(ctx, w.va, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("VA %s still there after %v: %v; audit %+v", w.va, d, err, w.audit(t))
	}
}

func (w *world) audit(t *testing.T) []audit.Record {
	t.Helper()
	recs, err := audit.ReadFile(w.drv.AuditPath())
	if err != nil {
		t.Fatalf("read audit: %v", err)
	}
	return recs
}

// wantUnpublish checks that the driver saw a ControllerUnpublishVolume of
// the volume with that fence flag and result.
func (w *world) wantUnpublish(t *testing.T, fence bool, code string) {
	t.Helper()
	recs := audit.Filter(w.audit(t), audit.Method("ControllerUnpublishVolume"), audit.Volume(w.volumeID), audit.Node(w.node), audit.Code(code))
	if !slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Fence == fence }) {
		t.Fatalf("no ControllerUnpublishVolume with fence=%v code=%s in %+v", fence, code, w.audit(t))
	}
}

// countEvents counts Events with that reason on the VA.
func (w *world) countEvents(t *testing.T, reason string) int {
	t.Helper()
	events, err := w.client.CoreV1().Events(metav1.NamespaceAll).List(w.ctx, metav1.ListOptions{
		FieldSelector: fmt.Sprintf("involvedObject.name=%s,reason=%s", w.va, reason),
	})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	return len(events.Items)
}

// waitEvent waits for an Event with that type and reason on the VA.
func (w *world) waitEvent(t *testing.T, typ, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		events, err := w.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fmt.Sprintf("involvedObject.name=%s,reason=%s", w.va, reason),
		})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(e v1.Event) bool { return e.Type == typ }), nil
	})
	if err != nil {
		t.Fatalf("no %s Event %s on VA %s: %v", typ, reason, w.va, err)
	}
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// httpGet fetches url, retrying until the server answers.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	var code int
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, nil
		}
		code, body = resp.StatusCode, string(b)
		return true, nil
	})
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return code, body
}

// applyRBAC applies the namespace and deploy/attacher with kubectl, exactly
// as a user would.
func applyRBAC(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	kubectl, err := cluster.Tool("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"deploy/namespace", "deploy/attacher"} {
		out, err := exec.Command(kubectl, "--kubeconfig="+c.AdminKubeconfig(), "apply", "-k", filepath.Join(root, dir)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply -k %s: %v\n%s", dir, err, out)
		}
	}
}
