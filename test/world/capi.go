package world

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"fenceline.io/fenceline/test/cluster"
)

// Cluster API's MachineHealthCheck as a world's checker: `make capi` builds
// capi-mhc (test/tools/capi), which runs only Cluster API's
// MachineHealthCheck reconciler, and copies the CRDs it reads from the same
// pinned module into capi-crds beside it.
const (
	// CAPIMachineHealthCheckTool is the binary in the tools directory.
	CAPIMachineHealthCheckTool = "capi-mhc"
	// CAPICRDDir is the directory of Cluster API's CRDs in the tools
	// directory.
	CAPICRDDir = "capi-crds"
	// CAPIClusterNameLabel is the label Cluster API puts on (and selects)
	// the objects of a Cluster, its kubeconfig Secret among them.
	CAPIClusterNameLabel = "cluster.x-k8s.io/cluster-name"
)

// CAPI's v1beta2 resources the worlds create.
var (
	CAPIClusters            = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}
	CAPIMachines            = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
	CAPIMachineHealthChecks = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinehealthchecks"}
)

// InstallCAPICRDs creates Cluster API's CRDs that capi-mhc reads (Cluster,
// Machine, MachineHealthCheck; from the tools directory), waits until they
// are Established and served, and returns a dynamic client.
func (w *World) InstallCAPICRDs(ctx context.Context) (dynamic.Interface, error) {
	dir, err := cluster.ToolsDir()
	if err != nil {
		return nil, err
	}
	crds, err := readCRDFiles(filepath.Join(dir, CAPICRDDir), "cluster.x-k8s.io_*.yaml", "run `make capi`")
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(w.Cluster.AdminConfig())
	if err != nil {
		return nil, fmt.Errorf("a dynamic client: %w", err)
	}
	for _, crd := range crds {
		if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		name := crd.GetName()
		if err := WaitFor(ctx, crdTimeout, "CRD "+name+" Established", func(ctx context.Context) (bool, error) {
			got, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			return err == nil && established(got), nil
		}); err != nil {
			return nil, err
		}
	}
	// Established means served; discovery catches up a moment later.
	for _, r := range []schema.GroupVersionResource{CAPIClusters, CAPIMachines, CAPIMachineHealthChecks} {
		if err := WaitFor(ctx, crdTimeout, r.Resource+"."+r.Group+" served", func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(r).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		}); err != nil {
			return nil, err
		}
	}
	return dyn, nil
}

// readCRDFiles decodes the CRDs of dir whose names match pattern.
func readCRDFiles(dir, pattern, hint string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		return nil, fmt.Errorf("listing the CRDs: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRD in %s (%s)", dir, hint)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading a CRD: %w", err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(data, &obj.Object); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", filepath.Base(f), err)
		}
		if obj.GetKind() != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s holds a %s, want a CustomResourceDefinition", filepath.Base(f), obj.GetKind())
		}
		out = append(out, obj)
	}
	return out, nil
}

// CAPIKubeconfigSecret is the Secret through which Cluster API reaches the
// workload cluster clusterName of namespace: <clusterName>-kubeconfig,
// key "value", labelled with the cluster's name (Cluster API caches only
// such Secrets). Its kubeconfig points back at this world's API server as
// cluster-admin, with the CA and token inline: the management cluster is
// its own workload cluster.
func (w *World) CAPIKubeconfigSecret(namespace, clusterName string) (*corev1.Secret, error) {
	rc := w.Cluster.AdminConfig()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos[clusterName+"-admin"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	cfg.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: clusterName + "-admin"}
	cfg.CurrentContext = clusterName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig of %s: %w", clusterName, err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: clusterName + "-kubeconfig", Namespace: namespace,
			Labels: map[string]string{CAPIClusterNameLabel: clusterName},
		},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{"value": data},
	}, nil
}

// StartCAPIMachineHealthCheck starts capi-mhc as cluster-admin, watching
// namespace, logging to capi-mhc.log in the cluster's log directory, and
// tracks it so that it stops with the world. verbosity is its -v.
func (w *World) StartCAPIMachineHealthCheck(namespace string, verbosity int) (*cluster.Process, error) {
	bin, err := cluster.Tool(CAPIMachineHealthCheckTool)
	if err != nil {
		return nil, fmt.Errorf("%w (run `make capi`)", err)
	}
	p, err := cluster.StartProcess(CAPIMachineHealthCheckTool, w.Cluster.LogDir(), bin,
		"--kubeconfig="+w.Cluster.AdminKubeconfig(), "--namespace="+namespace, fmt.Sprintf("-v=%d", verbosity))
	if err != nil {
		return nil, err
	}
	w.Cluster.Track(p)
	return p, nil
}
