package helm

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// components are the chart's workloads, named as their Deployment, container,
// ServiceAccount and image repository.
var components = []string{"fenceline-controller", "fenceline-fence-agent"}

// TestChartCRDsAreDeployCRDs keeps the chart's crds/ a copy of deploy/crds,
// which `make generate` writes from the API types (and copies into the
// chart): one source.
func TestChartCRDsAreDeployCRDs(t *testing.T) {
	root := repoRoot(t)
	want, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "fenceline.io_*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRDs in deploy/crds (%v)", err)
	}
	got := map[string][]byte{}
	for _, crd := range loadChart(t).CRDObjects() {
		got[filepath.Base(crd.Name)] = crd.File.Data
	}
	for _, path := range want {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s/crds/%s differs from deploy/crds/%s: run `make generate`", chartDir, name, name)
		}
		delete(got, name)
	}
	for name := range got {
		t.Errorf("%s/crds/%s has no counterpart in deploy/crds", chartDir, name)
	}
}

// deployment decodes the Deployment of a component.
func deployment(t testing.TB, objs []unstructured.Unstructured, name string) appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	u := get(t, objs, "Deployment", name)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &d, true); err != nil {
		t.Fatalf("Deployment %s: %v", name, err)
	}
	return d
}

// container returns a component's only container.
func container(t testing.TB, objs []unstructured.Unstructured, name string) corev1.Container {
	t.Helper()
	cs := deployment(t, objs, name).Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != name {
		t.Fatalf("Deployment %s: want one container %s, got %d", name, name, len(cs))
	}
	return cs[0]
}

func decode[T any](t testing.TB, u unstructured.Unstructured) T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

