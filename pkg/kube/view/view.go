// Package view is one read-only view of the cluster objects Fenceline's
// decisions read about a node, with three sources: the informer caches (a
// controller's sync), the API server (the write-time re-check, on fresh
// data), and a snapshot (kubectl fenceline explain implements View over
// what it read). A controller gathers its decision's input from a View in
// one function, so that the sync, the re-check and explain cannot gather
// it three different ways.
package view

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// View reads the objects of one node. A missing object is nil with no
// error; an error means the view could not tell (the caller then takes
// the safe action).
type View interface {
	// Node returns the node.
	Node(ctx context.Context, name string) (*v1.Node, error)
	// NodeLease returns the node's kubelet Lease in kube-node-lease.
	NodeLease(ctx context.Context, node string) (*coordinationv1.Lease, error)
	// PodsOnNode returns the pods bound to node.
	PodsOnNode(ctx context.Context, node string) ([]*v1.Pod, error)
	// VolumeAttachmentsOnNode returns the VolumeAttachments of node.
	VolumeAttachmentsOnNode(ctx context.Context, node string) ([]*storagev1.VolumeAttachment, error)
}

// Informers is View over informer caches. Pods and VolumeAttachments must
// carry nodeutil's by-node indexes (nodeutil.NodeIndexedInformers); a nil
// lister or indexer is a source this controller does not watch, and
// reading it is an error, never an empty answer.
type Informers struct {
	Nodes  corelisters.NodeLister
	Leases coordinationlisters.LeaseNamespaceLister
	Pods   cache.Indexer
	VAs    cache.Indexer
}

var _ View = Informers{}

// errNotWatched is reading a source an Informers view was not given.
func errNotWatched(what string) error {
	return fmt.Errorf("%s are not watched by this view", what)
}

// Node returns the cached node.
func (i Informers) Node(_ context.Context, name string) (*v1.Node, error) {
	if i.Nodes == nil {
		return nil, errNotWatched("nodes")
	}
	return nodeutil.Lookup(i.Nodes, name)
}

// NodeLease returns the cached node Lease.
func (i Informers) NodeLease(_ context.Context, node string) (*coordinationv1.Lease, error) {
	if i.Leases == nil {
		return nil, errNotWatched("node Leases")
	}
	return nodeutil.LookupLease(i.Leases, node)
}

// PodsOnNode returns the cached pods bound to node.
func (i Informers) PodsOnNode(_ context.Context, node string) ([]*v1.Pod, error) {
	if i.Pods == nil {
		return nil, errNotWatched("pods")
	}
	return nodeutil.PodsOnNode(i.Pods, node)
}

// VolumeAttachmentsOnNode returns the cached VolumeAttachments of node.
func (i Informers) VolumeAttachmentsOnNode(_ context.Context, node string) ([]*storagev1.VolumeAttachment, error) {
	if i.VAs == nil {
		return nil, errNotWatched("VolumeAttachments")
	}
	return nodeutil.VAsOnNode(i.VAs, node)
}

// API is View read fresh from the API server, for a write-time re-check.
// It costs a request per call (a list for pods and VolumeAttachments), so
// it is for the moment of a write, never for every event.
type API struct {
	Client kubernetes.Interface
}

var _ View = API{}

// Node reads the node.
func (a API) Node(ctx context.Context, name string) (*v1.Node, error) {
	n, err := a.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return n, nil
}

// NodeLease reads the node's Lease.
func (a API) NodeLease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	return nodeutil.ReadLease(ctx, a.Client, node)
}

// PodsOnNode lists the pods bound to node (a field selector on
// spec.nodeName, checked again for servers that ignore it).
func (a API) PodsOnNode(ctx context.Context, node string) ([]*v1.Pod, error) {
	l, err := a.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	var out []*v1.Pod
	for i := range l.Items {
		if l.Items[i].Spec.NodeName == node {
			out = append(out, &l.Items[i])
		}
	}
	return out, nil
}

// VolumeAttachmentsOnNode lists every VolumeAttachment and keeps node's:
// the API has no field selector for spec.nodeName.
func (a API) VolumeAttachmentsOnNode(ctx context.Context, node string) ([]*storagev1.VolumeAttachment, error) {
	l, err := a.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the VolumeAttachments of node %s: %w", node, err)
	}
	var out []*storagev1.VolumeAttachment
	for i := range l.Items {
		if l.Items[i].Spec.NodeName == node {
			out = append(out, &l.Items[i])
		}
	}
	return out, nil
}

// Parts selects what Read reads besides the node.
type Parts struct {
	Lease, Pods, VolumeAttachments bool
}

// Objects are a node's objects as read from a View; what Parts did not ask
// for stays empty.
type Objects struct {
	// Node is nil when the node does not exist (then nothing else is read).
	Node              *v1.Node
	Lease             *coordinationv1.Lease
	Pods              []*v1.Pod
	VolumeAttachments []*storagev1.VolumeAttachment
}

// Read reads node and the parts p asks for from v. Any error leaves the
// caller without an answer, never with a partial one. From the API server
// (a View that says it is Remote) the reads are made at once: one round
// trip instead of up to four, which a slow API server multiplies; the
// parts read for a node that turns out not to exist are dropped.
func Read(ctx context.Context, v View, node string, p Parts) (Objects, error) {
	if r, ok := v.(Remote); ok && r.Remote() {
		return readAtOnce(ctx, v, node, p)
	}
	n, err := v.Node(ctx, node)
	if n == nil || err != nil {
		return Objects{}, err
	}
	o := Objects{Node: n}
	if p.Lease {
		if o.Lease, err = v.NodeLease(ctx, node); err != nil {
			return Objects{}, err
		}
	}
	if p.Pods {
		if o.Pods, err = v.PodsOnNode(ctx, node); err != nil {
			return Objects{}, err
		}
	}
	if p.VolumeAttachments {
		if o.VolumeAttachments, err = v.VolumeAttachmentsOnNode(ctx, node); err != nil {
			return Objects{}, err
		}
	}
	return o, nil
}

// Remote is a View each of whose reads is a request: Read makes them at
// once.
type Remote interface {
	Remote() bool
}

// Remote implements Remote: every read of API is a request.
func (API) Remote() bool { return true }

func readAtOnce(ctx context.Context, v View, node string, p Parts) (Objects, error) {
	var (
		g errgroup.Group
		o Objects
	)
	g.Go(func() (err error) { o.Node, err = v.Node(ctx, node); return err })
	if p.Lease {
		g.Go(func() (err error) { o.Lease, err = v.NodeLease(ctx, node); return err })
	}
	if p.Pods {
		g.Go(func() (err error) { o.Pods, err = v.PodsOnNode(ctx, node); return err })
	}
	if p.VolumeAttachments {
		g.Go(func() (err error) { o.VolumeAttachments, err = v.VolumeAttachmentsOnNode(ctx, node); return err })
	}
	if err := g.Wait(); err != nil || o.Node == nil {
		return Objects{}, err
	}
	return o, nil
}
