package outofservice

import (
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/view"
	"fenceline.io/fenceline/pkg/names"
)

// TestUntaintRechecksVolumeAttachmentsFresh: the caches show a rebooted,
// Ready node with nothing left on it, but the API server still has a
// VolumeAttachment of the node (the cache lags). The write-time re-check
// gathers the pods and VolumeAttachments fresh and keeps the taint.
func TestUntaintRechecksVolumeAttachmentsFresh(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	added := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	node := testobj.Node("n1", testobj.ReadySince(added.Add(time.Minute)), testobj.BootID("boot-2"),
		testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, added),
		testobj.Annotation(names.BootIDAnnotation, Record("boot-1", added)))
	va := testobj.VA("va-1", "d", "pv-1", "n1")
	for _, tc := range []struct {
		name       string
		apiVAs     bool
		wantTaint  bool
		wantRefuse bool
	}{
		{"the API server agrees with the cache: untainted", false, false, false},
		{"the API server still has a VolumeAttachment: kept", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node.DeepCopy())
			if tc.apiVAs {
				if _, err := client.StorageV1().VolumeAttachments().Create(ctx, va.DeepCopy(), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			_ = nodes.Add(node)
			index := func(name string, f cache.IndexFunc) cache.Indexer {
				return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{name: f})
			}
			c := &Controller{
				act:   &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10)},
				nodes: corelisters.NewNodeLister(nodes),
				cached: view.Informers{Nodes: corelisters.NewNodeLister(nodes),
					Pods: index(nodeutil.PodsByNodeIndex, nodeutil.PodNodeNameIndexFunc), VAs: index(nodeutil.VAsByNodeIndex, nodeutil.VANodeNameIndexFunc)},
				now: func() time.Time { return added.Add(2 * time.Minute) },
			}
			_, err := c.sync(ctx, "n1")
			var changed *actuator.DecisionChangedError
			if refused := errors.As(err, &changed); refused != tc.wantRefuse {
				t.Fatalf("sync: %v, want a refusal on fresh data: %v", err, tc.wantRefuse)
			}
			got, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if has := nodeutil.HasTaint(got, names.OutOfServiceTaint); has != tc.wantTaint {
				t.Errorf("out-of-service taint present: %v, want %v", has, tc.wantTaint)
			}
		})
	}
}
