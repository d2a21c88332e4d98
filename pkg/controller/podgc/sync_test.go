package podgc

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	clienttesting "k8s.io/client-go/testing"

	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// start wires podgc to a fixture holding the objects and starts it.
func start(t *testing.T, objs ...runtime.Object) (*ctrltest.Fixture, *Controller) {
	t.Helper()
	f := ctrltest.New(t, testobj.Epoch, objs...)
	c, err := New(f.Informers, f.Actuator)
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	return f, c
}

// Writes of the sync tests, as ctrltest.Write spells them.
const (
	intentVA1 = "patch volumeattachments va-1"
	markDB0   = "update pods/status ns/db-0"
	deleteDB0 = "delete pods ns/db-0"
)

func TestSync(t *testing.T) {
	t0 := testobj.Epoch
	oos := testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)
	stuck := func(name string) *v1.Pod {
		return testobj.Pod("ns", name, testobj.OnNode("n1"), testobj.Terminating(t0))
	}
	va := testobj.VA("va-1", "disk.example.com", "pv-1", "n1")
	intended := testobj.VA("va-1", "disk.example.com", "pv-1", "n1",
		testobj.VAAnnotation(names.FenceIntentAnnotation, cutoff.NewRecord(cutoff.ReasonSafeDetach, "", "controller/quarantine", t0).Encode()))
	tests := []struct {
		name string
		objs []runtime.Object
		// apiNode is the node as the API server returns it to a fresh
		// read, when it differs from the cached one.
		apiNode *v1.Node
		// failIntent makes the API server refuse the intent writes.
		failIntent bool
		// failRead makes the API server fail the node's first read.
		failRead   bool
		dryRun     bool
		wantWrites [][]string
		wantEvents []string
		wantIntent cutoff.Reason
		// wantErr says which error the sync returns; nil: none.
		wantErr func(error) bool
		// wantNodeReads counts the node's reads from the API server: one
		// per sync that deletes, shared by its deletions.
		wantNodeReads int
	}{{
		name:          "out of service and not Ready: the intent on the node's VolumeAttachments first, then the stuck pod goes",
		objs:          []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), va},
		wantWrites:    [][]string{{intentVA1}, {markDB0}, {deleteDB0}},
		wantEvents:    []string{"Normal " + actuator.EventFenceIntent, "Warning " + actuator.EventForceDeleted + " Force-deleted: fenceline: node n1 out of service"},
		wantIntent:    cutoff.ReasonOutOfService,
		wantNodeReads: 1,
	}, {
		name: "every stuck pod of the node goes, after the intent, decided on one read of the node",
		objs: []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), stuck("db-1"), va},
		wantWrites: [][]string{{intentVA1},
			{markDB0, deleteDB0, "update pods/status ns/db-1", "delete pods ns/db-1"}},
		wantEvents:    []string{actuator.EventFenceIntent, actuator.EventForceDeleted, actuator.EventForceDeleted},
		wantIntent:    cutoff.ReasonOutOfService,
		wantNodeReads: 1,
	}, {
		name:       "out of service but Ready: the attach/detach controller detaches anyway, so the intent goes on; no pod is deleted, the node is not read",
		objs:       []runtime.Object{testobj.Node("n1", testobj.ReadySince(t0), oos), stuck("db-0"), va},
		wantWrites: [][]string{{intentVA1}},
		wantEvents: []string{actuator.EventFenceIntent},
		wantIntent: cutoff.ReasonOutOfService,
	}, {
		name:          "a VolumeAttachment with an intent already is not written again",
		objs:          []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), intended},
		wantWrites:    [][]string{{markDB0}, {deleteDB0}},
		wantEvents:    []string{actuator.EventForceDeleted},
		wantIntent:    cutoff.ReasonSafeDetach,
		wantNodeReads: 1,
	}, {
		name:          "the intent write fails: no pod is written at all",
		objs:          []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), stuck("db-1"), va},
		failIntent:    true,
		wantErr:       apierrors.IsServiceUnavailable,
		wantNodeReads: 1,
	}, {
		name:     "the node's read beside the intent fails: each deletion reads the node itself",
		objs:     []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), stuck("db-1"), va},
		failRead: true,
		wantWrites: [][]string{{intentVA1},
			{markDB0, deleteDB0, "update pods/status ns/db-1", "delete pods ns/db-1"}},
		wantEvents:    []string{actuator.EventFenceIntent, actuator.EventForceDeleted, actuator.EventForceDeleted},
		wantIntent:    cutoff.ReasonOutOfService,
		wantNodeReads: 3,
	}, {
		name:       "dry run: no write, no read of the node, the deletion said",
		objs:       []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), va},
		dryRun:     true,
		wantEvents: []string{"Warning " + actuator.EventForceDeleted + " Dry run: would force-delete pod"},
	}, {
		name: "no out-of-service taint: nothing",
		objs: []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), testobj.Taint("example.com/other", v1.TaintEffectNoExecute)), stuck("db-0"), va},
	}, {
		name:       "a pod that is not terminating stays",
		objs:       []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), testobj.Pod("ns", "db-0", testobj.OnNode("n1")), va},
		wantWrites: [][]string{{intentVA1}},
		wantEvents: []string{actuator.EventFenceIntent},
		wantIntent: cutoff.ReasonOutOfService,
	}, {
		name:          "the node reported Ready since the cache saw it: the re-check on the fresh node keeps the pods",
		objs:          []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), stuck("db-1"), va},
		apiNode:       testobj.Node("n1", testobj.ReadySince(t0.Add(time.Second)), oos),
		wantWrites:    [][]string{{intentVA1}},
		wantEvents:    []string{actuator.EventFenceIntent, "Normal " + actuator.EventDecisionChanged + " Did not force-delete pod: node is Ready", "Normal " + actuator.EventDecisionChanged + " Did not force-delete pod: node is Ready"},
		wantIntent:    cutoff.ReasonOutOfService,
		wantErr:       actuator.IsDecisionChanged,
		wantNodeReads: 1,
	}, {
		name: "the node is gone: nothing",
		objs: []runtime.Object{stuck("db-0"), va},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c := start(t, tc.objs...)
			f.Actuator.DryRun = tc.dryRun
			if tc.apiNode != nil {
				f.Kube.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, tc.apiNode.DeepCopy(), nil
				})
			}
			if tc.failIntent {
				f.Kube.PrependReactor("patch", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				})
			}
			if tc.failRead {
				var once sync.Once
				f.Kube.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
					failed := false
					once.Do(func() { failed = true })
					if !failed {
						return false, nil, nil
					}
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				})
			}
			reads := countNodeReads(f)
			r := f.Sync(c.sync, "n1")
			if (r.Err != nil) != (tc.wantErr != nil) || (r.Err != nil && !tc.wantErr(r.Err)) {
				t.Errorf("sync = %v, want an error %v", r.Err, tc.wantErr != nil)
			}
			r.Check(t, ctrltest.Want{Writes: tc.wantWrites, Events: tc.wantEvents})
			if got := int(reads.Load()); got != tc.wantNodeReads {
				t.Errorf("%d reads of the node from the API server, want %d", got, tc.wantNodeReads)
			}
			if got := f.Intent("va-1"); got != tc.wantIntent {
				t.Errorf("intent on va-1 = %q, want %q", got, tc.wantIntent)
			}
		})
	}
}

