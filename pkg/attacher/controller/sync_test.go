package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

func TestSyncAttach(t *testing.T) {
	tests := []struct {
		name string
		opts envOptions
		// objects besides the PV (built from the created volume) and VA.
		objects func() []runtime.Object
		// mutate adjusts the PV and VA before they are created.
		mutate  func(pv *v1.PersistentVolume, va *storagev1.VolumeAttachment)
		faults  []faults.Fault
		wantErr bool
		check   func(t *testing.T, e *env, volumeID string)
	}{
		{
			name:    "publishes and records finalizers, annotation and status",
			objects: withCSINode,
			check: func(t *testing.T, e *env, volumeID string) {
				va := e.va("va-1")
				if !va.Status.Attached || va.Status.AttachError != nil {
					t.Errorf("status = %+v, want attached without error", va.Status)
				}
				if !slices.Contains(va.Finalizers, testFinalizer) {
					t.Errorf("VA finalizers %v lack %s", va.Finalizers, testFinalizer)
				}
				if got := va.Annotations[names.NodeIDAnnotation]; got != testNode {
					t.Errorf("node-id annotation = %q, want %q", got, testNode)
				}
				if len(va.Status.AttachmentMetadata) == 0 {
					t.Errorf("attachmentMetadata is empty, want the publish context")
				}
				if pv := e.pv("pv-1"); !slices.Contains(pv.Finalizers, testFinalizer) {
					t.Errorf("PV finalizers %v lack %s", pv.Finalizers, testFinalizer)
				}
				if n := len(audit.Filter(e.audit("ControllerPublishVolume"), audit.OK(), audit.Volume(volumeID), audit.Node(testNode))); n != 1 {
					t.Errorf("successful ControllerPublishVolume calls = %d, want 1", n)
				}
				wantEvents(t, e, "Normal Attached")
			},
		},
		{
			name:    "without --attach-events an attach records no Event",
			opts:    envOptions{quietAttach: true},
			objects: withCSINode,
			check: func(t *testing.T, e *env, volumeID string) {
				if !e.va("va-1").Status.Attached {
					t.Error("VA not attached")
				}
				if n := len(audit.Filter(e.audit("ControllerPublishVolume"), audit.OK(), audit.Volume(volumeID))); n != 1 {
					t.Errorf("successful ControllerPublishVolume calls = %d, want 1", n)
				}
				wantEvents(t, e)
			},
		},
		{
			name: "the node-id annotation is no attach target without a CSINode",
			mutate: func(_ *v1.PersistentVolume, va *storagev1.VolumeAttachment) {
				va.Annotations = map[string]string{names.NodeIDAnnotation: testNode}
			},
			wantErr: true,
			check: func(t *testing.T, e *env, _ string) {
				if ae := e.va("va-1").Status.AttachError; ae == nil || !strings.Contains(ae.Message, "no CSINode") {
					t.Errorf("attachError = %+v, want one about the missing CSINode", ae)
				}
				wantNoPublish(t, e)
			},
		},
		{
			name:    "no CSINode and no annotation",
			wantErr: true,
			check: func(t *testing.T, e *env, _ string) {
				va := e.va("va-1")
				if va.Status.Attached || va.Status.AttachError == nil || !strings.Contains(va.Status.AttachError.Message, "no CSINode") {
					t.Errorf("status = %+v, want attachError about the CSINode", va.Status)
				}
				wantNoPublish(t, e)
				wantEvents(t, e, "Warning AttachFailed")
			},
		},
		{
			name:    "driver error is recorded with its gRPC code and retried",
			objects: withCSINode,
			faults:  []faults.Fault{{Method: "ControllerPublishVolume", Code: codes.Internal}},
			wantErr: true,
			check: func(t *testing.T, e *env, _ string) {
				va := e.va("va-1")
				if va.Status.AttachError == nil || va.Status.AttachError.ErrorCode == nil || *va.Status.AttachError.ErrorCode != int32(codes.Internal) {
					t.Errorf("attachError = %+v, want errorCode %d", va.Status.AttachError, codes.Internal)
				}
				if !slices.Contains(va.Finalizers, testFinalizer) {
					t.Errorf("finalizer must be in place before ControllerPublishVolume, got %v", va.Finalizers)
				}
				wantEvents(t, e, "Warning AttachFailed")
			},
		},
		{
			name:    "node unknown to the driver",
			objects: func() []runtime.Object { return []runtime.Object{csiNodeFor(testNode, "ghost")} },
			wantErr: true,
			check: func(t *testing.T, e *env, _ string) {
				ae := e.va("va-1").Status.AttachError
				if ae == nil || ae.ErrorCode == nil || *ae.ErrorCode != int32(codes.NotFound) {
					t.Errorf("attachError = %+v, want NotFound", ae)
				}
			},
		},
		{
			name: "controllerPublishSecretRef is read",
			objects: func() []runtime.Object {
				return []runtime.Object{csiNodeFor(testNode, testNode), &v1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "storage"},
					Data:       map[string][]byte{"password": []byte("x")},
				}}
			},
			mutate: withSecretRef,
			check: func(t *testing.T, e *env, _ string) {
				if !e.va("va-1").Status.Attached {
					t.Errorf("VA not attached")
				}
			},
		},
		{
			name:    "missing controllerPublishSecretRef secret",
			objects: withCSINode,
			mutate:  withSecretRef,
			wantErr: true,
			check: func(t *testing.T, e *env, _ string) {
				ae := e.va("va-1").Status.AttachError
				if ae == nil || !strings.Contains(ae.Message, "controllerPublishSecretRef storage/creds") {
					t.Errorf("attachError = %+v, want one naming the secret", ae)
				}
				wantNoPublish(t, e)
			},
		},
		{
			name:    "in-tree PV is a permanent error, not retried",
			objects: withCSINode,
			mutate: func(pv *v1.PersistentVolume, _ *storagev1.VolumeAttachment) {
				pv.Spec.CSI = nil
				pv.Spec.HostPath = &v1.HostPathVolumeSource{Path: "/data"}
			},
			check: func(t *testing.T, e *env, _ string) {
				ae := e.va("va-1").Status.AttachError
				if ae == nil || !strings.Contains(ae.Message, "CSI migration") || strings.Contains(ae.Message, "permanent error") {
					t.Errorf("attachError = %+v, want a CSI migration message with no internal prefix", ae)
				}
				wantNoPublish(t, e)
			},
		},
		{
			name:    "driver without PUBLISH_UNPUBLISH_VOLUME is marked attached without finalizer",
			opts:    envOptions{trivial: true},
			objects: withCSINode,
			check: func(t *testing.T, e *env, _ string) {
				va := e.va("va-1")
				if !va.Status.Attached || len(va.Finalizers) != 0 {
					t.Errorf("VA attached=%v finalizers=%v, want attached without finalizers", va.Status.Attached, va.Finalizers)
				}
				wantNoPublish(t, e)
			},
		},
		{
			name:    "VolumeAttachment of another driver is ignored",
			objects: withCSINode,
			mutate:  func(_ *v1.PersistentVolume, va *storagev1.VolumeAttachment) { va.Spec.Attacher = "other.example.com" },
			check: func(t *testing.T, e *env, _ string) {
				va := e.va("va-1")
				if va.Status.Attached || len(va.Finalizers) != 0 || va.Status.AttachError != nil {
					t.Errorf("foreign VA was touched: %+v", va)
				}
			},
		},
		{
			name:    "already attached VA is left alone",
			objects: withCSINode,
			mutate:  func(_ *v1.PersistentVolume, va *storagev1.VolumeAttachment) { va.Status.Attached = true },
			check: func(t *testing.T, e *env, _ string) {
				wantNoPublish(t, e)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.objects != nil {
				objs = tc.objects()
			}
			e := newEnv(t, tc.opts, objs...)
			volumeID := e.createVolume("vol-1")
			pv, va := pvFor("pv-1", volumeID), vaFor("va-1", "pv-1", testNode)
			if tc.mutate != nil {
				tc.mutate(pv, va)
			}
			e.create(pv, va)
			e.drv.Faults().Set(tc.faults)
			err := e.sync("va-1")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, wantErr %v", err, tc.wantErr)
			}
			tc.check(t, e, volumeID)
		})
	}
}

