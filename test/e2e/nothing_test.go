package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestNothingHappens: Fenceline leaves alone a pod on a Ready, untainted
// node, a pod that tolerates its node being lost, and a VolumeAttachment of
// another driver. The barrier that proves the controller looked is its
// force deletion of a sentinel pod with a safe-detach volume on the lost
// node, which shares the node with the tolerant pod.
func TestNothingHappens(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=1s"},
	})
	cs := s.w.Cluster.Client()
	db := s.startDB()
	lost := otherNode(s.w, db.Spec.NodeName)

	tolerant := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "tolerant"},
		Spec: corev1.PodSpec{
			NodeName:    lost,
			Containers:  []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	_, err := cs.CoreV1().Pods(s.ns).Create(s.ctx, tolerant, metav1.CreateOptions{})
	must(t, err)
	_, err = s.w.WaitRunning(s.ctx, s.ns, "tolerant", "", startTimeout)
	must(t, err)

	// The sentinel: a one-pod StatefulSet with a claim, pinned to the lost node.
	_, err = s.w.ProvisionStatefulSet(s.ctx, s.ns, "sentinel", 1)
	must(t, err)
	sentinel := world.StatefulSet(s.ns, "sentinel", 1)
	sentinel.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: lost}
	_, err = cs.AppsV1().StatefulSets(s.ns).Create(s.ctx, sentinel, metav1.CreateOptions{})
	must(t, err)
	_, err = s.w.WaitRunning(s.ctx, s.ns, "sentinel-0", "", startTimeout)
	must(t, err)

	pv := "foreign-pv"
	foreign := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign"},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: "other.example.com",
			NodeName: lost,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)},
		},
	}
	_, err = cs.StorageV1().VolumeAttachments().Create(s.ctx, foreign, metav1.CreateOptions{})
	must(t, err)

	s.powerOff(lost)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "sentinel-0 force-deleted from "+lost, func(ctx context.Context) (bool, error) {
		return s.forceDeleted(ctx) > 0, nil
	}))

	if p, err := s.w.RunningPod(s.ctx, s.ns, "db-0"); err != nil || p == nil || p.UID != db.UID {
		t.Errorf("db-0 on the Ready node %s was disturbed: %v (err %v)", db.Spec.NodeName, p, err)
	}
	if _, err := cs.CoreV1().Pods(s.ns).Get(s.ctx, "tolerant", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod tolerating a lost node is gone: %v", err)
	}
	if n := s.forceDeleted(s.ctx); n != 1 {
		t.Errorf("%d pods force-deleted, want 1 (the sentinel)", n)
	}
	va, err := cs.StorageV1().VolumeAttachments().Get(s.ctx, "foreign", metav1.GetOptions{})
	must(t, err)
	if len(va.Finalizers) != 0 || va.Status.Attached || va.Status.AttachError != nil {
		t.Errorf("VolumeAttachment of another driver was touched: finalizers %v, status %+v", va.Finalizers, va.Status)
	}
	if tainted, err := s.w.HasTaint(s.ctx, db.Spec.NodeName, names.QuarantineTaint); err != nil || tainted {
		t.Errorf("Ready node %s quarantined (err %v)", db.Spec.NodeName, err)
	}
}
