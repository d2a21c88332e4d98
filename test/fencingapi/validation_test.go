package fencingapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	typedv1alpha1 "fenceline.io/fenceline/pkg/generated/clientset/versioned/typed/fencing/v1alpha1"
)

// rejection is one write the API server must refuse as Invalid, with a
// message containing want.
type rejection struct {
	name string
	do   func(ctx context.Context, api fencingv1alpha1Client) error
	want string
}

// fencingv1alpha1Client is the generated typed client of the group.
type fencingv1alpha1Client = typedv1alpha1.FencingV1alpha1Interface

var create = metav1.CreateOptions{}

func createClass(mutate func(*fencingv1alpha1.FenceClass)) func(context.Context, fencingv1alpha1Client) error {
	return func(ctx context.Context, api fencingv1alpha1Client) error {
		fc := redfishClass("bad-class")
		mutate(fc)
		_, err := api.FenceClasses().Create(ctx, fc, create)
		return err
	}
}

func createPolicy(mutate func(*fencingv1alpha1.FencePolicy)) func(context.Context, fencingv1alpha1Client) error {
	return func(ctx context.Context, api fencingv1alpha1Client) error {
		fp := fencePolicy("bad-policy")
		mutate(fp)
		_, err := api.FencePolicies().Create(ctx, fp, create)
		return err
	}
}

// updateRequest creates a FencingRequest (optionally approved), then updates
// its spec with mutate.
func updateRequest(name string, approved bool, mutate func(*fencingv1alpha1.FencingRequestSpec)) func(context.Context, fencingv1alpha1Client) error {
	return func(ctx context.Context, api fencingv1alpha1Client) error {
		fr := fencingRequest(name, "worker-"+name)
		if approved {
			fr.Spec.Approved = ptr.To(true)
		}
		fr, err := api.FencingRequests().Create(ctx, fr, create)
		if err != nil {
			return err
		}
		mutate(&fr.Spec)
		_, err = api.FencingRequests().Update(ctx, fr, metav1.UpdateOptions{})
		return err
	}
}

