package kubelet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/test/cluster"
)

func TestAccepted(t *testing.T) {
	t0 := time.Unix(1000, 0)
	writes := []Write{
		{Time: t0.Add(-time.Second)},
		{Time: t0},
		{Time: t0.Add(time.Second)},
		{Time: t0.Add(2 * time.Second), Err: errors.New("permission denied")},
		{Time: t0.Add(3 * time.Second), Err: errors.New("permission denied")},
	}
	tests := []struct {
		name               string
		after              time.Time
		accepted, rejected int
	}{
		{name: "everything", after: time.Time{}, accepted: 3, rejected: 2},
		{name: "strictly after t0", after: t0, accepted: 1, rejected: 2},
		{name: "only refusals left", after: t0.Add(time.Second), accepted: 0, rejected: 2},
		{name: "nothing after the end", after: t0.Add(time.Hour), accepted: 0, rejected: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, r := Accepted(writes, tc.after)
			if a != tc.accepted || r != tc.rejected {
				t.Errorf("Accepted(after %v) = %d, %d; want %d, %d", tc.after, a, r, tc.accepted, tc.rejected)
			}
		})
	}
}

func poll(t *testing.T, ctx context.Context, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Names of the stand-in tests' world.
const node, drv = "node-a", driver.DefaultName

// fixture is a running stand-in on a real API server and the mock driver
// over unix sockets, with pod "db" Running on it and its volume written to.
type fixture struct {
	ctx    context.Context
	cs     kubernetes.Interface
	ctrl   csi.ControllerClient
	d      *driver.Driver
	k      *Kubelet
	handle string
	unique corev1.UniqueVolumeName
}

// startFixture starts the fixture; mutate adjusts the stand-in's Config.
func startFixture(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cs := c.Client()

	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(c.Dir(), "mock")
	cfg.Endpoint = "unix://" + filepath.Join(c.Dir(), "ctrl.sock")
	cfg.NodeEndpoints = map[string]string{node: "unix://" + filepath.Join(c.Dir(), "node-a.sock")}
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	conn, err := grpc.NewClient(d.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctrl := csi.NewControllerClient(conn)
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v1", VolumeCapabilities: []*csi.VolumeCapability{rwoCapability}})
	if err != nil {
		t.Fatal(err)
	}
	handle := vol.GetVolume().GetVolumeId()
	pub, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: handle, NodeId: node, VolumeCapability: rwoCapability})
	if err != nil {
		t.Fatal(err)
	}

	// The API objects a kubelet would see: node, PV, bound PVC, pod, and an
	// attached VolumeAttachment.
	mustCreate(t, func() error {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv1"},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: drv, VolumeHandle: handle}},
			},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				VolumeName:  "pv1",
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: corev1.PodSpec{
				NodeName:   node,
				Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
				}}},
			},
		}, metav1.CreateOptions{})
		return err
	})
	va, err := cs.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va1"},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: drv, NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv1")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	kcfg := Config{
		NodeName: node, Client: cs, Driver: drv, Endpoint: cfg.NodeEndpoints[node],
		DataDir: filepath.Join(c.Dir(), "kubelet"), WriteInterval: 50 * time.Millisecond, ZombieWrites: true,
	}
	if mutate != nil {
		mutate(&kcfg)
	}
	k, err := Start(ctx, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)

	unique := nodeutil.CSIUniqueVolumeName(drv, handle)
	poll(t, ctx, "volume reported in use before it is attached", func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && slices.Contains(n.Status.VolumesInUse, unique), nil
	})
	if got := k.Published(); len(got) != 0 {
		t.Fatalf("published %v before the VolumeAttachment is attached", got)
	}
	va.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: pub.GetPublishContext()}
	if _, err := cs.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := k.Published(); len(got) != 0 {
		t.Fatalf("published %v before the node's status lists it attached", got)
	}
	// What the attach/detach controller does once the attach succeeded.
	reportAttached(t, ctx, cs, node, unique)
	poll(t, ctx, "pod volumes marked mounted", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "db", metav1.GetOptions{})
		return err == nil && p.Annotations[cluster.VolumesMountedAnnotation] == "true", nil
	})
	poll(t, ctx, "an accepted write", func(context.Context) (bool, error) {
		a, _ := Accepted(k.Writes(), time.Time{})
		return a > 0, nil
	})
	return &fixture{ctx: ctx, cs: cs, ctrl: ctrl, d: d, k: k, handle: handle, unique: unique}
}