// countNodeReads counts the GETs of nodes the fake API server answers from
// now on.
func countNodeReads(f *ctrltest.Fixture) *atomic.Int32 {
	var n atomic.Int32
	f.Kube.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		return false, nil, nil
	})
	return &n
}

// readDeadline bounds the wait of the held intent writes for the node's
// read: far longer than the read takes, far short of the test timeout.
const readDeadline = 10 * time.Second

// holdIntents is a clientset whose VolumeAttachment patches wait until
// until is closed, and fail at readDeadline. They wait before they reach
// the fake clientset, which answers one request at a time: held inside it,
// they would hold up every other request too.
type holdIntents struct {
	kubernetes.Interface
	until <-chan struct{}
}

func (h holdIntents) StorageV1() storagev1client.StorageV1Interface {
	return holdStorage{StorageV1Interface: h.Interface.StorageV1(), until: h.until}
}

type holdStorage struct {
	storagev1client.StorageV1Interface
	until <-chan struct{}
}

func (h holdStorage) VolumeAttachments() storagev1client.VolumeAttachmentInterface {
	return holdVAs{VolumeAttachmentInterface: h.StorageV1Interface.VolumeAttachments(), until: h.until}
}

type holdVAs struct {
	storagev1client.VolumeAttachmentInterface
	until <-chan struct{}
}

