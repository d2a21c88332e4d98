package deploy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fenceline.io/fenceline/test/cluster"
)

// TestPodTemplatesAdmitted applies every entry point for real and then
// creates each workload's pod template as a Pod with dry-run. A dry run of
// a Deployment does not admit its pods; this does: the ServiceAccount must
// exist, the priority class must be allowed in fenceline-system, and Pod
// Security "restricted" is enforced rather than only warned about. A
// rejection or a warning fails the test, as it would leave the Deployment
// with no pods.
func TestPodTemplatesAdmitted(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	kc := "--kubeconfig=" + c.AdminKubeconfig()
	root := repoRoot(t)
	cfg := c.AdminConfig()
	rec := &cluster.WarningRecorder{}
	cfg.WarningHandler = rec
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	for _, dir := range entryPoints {
		runKubectl(t, kc, "apply", "-k", root+"/"+dir)
		for _, w := range workloads(t, render(t, dir)) {
			t.Run(dir+"/"+w.Name, func(t *testing.T) {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-admission-check", Namespace: w.Namespace},
					Spec:       w.Pod,
				}
				rec.Take()
				got, err := cs.CoreV1().Pods(w.Namespace).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if err != nil {
					t.Fatalf("the API server would not admit a pod of %s %s: %v", w.Kind, w.Name, err)
				}
				if warnings := rec.Take(); len(warnings) > 0 {
					t.Errorf("admitting a pod of %s %s warned: %s", w.Kind, w.Name, strings.Join(warnings, "; "))
				}
				// The harness's API server runs without the ServiceAccount
				// admission plugin, so the dry run does not look the
				// account up: do it here.
				if sa := w.Pod.ServiceAccountName; sa != "" {
					if _, err := cs.CoreV1().ServiceAccounts(w.Namespace).Get(t.Context(), sa, metav1.GetOptions{}); err != nil {
						t.Errorf("ServiceAccount %s of %s %s: %v", sa, w.Kind, w.Name, err)
					}
				}
				if w.Pod.PriorityClassName != "" && got.Spec.Priority == nil {
					t.Errorf("priority class %q was not resolved", w.Pod.PriorityClassName)
				}
			})
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("deploy/ renders no workloads")
	}
}
