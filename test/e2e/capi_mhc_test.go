package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/controller/remediation"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// capiMinMinor is the oldest Kubernetes minor Cluster API v1.14 supports
// as a management cluster; the test is skipped on an older control plane
// (make e2e-oldest).
const capiMinMinor = 33

// mhcUnhealthySeconds is how long a Node must be Ready=Unknown (or False)
// before the MachineHealthCheck remediates its Machine.
const mhcUnhealthySeconds = 5

// TestMachineHealthCheckRemediation: Fenceline as the remediator of Cluster
// API's own MachineHealthCheck controller (capi-mhc, built from the pinned
// Cluster API module by `make capi`), the management cluster being its own
// workload cluster. A Cluster marked provisioned and initialized, its
// kubeconfig Secret, one Machine per KWOK node (status.nodeRef), and a
// MachineHealthCheck whose remediation template is a
// FencelineRemediationTemplate. A node owned by the checker
// (fenceline.io/external-detection) stops heartbeating while its pod
// writes: the MachineHealthCheck marks its Machine unhealthy and creates a
// FencelineRemediation named after the Machine, owned by it; Fenceline
// fences the node through its BMC (read back Off), the pod fails over with
// its volume fenced off the node first, and the remediation reports
// Succeeded. The node is powered on and unfenced; the Machine is healthy
// again and the MachineHealthCheck itself deletes the remediation, which
// goes without its request being touched.
func TestMachineHealthCheckRemediation(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{Fencing: true, ControllerArgs: []string{"--controllers=*,remediation", "--remediation-namespaces=app"}})
	if minor := serverMinor(t, s); minor < capiMinMinor {
		t.Skipf("Cluster API v1.14 supports management clusters of Kubernetes 1.%d and later; this control plane is 1.%d", capiMinMinor, minor)
	}
	setup, err := s.w.SetUpFencing(s.ctx, world.BMCRedfish, s.timeline, nil)
	must(t, err)
	t.Cleanup(setup.Close)
	fs := &fencingScenario{scenario: s, setup: setup}
	fencing := setup.Client.FencingV1alpha1()
	dyn, err := s.w.InstallCAPICRDs(s.ctx)
	must(t, err)

	_, err = fencing.FencelineRemediationTemplates(s.ns).Create(s.ctx, &fencingv1alpha1.FencelineRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "fenceline"},
		Spec: fencingv1alpha1.FencelineRemediationTemplateSpec{Template: fencingv1alpha1.FencelineRemediationTemplateResource{
			Spec: fencingv1alpha1.FencelineRemediationSpec{PolicyName: setup.Policy.Name},
		}},
	}, metav1.CreateOptions{})
	must(t, err)

	// Every node is the checker's: node-fencing's own detection stands
	// aside (docs/integrations.md, one detector per node).
	for _, n := range s.w.Nodes {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{detect.ExternalDetectionLabel: "capi-mhc"}}})
		_, err := s.w.Cluster.Client().CoreV1().Nodes().Patch(s.ctx, n, types.MergePatchType, patch, metav1.PatchOptions{})
		must(t, err)
	}

	c := &capiWorld{t: t, ctx: s.ctx, dyn: dyn, ns: s.ns, cluster: "workload", machines: map[string]string{}}
	c.createCluster(s.w)
	for _, n := range s.w.Nodes {
		c.machines[n] = c.createMachine(n)
	}
	c.createMachineHealthCheck("workers", "fenceline")
	_, err = s.w.StartCAPIMachineHealthCheck(s.ns, 3)
	must(t, err)
	start := time.Now()
	c.waitMHC("every Machine healthy", func(st mhcStatus) bool {
		return st.ExpectedMachines == len(s.w.Nodes) && st.CurrentHealthy == len(s.w.Nodes) && len(st.Targets) == len(s.w.Nodes)
	})
	s.timeline.Add(time.Now(), "MachineHealthCheck %s/workers sees %d healthy Machines", s.ns, len(s.w.Nodes))
	t.Logf("capi-mhc saw every Machine healthy %s after it started", time.Since(start).Round(time.Millisecond))
	// No HealthCheckSucceeded=True yet: with a remediation template,
	// Cluster API v1.14 patches a healthy Machine only once it has a
	// remediation to delete.
	c.logMachine(c.machines[s.w.Nodes[0]], "healthy, before any remediation")

	nodeA := fs.startDB().Spec.NodeName
	machineA := c.machines[nodeA]
	fs.hang(nodeA)
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionUnknown, nodeLostTimeout))
	unknownAt := time.Now()
	s.timeline.Add(unknownAt, "node %s Ready=Unknown", nodeA)

	// The MachineHealthCheck creates the remediation: named after the
	// Machine, in its namespace, owned by it, spec from the template. It
	// reconciles at most every 15 s (Cluster API's rate limit for this
	// controller), so up to mhcUnhealthySeconds+15 s after Ready=Unknown.
	var rem *fencingv1alpha1.FencelineRemediation
	must(t, world.WaitFor(s.ctx, fenceTimeout, "FencelineRemediation "+machineA+" created by the MachineHealthCheck", func(ctx context.Context) (bool, error) {
		r, err := fencing.FencelineRemediations(s.ns).Get(ctx, machineA, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		rem = r
		return true, nil
	}))
	created := time.Now()
	s.timeline.Add(created, "the MachineHealthCheck created FencelineRemediation %s/%s", rem.Namespace, rem.Name)
	t.Logf("FencelineRemediation %s/%s seen %s after the node went Ready=Unknown (%s after the hang); created %s, labels %v, annotations %v, owners %+v, spec %+v",
		rem.Namespace, rem.Name, created.Sub(unknownAt).Round(time.Millisecond), created.Sub(s.t0).Round(time.Millisecond),
		rem.CreationTimestamp.UTC().Format(time.RFC3339), rem.Labels, rem.Annotations, rem.OwnerReferences, rem.Spec)
	owner := remediation.MachineOf(rem)
	if owner == nil || owner.UID != c.machineUID(machineA) || rem.Spec.PolicyName != setup.Policy.Name || rem.Labels[world.CAPIClusterNameLabel] != c.cluster {
		t.Fatalf("FencelineRemediation %s: owners %+v, spec %+v, labels %v; want owned by Machine %s, the template's spec, the cluster's label", rem.Name, rem.OwnerReferences, rem.Spec, rem.Labels, machineA)
	}
	c.logMachine(machineA, "after the remediation was created")

	req := fs.remediatedFailover(setup, rem, nodeA)
	if n := len(mustRequests(t, fs, nodeA)); n != 1 {
		t.Fatalf("%d FencingRequests for %s, want 1", n, nodeA)
	}
	// What the MachineHealthCheck makes of it: the Machine stays unhealthy
	// and waiting for the external remediation (it reads nothing of the
	// remediation's status), one Machine fewer healthy.
	c.waitMachineCondition(machineA, "HealthCheckSucceeded", "False", "UnhealthyNode")
	c.waitMachineCondition(machineA, "ExternallyRemediated", "False", "WaitingForRemediation")
	c.waitMHC("one Machine unhealthy", func(st mhcStatus) bool { return st.CurrentHealthy == len(s.w.Nodes)-1 })
	c.logMachine(machineA, "with the remediation Succeeded")
	c.logMHC("with the remediation Succeeded")
	if _, err := fencing.FencelineRemediations(s.ns).Get(s.ctx, rem.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("FencelineRemediation %s gone while its Machine is unhealthy: %v", rem.Name, err)
	}

	rec := fs.powerOnUnfenced(nodeA)
	if rec.UID != req.UID {
		t.Fatalf("request %s Recovered, want %s", rec.Name, req.Name)
	}
	s.timeline.Add(time.Now(), "node %s unfenced", nodeA)
	// Healthy again: the MachineHealthCheck itself deletes the remediation,
	// whose finalizer goes; the request is not asked to cancel.
	unfencedAt := time.Now()
	var deleting *metav1.Time
	must(t, world.WaitFor(s.ctx, failoverTimeout, "FencelineRemediation "+rem.Name+" deleted by the MachineHealthCheck", func(ctx context.Context) (bool, error) {
		r, err := fencing.FencelineRemediations(s.ns).Get(ctx, rem.Name, metav1.GetOptions{})
		if err == nil && r.DeletionTimestamp != nil && deleting == nil {
			deleting = r.DeletionTimestamp
		}
		return apierrors.IsNotFound(err), nil
	}))
	s.timeline.Add(time.Now(), "FencelineRemediation %s gone", rem.Name)
	t.Logf("FencelineRemediation %s gone %s after the node was seen unfenced (deletionTimestamp %v)", rem.Name, time.Since(unfencedAt).Round(time.Millisecond), deleting)
	c.waitMachineCondition(machineA, "HealthCheckSucceeded", "True", "")
	c.waitMHC("every Machine healthy again", func(st mhcStatus) bool { return st.CurrentHealthy == len(s.w.Nodes) })
	c.logMachine(machineA, "healthy again")
	c.logMHC("healthy again")
	after, err := fencing.FencingRequests().Get(s.ctx, req.Name, metav1.GetOptions{})
	must(t, err)
	if _, asked := after.Annotations[names.UnfenceAnnotation]; asked || after.Status.Phase != fencingv1alpha1.FencingPhaseRecovered {
		t.Fatalf("request %s after the remediation went: phase %s, annotations %v", after.Name, after.Status.Phase, after.Annotations)
	}
	if n := len(mustRequests(t, fs, nodeA)); n != 1 {
		t.Fatalf("%d FencingRequests for %s, want 1", n, nodeA)
	}
	fs.assertUnfenced(nodeA)
	t.Logf("timeline (seconds from the hang):\n%s", s.timeline.Format(s.t0))
}

