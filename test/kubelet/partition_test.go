package kubelet

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

func TestCleanupForce(t *testing.T) {
	tests := []struct {
		rebooted, forceCleanup, want bool
	}{
		{rebooted: false, forceCleanup: false, want: false},
		{rebooted: true, forceCleanup: false, want: false}, // the upstream kubelet
		{rebooted: false, forceCleanup: true, want: false},
		{rebooted: true, forceCleanup: true, want: true},
	}
	for _, tc := range tests {
		if got := cleanupForce(tc.rebooted, tc.forceCleanup); got != tc.want {
			t.Errorf("cleanupForce(rebooted=%t, forceCleanup=%t) = %t, want %t", tc.rebooted, tc.forceCleanup, got, tc.want)
		}
	}
}

func TestHealPatch(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		inUse []string
		want  []corev1.UniqueVolumeName
	}{
		{name: "volumes still mounted", inUse: []string{"kubernetes.io/csi/d^v1"}, want: []corev1.UniqueVolumeName{"kubernetes.io/csi/d^v1"}},
		{name: "nothing mounted clears the report", inUse: nil, want: []corev1.UniqueVolumeName{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			patch, err := healPatch(tc.inUse, now)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Status corev1.NodeStatus `json:"status"`
			}
			if err := json.Unmarshal(patch, &got); err != nil {
				t.Fatal(err)
			}
			ready := nodeutil.ReadyCondition(&corev1.Node{Status: got.Status})
			if ready == nil || ready.Status != corev1.ConditionTrue || !ready.LastHeartbeatTime.Time.Equal(now) {
				t.Errorf("Ready condition %+v, want True with heartbeat %s", ready, now)
			}
			if got.Status.VolumesInUse == nil || !slices.Equal(got.Status.VolumesInUse, tc.want) {
				t.Errorf("volumesInUse %v, want %v (explicit)", got.Status.VolumesInUse, tc.want)
			}
		})
	}
}

// TestPartitionHeal: a partitioned node keeps writing (boot ID, mounts and
// writers intact) until it is fenced; its pod goes meanwhile. When the
// partition heals, the first status update that says Ready also reports
// the volume still mounted, and the clean-up that follows is unforced and
// lifts the fence.
func TestPartitionHeal(t *testing.T) {
	f := startFixture(t, nil)
	ctx, k := f.ctx, f.k

	k.Partition()
	cut := time.Now()
	poll(t, ctx, "a write accepted from the partitioned node", func(context.Context) (bool, error) {
		a, _ := Accepted(k.Writes(), cut)
		return a > 0, nil
	})
	unpub := &csi.ControllerUnpublishVolumeRequest{VolumeId: f.handle, NodeId: node}
	fence.SetFence(unpub, true)
	if _, err := f.ctrl.ControllerUnpublishVolume(ctx, unpub); err != nil {
		t.Fatal(err)
	}
	fenced := time.Now()
	poll(t, ctx, "a write refused after the fence", func(context.Context) (bool, error) {
		_, r := Accepted(k.Writes(), fenced)
		return r > 0, nil
	})
	if err := f.cs.CoreV1().Pods("default").Delete(ctx, "db", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	if err := f.cs.StorageV1().VolumeAttachments().Delete(ctx, "va1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := k.Published(); !slices.Equal(got, []string{f.handle}) {
		t.Fatalf("published during the partition: %v, want the volume still mounted", got)
	}

	n, err := f.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := f.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node, ResourceVersion: n.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := k.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	first := firstReadyUpdate(t, ctx, w)
	if !slices.Contains(first.Status.VolumesInUse, f.unique) {
		t.Fatalf("first Ready update after the heal reports volumesInUse %v, want %s in it", first.Status.VolumesInUse, f.unique)
	}
	poll(t, ctx, "unforced clean-up after the heal", func(context.Context) (bool, error) {
		recs, err := audit.ReadFile(f.d.AuditPath())
		return err == nil && audit.Count(recs, audit.Method("NodeUnstageVolume"), audit.Volume(f.handle), audit.OK()) == 1, nil
	})
	recs, err := audit.ReadFile(f.d.AuditPath())
	if err != nil {
		t.Fatal(err)
	}
	if n := audit.Count(recs, audit.Forced()); n != 0 {
		t.Fatalf("%d calls with force after a healed partition", n)
	}
	if v := f.d.Array().Snapshot().Volumes[f.handle]; len(v.Fenced) != 0 {
		t.Fatalf("fence not lifted by the clean-up after the heal: %v", v.Fenced)
	}
}

// TestPowerOffEndsPartition: the power cut of a partitioned node (its BMC
// fencing it) stops the writers the partition left running, and the node
// can no longer Heal: only a PowerOn brings it back.
func TestPowerOffEndsPartition(t *testing.T) {
	const interval = 50 * time.Millisecond
	f := startFixture(t, func(c *Config) { c.ZombieWrites, c.WriteInterval = false, interval })
	ctx, k := f.ctx, f.k

	k.Partition()
	cut := time.Now()
	poll(t, ctx, "a write accepted from the partitioned node", func(context.Context) (bool, error) {
		a, _ := Accepted(k.Writes(), cut)
		return a > 0, nil
	})
	k.PowerOff()
	off := time.Now()
	if k.Partitioned() || k.Powered() {
		t.Fatalf("after the power cut: partitioned=%t powered=%t, want both false", k.Partitioned(), k.Powered())
	}
	// Wait for every writer to have exited (the power cut cancelled them):
	// from then on no write can be recorded, so the check below is final. A
	// write in flight when the power went may still be recorded right at
	// the cut.
	exited := make(chan struct{})
	go func() { k.writersWG.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatal("the writers of a powered-off node never stopped")
	}
	if a, r := Accepted(k.Writes(), off.Add(2*interval)); a+r != 0 {
		t.Fatalf("a powered-off node wrote: %d writes accepted, %d refused after its power cut", a, r)
	}
	if err := k.Heal(ctx); err == nil {
		t.Fatal("Heal after a power cut succeeded, want an error (only PowerOn brings the node back)")
	}
}

// firstReadyUpdate returns the first Node from w whose Ready condition is
// True.
func firstReadyUpdate(t *testing.T, ctx context.Context, w watch.Interface) *corev1.Node {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-deadline.C:
			t.Fatal("no Ready status update after the heal")
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("node watch closed")
			}
			n, isNode := ev.Object.(*corev1.Node)
			if !isNode {
				continue
			}
			if c := nodeutil.ReadyCondition(n); c != nil && c.Status == corev1.ConditionTrue {
				return n
			}
		}
	}
}
