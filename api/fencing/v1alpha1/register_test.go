package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"fenceline.io/fenceline/pkg/names"
)

// TestGroupVersionMatchesNames keeps the API package and pkg/names, the
// home of every well-known string, in agreement.
func TestGroupVersionMatchesNames(t *testing.T) {
	if GroupName != names.APIGroup || Version != names.APIVersion {
		t.Errorf("API %s/%s, pkg/names %s/%s", GroupName, Version, names.APIGroup, names.APIVersion)
	}
}

// TestAddToScheme checks that every kind and its list is registered, so
// that the generated clientset can decode them.
func TestAddToScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"FencingRequest", "FenceClass", "FenceTarget", "FencePolicy", "StorageFence", "FencelineRemediation", "FencelineRemediationTemplate"} {
		for _, k := range []string{kind, kind + "List"} {
			if !s.Recognizes(SchemeGroupVersion.WithKind(k)) {
				t.Errorf("scheme does not recognize %s", k)
			}
		}
	}
}
