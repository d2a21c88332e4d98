package fencingapi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/test/cluster"
)

// waitTimeout bounds every wait for the API server.
const waitTimeout = 30 * time.Second

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// startAPI starts a control plane, installs every CRD of deploy/crds, waits
// until each is Established and returns a clientset of the fencing API.
func startAPI(t *testing.T) versioned.Interface {
	t.Helper()
	c := cluster.Start(t, cluster.Options{})
	dyn, err := dynamic.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := readCRDs(t)
	if len(crds) != 7 {
		t.Fatalf("deploy/crds holds %d CRDs, want 7 (one per kind)", len(crds))
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	for _, crd := range crds {
		if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating CRD %s: %v", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		if err := waitEstablished(ctx, dyn, crd.GetName()); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := versioned.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Established means served, but discovery and the REST mapping of a new
	// group catch up a moment later: wait until a list works.
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.FencingV1alpha1().FencePolicies().List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("fencing API not served: %v", err)
	}
	return cs
}

// readCRDs decodes every CRD file of deploy/crds (not the kustomization).
func readCRDs(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "fenceline.io_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(data, &obj.Object); err != nil {
			t.Fatalf("decoding %s: %v", f, err)
		}
		if obj.GetKind() != "CustomResourceDefinition" {
			t.Fatalf("%s holds a %s, want a CustomResourceDefinition", f, obj.GetKind())
		}
		out = append(out, obj)
	}
	return out
}

// waitEstablished waits for the CRD's Established condition to be True,
// and fails fast when NamesAccepted is False.
func waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		var states []string
		for _, c := range conds {
			m, _ := c.(map[string]any)
			typ, status := fmt.Sprint(m["type"]), fmt.Sprint(m["status"])
			states = append(states, typ+"="+status)
			if typ == "NamesAccepted" && status == "False" {
				return false, fmt.Errorf("CRD %s: names not accepted: %v", name, m["message"])
			}
			if typ == "Established" && status == "True" {
				return true, nil
			}
		}
		last = strings.Join(states, ", ")
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not Established (conditions: %s): %w", name, last, err)
	}
	return nil
}