func (h holdVAs) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*storagev1.VolumeAttachment, error) {
	select {
	case <-h.until:
	case <-time.After(readDeadline):
		return nil, errors.New("the node was not read while the intent was being written")
	}
	return h.VolumeAttachmentInterface.Patch(ctx, name, pt, data, opts, subresources...)
}

// TestSyncReadsTheNodeBesideTheIntent: the node's fresh read for the
// deletions' re-check is made beside the intent writes, not after them,
// once for all the pods of the node; a deletion retried after a conflict
// reads the node again. The intent writes are held until the node's read
// has begun: a sync that read the node only after the intent would never
// let them through, and fails at the deadline.
func TestSyncReadsTheNodeBesideTheIntent(t *testing.T) {
	t0 := testobj.Epoch
	oos := testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)
	stuck := func(name string) *v1.Pod {
		return testobj.Pod("ns", name, testobj.OnNode("n1"), testobj.Terminating(t0))
	}
	node := testobj.Node("n1", testobj.NotReadySince(t0), oos)
	va1, va2 := testobj.VA("va-1", "disk.example.com", "pv-1", "n1"), testobj.VA("va-2", "disk.example.com", "pv-2", "n1")
	tests := []struct {
		name string
		objs []runtime.Object
		// conflict makes the first status write of db-0 conflict.
		conflict      bool
		wantWrites    [][]string
		wantNodeReads int
	}{{
		name:          "one stuck pod",
		objs:          []runtime.Object{node, stuck("db-0"), va1, va2},
		wantWrites:    [][]string{{intentVA1, "patch volumeattachments va-2"}, {markDB0}, {deleteDB0}},
		wantNodeReads: 1,
	}, {
		name: "three stuck pods: one read of the node for all",
		objs: []runtime.Object{node, stuck("db-0"), stuck("db-1"), stuck("db-2"), va1, va2},
		wantWrites: [][]string{{intentVA1, "patch volumeattachments va-2"},
			{markDB0, deleteDB0, "update pods/status ns/db-1", "delete pods ns/db-1", "update pods/status ns/db-2", "delete pods ns/db-2"}},
		wantNodeReads: 1,
	}, {
		name:          "a status write that conflicts: its retry reads the node again",
		objs:          []runtime.Object{node, stuck("db-0"), va1, va2},
		conflict:      true,
		wantWrites:    [][]string{{intentVA1, "patch volumeattachments va-2"}, {markDB0}, {deleteDB0}},
		wantNodeReads: 2,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c := start(t, tc.objs...)
			if tc.conflict {
				var once sync.Once
				f.Kube.PrependReactor("update", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
					conflict := false
					once.Do(func() { conflict = a.GetSubresource() == "status" })
					if !conflict {
						return false, nil, nil
					}
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "db-0", errors.New("the kubelet reported in"))
				})
			}
			read := make(chan struct{})
			var readOnce sync.Once
			f.Kube.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
				readOnce.Do(func() { close(read) })
				return false, nil, nil
			})
			f.Actuator.Client = holdIntents{Interface: f.Kube, until: read}
			reads := countNodeReads(f)
			r := f.Sync(c.sync, "n1")
			if r.Err != nil {
				t.Errorf("sync = %v", r.Err)
			}
			ctrltest.WantWrites(t, r.Writes, tc.wantWrites...)
			if got := int(reads.Load()); got != tc.wantNodeReads {
				t.Errorf("%d reads of the node from the API server, want %d", got, tc.wantNodeReads)
			}
		})
	}
}
