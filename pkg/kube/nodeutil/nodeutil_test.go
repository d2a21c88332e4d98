package nodeutil

import (
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func node(status v1.ConditionStatus, since time.Time, taints ...v1.Taint) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(since.Add(-time.Hour))}}
	if status != "" {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
	}
	n.Spec.Taints = taints
	return n
}

func TestNotReadyFor(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0.Add(time.Minute)
	tests := []struct {
		name     string
		node     *v1.Node
		want     time.Duration
		notReady bool
	}{
		{"Ready", node(v1.ConditionTrue, t0), 0, false},
		{"False since t0", node(v1.ConditionFalse, t0), time.Minute, true},
		{"Unknown since t0", node(v1.ConditionUnknown, t0), time.Minute, true},
		{"no Ready condition: since creation", node("", t0), time.Hour + time.Minute, true},
		{"transition in the future (clock skew): zero", node(v1.ConditionFalse, now.Add(time.Second)), 0, true},
		{"nil node", nil, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, notReady := NotReadyFor(tc.node, now)
			if got != tc.want || notReady != tc.notReady {
				t.Errorf("NotReadyFor() = %s, %v; want %s, %v", got, notReady, tc.want, tc.notReady)
			}
		})
	}
}

func TestFindTaint(t *testing.T) {
	n := node(v1.ConditionTrue, time.Now(), v1.Taint{Key: "a", Value: "x", Effect: v1.TaintEffectNoSchedule}, v1.Taint{Key: "b", Effect: v1.TaintEffectNoExecute})
	if got := FindTaint(n, "b"); got == nil || got.Effect != v1.TaintEffectNoExecute {
		t.Errorf("FindTaint(b) = %v", got)
	}
	if HasTaint(n, "c") || HasTaint(nil, "a") || !HasTaint(n, "a") {
		t.Error("HasTaint wrong")
	}
}

func TestCSIUniqueVolumeName(t *testing.T) {
	if got, want := CSIUniqueVolumeName("mock.fenceline.io", "vol-1"), v1.UniqueVolumeName("kubernetes.io/csi/mock.fenceline.io^vol-1"); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if d, ok := CSIVolumeDriver(CSIUniqueVolumeName("mock.fenceline.io", "vol-1")); !ok || d != "mock.fenceline.io" {
		t.Errorf("CSIVolumeDriver = %q, %v; want mock.fenceline.io, true", d, ok)
	}
	for _, name := range []v1.UniqueVolumeName{"kubernetes.io/iscsi/x", "kubernetes.io/csi/no-handle"} {
		if d, ok := CSIVolumeDriver(name); ok {
			t.Errorf("CSIVolumeDriver(%q) = %q, true; want false", name, d)
		}
	}
}

func TestIndexes(t *testing.T) {
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{PodsByNodeIndex: PodNodeNameIndexFunc})
	for _, p := range []*v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "on-n1"}, Spec: v1.PodSpec{NodeName: "n1"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "on-n1"}, Spec: v1.PodSpec{NodeName: "n1"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "on-n2"}, Spec: v1.PodSpec{NodeName: "n2"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "unscheduled"}},
	} {
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := PodsOnNode(pods, "n1")
	if err != nil || len(got) != 2 {
		t.Errorf("PodsOnNode(n1) = %d pods, %v; want 2", len(got), err)
	}
	vas := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{VAsByNodeIndex: VANodeNameIndexFunc})
	if err := vas.Add(&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va"}, Spec: storagev1.VolumeAttachmentSpec{NodeName: "n2"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := VAsOnNode(vas, "n2"); err != nil || len(got) != 1 {
		t.Errorf("VAsOnNode(n2) = %d, %v; want 1", len(got), err)
	}
	if got, err := VAsOnNode(vas, "n1"); err != nil || len(got) != 0 {
		t.Errorf("VAsOnNode(n1) = %d, %v; want 0", len(got), err)
	}
}

// brokenLister is a NodeLister whose Get fails with a cache error other
// than NotFound.
type brokenLister struct {
	corelisters.NodeLister
	err error
}

func (b brokenLister) Get(string) (*v1.Node, error) { return nil, b.err }

func TestLookup(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(node(v1.ConditionTrue, time.Now())); err != nil {
		t.Fatal(err)
	}
	cached := corelisters.NewNodeLister(indexer)
	boom := errors.New("boom")
	tests := []struct {
		name     string
		nodes    corelisters.NodeLister
		node     string
		wantNode bool
		wantErr  error
	}{
		{name: "cached node is returned", nodes: cached, node: "n1", wantNode: true},
		{name: "deleted node is nil without error", nodes: cached, node: "gone"},
		{name: "other cache errors are wrapped", nodes: brokenLister{err: boom}, node: "n1", wantErr: boom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Lookup(tc.nodes, tc.node)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Lookup error = %v, want %v", err, tc.wantErr)
			}
			if (got != nil) != tc.wantNode {
				t.Fatalf("Lookup node = %v, want a node: %v", got, tc.wantNode)
			}
			if got != nil && got.Name != tc.node {
				t.Errorf("Lookup returned node %q, want %q", got.Name, tc.node)
			}
		})
	}
}

func TestTaintMatches(t *testing.T) {
	taint := v1.Taint{Key: "k", Effect: v1.TaintEffectNoSchedule}
	tests := []struct {
		key    string
		effect v1.TaintEffect
		want   bool
	}{
		{"k", v1.TaintEffectNoSchedule, true},
		{"k", "", true},
		{"k", v1.TaintEffectNoExecute, false},
		{"other", "", false},
	}
	for _, tc := range tests {
		if got := TaintMatches(taint, tc.key, tc.effect); got != tc.want {
			t.Errorf("TaintMatches(%v, %q, %q) = %v, want %v", taint, tc.key, tc.effect, got, tc.want)
		}
	}
	node := &v1.Node{Spec: v1.NodeSpec{Taints: []v1.Taint{taint}}}
	if !HasTaintEffect(node, "k", v1.TaintEffectNoSchedule) || HasTaintEffect(node, "k", v1.TaintEffectNoExecute) || HasTaintEffect(nil, "k", v1.TaintEffectNoSchedule) {
		t.Error("HasTaintEffect does not match key and effect exactly")
	}
}