// serverMinor returns the control plane's Kubernetes minor.
func serverMinor(t *testing.T, s *scenario) int {
	t.Helper()
	v, err := s.w.Cluster.Client().Discovery().ServerVersion()
	must(t, err)
	minor, err := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err != nil {
		t.Fatalf("server version %+v: minor %q", v, v.Minor)
	}
	return minor
}

// capiWorld creates Cluster API's objects in a world, through a dynamic
// client: this module does not import Cluster API.
type capiWorld struct {
	t        *testing.T
	ctx      context.Context
	dyn      dynamic.Interface
	ns       string
	cluster  string
	machines map[string]string // node -> Machine
}

func (c *capiWorld) create(r schema.GroupVersionResource, obj map[string]any) *unstructured.Unstructured {
	c.t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	out, err := c.dyn.Resource(r).Namespace(c.ns).Create(c.ctx, u, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("creating %s %s/%s: %v", u.GetKind(), c.ns, u.GetName(), err)
	}
	return out
}

// setStatus writes status through the status subresource, as the
// controllers that own it would.
func (c *capiWorld) setStatus(r schema.GroupVersionResource, obj *unstructured.Unstructured, status map[string]any) {
	c.t.Helper()
	obj.Object["status"] = status
	if _, err := c.dyn.Resource(r).Namespace(c.ns).UpdateStatus(c.ctx, obj, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("writing the status of %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

func condition(typ, status, reason string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": "", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
}

// createCluster creates the Cluster, marked as its infrastructure and
// control plane providers would mark it once provisioned and initialized
// (the MachineHealthCheck checks no Machine before), and its kubeconfig
// Secret.
func (c *capiWorld) createCluster(w *world.World) {
	c.t.Helper()
	sec, err := w.CAPIKubeconfigSecret(c.ns, c.cluster)
	must(c.t, err)
	_, err = w.Cluster.Client().CoreV1().Secrets(c.ns).Create(c.ctx, sec, metav1.CreateOptions{})
	must(c.t, err)
	cl := c.create(world.CAPIClusters, map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": c.cluster, "namespace": c.ns},
		// References to providers that do not run here: no controller
		// reconciles the Cluster, the test writes its status.
		"spec": map[string]any{
			"controlPlaneRef":   map[string]any{"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": c.cluster},
			"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KWOKCluster", "name": c.cluster},
		},
	})
	c.setStatus(world.CAPIClusters, cl, map[string]any{
		"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true},
		"conditions": []any{
			condition("InfrastructureReady", "True", "Ready"),
			condition("ControlPlaneInitialized", "True", "Initialized"),
		},
		"phase": "Provisioned",
	})
}

// createMachine creates a worker Machine of the cluster for node, with
// status.nodeRef naming it, and returns its name.
func (c *capiWorld) createMachine(node string) string {
	c.t.Helper()
	name := c.cluster + "-worker-" + node
	m := c.create(world.CAPIMachines, map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": c.ns, "labels": map[string]any{
			world.CAPIClusterNameLabel: c.cluster, "fenceline.io/pool": "workers",
		}},
		"spec": map[string]any{
			"clusterName":       c.cluster,
			"bootstrap":         map[string]any{"dataSecretName": name + "-bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KWOKMachine", "name": name},
		},
	})
	c.setStatus(world.CAPIMachines, m, map[string]any{
		"nodeRef": map[string]any{"name": node},
		"phase":   "Running",
	})
	return name
}

