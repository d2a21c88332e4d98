package helm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// monitoringCRDs stand in for the Prometheus Operator's CRDs, which the
// harness does not install: they make the API server serve the
// ServiceMonitor, PodMonitor and PrometheusRule kinds (group, version, scope), so that
// their apiVersion and kind are checked; their schemas accept any fields.
var monitoringCRDs = []struct{ kind, plural string }{
	{"ServiceMonitor", "servicemonitors"},
	{"PodMonitor", "podmonitors"},
	{"PrometheusRule", "prometheusrules"},
}

func monitoringCRD(kind, plural string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + ".monitoring.coreos.com"},
		"spec": map[string]any{
			"group": "monitoring.coreos.com",
			"scope": "Namespaced",
			"names": map[string]any{"kind": kind, "plural": plural, "listKind": kind + "List", "singular": strings.ToLower(kind)},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
}

// TestChartServerDryRun sends every object the chart renders, for the
// defaults and for value sets that turn on every optional object, to a
// real kube-apiserver as a dry-run create with strict field validation:
// the server runs defaulting, validation and admission (Pod Security
// "restricted" in the namespace, as deploy/namespace labels it) without
// storing anything. The chart's CRDs are installed first, as Helm does. A
// rejection or any warning fails the test. Each Deployment's pod template
// is also dry-run as a Pod, which a Deployment's dry run does not admit.
func TestChartServerDryRun(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := c.AdminConfig()
	rec := &cluster.WarningRecorder{}
	cfg.WarningHandler = rec
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := createReleaseNamespace(ctx, c); err != nil {
		t.Fatal(err)
	}
	ch := loadChart(t)
	crds := crdObjects(t, ch)
	for _, m := range monitoringCRDs {
		crds = append(crds, *monitoringCRD(m.kind, m.plural))
	}
	mapper := installCRDs(ctx, t, dyn, cs, crds)
	if w := rec.Take(); len(w) > 0 {
		t.Errorf("installing the CRDs warned: %s", strings.Join(w, "; "))
	}

	sets := map[string]string{
		"defaults": "",
		"everything": `driverServiceAccounts: [{name: csi-driver, namespace: kube-system}]
metrics: {serviceMonitor: {enabled: true}, attacherPodMonitor: {enabled: true}, prometheusRule: {enabled: true}}
image: {registry: registry.example.com/storage, tag: v9.8.7, pullPolicy: Always}
imagePullSecrets: [registry-credentials]
controller: {extraArgs: [--feature-gates=TaintEviction=true], nodeSelector: {kubernetes.io/os: linux}}`,
	}
	for name, doc := range sets {
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, withAlerts(ch, []byte(testAlerts)), values(t, doc))
			for _, o := range objs {
				dryRunCreate(ctx, t, dyn, mapper, rec, o)
			}
			for _, d := range find(objs, "Deployment") {
				dryRunPod(ctx, t, cs, rec, deployment(t, objs, d.GetName()))
			}
		})
	}
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs creates the CRDs for real and returns a REST mapper once
// discovery serves every one of their kinds.
func installCRDs(ctx context.Context, t *testing.T, dyn dynamic.Interface, cs kubernetes.Interface, crds []unstructured.Unstructured) meta.RESTMapper {
	t.Helper()
	var kinds []schema.GroupKind
	for _, crd := range crds {
		if _, err := dyn.Resource(crdResource).Create(ctx, &crd, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("creating CRD %s: %v", crd.GetName(), err)
		}
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		kinds = append(kinds, schema.GroupKind{Group: group, Kind: kind})
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	err := world.WaitFor(ctx, time.Minute, "discovery to serve the CRDs' kinds", func(context.Context) (bool, error) {
		mapper.Reset()
		for _, gk := range kinds {
			if _, err := mapper.RESTMapping(gk); err != nil {
				return false, nil //nolint:nilerr // not served yet; poll until the deadline
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mapper
}

// dryRunCreate creates o with dry-run and strict field validation; an error
// or a warning fails the test.
func dryRunCreate(ctx context.Context, t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, rec *cluster.WarningRecorder, o unstructured.Unstructured) {
	t.Helper()
	what := fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Errorf("%s: the API server does not serve %s: %v", what, gvk, err)
		return
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			t.Errorf("%s is namespaced but names no namespace", what)
		}
		ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	} else if o.GetNamespace() != "" {
		t.Errorf("%s is cluster-scoped but names namespace %s", what, o.GetNamespace())
	}
	rec.Take()
	_, err = ri.Create(ctx, &o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
	if err != nil {
		t.Errorf("the API server refuses %s: %v", what, err)
	}
	if w := rec.Take(); len(w) > 0 {
		t.Errorf("%s: the API server warned: %s", what, strings.Join(w, "; "))
	}
}

// dryRunPod admits a Deployment's pod template as a Pod, with dry-run: the
// priority class must resolve and Pod Security is enforced, not only
// warned about.
func dryRunPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, rec *cluster.WarningRecorder, d appsv1.Deployment) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-admission-check", Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
		Spec:       d.Spec.Template.Spec,
	}
	rec.Take()
	got, err := cs.CoreV1().Pods(d.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
	if err != nil {
		t.Errorf("the API server would not admit a pod of Deployment %s: %v", d.Name, err)
		return
	}
	if w := rec.Take(); len(w) > 0 {
		t.Errorf("admitting a pod of Deployment %s warned: %s", d.Name, strings.Join(w, "; "))
	}
	if pc := d.Spec.Template.Spec.PriorityClassName; pc != "" && got.Spec.Priority == nil {
		t.Errorf("Deployment %s: priority class %q was not resolved", d.Name, pc)
	}
}
