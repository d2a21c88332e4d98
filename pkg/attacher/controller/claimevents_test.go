package controller

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// recordedEvent is one Event a captureRecorder received.
type recordedEvent struct {
	Object                v1.ObjectReference
	Type, Reason, Message string
}

// captureRecorder is a fake record.EventRecorder that keeps each Event with
// a reference to the object it is about, so that tests can tell the Events
// on a VolumeAttachment from those on its claim.
type captureRecorder struct {
	mu     sync.Mutex
	events []recordedEvent
}

var _ record.EventRecorder = &captureRecorder{}

// Event implements record.EventRecorder. An object the scheme cannot
// reference is recorded with an empty reference, which no test expects.
func (r *captureRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	var ref v1.ObjectReference
	if p, err := reference.GetReference(scheme.Scheme, obj); err == nil {
		ref = *p
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, recordedEvent{Object: ref, Type: eventtype, Reason: reason, Message: message})
}

// Eventf implements record.EventRecorder.
func (r *captureRecorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

// AnnotatedEventf implements record.EventRecorder; annotations are dropped.
func (r *captureRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	r.Eventf(obj, eventtype, reason, format, args...)
}

// take returns the Events recorded since the last call.
func (r *captureRecorder) take() []recordedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

const (
	claimNamespace = "db"
	claimName      = "data-db-0"
	claimUID       = types.UID("uid-claim")
)

// boundTo binds the PV to the test claim, as the PV controller does.
func boundTo(pv *v1.PersistentVolume) {
	pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claimNamespace, Name: claimName, UID: claimUID}
	pv.Status.Phase = v1.VolumeBound
}

// preBound names the claim the way an operator pre-binds a static PV: with
// namespace and name only.
func preBound(pv *v1.PersistentVolume) {
	pv.Spec.ClaimRef = &v1.ObjectReference{Namespace: claimNamespace, Name: claimName}
}

// released is a PV whose claim was deleted (reclaim policy Retain).
func released(pv *v1.PersistentVolume) {
	boundTo(pv)
	pv.Status.Phase = v1.VolumeReleased
}

// TestDetachEventsOnClaim: a fenced detach, a failed detach, a refused one
// and a plain one from a cut-off node (the driver cannot fence) are recorded on the claim bound to the volume too, with the
// VolumeAttachment's reason and message; a PV without a live claim gets
// none, and routine Events stay on the VolumeAttachment.
func TestDetachEventsOnClaim(t *testing.T) {
	outOfService := testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	quarantined := testobj.Node(testNode, notReady, testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule))
	tests := []struct {
		name  string
		opts  envOptions
		node  *v1.Node
		extra []runtime.Object
		pv    func(*v1.PersistentVolume)
		// stage stages the volume so that a plain unpublish is refused.
		stage bool
		// wantClaim lists the claim's Events as "Type Reason"; each must
		// repeat a VolumeAttachment Event's message.
		wantClaim []string
		// wantClaimUID is the claim UID the Events name.
		wantClaimUID types.UID
	}{
		{
			name:         "fenced detach",
			node:         outOfService,
			pv:           boundTo,
			stage:        true,
			wantClaim:    []string{"Normal FencedDetach"},
			wantClaimUID: claimUID,
		},
		{
			name:         "detach failed: strict driver refuses a plain unpublish",
			node:         testobj.Node(testNode),
			pv:           boundTo,
			stage:        true,
			wantClaim:    []string{"Warning DetachFailed"},
			wantClaimUID: claimUID,
		},
		{
			name:         "fence required but the driver cannot fence: refused",
			opts:         envOptions{noFence: true},
			node:         quarantined,
			extra:        []runtime.Object{safeDetachDriver()},
			pv:           boundTo,
			wantClaim:    []string{"Warning FenceRequired"},
			wantClaimUID: claimUID,
		},
		{
			name:         "node cut off but the driver cannot fence: a plain detach, warned on the claim",
			opts:         envOptions{noFence: true},
			node:         outOfService,
			pv:           boundTo,
			wantClaim:    []string{"Warning FenceUnsupported"},
			wantClaimUID: claimUID,
		},
		{
			name:      "fenced detach, pre-bound claimRef without kind",
			node:      outOfService,
			pv:        preBound,
			stage:     true,
			wantClaim: []string{"Normal FencedDetach"},
		},
		{
			name: "plain detach stays on the VolumeAttachment",
			node: testobj.Node(testNode),
			pv:   boundTo,
		},
		{
			name:  "static PV without a claim",
			node:  outOfService,
			pv:    func(*v1.PersistentVolume) {},
			stage: true,
		},
		{
			name:  "released PV: its claim is gone",
			node:  outOfService,
			pv:    released,
			stage: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(withCSINode(), tc.extra...)
			e := newEnv(t, tc.opts, append(objs, tc.node)...)
			volumeID := e.attached(tc.pv)
			if tc.stage {
				e.stage(volumeID, e.va("va-1").Status.AttachmentMetadata)
			}
			e.markDeleting("va-1")
			_ = e.sync("va-1") // success or failure is TestSyncDetach's; here only the Events count

			var onVA, onClaim []recordedEvent
			for _, ev := range e.recorder.take() {
				switch ev.Object.Kind {
				case "VolumeAttachment":
					onVA = append(onVA, ev)
				case "PersistentVolumeClaim":
					onClaim = append(onClaim, ev)
				default:
					t.Errorf("Event %s %s on unexpected object %+v", ev.Type, ev.Reason, ev.Object)
				}
			}
			var got []string
			for _, ev := range onClaim {
				got = append(got, ev.Type+" "+ev.Reason)
				want := v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claimNamespace, Name: claimName, UID: tc.wantClaimUID}
				if ev.Object != want {
					t.Errorf("claim Event %s names %+v, want %+v", ev.Reason, ev.Object, want)
				}
				if !slices.ContainsFunc(onVA, func(va recordedEvent) bool {
					return va.Type == ev.Type && va.Reason == ev.Reason && va.Message == ev.Message
				}) {
					t.Errorf("claim Event %s %s %q repeats no VolumeAttachment Event: %+v", ev.Type, ev.Reason, ev.Message, onVA)
				}
			}
			if !slices.Equal(got, tc.wantClaim) {
				t.Errorf("claim Events = %q, want %q (VolumeAttachment Events: %+v)", got, tc.wantClaim, onVA)
			}
		})
	}
}
