package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// TestBinary runs the built binary (make build) against a real
// kube-apiserver with the flags of deploy/controller/deployment.yaml, checks
// that it serves /healthz and /metrics, force-deletes a stuck pod, and exits
// cleanly on SIGTERM.
func TestBinary(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	bin, err := cluster.Binary("fenceline-controller")
	if err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx := t.Context()
	client := c.Client()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fenceline-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	logPath := filepath.Join(t.TempDir(), "controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--kubeconfig="+c.AdminKubeconfig(), "--controllers=*", "--leader-election",
		"--leader-election-namespace=fenceline-system", "--http-endpoint="+addr, "--v=2")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logFile.Close()
		if t.Failed() {
			if out, err := os.ReadFile(logPath); err == nil {
				t.Logf("controller log:\n%s", out)
			}
		}
	})

	poll := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	get := func(path string) (string, bool) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return "", false
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return string(body), err == nil && resp.StatusCode == http.StatusOK
	}
	poll("/healthz", func(context.Context) (bool, error) {
		_, ok := get("/healthz")
		return ok, nil
	})

	node := testobj.Node("bin-1", testobj.NotReadySince(time.Now()), testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	node.UID = ""
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := testobj.Pod("default", "bin-1-a", testobj.OnNode("bin-1"))
	pod.UID, pod.Status = "", v1.PodStatus{}
	created, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grace := int64(300)
	if err := client.CoreV1().Pods("default").Delete(ctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	poll("the stuck pod to be force-deleted", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, created.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	poll("the deletion in /metrics", func(context.Context) (bool, error) {
		body, ok := get("/metrics")
		return ok && strings.Contains(body, `pod_gc_collector_force_delete_pods_total{namespace="default",reason="out-of-service"} 1`), nil
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("binary did not exit within 30s of SIGTERM")
	}
	l, err := client.CoordinationV1().Leases("fenceline-system").Get(ctx, "fenceline-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("lease still held by %q after a clean exit, want it released", *h)
	}
	// The leader's renewals carried its version, for kubectl fenceline
	// version to compare with the plugin's.
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	if f := strings.Fields(string(out)); len(f) < 2 || l.Annotations[names.LeaderVersionAnnotation] != f[1] {
		t.Errorf("the Lease's %s is %q, want the version the binary reports: %q", names.LeaderVersionAnnotation, l.Annotations[names.LeaderVersionAnnotation], out)
	}
}