func TestSyncDetach(t *testing.T) {
	tests := []struct {
		name string
		opts envOptions
		node *v1.Node
		// stage stages the volume on the node after the attach, so that a
		// plain unpublish is refused.
		stage bool
		// extra objects exist from the start (e.g. a CSIDriver).
		extra []runtime.Object
		// beforeDelete runs after the attach, before deletion starts.
		beforeDelete func(e *env)
		wantErr      bool
		// noUnpublish: no ControllerUnpublishVolume may be sent at all.
		noUnpublish bool
		wantFence   bool
		wantCode    string
		// wantRecord is the fence reason recorded on the VA, "" for none.
		wantRecord cutoff.Reason
		wantEvents []string
		check      func(t *testing.T, e *env)
	}{
		{
			name:       "plain detach from a healthy node",
			node:       testobj.Node(testNode),
			wantCode:   "OK",
			wantEvents: []string{"Normal Attached", "Normal Detached"},
		},
		{
			// Upstream records none; a routine Event is a write per detach.
			name:     "without --attach-events a plain detach records no Event",
			opts:     envOptions{quietAttach: true},
			node:     testobj.Node(testNode),
			wantCode: "OK",
		},
		{
			name:       "without --attach-events a fenced detach is still recorded",
			opts:       envOptions{quietAttach: true},
			node:       testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)),
			stage:      true,
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonOutOfService,
			wantEvents: []string{"Normal FencedDetach"},
		},
		{
			name:       "fenced detach from an out-of-service node",
			node:       testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)),
			stage:      true,
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonOutOfService,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:       "fenced detach from a node with FencingComplete",
			node:       testobj.Node(testNode, unknown, testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue)),
			stage:      true,
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonFenced,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:       "fence reason but driver cannot fence: plain unpublish and a warning",
			opts:       envOptions{noFence: true},
			node:       testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)),
			wantCode:   "OK",
			wantEvents: []string{"Normal Attached", "Warning FenceUnsupported", "Normal Detached"},
		},
		{
			name:       "strict driver refuses a plain detach of a staged volume",
			node:       testobj.Node(testNode),
			stage:      true,
			wantErr:    true,
			wantCode:   "FailedPrecondition",
			wantEvents: []string{"Normal Attached", "Warning DetachFailed"},
			check: func(t *testing.T, e *env) {
				va := e.va("va-1")
				if !slices.Contains(va.Finalizers, testFinalizer) {
					t.Errorf("finalizer dropped after a failed unpublish: %v", va.Finalizers)
				}
				de := va.Status.DetachError
				if de == nil || de.ErrorCode == nil || *de.ErrorCode != int32(codes.FailedPrecondition) {
					t.Errorf("detachError = %+v, want FailedPrecondition", de)
				}
			},
		},
		{
			name:       "node object gone: fenced when the driver can fence",
			node:       nil,
			stage:      true,
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonNodeGone,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:       "node object gone, driver cannot fence: plain as upstream",
			opts:       envOptions{noFence: true},
			node:       nil,
			wantCode:   "OK",
			wantEvents: []string{"Normal Attached", "Normal Detached"},
		},
		{
			name:        "safe-detach node, driver cannot fence: refused, finalizer kept",
			opts:        envOptions{noFence: true},
			node:        testobj.Node(testNode, notReady, testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)),
			extra:       []runtime.Object{safeDetachDriver()},
			wantErr:     true,
			noUnpublish: true,
			wantEvents:  []string{"Normal Attached", "Warning FenceRequired"},
			check: func(t *testing.T, e *env) {
				va := e.va("va-1")
				if !slices.Contains(va.Finalizers, testFinalizer) || va.Status.DetachError == nil {
					t.Errorf("finalizers=%v detachError=%v, want finalizer kept and detachError set", va.Finalizers, va.Status.DetachError)
				}
			},
		},
		{
			name:       "safe-detach node, driver can fence: fenced",
			node:       testobj.Node(testNode, notReady, testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)),
			extra:      []runtime.Object{safeDetachDriver()},
			stage:      true,
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonSafeDetach,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:  "recorded fence, node Ready again and untainted: still fenced",
			node:  testobj.Node(testNode),
			stage: true,
			beforeDelete: func(e *env) {
				e.updateVA("va-1", withRecord(cutoff.ReasonOutOfService, testNode))
			},
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonOutOfService,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:       "blind: out-of-service node, driver can fence: plain, as upstream",
			opts:       envOptions{blind: true},
			node:       testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)),
			wantCode:   "OK",
			wantEvents: []string{"Normal Attached", "Normal Detached"},
		},
		{
			name:  "blind: a recorded fence is still fenced",
			opts:  envOptions{blind: true},
			node:  testobj.Node(testNode),
			stage: true,
			beforeDelete: func(e *env) {
				e.updateVA("va-1", withRecord(cutoff.ReasonOutOfService, testNode))
			},
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonOutOfService,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name: "recorded fence, driver no longer fences: refused",
			opts: envOptions{noFence: true},
			node: testobj.Node(testNode),
			beforeDelete: func(e *env) {
				e.updateVA("va-1", withRecord(cutoff.ReasonOutOfService, testNode))
			},
			wantErr:     true,
			noUnpublish: true,
			wantRecord:  cutoff.ReasonOutOfService,
			wantEvents:  []string{"Normal Attached", "Warning FenceRequired"},
		},
		{
			name:  "re-installed node with a new CSI node ID: the attach-time ID is fenced",
			node:  testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)),
			stage: true,
			beforeDelete: func(e *env) {
				if _, err := e.client.StorageV1().CSINodes().Update(e.ctx, csiNodeFor(testNode, "node-1-reinstalled"), metav1.UpdateOptions{}); err != nil {
					t.Fatalf("update CSINode: %v", err)
				}
				e.waitCSINodeID(testNode, "node-1-reinstalled")
			},
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonOutOfService,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name: "CSINode gone: node ID from the annotation",
			node: testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)),
			beforeDelete: func(e *env) {
				if err := e.client.StorageV1().CSINodes().Delete(e.ctx, testNode, metav1.DeleteOptions{}); err != nil {
					t.Fatalf("delete CSINode: %v", err)
				}
			},
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonOutOfService,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:  "controller's fence intent, node Ready and untainted: fenced, the intent's reason recorded",
			node:  testobj.Node(testNode),
			stage: true,
			beforeDelete: func(e *env) {
				e.updateVA("va-1", withIntent(cutoff.ReasonOutOfService))
			},
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonOutOfService,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:  "controller's fence intent, driver cannot fence, vouched reason: plain with a warning",
			opts:  envOptions{noFence: true},
			node:  testobj.Node(testNode),
			stage: false,
			beforeDelete: func(e *env) {
				e.updateVA("va-1", withIntent(cutoff.ReasonOutOfService))
			},
			wantCode:   "OK",
			wantEvents: []string{"Normal Attached", "Warning FenceUnsupported", "Normal Detached"},
		},
		{
			name:  "quarantined node that is Ready again, safe-detach driver: fenced",
			node:  testobj.Node(testNode, testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)),
			extra: []runtime.Object{safeDetachDriver()},
			stage: true,
			beforeDelete: func(e *env) {
				e.waitNodeCached(testNode)
			},
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonSafeDetach,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:  "volume still in volumesInUse of a Ready node: a forced detach, fenced",
			node:  testobj.Node(testNode),
			stage: true,
			beforeDelete: func(e *env) {
				e.updateNode(testNode, testobj.VolumesInUse(nodeutil.CSIUniqueVolumeName(testDriver, e.pv("pv-1").Spec.CSI.VolumeHandle)))
			},
			wantFence:  true,
			wantCode:   "OK",
			wantRecord: cutoff.ReasonInUse,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name:  "fenced unpublish answered NOT_FOUND: fenced by absence, done",
			node:  testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)),
			stage: true,
			beforeDelete: func(e *env) {
				e.drv.Faults().Set([]faults.Fault{{Method: "ControllerUnpublishVolume", Code: codes.NotFound, Count: 1}})
			},
			wantFence:  true,
			wantCode:   "NotFound",
			wantRecord: cutoff.ReasonOutOfService,
			wantEvents: []string{"Normal Attached", "Normal FencedDetach"},
		},
		{
			name: "plain unpublish answered NOT_FOUND: retried, as upstream",
			node: testobj.Node(testNode),
			beforeDelete: func(e *env) {
				e.drv.Faults().Set([]faults.Fault{{Method: "ControllerUnpublishVolume", Code: codes.NotFound, Count: 1}})
			},
			wantErr:    true,
			wantCode:   "NotFound",
			wantEvents: []string{"Normal Attached", "Warning DetachFailed"},
		},
		{
			name: "other finalizers stay and status is marked detached",
			node: testobj.Node(testNode),
			beforeDelete: func(e *env) {
				e.updateVA("va-1", func(va *storagev1.VolumeAttachment) {
					va.Finalizers = append(va.Finalizers, "example.com/keep")
				})
			},
			wantCode:   "OK",
			wantEvents: []string{"Normal Attached", "Normal Detached"},
			check: func(t *testing.T, e *env) {
				va := e.va("va-1")
				if !slices.Equal(va.Finalizers, []string{"example.com/keep"}) || va.Status.Attached {
					t.Errorf("finalizers=%v attached=%v, want [example.com/keep] and detached", va.Finalizers, va.Status.Attached)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(withCSINode(), tc.extra...)
			if tc.node != nil {
				objs = append(objs, tc.node)
			}
			e := newEnv(t, tc.opts, objs...)
			volumeID := e.attached()
			if tc.stage {
				e.stage(volumeID, e.va("va-1").Status.AttachmentMetadata)
			}
			if tc.beforeDelete != nil {
				tc.beforeDelete(e)
			}
			e.markDeleting("va-1")
			err := e.sync("va-1")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, wantErr %v", err, tc.wantErr)
			}
			all := e.audit("ControllerUnpublishVolume")
			calls := audit.Filter(all, audit.Volume(volumeID), audit.Node(testNode))
			switch {
			case tc.noUnpublish && len(all) != 0:
				t.Fatalf("ControllerUnpublishVolume calls = %+v, want none", all)
			case !tc.noUnpublish && (len(all) != 1 || len(calls) != 1 || calls[0].Fence != tc.wantFence || calls[0].Code != tc.wantCode):
				t.Fatalf("ControllerUnpublishVolume calls = %+v, want one to node ID %s with fence=%v code=%s", all, testNode, tc.wantFence, tc.wantCode)
			}
			if got := recordReason(t, e.va("va-1")); got != tc.wantRecord {
				t.Errorf("fence record reason = %q, want %q", got, tc.wantRecord)
			}
			if !tc.wantErr && slices.Contains(e.va("va-1").Finalizers, testFinalizer) {
				t.Errorf("finalizer still present after a successful detach")
			}
			wantEvents(t, e, tc.wantEvents...)
			if tc.check != nil {
				tc.check(t, e)
			}
		})
	}
}

