package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/fenceagent/app"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	ipmisim "fenceline.io/fenceline/test/bmc/ipmi"
	redfishsim "fenceline.io/fenceline/test/bmc/redfish"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

const (
	bmcUser     = "fence-admin"
	bmcPassword = "Agent-S3cret-pw"
	waitTimeout = 60 * time.Second
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TestAgentOnRealAPIServer runs the agent under the ServiceAccount and RBAC
// of deploy/fence-agent against a real kube-apiserver with the fencing
// CRDs, a Redfish BMC simulator and an IPMI one, and waits for both
// FenceTargets to be Reachable with power On. Then a FencingRequest in
// phase Fencing fences the Redfish node: a Succeeded attempt read back Off,
// and the simulator off.
func TestAgentOnRealAPIServer(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	installCRDs(t, c)
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := world.ApplyRBAC(ctx, c.Client(), filepath.Join(root, "deploy", "fence-agent", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	saConfig, _ := c.ServiceAccountConfig(t, app.Namespace, app.Component)
	admin, err := versioned.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}

	rf := redfishsim.New(redfishsim.Options{Username: bmcUser, Password: bmcPassword})
	t.Cleanup(rf.Close)
	ip, err := ipmisim.Start(ipmisim.Config{Username: bmcUser, Password: bmcPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ip.Close() })

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "bmc"},
		Data: map[string][]byte{devices.UsernameKey: []byte(bmcUser), devices.PasswordKey: []byte(bmcPassword)}}
	if _, err := c.Client().CoreV1().Secrets(app.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	creds := testobj.Credentials(app.Namespace, "bmc")
	classes := []*fencingv1alpha1.FenceClass{
		testobj.FenceClass("redfish", testobj.InsecureTLS(), creds),
		testobj.FenceClass("ipmi", testobj.Method(fencingv1alpha1.FenceMethodIPMI), creds),
	}
	for _, fc := range classes {
		if _, err := admin.FencingV1alpha1().FenceClasses().Create(ctx, fc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	targets := map[string]fencingv1alpha1.FenceEndpoint{
		"node-redfish": {FenceClassName: "redfish", Address: rf.Address()},
		"node-ipmi":    {FenceClassName: "ipmi", Address: ip.String()},
	}
	for name, ep := range targets {
		ft := testobj.FenceTarget(name, testobj.Endpoints(ep))
		if _, err := admin.FencingV1alpha1().FenceTargets().Create(ctx, ft, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	opts := app.DefaultOptions()
	opts.LeaderElection, opts.Registry, opts.Identity = true, prometheus.NewRegistry(), "test"
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, saConfig, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent stopped with error: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop within 30s")
		}
	})

	for name := range targets {
		var last fencingv1alpha1.FenceTargetStatus
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
			ft, err := admin.FencingV1alpha1().FenceTargets().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			last = ft.Status
			return meta.IsStatusConditionTrue(ft.Status.Conditions, fencingv1alpha1.FenceTargetReachable) &&
				ft.Status.PowerState == fencingv1alpha1.PowerStateOn && ft.Status.LastProbeTime != nil, nil
		})
		if err != nil {
			t.Fatalf("FenceTarget %s never Reachable with power On: %v; last status %+v", name, err, last)
		}
	}
	// A device that does not answer shows, with a Warning Event on its
	// FenceTarget.
	broken := testobj.FenceTarget("node-broken", testobj.Endpoints(fencingv1alpha1.FenceEndpoint{FenceClassName: "redfish", Address: "127.0.0.1:1"}))
	if _, err := admin.FencingV1alpha1().FenceTargets().Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		ft, err := admin.FencingV1alpha1().FenceTargets().Get(ctx, broken.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(ft.Status.Conditions, fencingv1alpha1.FenceTargetReachable)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == devices.ReasonUnreachable, nil
	})
	if err != nil {
		t.Fatalf("no Unreachable condition for %s: %v", broken.Name, err)
	}
	waitEvent(t, c, broken.Name, "FenceDeviceUnreachable", corev1.EventTypeWarning)
	if !ip.PoweredOn() || rf.PowerState("1") != "On" {
		t.Fatal("a probe changed a node's power")
	}
	fenceNode(t, c, admin, "node-redfish", "redfish")
	if rf.PowerState("1") != "Off" {
		t.Errorf("the attempt Succeeded but the simulator reads %s", rf.PowerState("1"))
	}
	if !ip.PoweredOn() {
		t.Error("fencing node-redfish powered node-ipmi off")
	}
}

// fenceNode does what fenceline-controller does when it admits a request
// (phase Fencing, Required=True) for node, whose policy has one level with
// class, and waits for the agent to record a Succeeded attempt read back
// Off, and its FenceVerified Event.
func fenceNode(t *testing.T, c *cluster.Cluster, admin versioned.Interface, node, class string) {
	t.Helper()
	ctx := t.Context()
	n, err := c.Client().CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policy := testobj.FencePolicy("fence-"+node, testobj.Levels(testobj.FenceLevel(1, class)))
	if _, err := admin.FencingV1alpha1().FencePolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	req, err := admin.FencingV1alpha1().FencingRequests().Create(ctx,
		testobj.FencingRequest(node, testobj.RequestName(node+"-fence"), testobj.ForNodeUID(n.UID), testobj.ForPolicy(policy.Name), testobj.ByUser("test")),
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req.Status.Phase = fencingv1alpha1.FencingPhaseFencing
	meta.SetStatusCondition(&req.Status.Conditions, metav1.Condition{Type: fencingv1alpha1.FencingRequestRequired, Status: metav1.ConditionTrue, Reason: "Admitted", Message: "test"})
	if _, err := admin.FencingV1alpha1().FencingRequests().UpdateStatus(ctx, req, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last fencingv1alpha1.FencingRequestStatus
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		r, err := admin.FencingV1alpha1().FencingRequests().Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = r.Status
		for _, a := range r.Status.Attempts {
			if a.Level == 1 && a.FenceClass == class && a.Result == fencingv1alpha1.FenceAttemptSucceeded && a.VerifiedPowerState == "Off" && a.EndTime != nil {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no Succeeded attempt read back Off for %s: %v; last status %+v", req.Name, err, last)
	}
	if last.Phase != fencingv1alpha1.FencingPhaseFencing || last.FailedRounds != 0 || len(last.Attempts) != 1 {
		t.Errorf("status %+v: want phase Fencing kept, no failed round, one attempt", last)
	}
	waitEvent(t, c, req.Name, "FenceVerified", corev1.EventTypeNormal)
}

// waitEvent waits for an Event of type and reason on the object name.
func waitEvent(t *testing.T, c *cluster.Cluster, name, reason, typ string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == name && e.Reason == reason && e.Type == typ {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event %s on %s: %v", typ, reason, name, err)
	}
}

// installCRDs creates the CRDs of deploy/crds and waits until the fencing
// API is served.
func installCRDs(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "fenceline.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs: %v", err)
	}
	dyn, err := dynamic.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(data, &obj.Object); err != nil {
			t.Fatalf("decoding %s: %v", f, err)
		}
		if _, err := dyn.Resource(crdResource).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating CRD %s: %v", obj.GetName(), err)
		}
	}
	cs, err := versioned.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err1 := cs.FencingV1alpha1().FenceTargets().List(ctx, metav1.ListOptions{})
		_, err2 := cs.FencingV1alpha1().FenceClasses().List(ctx, metav1.ListOptions{})
		return err1 == nil && err2 == nil, nil
	})
	if err != nil {
		t.Fatal(fmt.Errorf("fencing API not served: %w", err))
	}
}