// TestStandIn: the stand-in mounts an attached volume, reports it in use,
// marks the pod's volumes mounted and writes; as a zombie it keeps writing
// until the volume is fenced; after power on it cleans up the volume of a
// pod that left, without force, as the upstream kubelet does, and that
// lifts the fence.
func TestStandIn(t *testing.T) {
	f := startFixture(t, nil)
	ctx, cs, ctrl, d, k, handle := f.ctx, f.cs, f.ctrl, f.d, f.k, f.handle

	k.PowerOff()
	off := time.Now()
	poll(t, ctx, "a zombie write accepted", func(context.Context) (bool, error) {
		a, _ := Accepted(k.Writes(), off)
		return a > 0, nil
	})
	unpub := &csi.ControllerUnpublishVolumeRequest{VolumeId: handle, NodeId: node}
	fence.SetFence(unpub, true)
	if _, err := ctrl.ControllerUnpublishVolume(ctx, unpub); err != nil {
		t.Fatal(err)
	}
	fenced := time.Now()
	poll(t, ctx, "a zombie write refused after the fence", func(context.Context) (bool, error) {
		_, r := Accepted(k.Writes(), fenced)
		return r > 0, nil
	})
	if a, _ := Accepted(k.Writes(), fenced.Add(100*time.Millisecond)); a != 0 {
		t.Fatalf("%d zombie writes accepted after the fence", a)
	}

	// While the node is away its pod is force-deleted and the VA removed.
	if err := cs.CoreV1().Pods("default").Delete(ctx, "db", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	if err := cs.StorageV1().VolumeAttachments().Delete(ctx, "va1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.PowerOn(); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "unforced node-side clean-up", func(context.Context) (bool, error) {
		recs, err := audit.ReadFile(d.AuditPath())
		return err == nil &&
			audit.Count(recs, audit.Method("NodeUnpublishVolume"), audit.Volume(handle), audit.OK()) == 1 &&
			audit.Count(recs, audit.Method("NodeUnstageVolume"), audit.Volume(handle), audit.OK()) == 1, nil
	})
	recs, err := audit.ReadFile(d.AuditPath())
	if err != nil {
		t.Fatal(err)
	}
	if n := audit.Count(recs, audit.Forced()); n != 0 {
		t.Fatalf("%d calls with force; the stand-in must behave like the upstream kubelet", n)
	}
	if v := d.Array().Snapshot().Volumes[handle]; len(v.Fenced) != 0 {
		t.Fatalf("fence not lifted by the unforced clean-up: %v", v.Fenced)
	}
	poll(t, ctx, "volumesInUse cleared", func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && len(n.Status.VolumesInUse) == 0, nil
	})
	if got := k.Published(); len(got) != 0 {
		t.Fatalf("still published after clean-up: %v", got)
	}
}

func mustCreate(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

// reportAttached lists the volume in the node's status.volumesAttached,
// as the attach/detach controller does after a successful attach.
func reportAttached(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, unique corev1.UniqueVolumeName) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"status":{"volumesAttached":[{"name":%q,"devicePath":""}]}}`, unique)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// TestStoppedPodReleasedAfterUnpublish: a pod marked for deletion keeps
// its volumes marked mounted (which holds KWOK's final deletion, as the
// real kubelet holds a pod object until its volumes are unmounted) while
// NodeUnpublishVolume fails, and is released once it succeeds, even while
// NodeUnstageVolume still fails.
func TestStoppedPodReleasedAfterUnpublish(t *testing.T) {
	f := startFixture(t, func(c *Config) { c.ResyncInterval = 100 * time.Millisecond })
	ctx, cs, d := f.ctx, f.cs, f.d
	d.Faults().Set([]faults.Fault{faults.FailNext("NodeUnpublishVolume", 3, codes.Internal), faults.FailNext("NodeUnstageVolume", 0, codes.Internal)})
	// A graceful delete: the pod stays, marked, as KWOK is not running here.
	if err := cs.CoreV1().Pods("default").Delete(ctx, "db", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](300)}); err != nil {
		t.Fatal(err)
	}
	mounted := func(ctx context.Context) (string, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return p.Annotations[cluster.VolumesMountedAnnotation], nil
	}
	poll(t, ctx, "the failed unpublishes", func(context.Context) (bool, error) {
		recs, err := audit.ReadFile(d.AuditPath())
		if err != nil || audit.Count(recs, audit.Method("NodeUnpublishVolume")) < 3 {
			return false, err
		}
		m, err := mounted(ctx)
		if err == nil && m != "true" && audit.Count(recs, audit.Method("NodeUnpublishVolume"), audit.OK()) == 0 {
			t.Fatalf("volumes of the stopped pod marked %q before any unpublish succeeded", m)
		}
		return true, err
	})
	poll(t, ctx, "the stopped pod's volumes marked unmounted", func(ctx context.Context) (bool, error) {
		m, err := mounted(ctx)
		return err == nil && m == "false", nil
	})
	recs, err := audit.ReadFile(d.AuditPath())
	if err != nil {
		t.Fatal(err)
	}
	if audit.Count(recs, audit.Method("NodeUnpublishVolume"), audit.OK()) == 0 {
		t.Fatal("pod released without a successful NodeUnpublishVolume")
	}
	if n := audit.Count(recs, audit.Method("NodeUnstageVolume"), audit.OK()); n != 0 {
		t.Fatalf("%d successful unstages, want the unstage still failing", n)
	}
	if got := f.k.Published(); len(got) != 0 {
		t.Fatalf("still published after the unpublish: %v", got)
	}
}
