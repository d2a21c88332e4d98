package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// GroupName is the API group of every kind in this package. It equals
	// names.APIGroup (checked by a test).
	GroupName = "fenceline.io"
	// Version is the API version of this package.
	Version = "v1alpha1"
)

// SchemeGroupVersion is the group and version of the kinds in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// Resource takes an unqualified resource name and returns it qualified with
// this package's group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

// Kind takes an unqualified kind and returns it qualified with this
// package's group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

var (
	// SchemeBuilder registers this package's kinds with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's kinds to a scheme; the generated
	// clientset calls it.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&FencingRequest{}, &FencingRequestList{},
		&FenceClass{}, &FenceClassList{},
		&FenceTarget{}, &FenceTargetList{},
		&FencePolicy{}, &FencePolicyList{},
		&StorageFence{}, &StorageFenceList{},
		&FencelineRemediation{}, &FencelineRemediationList{},
		&FencelineRemediationTemplate{}, &FencelineRemediationTemplateList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
