package cluster

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

func TestSanitize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "plain", in: "TestFoo", want: "TestFoo"},
		{name: "subtest keeps directory", in: "TestFoo/bar_baz", want: "TestFoo/bar_baz"},
		{name: "spaces and colons", in: "TestFoo/a b:c", want: "TestFoo/a_b_c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := sanitize(tc.in); got != tc.want {
				t.Errorf("sanitize(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRepoRootFindsModule(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Tool("definitely-not-a-tool"); err == nil {
		t.Fatal("Tool of a missing binary returned no error")
	}
	t.Logf("repository root %s", root)
}

func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestControlPlane exercises the whole harness against real binaries: the
// API serves with RBAC, a ServiceAccount identity has only what is bound to
// it, KWOK nodes power off and on (with a new boot ID), pods with claims
// wait for their volumes, and Stop leaves no process behind.
func TestControlPlane(t *testing.T) {
	c := Start(t, Options{ControllerManager: true, Scheduler: true, KWOK: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Client()

	t.Run("service account has only its RBAC", func(t *testing.T) {
		cfg, kubeconfig := c.ServiceAccountConfig(t, "harness", "reader")
		if kubeconfig == "" {
			t.Fatal("no kubeconfig path")
		}
		sa, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing nodes as an unbound service account: got %v, want Forbidden", err)
		}
	})

	if err := c.AddNode(ctx, "node-a", "mock.fenceline.io"); err != nil {
		t.Fatal(err)
	}
	csiNode, err := cs.StorageV1().CSINodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(csiNode.Spec.Drivers) != 1 || csiNode.Spec.Drivers[0].NodeID != "node-a" {
		t.Fatalf("CSINode drivers = %+v, want mock.fenceline.io with node ID node-a", csiNode.Spec.Drivers)
	}

	t.Run("pods run, claims wait for their volumes", func(t *testing.T) {
		plain := testPod("plain", "node-a", "")
		withClaim := testPod("with-claim", "node-a", "data")
		for _, p := range []*corev1.Pod{plain, withClaim} {
			if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitPhase(ctx, t, cs, "plain", corev1.PodRunning)
		// KWOK has handled "plain"; the claim's pod must still be Pending.
		p, err := cs.CoreV1().Pods("default").Get(ctx, "with-claim", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodPending {
			t.Fatalf("pod with an unmounted claim is %s, want Pending", p.Status.Phase)
		}
		p.Annotations = map[string]string{VolumesMountedAnnotation: "true"}
		if _, err := cs.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPhase(ctx, t, cs, "with-claim", corev1.PodRunning)
	})

	t.Run("power cycle", func(t *testing.T) {
		before, err := c.BootID(ctx, "node-a")
		if err != nil || before == "" {
			t.Fatalf("boot ID %q, err %v", before, err)
		}
		if err := c.PowerOff(ctx, "node-a"); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitNodeReady(ctx, "node-a", corev1.ConditionUnknown, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := c.PowerOn(ctx, "node-a"); err != nil {
			t.Fatal(err)
		}
		after, err := c.BootID(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if after == before || after == "" {
			t.Fatalf("boot ID after power cycle = %q, before %q: want a new one", after, before)
		}
	})

	t.Run("stop leaves no process", func(t *testing.T) {
		procs := c.Processes()
		if len(procs) != 5 {
			t.Fatalf("tracked %d processes, want 5 (etcd, apiserver, kcm, scheduler, kwok)", len(procs))
		}
		stopAndCheckGone(t, c, procs)
	})
}

// stopAndCheckGone stops c and checks that none of procs is still running.
func stopAndCheckGone(t *testing.T, c *Cluster, procs []*Process) {
	t.Helper()
	c.Stop()
	for _, p := range procs {
		if alive(p.PID()) {
			t.Errorf("%s (pid %d) still running after Stop", p.Name, p.PID())
		}
	}
}

func testPod(name, node, claim string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}
	if claim != "" {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}}
	}
	return p
}

func waitPhase(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, phase corev1.PodPhase) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s to be %s: %v", name, phase, err)
	}
}

// TestMinimalControlPlane starts only etcd and kube-apiserver, the
// smallest useful cluster, and checks that both stop cleanly.
func TestMinimalControlPlane(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Client().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("getting namespace default: %v", err)
	}
	procs := c.Processes()
	if len(procs) != 2 {
		t.Fatalf("tracked %d processes, want 2", len(procs))
	}
	stopAndCheckGone(t, c, procs)
}

func TestKWOKConfigFor(t *testing.T) {
	if got := kwokConfigFor(0, 0); got != kwokConfig {
		t.Fatal("without options the harness's stages must be used unchanged")
	}
	if !strings.Contains(kwokConfig, heartbeatDelay) {
		t.Fatal("the heartbeat stage's delay is not heartbeatDelay: kwokConfigFor would not change it")
	}
	got := kwokConfigFor(32, 5*time.Minute)
	for _, want := range []string{
		"kind: KwokConfiguration\noptions:\n  nodeLeaseParallelism: 32\n  nodePlayStageParallelism: 32\n  podPlayStageParallelism: 32\n---\n",
		"    durationMilliseconds: 300000\n    jitterDurationMilliseconds: 330000\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, heartbeatDelay) {
		t.Error("the default heartbeat delay is still there")
	}
	if !strings.HasSuffix(got, kwokConfig[strings.Index(kwokConfig, "  next:\n    statusTemplate: |\n      {{ $now := Now }}\n      conditions:\n      {{ range"):]) {
		t.Error("the stages after the heartbeat's delay changed")
	}
}
