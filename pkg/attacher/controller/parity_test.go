package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/names"
)

// Tests of the attach preconditions upstream's external-attacher v4.13
// also enforces; the differential test (test/differential) compares the
// outcomes with upstream's on a real API server.

func deletingPV(pv *v1.PersistentVolume) *v1.PersistentVolume {
	pv.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now()))
	pv.Finalizers = []string{"kubernetes.io/pv-protection"}
	return pv
}

func TestAttachablePV(t *testing.T) {
	inTree := pvFor("pv", "vol")
	inTree.Spec.CSI = nil
	inTree.Spec.HostPath = &v1.HostPathVolumeSource{Path: "/data"}
	foreign := pvFor("pv", "vol")
	foreign.Spec.CSI.Driver = "other.example.com"
	tests := []struct {
		name string
		pv   *v1.PersistentVolume
		// want is a substring of the error, "" for none.
		want string
	}{
		{"CSI PV of this driver", pvFor("pv", "vol"), ""},
		{"marked for deletion", deletingPV(pvFor("pv", "vol")), `PersistentVolume "pv" is marked for deletion`},
		{"in-tree PV", inTree, "not a CSI volume"},
		{"another driver's PV", foreign, `belongs to driver "other.example.com"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := attachablePV(tc.pv, testDriver)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("attachablePV = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("attachablePV = %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(err, errPermanent) {
				t.Errorf("attachablePV = %v, want a permanent error (retrying cannot change it)", err)
			}
		})
	}
}

func TestPublishReadOnly(t *testing.T) {
	readOnly := pvFor("pv", "vol")
	readOnly.Spec.CSI.ReadOnly = true
	inTree := pvFor("pv", "vol")
	inTree.Spec.CSI = nil
	tests := []struct {
		name      string
		pv        *v1.PersistentVolume
		supported bool
		want      bool
	}{
		{"readOnly PV, driver with PUBLISH_READONLY", readOnly, true, true},
		{"readOnly PV, driver without PUBLISH_READONLY", readOnly, false, false},
		{"read-write PV, driver with PUBLISH_READONLY", pvFor("pv", "vol"), true, false},
		{"read-write PV, driver without PUBLISH_READONLY", pvFor("pv", "vol"), false, false},
		{"no CSI source", inTree, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := publishReadOnly(tc.pv, tc.supported); got != tc.want {
				t.Errorf("publishReadOnly = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAttachNodeID(t *testing.T) {
	otherDriver := csiNodeFor(testNode, "x")
	otherDriver.Spec.Drivers[0].Name = "other.example.com"
	tests := []struct {
		name    string
		csiNode *storagev1.CSINode
		want    string
		wantErr string
	}{
		{"CSINode entry", csiNodeFor(testNode, "id-1"), "id-1", ""},
		{"no CSINode", nil, "", "has no CSINode"},
		{"CSINode without the driver", otherDriver, "", "does not contain driver"},
		{"CSINode entry without an ID", csiNodeFor(testNode, ""), "", "does not contain driver"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := attachNodeID(tc.csiNode, testNode, testDriver)
			if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("attachNodeID = %q, %v; want %q, error containing %q", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestAttachParity drives one sync per case through the controller, as
// TestSyncAttach does, for the paths where upstream refuses or records an
// error before ControllerPublishVolume.
func TestAttachParity(t *testing.T) {
	tests := []struct {
		name    string
		opts    envOptions
		mutate  func(pv *v1.PersistentVolume)
		reactor k8stesting.ReactionFunc
		wantErr bool
		// wantAttachError is a substring of status.attachError, "" for an
		// attached VA.
		wantAttachError string
		wantPublish     bool
		wantPVFinalizer bool
		wantVAFinalizer bool
		wantEvents      []string
	}{
		{
			name:            "readOnly PV to a driver without PUBLISH_READONLY: published read-write",
			opts:            envOptions{minimal: true, noFence: true},
			mutate:          func(pv *v1.PersistentVolume) { pv.Spec.CSI.ReadOnly = true },
			wantPublish:     true,
			wantPVFinalizer: true,
			wantVAFinalizer: true,
			wantEvents:      []string{"Normal Attached"},
		},
		{
			name:            "readOnly PV to a driver with PUBLISH_READONLY",
			mutate:          func(pv *v1.PersistentVolume) { pv.Spec.CSI.ReadOnly = true },
			wantPublish:     true,
			wantPVFinalizer: true,
			wantVAFinalizer: true,
			wantEvents:      []string{"Normal Attached"},
		},
		{
			name:            "PV marked for deletion is not attached",
			mutate:          func(pv *v1.PersistentVolume) { deletingPV(pv) },
			wantAttachError: "marked for deletion",
			wantEvents:      []string{"Warning AttachFailed"},
		},
		{
			name: "PV deleted after the cache saw it: the API's answer to the finalizer write stops the attach",
			reactor: func(a k8stesting.Action) (bool, runtime.Object, error) {
				pv := deletingPV(pvFor("pv-1", "vol"))
				pv.Finalizers = append(pv.Finalizers, testFinalizer)
				return true, pv, nil
			},
			wantAttachError: "marked for deletion",
			wantEvents:      []string{"Warning AttachFailed"},
		},
		{
			name: "failed PV finalizer write is recorded and retried",
			reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("etcd is on holiday")
			},
			wantErr:         true,
			wantAttachError: "add finalizer to PV",
			wantEvents:      []string{"Warning AttachFailed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts, csiNodeFor(testNode, testNode))
			volumeID := e.createVolume("vol-1")
			pv, va := pvFor("pv-1", volumeID), vaFor("va-1", "pv-1", testNode)
			if tc.mutate != nil {
				tc.mutate(pv)
			}
			e.create(pv, va)
			if tc.reactor != nil {
				e.client.PrependReactor("patch", "persistentvolumes", tc.reactor)
			}
			if err := e.sync("va-1"); (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, wantErr %v", err, tc.wantErr)
			}
			got := e.va("va-1")
			switch ae := got.Status.AttachError; {
			case tc.wantAttachError == "" && (ae != nil || !got.Status.Attached):
				t.Errorf("status = %+v, want attached without error", got.Status)
			case tc.wantAttachError != "" && (ae == nil || !strings.Contains(ae.Message, tc.wantAttachError) || got.Status.Attached):
				t.Errorf("status = %+v, want not attached, attachError containing %q", got.Status, tc.wantAttachError)
			}
			if n := len(audit.Filter(e.audit("ControllerPublishVolume"), audit.OK())); (n == 1) != tc.wantPublish || n > 1 {
				t.Errorf("successful ControllerPublishVolume calls = %d, want publish %v", n, tc.wantPublish)
			}
			if has := slices.Contains(e.pv("pv-1").Finalizers, testFinalizer); has != tc.wantPVFinalizer && tc.reactor == nil {
				t.Errorf("PV finalizer present = %v, want %v", has, tc.wantPVFinalizer)
			}
			if has := slices.Contains(got.Finalizers, testFinalizer); has != tc.wantVAFinalizer {
				t.Errorf("VA finalizer present = %v, want %v", has, tc.wantVAFinalizer)
			}
			wantEvents(t, e, tc.wantEvents...)
		})
	}
}

// TestAttachClearsErrorTheCacheMissed: a sync that acts on a cached copy
// without the attachError this attacher wrote a moment ago (a PV or
// CSINode event re-queues the VA at once) still clears it when the attach
// succeeds, as upstream's later retry does.
func TestAttachClearsErrorTheCacheMissed(t *testing.T) {
	tests := []struct {
		name string
		opts envOptions
	}{
		{name: "ControllerPublishVolume"},
		{name: "trivial driver", opts: envOptions{trivial: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts, csiNodeFor(testNode, testNode))
			// A retry: finalizer and node ID are in place, so nothing
			// refreshes the VA before the status write.
			va := vaFor("va-1", "pv-1", testNode)
			va.Finalizers = []string{testFinalizer}
			va.Annotations = map[string]string{names.NodeIDAnnotation: testNode}
			e.create(pvFor("pv-1", e.createVolume("vol-1")), va)
			e.waitCached("va-1")
			cached, err := e.ctrl.vaLister.Get("va-1")
			if err != nil {
				t.Fatal(err)
			}
			withError := e.va("va-1")
			withError.Status.AttachError = &storagev1.VolumeError{Message: "get PV pv-1: not found"}
			if _, err := e.client.StorageV1().VolumeAttachments().UpdateStatus(e.ctx, withError, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := e.ctrl.syncAttach(e.ctx, cached.DeepCopy()); err != nil {
				t.Fatalf("syncAttach: %v", err)
			}
			if got := e.va("va-1").Status; !got.Attached || got.AttachError != nil {
				t.Errorf("status = %+v, want attached without attachError", got)
			}
		})
	}
}
