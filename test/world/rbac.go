package world

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"fenceline.io/fenceline/test/cluster"
)

// Namespace is where the attacher and the controller run, as deployed.
const Namespace = "fenceline-system"

// Identities of our binaries; the ServiceAccounts are defined by the deploy
// manifests.
const (
	AttacherServiceAccount   = "fenceline-attacher"
	ControllerServiceAccount = "fenceline-controller"
)

// rbacFile returns <repo>/deploy/<component>/rbac.yaml.
func rbacFile(component string) (string, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deploy", component, "rbac.yaml"), nil
}

// applyComponentRBAC applies deploy/<component>/rbac.yaml, so that every
// component runs with exactly the permissions its deploy manifest grants. A
// missing manifest is an error: running with other permissions would hide
// a gap in what users deploy.
func applyComponentRBAC(ctx context.Context, cs kubernetes.Interface, component string) error {
	path, err := rbacFile(component)
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the %s has no RBAC manifest: %s is missing: %w", component, path, err)
		}
		return fmt.Errorf("checking the %s's RBAC manifest: %w", component, err)
	}
	return ApplyRBAC(ctx, cs, path)
}

// ApplyRBAC creates every ServiceAccount, (Cluster)Role and
// (Cluster)RoleBinding in the YAML manifest at path, creating namespaces as
// needed. Objects that already exist are left alone. Other kinds are an
// error: an RBAC file should hold nothing else.
func ApplyRBAC(ctx context.Context, cs kubernetes.Interface, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading RBAC manifest: %w", err)
	}
	objs, err := decodeAll(data)
	if err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	for _, obj := range objs {
		if err := create(ctx, cs, obj); err != nil {
			return fmt.Errorf("applying %s: %w", path, err)
		}
	}
	return nil
}

func decodeAll(data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if onlyComments(doc) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

func ensureNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	if ns == "" {
		return nil
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	return nil
}

func create(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		err = ensureNamespace(ctx, cs, o.Name)
	case *corev1.ServiceAccount:
		if err = ensureNamespace(ctx, cs, o.Namespace); err == nil {
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.Role:
		if err = ensureNamespace(ctx, cs, o.Namespace); err == nil {
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
	case *rbacv1.RoleBinding:
		if err = ensureNamespace(ctx, cs, o.Namespace); err == nil {
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
	default:
		return fmt.Errorf("unexpected object %T in an RBAC manifest", obj)
	}
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// onlyComments reports whether a YAML document holds nothing but
// comments, blank lines and separators.
func onlyComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' && !bytes.Equal(l, []byte("---")) {
			return false
		}
	}
	return true
}
