package storagefence

import (
	"context"
	"fmt"
	"golang.org/x/sync/errgroup"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
	"fenceline.io/fenceline/pkg/kube/apitext"
)

// syncLift decides a StorageFence's lift request on the caches and, when
// they allow it, again on fresh reads before it records the evidence on
// the object and lifts.
func (c *Controller) syncLift(ctx context.Context, name string) error {
	sf, err := c.fences.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if sf.Spec.Lift == nil || sf.Spec.Driver != c.cfg.Driver {
		return nil
	}
	// A request is carried out once: a fence set after it (a later
	// failover) needs a request of its own (a new generation).
	if done := meta.FindStatusCondition(sf.Status.Conditions, fencingv1alpha1.StorageFenceLifted); done != nil &&
		done.Status == metav1.ConditionTrue && done.ObservedGeneration == sf.Generation {
		return nil
	}
	sf = sf.DeepCopy() // setLifted keeps what the API server answered in it
	d := DecideLift(c.cachedInput(sf))
	var in LiftInput
	if d.Lift {
		if in, err = c.freshInput(ctx, sf); err != nil {
			return err
		}
		d = DecideLift(in)
	}
	if !d.Lift {
		if d.Reason == ReasonNoFences {
			c.loop.Add(listKey) // nothing left to lift: the listing retires the object
		}
		return c.setLifted(ctx, sf, metav1.ConditionFalse, d.Reason, d.Message, v1.EventTypeWarning, EventLiftWaiting)
	}
	// Intent before cause: the evidence is on the object before the fence
	// goes, so whoever looks later sees why it was lifted.
	if err := c.setLifted(ctx, sf, metav1.ConditionFalse, reasonLifting, d.Message, "", ""); err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	why := fmt.Sprintf("requested by %s: %s; %s", sf.Spec.Lift.RequestedBy, sf.Spec.Lift.Reason, d.Message)
	lifted, err := fence.LiftFence(callCtx, c.cfg.Conn, c.cfg.Caps, &fencev1.LiftFenceRequest{NodeId: sf.Spec.NodeID, Reason: why})
	c.cfg.Metrics.lifted(err == nil)
	if err != nil {
		c.cfg.Recorder.Eventf(sf, v1.EventTypeWarning, EventLiftFailed, "Lifting the fences of node ID %q failed: %v", sf.Spec.NodeID, err)
		return err
	}
	klog.FromContext(ctx).Info("Lifted the storage fences of a node", "nodeID", sf.Spec.NodeID, "node", in.NodeName, "fences", len(lifted), "evidence", d.Reason)
	c.cfg.Recorder.Eventf(sf, v1.EventTypeNormal, EventFenceLifted, "Lifted %d fence(s) of node ID %q at the request of %s: %s",
		len(lifted), sf.Spec.NodeID, sf.Spec.Lift.RequestedBy, d.Message)
	c.loop.Add(listKey)
	return c.setLifted(ctx, sf, metav1.ConditionTrue, d.Reason, d.Message, "", "")
}

// cachedInput gathers DecideLift's inputs from the object and the caches:
// only a lift they allow is checked again on fresh reads (a Node that
// changes brings the request back).
func (c *Controller) cachedInput(sf *fencingv1alpha1.StorageFence) LiftInput {
	in := LiftInput{Request: sf.Spec.Lift, CanLift: c.cfg.Caps.LiftFence, Driver: c.cfg.Driver, NodeName: sf.Status.NodeName, Fences: reported(sf)}
	if in.NodeName != "" {
		if n, err := c.nodes.Get(in.NodeName); err == nil {
			in.Node = n
		}
	}
	return in
}

