package view

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// names returns the names of objs, sorted.
func names[T interface{ GetName() string }](objs []T) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	slices.Sort(out)
	return out
}

// sources returns the two Views over the same objects: the informer caches
// (synced) and the API server.
func sources(ctx context.Context, t *testing.T, objs ...runtime.Object) map[string]View {
	t.Helper()
	client := fake.NewClientset(objs...)
	f := informers.NewSharedInformerFactory(client, 0)
	pods, vas, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		t.Fatal(err)
	}
	nodes, leases := f.Core().V1().Nodes(), f.Coordination().V1().Leases()
	nodes.Informer()
	leases.Informer()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return map[string]View{
		"informers": Informers{Nodes: nodes.Lister(), Leases: leases.Lister().Leases(v1.NamespaceNodeLease), Pods: pods.GetIndexer(), VAs: vas.GetIndexer()},
		"api":       API{Client: client},
	}
}

// TestSourcesAgree: the caches and the API server give the same answers
// for the same objects, a missing object is nil without an error, and a
// source a view was not given is an error, never an empty answer.
func TestSourcesAgree(t *testing.T) {
	objs := []runtime.Object{
		testobj.Node("n1"), testobj.Node("n2"),
		testobj.Lease("n1", time.Unix(1000, 0)),
		testobj.Pod("default", "a", testobj.OnNode("n1")), testobj.Pod("default", "b", testobj.OnNode("n2")), testobj.Pod("kube-system", "c", testobj.OnNode("n1")),
		testobj.VA("va-1", "d", "pv-1", "n1"), testobj.VA("va-2", "d", "pv-2", "n2"),
	}
	ctx := t.Context()
	views := sources(ctx, t, objs...)
	for name, v := range views {
		t.Run(name, func(t *testing.T) {
			if n, err := v.Node(ctx, "n1"); err != nil || n == nil || n.Name != "n1" {
				t.Errorf("Node(n1) = %v, %v", n, err)
			}
			if n, err := v.Node(ctx, "gone"); err != nil || n != nil {
				t.Errorf("Node(gone) = %v, %v; want nil, nil", n, err)
			}
			if l, err := v.NodeLease(ctx, "n1"); err != nil || l == nil {
				t.Errorf("NodeLease(n1) = %v, %v", l, err)
			}
			if l, err := v.NodeLease(ctx, "n2"); err != nil || l != nil {
				t.Errorf("NodeLease(n2) = %v, %v; want nil, nil", l, err)
			}
			if p, err := v.PodsOnNode(ctx, "n1"); err != nil || !slices.Equal(names(p), []string{"a", "c"}) {
				t.Errorf("PodsOnNode(n1) = %v, %v", names(p), err)
			}
			if a, err := v.VolumeAttachmentsOnNode(ctx, "n2"); err != nil || !slices.Equal(names(a), []string{"va-2"}) {
				t.Errorf("VolumeAttachmentsOnNode(n2) = %v, %v", names(a), err)
			}
		})
	}
	if _, err := (Informers{Nodes: views["informers"].(Informers).Nodes}).PodsOnNode(ctx, "n1"); err == nil || !strings.Contains(err.Error(), "not watched") {
		t.Errorf("pods of a view without a pod cache: %v, want an error", err)
	}
}

// TestReadParts: Read gives the same objects from either source, and
// nothing at all for a node that does not exist.
func TestReadParts(t *testing.T) {
	objs := []runtime.Object{
		testobj.Node("n1"), testobj.Lease("n1", time.Unix(1000, 0)),
		testobj.Pod("default", "a", testobj.OnNode("n1")), testobj.VA("va-1", "d", "pv-1", "n1"),
		testobj.Pod("default", "orphan", testobj.OnNode("gone")), testobj.VA("va-9", "d", "pv-9", "gone"),
	}
	ctx := t.Context()
	views := sources(ctx, t, objs...)
	all := Parts{Lease: true, Pods: true, VolumeAttachments: true}
	for name, v := range views {
		o, err := Read(ctx, v, "n1", all)
		if err != nil || o.Node == nil || o.Lease == nil || !slices.Equal(names(o.Pods), []string{"a"}) || !slices.Equal(names(o.VolumeAttachments), []string{"va-1"}) {
			t.Errorf("%s: Read(n1) = %+v, %v", name, o, err)
		}
		if o, err := Read(ctx, v, "gone", all); err != nil || o.Node != nil || o.Pods != nil || o.VolumeAttachments != nil {
			t.Errorf("%s: Read(gone) = %+v, %v; want nothing: the parts of a missing node are not an answer", name, o, err)
		}
	}
}

// barrierView is a Remote View each of whose reads waits until all four
// reads have started: it answers only reads made at once.
type barrierView struct {
	all  chan struct{}
	once *sync.Once
	n    *atomic.Int32
}

func (b barrierView) wait(ctx context.Context) error {
	if b.n.Add(1) == 4 {
		b.once.Do(func() { close(b.all) })
	}
	select {
	case <-b.all:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("the other reads never started: Read made them one after another")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b barrierView) Remote() bool { return true }
func (b barrierView) Node(ctx context.Context, name string) (*v1.Node, error) {
	return testobj.Node(name), b.wait(ctx)
}
func (b barrierView) NodeLease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	return testobj.Lease(node, time.Unix(1000, 0)), b.wait(ctx)
}
func (b barrierView) PodsOnNode(ctx context.Context, _ string) ([]*v1.Pod, error) {
	return nil, b.wait(ctx)
}
func (b barrierView) VolumeAttachmentsOnNode(ctx context.Context, _ string) ([]*storagev1.VolumeAttachment, error) {
	return nil, b.wait(ctx)
}

// TestReadRemoteAtOnce: from the API server, Read makes its reads at once.
func TestReadRemoteAtOnce(t *testing.T) {
	b := barrierView{all: make(chan struct{}), once: &sync.Once{}, n: &atomic.Int32{}}
	o, err := Read(context.Background(), b, "n1", Parts{Lease: true, Pods: true, VolumeAttachments: true})
	if err != nil || o.Node == nil || o.Lease == nil {
		t.Fatalf("Read = %+v, %v", o, err)
	}
}
