package remediation

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// MachineGroup is Cluster API's API group: a remediation owned by a
// Machine of this group, and named after it, was created by a
// MachineHealthCheck.
const MachineGroup = "cluster.x-k8s.io"

// MachineNodes returns the node of the Cluster API Machine
// apiVersion/namespace/name: its status.nodeRef.name, or "" and why there
// is none.
type MachineNodes func(ctx context.Context, apiVersion, namespace, name string) (node, problem string, err error)

// MachineOf returns the owner reference of the Cluster API Machine the
// remediation was created for (MachineHealthCheck names the remediation
// after the Machine and makes the Machine its owner), or nil.
func MachineOf(r *fencingv1alpha1.FencelineRemediation) *metav1.OwnerReference {
	for i, o := range r.OwnerReferences {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err == nil && gv.Group == MachineGroup && o.Kind == "Machine" && o.Name == r.Name {
			return &r.OwnerReferences[i]
		}
	}
	return nil
}

// nhcNodeName is the node of a remediation NodeHealthCheck created: the
// node-name annotation, else the remediation's name.
func nhcNodeName(r *fencingv1alpha1.FencelineRemediation) string {
	if n := r.Annotations[NodeNameAnnotation]; n != "" {
		return n
	}
	return r.Name
}

// nodeName resolves the remediation's node: a Machine's node through
// Machines, else as NodeHealthCheck names it.
func (c *Controller) nodeName(ctx context.Context, r *fencingv1alpha1.FencelineRemediation) (node, problem string, err error) {
	m := MachineOf(r)
	if m == nil {
		return nhcNodeName(r), "", nil
	}
	if c.cfg.Machines == nil {
		return "", fmt.Sprintf("Machine %s/%s: Machines are not read by this controller", r.Namespace, m.Name), nil
	}
	return c.cfg.Machines(ctx, m.APIVersion, r.Namespace, m.Name)
}

// DynamicMachineNodes reads Machines through a dynamic client, in the
// version the owner reference names.
func DynamicMachineNodes(client dynamic.Interface) MachineNodes {
	return func(ctx context.Context, apiVersion, namespace, name string) (string, string, error) {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return "", fmt.Sprintf("Machine %s/%s: bad apiVersion %q", namespace, name, apiVersion), nil
		}
		m, err := client.Resource(gv.WithResource("machines")).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", fmt.Sprintf("Machine %s/%s does not exist", namespace, name), nil
		}
		if err != nil {
			return "", "", fmt.Errorf("reading Machine %s/%s: %w", namespace, name, err)
		}
		node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		if node == "" {
			return "", fmt.Sprintf("Machine %s/%s has no status.nodeRef", namespace, name), nil
		}
		return node, "", nil
	}
}