// createMachineHealthCheck creates a MachineHealthCheck of the workers
// with the remediation template named template.
func (c *capiWorld) createMachineHealthCheck(name, template string) {
	c.t.Helper()
	unhealthy := func(status string) map[string]any {
		return map[string]any{"type": "Ready", "status": status, "timeoutSeconds": int64(mhcUnhealthySeconds)}
	}
	c.create(world.CAPIMachineHealthChecks, map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{
			"clusterName": c.cluster,
			"selector":    map[string]any{"matchLabels": map[string]any{"fenceline.io/pool": "workers"}},
			"checks":      map[string]any{"unhealthyNodeConditions": []any{unhealthy("Unknown"), unhealthy("False")}},
			"remediation": map[string]any{"templateRef": map[string]any{
				"apiVersion": fencingv1alpha1.SchemeGroupVersion.String(), "kind": "FencelineRemediationTemplate", "name": template,
			}},
		},
	})
}

func (c *capiWorld) machineUID(name string) types.UID {
	c.t.Helper()
	m, err := c.dyn.Resource(world.CAPIMachines).Namespace(c.ns).Get(c.ctx, name, metav1.GetOptions{})
	must(c.t, err)
	return m.GetUID()
}

// mhcStatus is the part of a MachineHealthCheck's status the test reads.
type mhcStatus struct {
	ExpectedMachines, CurrentHealthy, RemediationsAllowed int
	Targets                                               []string
}