// recordReason returns the reason of the VA's fence record, "" for none.
func recordReason(t *testing.T, va *storagev1.VolumeAttachment) cutoff.Reason {
	t.Helper()
	rec, err := fencing.RecordOf(va)
	if err != nil {
		t.Fatalf("fence record: %v", err)
	}
	if rec == nil {
		return ""
	}
	if rec.NodeID != testNode {
		t.Errorf("fence record names node ID %q, want %q", rec.NodeID, testNode)
	}
	return rec.Reason
}

// withRecord saves a fence record on a VA as an earlier attempt would have.
func withRecord(reason cutoff.Reason, nodeID string) func(*storagev1.VolumeAttachment) {
	return func(va *storagev1.VolumeAttachment) {
		if va.Annotations == nil {
			va.Annotations = map[string]string{}
		}
		va.Annotations[names.FenceRecordAnnotation] = fencing.NewRecord(reason, nodeID, time.Now()).Encode()
	}
}

// withIntent saves a controller's fence intent on a VA, without a node ID.
func withIntent(reason cutoff.Reason) func(*storagev1.VolumeAttachment) {
	return func(va *storagev1.VolumeAttachment) {
		if va.Annotations == nil {
			va.Annotations = map[string]string{}
		}
		va.Annotations[names.FenceIntentAnnotation] = cutoff.NewRecord(reason, "", cutoff.ByControllerPrefix+"podgc", time.Now()).Encode()
	}
}

