package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/rbaccheck"
	"fenceline.io/fenceline/test/world"
)

// The NoSchedule taints medik8s's remediators put on the node they
// remediate (their names, not ours: the stand-in plays them).
const (
	farTaintKey = "remediation.medik8s.io/fence-agents-remediation"
	snrTaintKey = "remediation.medik8s.io/self-node-remediation"
)

// remediator stands in for a medik8s remediator (Fence Agents Remediation
// or Self Node Remediation) with the OutOfServiceTaint strategy, acting on
// one node. It writes the node only through update, which remembers the
// resourceVersion of every write, so that a taint history can tell its
// removals from anyone else's.
type remediator struct {
	s        *scenario
	node     string
	taintKey string // its own NoSchedule taint

	mu     sync.Mutex
	writes map[string]bool // resourceVersions its writes produced
}

func newRemediator(s *scenario, node, taintKey string) *remediator {
	return &remediator{s: s, node: node, taintKey: taintKey, writes: map[string]bool{}}
}

// update applies mutate to a fresh copy of the node (retrying on
// conflicts) and records the resourceVersion of the write.
func (r *remediator) update(ctx context.Context, mutate func(*corev1.Node) bool) error {
	nodes := r.s.w.Cluster.Client().CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, r.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !mutate(n) {
			return nil
		}
		out, err := nodes.Update(ctx, n, metav1.UpdateOptions{FieldManager: "medik8s-stand-in"})
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.writes[out.ResourceVersion] = true
		r.mu.Unlock()
		return nil
	})
	if err != nil {
		return fmt.Errorf("remediator updating node %s: %w", r.node, err)
	}
	return nil
}

// ownWrite reports whether the node's resourceVersion rv is one of the
// remediator's writes.
func (r *remediator) ownWrite(rv string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes[rv]
}

// taint adds taint (stamped with timeAdded) unless its key is there.
func (r *remediator) taint(taint corev1.Taint) {
	r.s.t.Helper()
	must(r.s.t, r.update(r.s.ctx, func(n *corev1.Node) bool {
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taint.Key }) {
			return false
		}
		now := metav1.Now()
		taint.TimeAdded = &now
		n.Spec.Taints = append(n.Spec.Taints, taint)
		return true
	}))
	r.s.timeline.Add(time.Now(), "remediator: taint %s:%s added to %s", taint.Key, taint.Effect, r.node)
}

// startRemediation is the remediator's first step: its own NoSchedule taint.
func (r *remediator) startRemediation() {
	r.taint(corev1.Taint{Key: r.taintKey, Effect: corev1.TaintEffectNoSchedule})
}

// outOfService is the OutOfServiceTaint strategy's step once the node is
// (assumed) off: medik8s's exact taint.
func (r *remediator) outOfService() {
	r.taint(world.OutOfServiceTaint)
}

// finish removes the out-of-service taint and the remediator's own, as
// medik8s does when NodeHealthCheck deletes the remediation CR (or, for
// SNR, on its out-of-service expiry).
func (r *remediator) finish() {
	r.s.t.Helper()
	keys := []string{names.OutOfServiceTaint, r.taintKey}
	must(r.s.t, r.update(r.s.ctx, func(n *corev1.Node) bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return slices.Contains(keys, t.Key) })
		return len(n.Spec.Taints) != before
	}))
	r.s.timeline.Add(time.Now(), "remediator: taints %v removed from %s", keys, r.node)
}

// powerOff is what FAR's fence agent does with action off: ask the BMC to
// cut the power, then read the power state back until it is Off.
func (r *remediator) powerOff(dev power.Device) {
	r.s.t.Helper()
	must(r.s.t, dev.Off(r.s.ctx))
	must(r.s.t, world.WaitFor(r.s.ctx, nodeLostTimeout, "the BMC of "+r.node+" to read Off", func(ctx context.Context) (bool, error) {
		st, err := dev.Status(ctx)
		return err == nil && st == power.StateOff, nil
	}))
}

// resourcesGone is the OutOfServiceTaint strategy's wait: no pod on the
// node is terminating and no VolumeAttachment names the node.
func (r *remediator) resourcesGone(ctx context.Context) (bool, error) {
	cs := r.s.w.Cluster.Client()
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", r.node).String(),
	})
	if err != nil {
		return false, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			return false, nil
		}
	}
	vas, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for _, va := range vas.Items {
		if va.Spec.NodeName == r.node {
			return false, nil
		}
	}
	return true, nil
}

// taintRemoval is one change of a node, seen on a watch, that removed
// taints: its resourceVersion and the keys that went.
type taintRemoval struct {
	rv   string
	keys []string
}

// taintHistory watches one node for as long as the scenario runs and
// keeps every change that removed a taint.
type taintHistory struct {
	mu       sync.Mutex
	removals []taintRemoval
	err      error // a gap in the history (the watch could not resume)
}