func TestChartDefaults(t *testing.T) {
	objs := mustRender(t, loadChart(t), nil)
	for _, name := range components {
		t.Run(name, func(t *testing.T) {
			d := deployment(t, objs, name)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
				t.Errorf("replicas %v, want 2 (leader election with a standby)", d.Spec.Replicas)
			}
			if got := d.Spec.Template.Spec.PriorityClassName; got != "system-cluster-critical" {
				t.Errorf("priorityClassName %q, want system-cluster-critical", got)
			}
			c := container(t, objs, name)
			if want := name + ":v0.1.0"; c.Image != want {
				t.Errorf("image %q, want %q (repository per component, tag the appVersion)", c.Image, want)
			}
			for _, flag := range []string{"--leader-election", "--leader-election-namespace=" + namespace, "--http-endpoint=:8080"} {
				if !slices.Contains(c.Args, flag) {
					t.Errorf("args %q lack %s", c.Args, flag)
				}
			}
			// The controller caches pods and volumes: 1.6 GB projected
			// at 150,000 pods, 50,000 with a volume.
			wantLimit := "256Mi"
			if name == "fenceline-controller" {
				wantLimit = "2Gi"
			}
			req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
			if req.Cmp(resource.MustParse("64Mi")) != 0 || lim.Cmp(resource.MustParse(wantLimit)) != 0 {
				t.Errorf("memory requests %s limits %s, want 64Mi and %s", req, lim, wantLimit)
			}
			pdb := decode[policyv1.PodDisruptionBudget](t, get(t, objs, "PodDisruptionBudget", name))
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
			}
			if sel := pdb.Spec.Selector.MatchLabels; !equalLabels(sel, d.Spec.Selector.MatchLabels) {
				t.Errorf("PodDisruptionBudget selects %v, the Deployment %v", sel, d.Spec.Selector.MatchLabels)
			}
			svc := decode[corev1.Service](t, get(t, objs, "Service", name+"-metrics"))
			if !equalLabels(svc.Spec.Selector, d.Spec.Selector.MatchLabels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
				t.Errorf("metrics Service %+v does not reach the pods' http port", svc.Spec)
			}
		})
	}
	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"} {
		if got := find(objs, kind); len(got) != 0 {
			t.Errorf("%d %s rendered by default, want none (off by default)", len(got), kind)
		}
	}
	if has(objs, "ClusterRole", "fenceline-attacher-fencing") {
		t.Error("the drivers' ClusterRole is rendered with no driverServiceAccounts")
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestChartValues renders a table of value sets and checks what each
// changes.
func TestChartValues(t *testing.T) {
	cases := []struct {
		name   string
		values string
		check  func(t *testing.T, objs []unstructured.Unstructured)
	}{{
		name:   "registry and tag",
		values: "image: {registry: registry.example.com/storage/, tag: v9.8.7}",
		check: func(t *testing.T, objs []unstructured.Unstructured) {
			for _, name := range components {
				if got, want := container(t, objs, name).Image, "registry.example.com/storage/"+name+":v9.8.7"; got != want {
					t.Errorf("image %q, want %q", got, want)
				}
			}
		},
	}, {
		name:   "repository per component",
		values: "controller: {image: {repository: mirror/ctl}}\nfenceAgent: {image: {repository: mirror/agent}}",
		check: func(t *testing.T, objs []unstructured.Unstructured) {
			if got := container(t, objs, "fenceline-controller").Image; got != "mirror/ctl:v0.1.0" {
				t.Errorf("controller image %q", got)
			}
			if got := container(t, objs, "fenceline-fence-agent").Image; got != "mirror/agent:v0.1.0" {
				t.Errorf("fence agent image %q", got)
			}
		},
	}, {
		name:   "no priority class",
		values: "controller: {priorityClassName: ''}",
		check: func(t *testing.T, objs []unstructured.Unstructured) {
			if got := deployment(t, objs, "fenceline-controller").Spec.Template.Spec.PriorityClassName; got != "" {
				t.Errorf("controller priorityClassName %q, want none", got)
			}
			if got := deployment(t, objs, "fenceline-fence-agent").Spec.Template.Spec.PriorityClassName; got != "system-cluster-critical" {
				t.Errorf("fence agent priorityClassName %q changed with the controller's", got)
			}
		},
	}, {
		name:   "resources and replicas",
		values: "controller: {replicas: 3, resources: {requests: {cpu: 100m, memory: 256Mi}, limits: {memory: 1Gi}}}",
		check: func(t *testing.T, objs []unstructured.Unstructured) {
			c := container(t, objs, "fenceline-controller")
			if got := c.Resources.Limits.Memory(); got.Cmp(resource.MustParse("1Gi")) != 0 {
				t.Errorf("memory limit %s, want 1Gi", got)
			}
			if got := c.Resources.Requests.Cpu(); got.Cmp(resource.MustParse("100m")) != 0 {
				t.Errorf("cpu request %s, want 100m", got)
			}
			if r := deployment(t, objs, "fenceline-controller").Spec.Replicas; r == nil || *r != 3 {
				t.Errorf("replicas %v, want 3", r)
			}
		},
	}, {
		name:   "flags",
		values: "controller: {quarantineDelay: 90s, verbosity: 4, extraArgs: ['--feature-gates=TaintEviction=true']}\nfenceAgent: {probeInterval: 30s}\nmetrics: {port: 9090}",
		check: func(t *testing.T, objs []unstructured.Unstructured) {
			c := container(t, objs, "fenceline-controller")
			for _, flag := range []string{"--quarantine-delay=90s", "--v=4", "--http-endpoint=:9090"} {
				if !slices.Contains(c.Args, flag) {
					t.Errorf("controller args %q lack %s", c.Args, flag)
				}
			}
			if last := c.Args[len(c.Args)-1]; last != "--feature-gates=TaintEviction=true" {
				t.Errorf("controller's last arg %q, want the extra one", last)
			}
			if a := container(t, objs, "fenceline-fence-agent").Args; !slices.Contains(a, "--probe-interval=30s") {
				t.Errorf("fence agent args %q lack --probe-interval=30s", a)
			}
		},
	}, {
		name:   "no PodDisruptionBudgets",
		values: "controller: {podDisruptionBudget: {enabled: false}}\nfenceAgent: {podDisruptionBudget: {enabled: false}}",
		check: func(t *testing.T, objs []unstructured.Unstructured) {
			if n := len(find(objs, "PodDisruptionBudget")); n != 0 {
				t.Errorf("%d PodDisruptionBudgets rendered, want none", n)
			}
		},
	}, {
		name:   "driver ServiceAccounts",
		values: "driverServiceAccounts: [{name: ebs-csi-controller-sa, namespace: kube-system}, {name: csi-nfs-controller-sa, namespace: storage}]",
		check:  checkDriverRBAC,
	}, {
		name:   "no attacher ServiceAccount",
		values: "attacher: {serviceAccount: {create: false}}",
		check: func(t *testing.T, objs []unstructured.Unstructured) {
			for _, o := range objs {
				if o.GetLabels()["app.kubernetes.io/name"] == "fenceline-attacher" {
					t.Errorf("%s %s rendered", o.GetKind(), o.GetName())
				}
			}
		},
	}, {
		name:   "ServiceMonitors",
		values: "metrics: {serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}",
		check: func(t *testing.T, objs []unstructured.Unstructured) {
			sms := find(objs, "ServiceMonitor")
			if len(sms) != len(components) {
				t.Fatalf("%d ServiceMonitors, want one per component", len(sms))
			}
			for _, sm := range sms {
				if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetLabels()["release"] != "prom" {
					t.Errorf("ServiceMonitor %s: apiVersion %s labels %v", sm.GetName(), sm.GetAPIVersion(), sm.GetLabels())
				}
				eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
				if len(eps) != 1 || eps[0].(map[string]any)["port"] != "http-metrics" || eps[0].(map[string]any)["interval"] != "15s" {
					t.Errorf("ServiceMonitor %s endpoints %v", sm.GetName(), eps)
				}
			}
		},
	}, {
		name:   "attacher PodMonitor, every namespace",
		values: "metrics: {attacherPodMonitor: {enabled: true, labels: {release: prom}}}",
		check:  checkAttacherPodMonitor(map[string]any{"any": true}, map[string]any{"fenceline.io/attacher-metrics": "true"}, "attacher-http"),
	}, {
		name:   "attacher PodMonitor, the drivers' namespaces and pods",
		values: "metrics: {attacherPodMonitor: {enabled: true, namespaces: [kube-system, storage], podSelector: {app: ebs-csi-controller}, port: http, labels: {release: prom}}}",
		check:  checkAttacherPodMonitor(map[string]any{"matchNames": []any{"kube-system", "storage"}}, map[string]any{"app": "ebs-csi-controller"}, "http"),
	}}
	c := loadChart(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, mustRender(t, c, values(t, tc.values)))
		})
	}
}

