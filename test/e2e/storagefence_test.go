package e2e

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/attacher/storagefence"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/pkg/kubectlplugin"
	"fenceline.io/fenceline/test/world"
)

// TestStorageFencePublishedAndLifted: the mock driver lists and lifts its
// fences. After a failover the fence against the dead node shows as a
// StorageFence of the node, published by fenceline-attacher. An operator's
// lift waits while the node is down (nothing shows it stopped using the
// volume), still waits once its Node is deleted (a deleted Node proves
// nothing about its machine), and goes once the operator confirms the
// machine is gone: the storage holds no fence of it any more, and the
// StorageFence is gone too.
func TestStorageFencePublishedAndLifted(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{Fencing: true, ZombieWrites: true})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	s.powerOff(nodeA)
	moved := s.outOfService(nodeA)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)

	fencing, err := versioned.NewForConfig(s.w.Cluster.AdminConfig())
	must(t, err)
	var sf *fencingv1alpha1.StorageFence
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a StorageFence of "+nodeA, func(ctx context.Context) (bool, error) {
		list, err := fencing.FencingV1alpha1().StorageFences().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			if list.Items[i].Status.NodeName == nodeA && list.Items[i].Spec.Driver == world.DriverName {
				sf = &list.Items[i]
			}
		}
		return sf != nil, nil
	}))
	if sf.Status.VolumeCount < 1 && !sf.Status.AllVolumes {
		t.Fatalf("StorageFence %s shows no fenced volume: %+v", sf.Name, sf.Status)
	}
	s.timeline.Add(s.t0, "StorageFence %s of %s published (%d volumes)", sf.Name, nodeA, sf.Status.VolumeCount)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "Event StorageFenceReported on "+sf.Name, func(ctx context.Context) (bool, error) {
		evs, err := s.w.Cluster.Client().CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=StorageFence,involvedObject.name=" + sf.Name + ",reason=" + storagefence.EventReported})
		return err == nil && len(evs.Items) > 0, nil
	}))

	clients := kubectlplugin.Clients{Kube: s.w.Cluster.Client(), Fencing: fencing}
	lift := func(node string, confirmedGone bool) {
		t.Helper()
		_, err := kubectlplugin.LiftFence(s.ctx, clients, kubectlplugin.LiftFenceOptions{Node: node, Requester: "user:e2e", Reason: "machine replaced",
			ConfirmGone: confirmedGone, Confirm: func(string) (bool, error) { return true, nil }})
		must(t, err)
	}
	waitReason := func(reason string) {
		t.Helper()
		must(t, world.WaitFor(s.ctx, failoverTimeout, "StorageFence "+sf.Name+" Lifted=False "+reason, func(ctx context.Context) (bool, error) {
			got, err := fencing.FencingV1alpha1().StorageFences().Get(ctx, sf.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, fencingv1alpha1.StorageFenceLifted)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason, nil
		}))
	}
	lift(nodeA, false)
	waitReason(storagefence.ReasonNodeNotReady)
	if n := s.storageFences(sf.Spec.NodeID); n == 0 {
		t.Fatalf("the storage holds no fence of %s while the lift waits", nodeA)
	}

	must(t, s.w.Cluster.Client().CoreV1().Nodes().Delete(s.ctx, nodeA, metav1.DeleteOptions{}))
	s.timeline.Add(s.t0, "node %s deleted", nodeA)
	waitReason(storagefence.ReasonNodeUnknown)

	// Its CSINode may go with the Node: the operator names the node ID
	// the StorageFence shows.
	lift(sf.Spec.NodeID, true)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "StorageFence "+sf.Name+" gone", func(ctx context.Context) (bool, error) {
		_, err := fencing.FencingV1alpha1().StorageFences().Get(ctx, sf.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}))
	if n := s.storageFences(sf.Spec.NodeID); n != 0 {
		t.Errorf("the storage still holds %d fences of %s after the lift", n, nodeA)
	}
}

// storageFences asks the mock driver how many fences it holds against the
// node ID.
func (s *scenario) storageFences(nodeID string) int {
	s.t.Helper()
	conn, err := grpc.NewClient(s.w.ControllerSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(s.t, err)
	defer func() { _ = conn.Close() }()
	caps, err := fence.Discover(s.ctx, conn)
	must(s.t, err)
	fences, err := fence.ListFences(s.ctx, conn, caps, &fencev1.ListFencesRequest{NodeId: nodeID})
	must(s.t, err)
	return len(fences)
}