// freshInput reads DecideLift's inputs fresh from the driver and the API
// server, at the moment of the lift: the node's fences, the CSINode that
// names the node ID, its Node and the VolumeAttachments being detached.
func (c *Controller) freshInput(ctx context.Context, sf *fencingv1alpha1.StorageFence) (LiftInput, error) {
	in := LiftInput{Request: sf.Spec.Lift, CanLift: c.cfg.Caps.LiftFence, Driver: c.cfg.Driver}
	// The reads are independent (the Node follows its CSINode): made at
	// once, they cost two round trips, not four.
	var (
		g   errgroup.Group
		vas *storagev1.VolumeAttachmentList
	)
	g.Go(func() (err error) {
		if in.Fences, err = c.list(ctx, sf.Spec.NodeID); err != nil {
			return fmt.Errorf("read the fences of node ID %q: %w", sf.Spec.NodeID, err)
		}
		return nil
	})
	g.Go(func() (err error) {
		if vas, err = c.cfg.Kube.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("read VolumeAttachments: %w", err)
		}
		return nil
	})
	g.Go(func() (err error) {
		if in.NodeName, err = c.freshNodeName(ctx, sf); err != nil || in.NodeName == "" {
			return err
		}
		node, err := c.cfg.Kube.CoreV1().Nodes().Get(ctx, in.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("read node %s: %w", in.NodeName, err)
		default:
			in.Node = node
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return in, err
	}
	for _, va := range vas.Items {
		// Without a node name, any detach of the driver may be from it.
		if va.Spec.Attacher == c.cfg.Driver && va.DeletionTimestamp != nil && (in.NodeName == "" || va.Spec.NodeName == in.NodeName) {
			in.Detaching = append(in.Detaching, va.Name)
		}
	}
	return in, nil
}

// freshNodeName returns the node whose CSINode, as the API server has it,
// names the driver's node ID ("" for none): the CSINode the object names
// when it still does, else the one a List finds.
func (c *Controller) freshNodeName(ctx context.Context, sf *fencingv1alpha1.StorageFence) (string, error) {
	names := func(n *storagev1.CSINode) bool {
		return slices.ContainsFunc(n.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == c.cfg.Driver && d.NodeID == sf.Spec.NodeID })
	}
	if sf.Status.NodeName != "" {
		n, err := c.cfg.Kube.StorageV1().CSINodes().Get(ctx, sf.Status.NodeName, metav1.GetOptions{})
		if err == nil && names(n) {
			return n.Name, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("read CSINode %s: %w", sf.Status.NodeName, err)
		}
	}
	list, err := c.cfg.Kube.StorageV1().CSINodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("read CSINodes: %w", err)
	}
	for i := range list.Items {
		if names(&list.Items[i]) {
			return list.Items[i].Name, nil
		}
	}
	return "", nil
}

// reported turns the fences an object shows back into fences, for the
// decision on the caches.
func reported(sf *fencingv1alpha1.StorageFence) []*fencev1.Fence {
	var out []*fencev1.Fence
	for _, f := range sf.Status.Fences {
		out = append(out, &fencev1.Fence{NodeId: sf.Spec.NodeID, VolumeIds: f.VolumeIDs, AllVolumes: f.AllVolumes})
	}
	return out
}

// setLifted writes the Lifted condition when it changes and, with an Event
// reason, records an Event of type typ then.
func (c *Controller) setLifted(ctx context.Context, sf *fencingv1alpha1.StorageFence, status metav1.ConditionStatus, reason, msg, typ, event string) error {
	cur := meta.FindStatusCondition(sf.Status.Conditions, fencingv1alpha1.StorageFenceLifted)
	if cur != nil && cur.Status == status && cur.Reason == reason && cur.Message == msg {
		return nil
	}
	next := sf.DeepCopy()
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{
		Type: fencingv1alpha1.StorageFenceLifted, Status: status, Reason: reason, Message: apitext.Truncate(msg, 1024),
		ObservedGeneration: sf.Generation, LastTransitionTime: metav1.NewTime(c.cfg.Now()),
	})
	out, err := c.cfg.Fencing.FencingV1alpha1().StorageFences().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update StorageFence %s: %w", sf.Name, err)
	}
	*sf = *out
	if event != "" && (cur == nil || cur.Reason != reason) {
		c.cfg.Recorder.Event(sf, typ, event, "Lift of node ID "+sf.Spec.NodeID+" waits: "+msg)
	}
	return nil
}
