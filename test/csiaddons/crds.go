package csiaddons

import (
	"context"
	"embed"
	"fmt"
	"path"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDs returns the NetworkFence and NetworkFenceClass definitions of
// crds/.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := crdFiles.ReadDir("crds")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, e := range entries {
		data, err := crdFiles.ReadFile(path.Join("crds", e.Name()))
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", e.Name(), err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// crdTimeout bounds InstallCRDs' wait for the API to be served.
const crdTimeout = time.Minute

// InstallCRDs creates the NetworkFence and NetworkFenceClass CRDs that are
// missing (those present are left alone) and waits until both are
// Established and their resources answer a list, or ctx ends, or a minute
// passed.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("an apiextensions client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("a dynamic client: %w", err)
	}
	for _, crd := range crds {
		_, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, crdTimeout)
	defer cancel()
	for _, crd := range crds {
		var last error
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				last = err
				return false, nil
			}
			if !established(got) {
				last = fmt.Errorf("not Established yet")
				return false, nil
			}
			// Established means served; discovery and the REST mapping
			// catch up a moment later.
			gvr := NetworkFenceResource.GroupVersion().WithResource(crd.Spec.Names.Plural)
			_, last = dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s: %w (last: %v)", crd.Name, err, last)
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