func (c *capiWorld) mhc() (*unstructured.Unstructured, mhcStatus, error) {
	u, err := c.dyn.Resource(world.CAPIMachineHealthChecks).Namespace(c.ns).Get(c.ctx, "workers", metav1.GetOptions{})
	if err != nil {
		return nil, mhcStatus{}, err
	}
	var st mhcStatus
	n, _, _ := unstructured.NestedInt64(u.Object, "status", "expectedMachines")
	st.ExpectedMachines = int(n)
	n, _, _ = unstructured.NestedInt64(u.Object, "status", "currentHealthy")
	st.CurrentHealthy = int(n)
	n, _, _ = unstructured.NestedInt64(u.Object, "status", "remediationsAllowed")
	st.RemediationsAllowed = int(n)
	st.Targets, _, _ = unstructured.NestedStringSlice(u.Object, "status", "targets")
	return u, st, nil
}

func (c *capiWorld) waitMHC(what string, ok func(mhcStatus) bool) {
	c.t.Helper()
	var last mhcStatus
	err := world.WaitFor(c.ctx, failoverTimeout, "MachineHealthCheck workers: "+what, func(context.Context) (bool, error) {
		_, st, err := c.mhc()
		if err != nil {
			return false, nil
		}
		last = st
		return ok(st), nil
	})
	if err != nil {
		c.t.Fatalf("%v; last status %+v", err, last)
	}
}

// machineCondition returns the Machine's v1beta2 condition typ.
func (c *capiWorld) machineCondition(ctx context.Context, machine, typ string) (status, reason string, err error) {
	m, err := c.dyn.Resource(world.CAPIMachines).Namespace(c.ns).Get(ctx, machine, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	conds, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
	for _, x := range conds {
		cond, _ := x.(map[string]any)
		if cond["type"] == typ {
			s, _ := cond["status"].(string)
			r, _ := cond["reason"].(string)
			return s, r, nil
		}
	}
	return "", "", nil
}

// waitMachineCondition waits for the Machine's condition typ with status
// (and reason, unless empty).
func (c *capiWorld) waitMachineCondition(machine, typ, status, reason string) {
	c.t.Helper()
	var gotStatus, gotReason string
	err := world.WaitFor(c.ctx, failoverTimeout, fmt.Sprintf("Machine %s %s=%s", machine, typ, status), func(ctx context.Context) (bool, error) {
		s, r, err := c.machineCondition(ctx, machine, typ)
		if err != nil {
			return false, nil
		}
		gotStatus, gotReason = s, r
		return s == status && (reason == "" || r == reason), nil
	})
	if err != nil {
		c.logMachine(machine, "when the wait ended")
		c.t.Fatalf("%v; last %s=%q reason %q", err, typ, gotStatus, gotReason)
	}
}

// logMachine logs the Machine's status conditions, for the record of what
// the MachineHealthCheck writes.
func (c *capiWorld) logMachine(machine, when string) {
	c.t.Helper()
	m, err := c.dyn.Resource(world.CAPIMachines).Namespace(c.ns).Get(c.ctx, machine, metav1.GetOptions{})
	must(c.t, err)
	st, _, _ := unstructured.NestedMap(m.Object, "status")
	data, _ := json.Marshal(st)
	c.t.Logf("Machine %s %s: annotations %v, status %s", machine, when, m.GetAnnotations(), data)
}

// logMHC logs the MachineHealthCheck's status.
func (c *capiWorld) logMHC(when string) {
	c.t.Helper()
	u, _, err := c.mhc()
	must(c.t, err)
	st, _, _ := unstructured.NestedMap(u.Object, "status")
	data, _ := json.Marshal(st)
	c.t.Logf("MachineHealthCheck workers %s: status %s", when, data)
}
