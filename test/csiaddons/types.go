package csiaddons

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API group and version of NetworkFence and NetworkFenceClass.
const (
	Group   = "csiaddons.openshift.io"
	Version = "v1alpha1"
)

// The resources, for dynamic clients.
var (
	NetworkFenceResource      = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "networkfences"}
	NetworkFenceClassResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "networkfenceclasses"}
)

// The kinds.
const (
	NetworkFenceKind      = "NetworkFence"
	NetworkFenceClassKind = "NetworkFenceClass"
)

// Finalizer is the finalizer the controller puts on a NetworkFence before
// it calls the driver.
const Finalizer = "csiaddons.openshift.io/network-fence"

// The reserved NetworkFenceClass parameters that name the Secret passed to
// the driver; they are not passed on as parameters.
const (
	SecretNameParameter      = "csiaddons.openshift.io/networkfence-secret-name"
	SecretNamespaceParameter = "csiaddons.openshift.io/networkfence-secret-namespace"
)

// FenceState is the state the CIDR blocks of a NetworkFence should be in.
type FenceState string

// The fence states.
const (
	Fenced   FenceState = "Fenced"
	Unfenced FenceState = "Unfenced"
)

// FencingOperationResult is the outcome of the last fence or unfence call.
type FencingOperationResult string

// The results.
const (
	FencingOperationResultSucceeded FencingOperationResult = "Succeeded"
	FencingOperationResultFailed    FencingOperationResult = "Failed"
)

// The status messages of a successful call, word for word those of the
// csi-addons controller.
const (
	FenceOperationSuccessfulMessage   = "fencing operation successful"
	UnfenceOperationSuccessfulMessage = "unfencing operation successful"
)

// SecretSpec names a Secret.
type SecretSpec struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// NetworkFenceSpec is what to fence, through which driver. Either
// NetworkFenceClassName or the deprecated Driver (with Secret and
// Parameters) names the driver.
type NetworkFenceSpec struct {
	NetworkFenceClassName string            `json:"networkFenceClassName,omitempty"`
	Driver                string            `json:"driver,omitempty"`
	FenceState            FenceState        `json:"fenceState"`
	Cidrs                 []string          `json:"cidrs"`
	Secret                *SecretSpec       `json:"secret,omitempty"`
	Parameters            map[string]string `json:"parameters,omitempty"`
}

// NetworkFenceStatus is the outcome of the last call.
type NetworkFenceStatus struct {
	Result     FencingOperationResult `json:"result,omitempty"`
	Message    string                 `json:"message,omitempty"`
	Conditions []metav1.Condition     `json:"conditions,omitempty"`
}

// NetworkFence asks a CSI driver to fence or unfence CIDR blocks. It is
// cluster-scoped.
type NetworkFence struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NetworkFenceSpec   `json:"spec"`
	Status NetworkFenceStatus `json:"status,omitempty"`
}

// NetworkFenceClassSpec names the driver and what to pass it.
type NetworkFenceClassSpec struct {
	Provisioner string            `json:"provisioner"`
	Parameters  map[string]string `json:"parameters,omitempty"`
}

// NetworkFenceClassStatus is empty, as in the published API version.
type NetworkFenceClassStatus struct{}

// NetworkFenceClass names the driver that fences, with its parameters and
// secret (SecretNameParameter, SecretNamespaceParameter). It is
// cluster-scoped.
type NetworkFenceClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NetworkFenceClassSpec   `json:"spec,omitempty"`
	Status NetworkFenceClassStatus `json:"status,omitempty"`
}

// ToUnstructured returns the NetworkFence as an object for a dynamic
// client, with its apiVersion and kind set.
func (nf *NetworkFence) ToUnstructured() (*unstructured.Unstructured, error) {
	return toUnstructured(nf, NetworkFenceKind)
}

// ToUnstructured returns the NetworkFenceClass as an object for a dynamic
// client, with its apiVersion and kind set.
func (c *NetworkFenceClass) ToUnstructured() (*unstructured.Unstructured, error) {
	return toUnstructured(c, NetworkFenceClassKind)
}

// NetworkFenceFrom decodes a NetworkFence from a dynamic client's object.
func NetworkFenceFrom(u *unstructured.Unstructured) (*NetworkFence, error) {
	nf := &NetworkFence{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, nf); err != nil {
		return nil, err
	}
	return nf, nil
}

// NetworkFenceClassFrom decodes a NetworkFenceClass from a dynamic
// client's object.
func NetworkFenceClassFrom(u *unstructured.Unstructured) (*NetworkFenceClass, error) {
	c := &NetworkFenceClass{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, c); err != nil {
		return nil, err
	}
	return c, nil
}

func toUnstructured(obj any, kind string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(kind)
	return u, nil
}
