package fencingapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// Valid objects of each kind, as docs/fencing-api.md shows them. Each call
// returns a fresh object, so that a test case may break it.

func redfishClass(name string) *fencingv1alpha1.FenceClass {
	return &fencingv1alpha1.FenceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fencingv1alpha1.FenceClassSpec{
			Method:               fencingv1alpha1.FenceMethodRedfish,
			Redfish:              &fencingv1alpha1.RedfishSettings{},
			CredentialsSecretRef: &fencingv1alpha1.SecretReference{Name: "bmc-shared", Namespace: "fenceline-system"},
			SharesPowerWithNode:  true,
		},
	}
}

func execClass(name string) *fencingv1alpha1.FenceClass {
	return &fencingv1alpha1.FenceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fencingv1alpha1.FenceClassSpec{
			Method: fencingv1alpha1.FenceMethodExec,
			Exec:   &fencingv1alpha1.ExecSettings{Agent: "fence_ipmilan", Args: map[string]string{"lanplus": "1"}},
		},
	}
}

func fenceTarget(node string) *fencingv1alpha1.FenceTarget {
	return &fencingv1alpha1.FenceTarget{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: fencingv1alpha1.FenceTargetSpec{Endpoints: []fencingv1alpha1.FenceEndpoint{
			{FenceClassName: "redfish-forceoff", Address: "https://10.0.0.5", SystemID: "System.Embedded.1"},
			{FenceClassName: "pdu-off", Address: "10.0.1.2", Plug: "7"},
		}},
	}
}

func fencePolicy(name string) *fencingv1alpha1.FencePolicy {
	return &fencingv1alpha1.FencePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fencingv1alpha1.FencePolicySpec{
			NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "node-role.kubernetes.io/control-plane", Operator: metav1.LabelSelectorOpDoesNotExist},
			}},
			Detection: fencingv1alpha1.FenceDetection{UnhealthyConditions: []fencingv1alpha1.UnhealthyCondition{
				{Type: "Ready", Status: metav1.ConditionUnknown, Duration: metav1.Duration{Duration: 20e9}},
			}},
			Levels: []fencingv1alpha1.FenceLevel{
				{Index: 1, FenceClassNames: []string{"redfish-forceoff"}},
				{Index: 2, FenceClassNames: []string{"pdu-off"}},
			},
			StormGuard: fencingv1alpha1.StormGuard{MaxUnhealthy: ptr.To(intstr.FromString("40%"))},
		},
	}
}

func fencingRequest(name, node string) *fencingv1alpha1.FencingRequest {
	return &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fencingv1alpha1.FencingRequestSpec{
			NodeName:  node,
			NodeUID:   "0c0ffee0-0000-4000-8000-000000000001",
			Reason:    "LeaseExpired",
			Requester: "controller",
		},
	}
}