// checkAttacherPodMonitor: one PodMonitor for the attacher sidecars, in the
// release's namespace, selecting pods by labels in namespaces and scraping
// the named port.
func checkAttacherPodMonitor(namespaces, labels map[string]any, port string) func(*testing.T, []unstructured.Unstructured) {
	return func(t *testing.T, objs []unstructured.Unstructured) {
		pms := find(objs, "PodMonitor")
		if len(pms) != 1 {
			t.Fatalf("%d PodMonitors, want one for the attacher sidecars", len(pms))
		}
		pm := pms[0]
		if pm.GetName() != "fenceline-attacher" || pm.GetNamespace() != namespace || pm.GetAPIVersion() != "monitoring.coreos.com/v1" || pm.GetLabels()["release"] != "prom" {
			t.Errorf("PodMonitor %s/%s apiVersion %s labels %v", pm.GetNamespace(), pm.GetName(), pm.GetAPIVersion(), pm.GetLabels())
		}
		ns, _, _ := unstructured.NestedMap(pm.Object, "spec", "namespaceSelector")
		sel, _, _ := unstructured.NestedMap(pm.Object, "spec", "selector", "matchLabels")
		eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
		if !reflect.DeepEqual(ns, namespaces) || !reflect.DeepEqual(sel, labels) {
			t.Errorf("namespaceSelector %v selector %v, want %v and %v", ns, sel, namespaces, labels)
		}
		if len(eps) != 1 || eps[0].(map[string]any)["port"] != port || eps[0].(map[string]any)["path"] != "/metrics" {
			t.Errorf("endpoints %v, want port %s, /metrics", eps, port)
		}
	}
}

