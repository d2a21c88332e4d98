package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// LiftFenceOptions is a request to lift a node's storage fences.
type LiftFenceOptions struct {
	// Node is a node's name or a driver's node ID for it.
	Node string
	// Driver limits the request to one CSI driver's fences; "" means
	// every driver that fences the node.
	Driver string
	// Requester is who asks, "user:<name>"; Reason why.
	Requester, Reason string
	// ConfirmGone states that the machine of a node no Node names is
	// powered off or destroyed.
	ConfirmGone bool
	Confirm     Confirm
}

// LiftFence writes a lift request (spec.lift) on the StorageFences of the
// node, and nothing else: each driver's fenceline-attacher lifts only on
// the evidence its rule asks for (docs/attacher.md, "Storage fences"). It
// returns the names of the objects asked.
func LiftFence(ctx context.Context, c Clients, o LiftFenceOptions) ([]string, error) {
	list, err := c.Fencing.FencingV1alpha1().StorageFences().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing StorageFences: %w", err)
	}
	var match []fencingv1alpha1.StorageFence
	for _, sf := range list.Items {
		if (sf.Status.NodeName == o.Node || sf.Spec.NodeID == o.Node) && (o.Driver == "" || sf.Spec.Driver == o.Driver) {
			match = append(match, sf)
		}
	}
	if len(match) == 0 {
		which := ""
		if o.Driver != "" {
			which = " of driver " + o.Driver
		}
		return nil, fmt.Errorf("no StorageFence%s names node %q (by node name or node ID): the storage reports no fence of it, or its driver does not publish its fences (see kubectl get storagefences)", which, o.Node)
	}
	var lines []string
	for _, sf := range match {
		lines = append(lines, fmt.Sprintf("  %s: driver %s, node ID %s, %s", sf.Name, sf.Spec.Driver, sf.Spec.NodeID, sf.Status.FencedOff()))
	}
	prompt := fmt.Sprintf("Lift the storage fences of %s?\n%s\nThe storage will accept this node's I/O again: do it only once the node uses none of the fenced volumes.", o.Node, strings.Join(lines, "\n"))
	if ok, err := o.Confirm(prompt); err != nil || !ok {
		return nil, errors.Join(errors.New("not confirmed; nothing written"), err)
	}
	var names []string
	for _, sf := range match {
		sf.Spec.Lift = &fencingv1alpha1.FenceLiftRequest{RequestedBy: o.Requester, Reason: o.Reason, ConfirmedGone: o.ConfirmGone}
		if _, err := c.Fencing.FencingV1alpha1().StorageFences().Update(ctx, &sf, metav1.UpdateOptions{}); err != nil {
			return names, fmt.Errorf("writing the lift request on StorageFence %s: %w", sf.Name, err)
		}
		names = append(names, sf.Name)
	}
	return names, nil
}

// WaitLifted waits until every named StorageFence is gone (the storage
// reports no fence any more) or says Lifted=True; on a timeout the error
// gives each one's reason for waiting.
func WaitLifted(ctx context.Context, c Clients, objects []string, timeout time.Duration) error {
	waiting := map[string]string{}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		clear(waiting)
		for _, name := range objects {
			sf, err := c.Fencing.FencingV1alpha1().StorageFences().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return false, err
			}
			cond := meta.FindStatusCondition(sf.Status.Conditions, fencingv1alpha1.StorageFenceLifted)
			switch {
			case cond == nil:
				waiting[name] = "the attacher has not looked at the request yet"
			case cond.Status != metav1.ConditionTrue:
				waiting[name] = cond.Reason + ": " + cond.Message
			}
		}
		return len(waiting) == 0, nil
	})
	if err == nil {
		return nil
	}
	if len(waiting) == 0 {
		return err
	}
	var why []string
	for _, name := range slices.Sorted(maps.Keys(waiting)) {
		why = append(why, name+": "+waiting[name])
	}
	return fmt.Errorf("%w after %s; the requests stay and the attacher lifts when the evidence allows: %s", ErrTimeout, timeout, strings.Join(why, "; "))
}
