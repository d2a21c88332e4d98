package world

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/test/cluster"
)

// crdTimeout bounds the installation of the fencing CRDs.
const crdTimeout = 30 * time.Second

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// createSecret creates the BMC's credentials Secret, as an operator would
// for a FenceClass or FenceTarget to name: type basic-auth, keys username
// and password.
func (b *BMC) createSecret(ctx context.Context) error {
	cs := b.w.Cluster.Client()
	if err := ensureNamespace(ctx, cs, Namespace); err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: b.SecretName, Namespace: Namespace, Labels: map[string]string{"fenceline.io/bmc-node": b.Node}},
		Type:       corev1.SecretTypeBasicAuth,
		StringData: map[string]string{corev1.BasicAuthUsernameKey: b.Username, corev1.BasicAuthPasswordKey: b.Password},
	}
	_, err := cs.CoreV1().Secrets(Namespace).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A BMC started again for the node: its new credentials win.
		_, err = cs.CoreV1().Secrets(Namespace).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating the BMC Secret %s/%s: %w", Namespace, b.SecretName, err)
	}
	return nil
}

// SecretRef names the BMC's credentials Secret.
func (b *BMC) SecretRef() *fencingv1alpha1.SecretReference {
	return &fencingv1alpha1.SecretReference{Name: b.SecretName, Namespace: Namespace}
}

// CreateFenceTarget creates the node's FenceTarget with one endpoint, the
// BMC, for fenceClass, naming the BMC's Secret; it installs the fencing
// CRDs first if the cluster does not serve them yet.
func (b *BMC) CreateFenceTarget(ctx context.Context, fenceClass string) (*fencingv1alpha1.FenceTarget, error) {
	cs, err := b.w.InstallFencingCRDs(ctx)
	if err != nil {
		return nil, err
	}
	ft := &fencingv1alpha1.FenceTarget{
		ObjectMeta: metav1.ObjectMeta{Name: b.Node},
		Spec: fencingv1alpha1.FenceTargetSpec{Endpoints: []fencingv1alpha1.FenceEndpoint{{
			FenceClassName: fenceClass, Address: b.Address, SystemID: b.SystemID, CredentialsSecretRef: b.SecretRef(),
		}}},
	}
	out, err := cs.FencingV1alpha1().FenceTargets().Create(ctx, ft, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the FenceTarget of %s: %w", b.Node, err)
	}
	return out, nil
}

// InstallFencingCRDs creates the CRDs of deploy/crds that are missing,
// waits until each is Established and the fencing API answers, and
// returns a clientset of it. CRDs already installed are left alone.
func (w *World) InstallFencingCRDs(ctx context.Context) (versioned.Interface, error) {
	cfg := w.Cluster.AdminConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a dynamic client: %w", err)
	}
	crds, err := readCRDs()
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		_, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		name := crd.GetName()
		err := WaitFor(ctx, crdTimeout, "CRD "+name+" Established", func(ctx context.Context) (bool, error) {
			got, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // not visible yet; keep polling until the deadline
			}
			return established(got), nil
		})
		if err != nil {
			return nil, err
		}
	}
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a fencing clientset: %w", err)
	}
	// Established means served; discovery catches up a moment later.
	err = WaitFor(ctx, crdTimeout, "the fencing API", func(ctx context.Context) (bool, error) {
		_, err := cs.FencingV1alpha1().FenceTargets().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	return cs, err
}

// established reports whether a CRD's Established condition is True.
func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// readCRDs decodes every CRD file of deploy/crds (not the kustomization).
func readCRDs() ([]*unstructured.Unstructured, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	return readCRDFiles(filepath.Join(root, "deploy", "crds"), "fenceline.io_*.yaml", "the repository's CRDs")
}
