package chaos

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/test/world"
)

// operate is the operator of an Operator episode: a failed node seen not
// Ready while it is down gets the out-of-service taint; once it is back
// and Ready the operator removes it.
func (e *episode) operate(stop <-chan struct{}) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-e.ctx.Done():
			return nil
		case <-tick.C:
		}
		for _, n := range e.failed {
			if err := e.operateNode(n); err != nil {
				return err
			}
		}
	}
}

func (e *episode) operateNode(n string) error {
	node, err := e.w.Cluster.Client().CoreV1().Nodes().Get(e.ctx, n, metav1.GetOptions{})
	if err != nil {
		return nil //nolint:nilerr // the API server may be restarting: look again
	}
	ready := readyOf(node) == corev1.ConditionTrue
	down := !e.w.NodeUp(n) // off or partitioned
	tainted := false
	for _, t := range node.Spec.Taints {
		tainted = tainted || (t.Key == world.OutOfServiceTaint.Key && t.Value == world.OutOfServiceTaint.Value)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case !ready && down && !tainted:
		if e.operatorTainted[n] {
			// Added and gone without the operator: Check reports it;
			// adding it again would hide it.
			return nil
		}
		if err := e.w.AddTaint(e.ctx, n, world.OutOfServiceTaint); err != nil {
			return nil //nolint:nilerr // retried on the next tick
		}
		e.operatorTainted[n] = true
		e.operatorRemovals[n] = append(e.operatorRemovals[n], []uint64{}...)
		e.timeline.Add(time.Now(), "operator: out-of-service taint on %s", n)
	case ready && !down && tainted:
		// The update's own answer gives the removal's exact
		// resourceVersion, which Check orders the node's history by.
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == world.OutOfServiceTaint.Key })
		after, err := e.w.Cluster.Client().CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{})
		if err != nil {
			return nil //nolint:nilerr // a conflict or a restarting API server: retried on the next tick
		}
		e.operatorTainted[n] = false
		e.operatorRemovals[n] = append(e.operatorRemovals[n], rv(after.ResourceVersion))
		e.timeline.Add(time.Now(), "operator: out-of-service taint off %s", n)
	}
	return nil
}