// watchTaintRemovals starts a taintHistory of node from now on. The watch
// resumes from the last resourceVersion it saw after a disconnect, so no
// change is missed; if it cannot resume, the history says so.
func watchTaintRemovals(ctx context.Context, cs kubernetes.Interface, node string) (*taintHistory, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", node, err)
	}
	byName := fields.OneTermEqualSelector("metadata.name", node).String()
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = byName
		return cs.CoreV1().Nodes().Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, n.ResourceVersion, lw)
	if err != nil {
		return nil, fmt.Errorf("watching node %s: %w", node, err)
	}
	h := &taintHistory{}
	go h.follow(ctx, rw, taintKeys(n))
	return h, nil
}

func (h *taintHistory) follow(ctx context.Context, rw *watchtools.RetryWatcher, prev []string) {
	defer rw.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return
			}
			n, isNode := ev.Object.(*corev1.Node)
			if !isNode {
				h.fail(fmt.Errorf("watch event %s: %s", ev.Type, describe(ev.Object)))
				return
			}
			cur := taintKeys(n)
			var gone []string
			for _, k := range prev {
				if !slices.Contains(cur, k) {
					gone = append(gone, k)
				}
			}
			if len(gone) > 0 {
				h.mu.Lock()
				h.removals = append(h.removals, taintRemoval{rv: n.ResourceVersion, keys: gone})
				h.mu.Unlock()
			}
			prev = cur
		}
	}
}

func (h *taintHistory) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
}

// removalsOf returns the removals of taint key so far, and the error of a
// gap in the history if there is one.
func (h *taintHistory) removalsOf(key string) ([]taintRemoval, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []taintRemoval
	for _, r := range h.removals {
		if slices.Contains(r.keys, key) {
			out = append(out, r)
		}
	}
	return out, h.err
}

func taintKeys(n *corev1.Node) []string {
	var keys []string
	for _, t := range n.Spec.Taints {
		keys = append(keys, t.Key)
	}
	return keys
}

func describe(obj runtime.Object) string {
	if st, ok := obj.(*metav1.Status); ok {
		return st.Message
	}
	return fmt.Sprintf("%T", obj)
}

// assertOnlyRemediatorRemoved checks that every removal of the
// remediator's taints (its own and the out-of-service taint) was one of
// its writes, and that each was removed at least once (so the check is not
// vacuous).
func (r *remediator) assertOnlyRemediatorRemoved(h *taintHistory) {
	r.s.t.Helper()
	for _, key := range []string{r.taintKey, names.OutOfServiceTaint} {
		removals, err := h.removalsOf(key)
		must(r.s.t, err)
		if len(removals) == 0 {
			r.s.t.Fatalf("the taint history of %s shows no removal of %s", r.node, key)
		}
		for _, rm := range removals {
			if !r.ownWrite(rm.rv) {
				r.s.t.Fatalf("taint %s removed from %s by a write that is not the remediator's (resourceVersion %s)", key, r.node, rm.rv)
			}
		}
	}
}

// assertFencelineLeftNodeAlone checks kube-apiserver's audit log: no
// Fenceline component wrote to the node (spec or status), so nothing it
// did can have removed, or raced, the remediator's taints.
func (s *scenario) assertFencelineLeftNodeAlone(node string) {
	s.t.Helper()
	calls, err := rbaccheck.ReadAuditLog(s.w.Cluster.AuditLogPath())
	must(s.t, err)
	ours := []string{
		rbaccheck.ServiceAccountUser(world.Namespace, world.AttacherServiceAccount),
		rbaccheck.ServiceAccountUser(world.Namespace, world.ControllerServiceAccount),
	}
	var seen bool
	for _, c := range calls {
		if c.APIGroup != "" || c.Resource != "nodes" || c.Name != node {
			continue
		}
		seen = true
		if slices.Contains(ours, c.User) && slices.Contains([]string{"create", "update", "patch", "delete"}, c.Verb) {
			s.t.Fatalf("%s wrote to node %s: %s", c.User, node, c)
		}
	}
	if !seen {
		s.t.Fatalf("setup: kube-apiserver's audit log holds no request for node %s", node)
	}
}

// assertNothingOfFencelineOn checks that node carries no taint, condition
// or annotation of Fenceline's, and waits until it carries no taint at all
// (the node lifecycle controller lifts its unreachable taints once the node
// is Ready), so that nothing keeps workloads off it.
func (s *scenario) assertNothingOfFencelineOn(node string) {
	s.t.Helper()
	n := s.node(s.ctx, node)
	for _, t := range n.Spec.Taints {
		if strings.HasPrefix(t.Key, names.Domain+"/") {
			s.t.Fatalf("%s still carries Fenceline's taint %s:%s", node, t.Key, t.Effect)
		}
	}
	for _, c := range n.Status.Conditions {
		if slices.Contains([]string{names.FencingCompleteCondition, names.FencingRequiredCondition, names.FencingTriagedCondition}, string(c.Type)) {
			s.t.Fatalf("%s still carries Fenceline's condition %s=%s", node, c.Type, c.Status)
		}
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, names.Domain+"/") {
			s.t.Fatalf("%s still carries Fenceline's annotation %s", node, k)
		}
	}
	must(s.t, world.WaitFor(s.ctx, failoverTimeout, node+" without any taint", func(ctx context.Context) (bool, error) {
		n, err := s.w.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		return len(n.Spec.Taints) == 0, nil
	}))
}