// attached creates a volume, PV and VA and attaches them through a sync;
// pvOpts change the PV before it is created.
func (e *env) attached(pvOpts ...func(*v1.PersistentVolume)) string {
	e.t.Helper()
	volumeID := e.createVolume("vol-1")
	pv := pvFor("pv-1", volumeID)
	for _, o := range pvOpts {
		o(pv)
	}
	e.create(pv, vaFor("va-1", "pv-1", testNode))
	if err := e.sync("va-1"); err != nil {
		e.t.Fatalf("attach: %v", err)
	}
	return volumeID
}

func (e *env) create(objs ...runtime.Object) {
	e.t.Helper()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *v1.PersistentVolume:
			if _, err = e.client.CoreV1().PersistentVolumes().Create(e.ctx, o, metav1.CreateOptions{}); err == nil {
				// Syncs read PVs from the cache.
				err = wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
					_, err := e.ctrl.pvLister.Get(o.Name)
					return err == nil, nil
				})
			}
		case *storagev1.VolumeAttachment:
			_, err = e.client.StorageV1().VolumeAttachments().Create(e.ctx, o, metav1.CreateOptions{})
		default:
			e.t.Fatalf("create: unsupported %T", o)
		}
		if err != nil {
			e.t.Fatalf("create %T: %v", o, err)
		}
	}
}

// withCSINode gives the test node a CSINode whose node ID is its name.
func withCSINode() []runtime.Object {
	return []runtime.Object{csiNodeFor(testNode, testNode)}
}

func wantNoPublish(t *testing.T, e *env) {
	t.Helper()
	if n := len(e.audit("ControllerPublishVolume")); n != 0 {
		t.Errorf("ControllerPublishVolume calls = %d, want 0", n)
	}
}

func withSecretRef(pv *v1.PersistentVolume, _ *storagev1.VolumeAttachment) {
	pv.Spec.CSI.ControllerPublishSecretRef = &v1.SecretReference{Name: "creds", Namespace: "storage"}
}

func wantEvents(t *testing.T, e *env, want ...string) {
	t.Helper()
	if got := e.events(); !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}
