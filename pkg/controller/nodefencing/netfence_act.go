package nodefencing

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/networkfence"
)

// Event reasons of the storage fence method NetworkFence.
const (
	EventNetworkFenced      = "NetworkFenceCreated"
	EventNetworkFenceFailed = "NetworkFenceFailed"
	EventNetworkUnfenced    = "NetworkFenceLifted"
)

// networkFence creates the NetworkFence of d. It decides again on fresh
// reads first, and records the NetworkFence's name in the request's
// status.storage before creating it (intent before cause): whoever reads
// the request later knows that the storage may refuse the node.
func (c *Controller) networkFence(ctx context.Context, in Input, d Decision) error {
	r := in.Request
	if c.netFenceWriter == nil || d.NetworkFence == nil {
		return fmt.Errorf("no NetworkFence client: the controller runs without a dynamic client")
	}
	fresh, err := c.freshInput(ctx, r.Spec.NodeName, nil, r, false)
	if err != nil {
		return err
	}
	fd := Decide(fresh)
	if fd.Step != StepNetworkFence || fd.NetworkFence == nil || fd.NetworkFence.Name != d.NetworkFence.Name {
		klog.FromContext(ctx).V(2).Info("Not creating a NetworkFence: decision changed on fresh data", "why", fd.Why)
		return nil
	}
	spec := *fd.NetworkFence
	driver := fresh.NetworkFence.Classes[spec.Class].Provisioner
	if c.cfg.Actuator.DryRun {
		klog.FromContext(ctx).Info("Dry run: would create NetworkFence", "networkFence", spec.Name, "cidrs", spec.CIDRs, "why", fd.Why)
		c.cfg.Recorder.Eventf(r, v1.EventTypeNormal, "DryRun", "Dry run: would create NetworkFence %s for %v", spec.Name, spec.CIDRs)
		return nil
	}
	if err := c.updateStatus(ctx, r, func(s *fencingv1alpha1.FencingRequestStatus, _ metav1.Time) bool {
		return addNetworkFence(s, driver, spec.Name)
	}); err != nil {
		return ignoreGone(err)
	}
	if err := c.netFenceWriter.Create(ctx, spec); err != nil {
		c.cfg.Recorder.Eventf(r, v1.EventTypeWarning, EventNetworkFenceFailed, "Creating NetworkFence %s failed: %v", spec.Name, err)
		return err
	}
	klog.FromContext(ctx).Info("Created NetworkFence", "networkFence", spec.Name, "class", spec.Class, "driver", driver, "cidrs", spec.CIDRs)
	c.cfg.Recorder.Eventf(r, v1.EventTypeNormal, EventNetworkFenced, "%s", fd.Why)
	if fresh.Node != nil {
		c.cfg.Actuator.Recorder.Eventf(fresh.Node, v1.EventTypeWarning, EventNetworkFenced, "FencingRequest %s: %s", r.Name, fd.Why)
	}
	return nil
}

// addNetworkFence lists name under the driver's storage status.
func addNetworkFence(s *fencingv1alpha1.FencingRequestStatus, driver, name string) bool {
	if driver == "" {
		driver = "unknown"
	}
	for i := range s.Storage {
		if s.Storage[i].Driver != driver {
			continue
		}
		if slices.Contains(s.Storage[i].NetworkFences, name) {
			return false
		}
		s.Storage[i].NetworkFences = append(s.Storage[i].NetworkFences, name)
		slices.Sort(s.Storage[i].NetworkFences)
		return true
	}
	s.Storage = append(s.Storage, fencingv1alpha1.StorageFenceStatus{Driver: driver, NetworkFences: []string{name}, Message: "NetworkFence requested"})
	slices.SortFunc(s.Storage, func(a, b fencingv1alpha1.StorageFenceStatus) int { return cmp.Compare(a.Driver, b.Driver) })
	return true
}

// networkUnfence sets the request's NetworkFences Unfenced, and deletes
// those whose unfence the storage confirmed, after deciding again on
// fresh reads: the recovery's every condition must hold at that moment.
func (c *Controller) networkUnfence(ctx context.Context, in Input, d Decision) error {
	r := in.Request
	if c.netFenceWriter == nil {
		return fmt.Errorf("no NetworkFence client: the controller runs without a dynamic client")
	}
	fresh, err := c.freshInput(ctx, r.Spec.NodeName, nil, r, true)
	if err != nil {
		return err
	}
	if fd := Decide(fresh); fd.Step != StepNetworkUnfence {
		klog.FromContext(ctx).V(2).Info("Not unfencing NetworkFences: decision changed on fresh data", "why", fd.Why)
		return nil
	}
	for _, f := range fresh.NetworkFence.Fences {
		var what string
		switch {
		case f.Deleting:
			continue
		case f.FenceState == networkfence.StateFenced:
			what = "set Unfenced"
			if !c.cfg.Actuator.DryRun {
				err = c.netFenceWriter.Unfence(ctx, f.Name)
			}
		case f.Unfenced():
			what = "deleted"
			if !c.cfg.Actuator.DryRun {
				err = c.netFenceWriter.Delete(ctx, f.Name)
			}
		default:
			continue
		}
		if err != nil {
			return err
		}
		if c.cfg.Actuator.DryRun {
			klog.FromContext(ctx).Info("Dry run: NetworkFence would be "+what, "networkFence", f.Name, "why", d.Why)
			c.cfg.Recorder.Eventf(r, v1.EventTypeNormal, "DryRun", "Dry run: NetworkFence %s would be %s: %s", f.Name, what, d.Why)
			continue
		}
		klog.FromContext(ctx).Info("NetworkFence "+what, "networkFence", f.Name, "why", d.Why)
		c.cfg.Recorder.Eventf(r, v1.EventTypeNormal, EventNetworkUnfenced, "NetworkFence %s %s: %s", f.Name, what, d.Why)
	}
	return nil
}
