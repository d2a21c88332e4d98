package nodefencing

import (
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// lifeWatch counts, per node under a Fenced request, the kubelet's writes
// the controller observes after it first saw the request Fenced (the
// mark): the LifeSigns JudgeFence judges. It keeps only the last renewal
// and Ready report seen, to tell a change from a resync; the node's
// timestamps are compared with each other for equality only, never with
// the controller's clock. The counts live in memory: a restarted
// controller starts a new mark, which can only make it slower to call a
// fence a lie, never quicker.
type lifeWatch struct {
	enqueue func(node string)

	mu    sync.Mutex
	nodes map[string]*watched
}

// watched is one node's count since its mark.
type watched struct {
	request types.UID
	lease   leaseMark
	ready   readyMark
	signs   LifeSigns
}

// leaseMark identifies one renewal of a Lease: a change of any field is a
// renewal.
type leaseMark struct {
	uid    types.UID
	holder string
	renew  int64 // renewTime in Unix nanoseconds: compared for equality only
}

// readyMark is the node's Ready condition as last seen.
type readyMark struct {
	status    v1.ConditionStatus
	heartbeat int64 // lastHeartbeatTime in Unix nanoseconds: compared for equality only
}

func newLifeWatch(enqueue func(string)) *lifeWatch {
	return &lifeWatch{enqueue: enqueue, nodes: map[string]*watched{}}
}

// signs returns the node's LifeSigns for the open request r: a request
// not Fenced has none (and ends the node's watch); a Fenced request seen
// for the first time is marked now, from the Lease and node as given.
func (w *lifeWatch) signs(nodeName string, r *fencingv1alpha1.FencingRequest, lease *coordinationv1.Lease, node *v1.Node) LifeSigns {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r == nil || r.Status.Phase != fencingv1alpha1.FencingPhaseFenced {
		delete(w.nodes, nodeName)
		return LifeSigns{}
	}
	cur := w.nodes[nodeName]
	if cur == nil || cur.request != r.UID {
		cur = &watched{request: r.UID, lease: markOf(lease), ready: readyOf(node), signs: LifeSigns{Watching: true}}
		w.nodes[nodeName] = cur
	}
	return cur.signs
}

// leaseSeen counts a renewal of a watched node's Lease.
func (w *lifeWatch) leaseSeen(lease *coordinationv1.Lease) {
	w.mu.Lock()
	cur := w.nodes[lease.Name]
	renewed := false
	if cur != nil {
		if m := markOf(lease); m != cur.lease {
			cur.lease, renewed = m, true
			cur.signs.LeaseRenewals++
		}
	}
	w.mu.Unlock()
	if renewed {
		w.enqueue(lease.Name)
	}
}

// nodeSeen counts a report of Ready=True by a watched node: Ready turning
// True, or its heartbeat changing while True.
func (w *lifeWatch) nodeSeen(node *v1.Node) {
	w.mu.Lock()
	cur := w.nodes[node.Name]
	reported := false
	if cur != nil {
		if m := readyOf(node); m != cur.ready {
			reported = m.status == v1.ConditionTrue
			cur.ready = m
			if reported {
				cur.signs.ReadyReports++
			}
		}
	}
	w.mu.Unlock()
	if reported {
		w.enqueue(node.Name)
	}
}

// watchLife starts the controller's lifeWatch: fed by the node Lease and
// Node informers, it enqueues a watched node on each sign of life (the
// node handler of the queue filters heartbeats out).
func (c *Controller) watchLife(leases, nodes cache.SharedIndexInformer) error {
	c.life = newLifeWatch(c.queue.Enqueue)
	w := c.life
	if err := nodequeue.AddHandler(leases, "Lease", cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onLease(obj) },
		UpdateFunc: func(_, obj any) { w.onLease(obj) },
	}); err != nil {
		return err
	}
	return nodequeue.AddHandler(nodes, "node (signs of life)", cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if n, ok := nodequeue.DeletedObject[*v1.Node](obj); ok {
				w.nodeSeen(n)
			}
		},
	})
}

func (w *lifeWatch) onLease(obj any) {
	if l, ok := nodequeue.DeletedObject[*coordinationv1.Lease](obj); ok && l.Namespace == v1.NamespaceNodeLease {
		w.leaseSeen(l)
	}
}

func markOf(l *coordinationv1.Lease) leaseMark {
	if l == nil {
		return leaseMark{}
	}
	m := leaseMark{uid: l.UID}
	if l.Spec.HolderIdentity != nil {
		m.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		m.renew = l.Spec.RenewTime.UnixNano()
	}
	return m
}

func readyOf(n *v1.Node) readyMark {
	c := nodeutil.ReadyCondition(n)
	if c == nil {
		return readyMark{}
	}
	return readyMark{status: c.Status, heartbeat: c.LastHeartbeatTime.UnixNano()}
}