// checkDriverRBAC: the drivers' ServiceAccounts are bound to exactly the
// three fencing rules and the two of the StorageFences, which are also in
// fenceline-attacher's ClusterRole.
func checkDriverRBAC(t *testing.T, objs []unstructured.Unstructured) {
	role := decode[rbacv1.ClusterRole](t, get(t, objs, "ClusterRole", "fenceline-attacher-fencing"))
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"fenceline.io"}, Resources: []string{"storagefences"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"fenceline.io"}, Resources: []string{"storagefences/status"}, Verbs: []string{"update"}},
	}
	if !equalRules(role.Rules, want) {
		t.Errorf("rules %+v, want %+v", role.Rules, want)
	}
	attacher := decode[rbacv1.ClusterRole](t, get(t, objs, "ClusterRole", "fenceline-attacher"))
	for _, r := range want {
		if !slices.ContainsFunc(attacher.Rules, func(a rbacv1.PolicyRule) bool { return equalRules([]rbacv1.PolicyRule{a}, []rbacv1.PolicyRule{r}) }) {
			t.Errorf("fenceline-attacher's ClusterRole lacks %+v", r)
		}
	}
	b := decode[rbacv1.ClusterRoleBinding](t, get(t, objs, "ClusterRoleBinding", "fenceline-attacher-fencing"))
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role.Name {
		t.Errorf("binding refers to %+v", b.RoleRef)
	}
	subjects := []rbacv1.Subject{
		{Kind: "ServiceAccount", Name: "ebs-csi-controller-sa", Namespace: "kube-system"},
		{Kind: "ServiceAccount", Name: "csi-nfs-controller-sa", Namespace: "storage"},
	}
	if !slices.Equal(b.Subjects, subjects) {
		t.Errorf("subjects %+v, want %+v", b.Subjects, subjects)
	}
}

func equalRules(a, b []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacv1.PolicyRule) bool {
		return slices.Equal(x.APIGroups, y.APIGroups) && slices.Equal(x.Resources, y.Resources) &&
			slices.Equal(x.Verbs, y.Verbs) && slices.Equal(x.ResourceNames, y.ResourceNames) &&
			slices.Equal(x.NonResourceURLs, y.NonResourceURLs)
	})
}

// TestChartRefusesBadValues: values that cannot work fail the rendering
// (values.schema.json or the templates' own checks) with a message that
// says what to change.
func TestChartRefusesBadValues(t *testing.T) {
	cases := []struct {
		name, values, want string
		// noSchema renders as `helm install --skip-schema-validation`:
		// the templates must still refuse.
		noSchema bool
	}{
		{"PrometheusRule without its alerts file", "metrics: {prometheusRule: {enabled: true}}", "has no " + alertsFile, false},
		{"driver ServiceAccount without namespace", "driverServiceAccounts: [{name: sa}]", "missing property 'namespace'", false},
		{"driver ServiceAccount without namespace, schema skipped", "driverServiceAccounts: [{name: sa}]", "driverServiceAccounts[0] needs both name and namespace", true},
		{"misspelt value", "controler: {replicas: 3}", "'controler' not allowed", false},
		{"duration without a unit", "controller: {quarantineDelay: 40}", "/controller/quarantineDelay", false},
		{"no replicas", "fenceAgent: {replicas: 0}", "/fenceAgent/replicas", false},
		{"ServiceMonitor without Service", "metrics: {service: {enabled: false}, serviceMonitor: {enabled: true}}", "needs metrics.service.enabled", false},
		{"attacher PodMonitor port not a port name", "metrics: {attacherPodMonitor: {enabled: true, port: Attacher_HTTP}}", "/metrics/attacherPodMonitor/port", false},
		{"runbook base with a fragment", "metrics: {prometheusRule: {runbookBaseURL: 'https://x.example/runbooks#top'}}", "/metrics/prometheusRule/runbookBaseURL", false},
	}
	c := withAlerts(loadChart(t), nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := c
			if tc.noSchema {
				noSchema := *c
				noSchema.Schema = nil
				ch = &noSchema
			}
			_, err := renderChart(ch, namespace, values(t, tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("rendering with %s: error %v, want one saying %q", tc.values, err, tc.want)
			}
		})
	}
}
