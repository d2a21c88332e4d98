package app_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// TestBesideKubeControllerManagerIntegration runs the controller next to a
// real kube-controller-manager. testReleaseToADC checks the release mechanism
// against kube-controller-manager's real attach/detach controller: the dead
// node last reported the volume in use, which would make the ADC wait
// 6 minutes; after quarantine the ADC detaches (deletes the
// VolumeAttachment) within seconds. The test plays the kubelet (volumesInUse)
// and the external attacher (VolumeAttachment status).
func TestBesideKubeControllerManagerIntegration(t *testing.T) {
	e := newEnvWith(t, cluster.Options{ControllerManager: true})
	opts := testOptions(quarantine.Name, podgc.Name)
	opts.Settings[quarantine.Name].(*quarantine.Settings).Delay = testDelay
	e.runController(opts)
	t.Run("quarantine releases the volume to the attach/detach controller", func(t *testing.T) { testReleaseToADC(t, e) })
	t.Run("podgc beside kube-controller-manager's pod GC", func(t *testing.T) {
		// Both act on the out-of-service taint; whoever comes second must
		// see NotFound or a UID mismatch, which is not an error.
		e.createNode("kcm-oos", false, testobj.Annotation(names.ControllerManagedAttachAnnotation, "true"))
		var pods []*v1.Pod
		for i := range 5 {
			pods = append(pods, e.createStuckPod(fmt.Sprintf("kcm-oos-%d", i), "kcm-oos"))
		}
		e.addTaint("kcm-oos", names.OutOfServiceTaint, v1.TaintEffectNoExecute)
		for _, p := range pods {
			e.waitPodGone(p)
		}
		if got := e.metricValue("pod_gc_collector_force_delete_pod_errors_total", ns, "out-of-service"); got != 0 {
			t.Errorf("force deletion errors = %v, want 0", got)
		}
	})
}

func testReleaseToADC(t *testing.T, e *env) {
	e.safeDetachDriver(safeDriver, true)
	e.heartbeat(safeDriver, time.Now())
	const node = "adc-1"
	e.createNode(node, true, testobj.Annotation(names.ControllerManagedAttachAnnotation, "true"))
	if _, err := e.admin.StorageV1().CSINodes().Create(e.ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: safeDriver, NodeID: node}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim, unique := e.volume("adc", safeDriver, v1.ReadWriteOnce)
	pod := e.createPod("adc-1-a", node, testobj.Claim("data", claim))

	// The ADC attaches: it creates the VolumeAttachment; we are the attacher.
	var vaName string
	e.waitFor("the ADC to create a VolumeAttachment", func(ctx context.Context) (bool, error) {
		vas, err := e.admin.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, va := range vas.Items {
			if va.Spec.NodeName == node {
				vaName = va.Name
				return true, nil
			}
		}
		return false, nil
	})
	e.waitFor("VolumeAttachment marked attached", func(ctx context.Context) (bool, error) {
		va, err := e.admin.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		va.Status.Attached = true
		_, err = e.admin.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{})
		return err == nil, nil
	})
	e.waitFor("the ADC to report the volume attached", func(context.Context) (bool, error) {
		return slices.ContainsFunc(e.node(node).Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == unique }), nil
	})
	// The kubelet mounted it, then the node died.
	e.updateNode(node, true, func(n *v1.Node) { n.Status.VolumesInUse = []v1.UniqueVolumeName{unique} })
	e.setReady(node, false)
	e.terminate(pod)

	start := time.Now()
	e.waitPodGone(pod)
	e.waitFor("the ADC to detach (delete the VolumeAttachment)", func(ctx context.Context) (bool, error) {
		_, err := e.admin.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
		return err != nil, nil
	})
	t.Logf("VolumeAttachment deleted by the ADC %s after the pod was terminated (quarantine delay %s; without the release the ADC waits 6m)", time.Since(start).Round(time.Millisecond), testDelay)
	if !nodeutil.HasTaint(e.node(node), names.QuarantineTaint) {
		t.Error("node not quarantined while its volume was detached")
	}
}