var rejections = []rejection{
	{
		name: "StorageFence driver is immutable",
		do:   changeStorageFence("sf-driver", func(sf *fencingv1alpha1.StorageFence) { sf.Spec.Driver = "other.example.com" }),
		want: "driver is immutable",
	},
	{
		name: "StorageFence nodeID is immutable",
		do:   changeStorageFence("sf-node", func(sf *fencingv1alpha1.StorageFence) { sf.Spec.NodeID = "node-9" }),
		want: "nodeID is immutable",
	},
	{
		name: "FencingRequest attempt Succeeded without a read-back Off",
		do: func(ctx context.Context, api fencingv1alpha1Client) error {
			fr, err := api.FencingRequests().Create(ctx, fencingRequest("unverified", "worker-7"), create)
			if err != nil {
				return err
			}
			fr.Status.Attempts = []fencingv1alpha1.FenceAttempt{{
				Level: 1, FenceClass: "redfish-forceoff", Method: "Redfish", StartTime: metav1.Now(),
				Result: fencingv1alpha1.FenceAttemptSucceeded, VerifiedPowerState: "On",
			}}
			_, err = api.FencingRequests().UpdateStatus(ctx, fr, metav1.UpdateOptions{})
			return err
		},
		want: "a Succeeded attempt must carry verifiedPowerState Off",
	},
	{
		name: "FenceClass exec image is not supported yet",
		do: createClass(func(fc *fencingv1alpha1.FenceClass) {
			fc.Spec.Method, fc.Spec.Redfish = fencingv1alpha1.FenceMethodExec, nil
			fc.Spec.Exec = &fencingv1alpha1.ExecSettings{Agent: "fence_ipmilan", Image: "example.com/fence-agents:1"}
		}),
		want: "exec.image is not supported yet",
	},
	{
		name: "FencingRequest nodeName is immutable",
		do:   updateRequest("rename", false, func(s *fencingv1alpha1.FencingRequestSpec) { s.NodeName = "worker-other" }),
		want: "nodeName is immutable",
	},
	{
		name: "FencingRequest action is immutable",
		do:   updateRequest("reaction", false, func(s *fencingv1alpha1.FencingRequestSpec) { s.Action = fencingv1alpha1.FenceActionReboot }),
		want: "action is immutable",
	},
	{
		name: "FencingRequest nodeUID is immutable once set",
		do:   updateRequest("reuid", false, func(s *fencingv1alpha1.FencingRequestSpec) { s.NodeUID = "another" }),
		want: "nodeUID is immutable once set",
	},
	{
		name: "FencingRequest spec is frozen once approved",
		do:   updateRequest("approved", true, func(s *fencingv1alpha1.FencingRequestSpec) { s.Reason = "Manual" }),
		want: "spec is immutable once approved is true",
	},
	{
		name: "FencingRequest needs a reason",
		do: func(ctx context.Context, api fencingv1alpha1Client) error {
			fr := fencingRequest("no-reason", "worker-9")
			fr.Spec.Reason = ""
			_, err := api.FencingRequests().Create(ctx, fr, create)
			return err
		},
		want: "spec.reason",
	},
	{
		name: "FencingRequest status phase outside the enum",
		do: func(ctx context.Context, api fencingv1alpha1Client) error {
			fr, err := api.FencingRequests().Create(ctx, fencingRequest("bad-phase", "worker-8"), create)
			if err != nil {
				return err
			}
			fr.Status.Phase = "Done"
			_, err = api.FencingRequests().UpdateStatus(ctx, fr, metav1.UpdateOptions{})
			return err
		},
		// Kubernetes 1.29 names the field "phase" in a status update's
		// error, later minors "status.phase".
		want: `phase: Unsupported value: "Done"`,
	},
	{
		name: "FenceClass verify None on a power method",
		do:   createClass(func(fc *fencingv1alpha1.FenceClass) { fc.Spec.Verify = fencingv1alpha1.VerifyNone }),
		want: "verify None is not allowed for power methods",
	},
	{
		name: "FenceClass retries above 10",
		do:   createClass(func(fc *fencingv1alpha1.FenceClass) { fc.Spec.Retries = ptr.To[int32](11) }),
		want: "spec.retries: Invalid value: 11: spec.retries in body should be less than or equal to 10",
	},
	{
		name: "FenceClass negative retries",
		do:   createClass(func(fc *fencingv1alpha1.FenceClass) { fc.Spec.Retries = ptr.To[int32](-1) }),
		want: "should be greater than or equal to 0",
	},
	{
		name: "FenceClass unknown method",
		do:   createClass(func(fc *fencingv1alpha1.FenceClass) { fc.Spec.Method = "SSH"; fc.Spec.Redfish = nil }),
		want: `spec.method: Unsupported value: "SSH"`,
	},
	{
		name: "FenceClass action timeout out of range",
		do: createClass(func(fc *fencingv1alpha1.FenceClass) {
			fc.Spec.Timeouts.Action = &metav1.Duration{Duration: 20 * time.Minute}
		}),
		want: "action timeout must be between 1s and 10m",
	},
	{
		name: "FenceClass poll interval longer than verify",
		do: createClass(func(fc *fencingv1alpha1.FenceClass) {
			fc.Spec.Timeouts.PollInterval = &metav1.Duration{Duration: 30 * time.Second}
		}),
		want: "pollInterval must not exceed verify",
	},
	{
		name: "FenceClass Exec without exec settings",
		do: createClass(func(fc *fencingv1alpha1.FenceClass) {
			fc.Spec.Method, fc.Spec.Redfish = fencingv1alpha1.FenceMethodExec, nil
		}),
		want: "exec settings are required with method Exec",
	},
	{
		name: "FenceClass ipmi settings on a Redfish class",
		do:   createClass(func(fc *fencingv1alpha1.FenceClass) { fc.Spec.IPMI = &fencingv1alpha1.IPMISettings{} }),
		want: "ipmi settings are allowed only with method IPMI",
	},
	{
		name: "FenceClass exec args may not set the password",
		do: func(ctx context.Context, api fencingv1alpha1Client) error {
			fc := execClass("bad-exec")
			fc.Spec.Exec.Args["password"] = "hunter2"
			_, err := api.FenceClasses().Create(ctx, fc, create)
			return err
		},
		want: "are set by Fenceline",
	},
	{
		name: "FenceTarget systemID and plug together",
		do: func(ctx context.Context, api fencingv1alpha1Client) error {
			ft := fenceTarget("worker-bad")
			ft.Spec.Endpoints[0].Plug = "3"
			_, err := api.FenceTargets().Create(ctx, ft, create)
			return err
		},
		want: "systemID and plug are mutually exclusive",
	},
	{
		name: "FencePolicy levels out of order",
		do: createPolicy(func(fp *fencingv1alpha1.FencePolicy) {
			fp.Spec.Levels[0].Index, fp.Spec.Levels[1].Index = 2, 1
		}),
		want: "levels must be in ascending index order",
	},
	{
		name: "FencePolicy bad approval enum",
		do:   createPolicy(func(fp *fencingv1alpha1.FencePolicy) { fp.Spec.Detection.Approval = "Sometimes" }),
		want: `spec.detection.approval: Unsupported value: "Sometimes"`,
	},
	{
		name: "FencePolicy maxUnhealthy above 100%",
		do: createPolicy(func(fp *fencingv1alpha1.FencePolicy) {
			fp.Spec.StormGuard.MaxUnhealthy = ptr.To(intstr.FromString("150%"))
		}),
		want: "maxUnhealthy must be a non-negative count or a percentage",
	},
	{
		name: "FencePolicy NetworkFence method without its settings",
		do: createPolicy(func(fp *fencingv1alpha1.FencePolicy) {
			fp.Spec.StorageFenceMethods = []fencingv1alpha1.StorageFenceMethod{{Method: fencingv1alpha1.StorageFenceNetworkFence}}
		}),
		want: "method NetworkFence needs networkFence",
	},
	{
		name: "FencePolicy NetworkFence address type unknown",
		do: createPolicy(func(fp *fencingv1alpha1.FencePolicy) {
			fp.Spec.StorageFenceMethods = []fencingv1alpha1.StorageFenceMethod{{Method: fencingv1alpha1.StorageFenceNetworkFence,
				NetworkFence: &fencingv1alpha1.NetworkFenceMethod{NetworkFenceClassName: "ceph", AddressTypes: []corev1.NodeAddressType{corev1.NodeHostName}}}}
		}),
		want: `Unsupported value: "Hostname"`,
	},
	{
		name: "FencePolicy without levels",
		do:   createPolicy(func(fp *fencingv1alpha1.FencePolicy) { fp.Spec.Levels = nil }),
		want: "spec.levels",
	},
}

