package world

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/kubelet"
)

// The checks of a failover that stories of more than one package make
// (test/e2e, and the Helm chart's story in the test/helm module), each
// stated once here.

// WaitAcceptedWrite waits until the workload on node has a write accepted
// by the storage after after.
func (w *World) WaitAcceptedWrite(ctx context.Context, node string, after time.Time, timeout time.Duration) error {
	return WaitFor(ctx, timeout, "an accepted write from "+node, func(context.Context) (bool, error) {
		acc, _ := kubelet.Accepted(w.NodeWrites(node), after)
		return acc > 0, nil
	})
}

// CheckFenceProof returns an error unless the Fenced request req carries a
// read-back proof of the power-off (a Succeeded attempt that read Off, the
// boot ID at the fence) and bmc, the node's, did accept a ForceOff and
// reads Off.
func CheckFenceProof(req *fencingv1alpha1.FencingRequest, bmc *BMC) error {
	if !slices.ContainsFunc(req.Status.Attempts, func(a fencingv1alpha1.FenceAttempt) bool {
		return a.Result == fencingv1alpha1.FenceAttemptSucceeded && a.VerifiedPowerState == string(fencingv1alpha1.PowerStateOff)
	}) {
		return fmt.Errorf("fenced request %s has no Succeeded attempt read back Off: %+v", req.Name, req.Status.Attempts)
	}
	if req.Status.BootIDAtFence == "" {
		return fmt.Errorf("fenced request %s recorded no boot ID", req.Name)
	}
	if !bmc.ReadsOff() {
		return fmt.Errorf("request %s Fenced but the BMC of %s reads On", req.Name, bmc.Node)
	}
	if !slices.ContainsFunc(bmc.PowerCommands(), func(c PowerCommand) bool { return c.OK && c.Action == "ForceOff" }) {
		return fmt.Errorf("the BMC of %s accepted no ForceOff: %+v", bmc.Node, bmc.PowerCommands())
	}
	return nil
}

// FenceIndex returns the index in recs of the first successful fenced
// unpublish of volume from node since it was last published there, or -1.
func FenceIndex(recs []audit.Record, volume, node string) int {
	from := audit.LastIndex(recs, audit.Method("ControllerPublishVolume"), audit.Volume(volume), audit.Node(node), audit.OK()) + 1
	i := audit.FirstIndex(recs[from:], audit.Method("ControllerUnpublishVolume"), audit.Volume(volume), audit.Node(node), audit.Fenced(), audit.OK())
	if i < 0 {
		return -1
	}
	return from + i
}

// CheckNoWriteAfterFence checks the driver's audit log for the move of
// volume from oldNode to newNode: it was unpublished from oldNode with
// fence=true before it was published to newNode, and no write of oldNode
// was accepted after that fence, nor, by oldNode's workload, after
// fencedAt (when the node was known powered off).
func (w *World) CheckNoWriteAfterFence(volume, oldNode, newNode string, fencedAt time.Time) error {
	recs, err := w.Audit()
	if err != nil {
		return err
	}
	since := audit.LastIndex(recs, audit.Method("ControllerPublishVolume"), audit.Volume(volume), audit.Node(oldNode), audit.OK()) + 1
	fence := FenceIndex(recs, volume, oldNode)
	publish := audit.FirstIndex(recs[since:], audit.Method("ControllerPublishVolume"), audit.Volume(volume), audit.Node(newNode), audit.OK())
	if fence < 0 || publish < 0 || since+publish < fence {
		return fmt.Errorf("audit log: fenced unpublish from %s at %d, publish to %s at %d (from %d): want a fenced unpublish first", oldNode, fence, newNode, publish, since)
	}
	if n := audit.Count(recs[fence+1:], audit.Method("Write"), audit.Node(oldNode), audit.Volume(volume), audit.OK()); n != 0 {
		return fmt.Errorf("%d writes from %s accepted after the storage fence", n, oldNode)
	}
	if acc, _ := kubelet.Accepted(w.NodeWrites(oldNode), fencedAt); acc != 0 {
		return fmt.Errorf("%d writes from %s accepted after its verified power-off", acc, oldNode)
	}
	return nil
}

// CheckFailoverTo judges the failover f with CheckFailover and checks that
// the volume went to newNode.
func (w *World) CheckFailoverTo(f invariant.Failover, newNode string) error {
	res, err := w.CheckFailover(f)
	if err != nil {
		return err
	}
	if err := res.Err(); err != nil {
		return err
	}
	if res.NewNode != newNode {
		return fmt.Errorf("audit log shows the volume published to %q after the cut-off of %s, want %s", res.NewNode, f.From, newNode)
	}
	return nil
}

// WaitUnfenced waits until node carries none of node-fencing's taints
// (FencingTaints) nor its out-of-service owner annotation, is schedulable,
// and its fencing conditions are False.
func (w *World) WaitUnfenced(ctx context.Context, node string, timeout time.Duration) error {
	return WaitFor(ctx, timeout, node+" unfenced", func(ctx context.Context) (bool, error) {
		n, err := w.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		return unfenced(n), nil
	})
}

// unfenced reports whether n shows no trace of node-fencing.
func unfenced(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if slices.Contains(FencingTaints, t.Key) {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if slices.Contains([]string{names.FencingTriagedCondition, names.FencingRequiredCondition, names.FencingCompleteCondition}, string(c.Type)) && c.Status != corev1.ConditionFalse {
			return false
		}
	}
	return n.Annotations[names.OutOfServiceOwnerAnnotation] == "" && !n.Spec.Unschedulable
}