// testRejected runs every rejection against the API server.
func testRejected(t *testing.T, cs versioned.Interface) {
	api := cs.FencingV1alpha1()
	for _, tc := range rejections {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(t.Context(), api)
			if err == nil {
				t.Fatalf("accepted, want rejected with %q", tc.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error %v, want Invalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tc.want)
			}
		})
	}
}

// testLevelOrder checks the levels' order rule at every position the
// list's bound allows: ascending indexes (gaps allowed) are accepted, a
// descent anywhere, the last pair of eight included, is refused.
func testLevelOrder(t *testing.T, cs versioned.Interface) {
	tests := []struct {
		name    string
		indexes []int32
		ok      bool
	}{
		{"one level", []int32{3}, true},
		{"ascending with gaps", []int32{1, 4, 8}, true},
		{"all eight ascending", []int32{1, 2, 3, 4, 5, 6, 7, 8}, true},
		{"first pair descending", []int32{2, 1}, false},
		{"a middle pair descending", []int32{1, 2, 5, 4, 6}, false},
		{"last pair of eight descending", []int32{1, 2, 3, 4, 5, 6, 8, 7}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := fencePolicy(fmt.Sprintf("level-order-%d", i))
			fp.Spec.Levels = nil
			for _, idx := range tt.indexes {
				fp.Spec.Levels = append(fp.Spec.Levels, fencingv1alpha1.FenceLevel{Index: idx, FenceClassNames: []string{"redfish-forceoff"}})
			}
			_, err := cs.FencingV1alpha1().FencePolicies().Create(t.Context(), fp, create)
			switch {
			case tt.ok && err != nil:
				t.Fatalf("levels %v refused: %v", tt.indexes, err)
			case !tt.ok && err == nil:
				t.Fatalf("levels %v accepted, want refused", tt.indexes)
			case !tt.ok && !strings.Contains(err.Error(), "levels must be in ascending index order"):
				t.Fatalf("levels %v refused with %v, want the order rule's message", tt.indexes, err)
			}
		})
	}
}

// changeStorageFence creates a StorageFence, then updates it with change.
func changeStorageFence(name string, change func(*fencingv1alpha1.StorageFence)) func(context.Context, fencingv1alpha1Client) error {
	return func(ctx context.Context, api fencingv1alpha1Client) error {
		sf, err := api.StorageFences().Create(ctx, &fencingv1alpha1.StorageFence{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       fencingv1alpha1.StorageFenceSpec{Driver: "block.csi.example.com", NodeID: "node-7"},
		}, create)
		if err != nil {
			return err
		}
		change(sf)
		_, err = api.StorageFences().Update(ctx, sf, metav1.UpdateOptions{})
		return err
	}
}
