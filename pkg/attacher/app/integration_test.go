package app_test

import (
	"context"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/attacher/app"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

const (
	namespace = "fenceline-system"
	account   = "fenceline-attacher"
	timeout   = 30 * time.Second
)

var finalizer = names.AttacherFinalizer(driver.DefaultName)

// TestAttacherOnRealAPIServer runs the attacher in-process against a real
// kube-apiserver, with the RBAC of deploy/attacher as its identity, and a
// mock driver over real unix sockets.
func TestAttacherOnRealAPIServer(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	applyRBAC(t, c)
	saConfig, saKubeconfig := c.ServiceAccountConfig(t, namespace, account)
	admin := c.Client()

	t.Run("attach, then fenced detach from an out-of-service node", func(t *testing.T) {
		w := newWorld(t, admin, "oos", true)
		w.taintOutOfService(t)
		w.startAttacher(t, saConfig, time.Second)
		va := w.attach(t)
		if !slices.Contains(va.Finalizers, finalizer) || va.Annotations[names.NodeIDAnnotation] != w.node || len(va.Status.AttachmentMetadata) == 0 {
			t.Fatalf("attached VA lacks finalizer, node-id annotation or metadata: %+v", va)
		}
		pv, err := admin.CoreV1().PersistentVolumes().Get(w.ctx, w.pv, metav1.GetOptions{})
		if err != nil || !slices.Contains(pv.Finalizers, finalizer) {
			t.Fatalf("PV finalizers %v (err %v), want %s", pv.Finalizers, err, finalizer)
		}
		w.stage(t, va.Status.AttachmentMetadata)
		w.deleteVA(t)
		w.waitVAGone(t, timeout)
		w.wantUnpublish(t, true, "OK")
		for _, method := range []string{"ControllerPublishVolume", "ControllerUnpublishVolume"} {
			if n := audit.Count(w.audit(t), audit.Method(method), audit.Volume(w.volumeID)); n != 1 {
				t.Errorf("%s calls = %d, want exactly 1", method, n)
			}
		}
		w.waitEvent(t, v1.EventTypeNormal, "FencedDetach")
	})

	t.Run("leader election on the upstream lease, health check and metrics", func(t *testing.T) {
		w := newWorld(t, admin, "metrics", true)
		w.taintOutOfService(t)
		addr := freeAddress(t)
		w.startAttacherWith(t, saConfig, func(o *app.Options) {
			o.HTTPEndpoint = addr
			withLeaderElection(o, "attacher-a")
		})
		waitLeaseHeld(t, w, names.AttacherLeaseName(driver.DefaultName), func(h string) bool { return h == "attacher-a" })
		if code, body := httpGet(t, "http://"+addr+app.LeaderElectionHealthPath); code != http.StatusOK {
			t.Errorf("leader-election health = %d %q, want 200", code, body)
		}
		va := w.attach(t)
		w.stage(t, va.Status.AttachmentMetadata)
		w.deleteVA(t)
		w.waitVAGone(t, timeout)
		_, body := httpGet(t, "http://"+addr+"/metrics")
		for _, want := range []string{
			`fenceline_attacher_detaches_total{mode="fenced",reason="out-of-service",result="success"} 1`,
			`fenceline_attacher_detach_duration_seconds_count{mode="fenced",reason="out-of-service"} 1`,
			`csi_sidecar_operations_seconds_count{driver_name="mock.fenceline.io",grpc_status_code="OK",method_name="/csi.v1.Controller/ControllerPublishVolume"} 1`,
			`fenceline_attacher_driver_fence_capability{capability="UNPUBLISH_FENCE"} 1`,
			// The standard series of every Kubernetes component.
			"\ngo_goroutines ",
			"\nprocess_cpu_seconds_total ",
			"\nprocess_start_time_seconds ",
			`workqueue_adds_total{name="csi-attacher-va"}`,
			`workqueue_depth{name="csi-attacher-pv"}`,
			`workqueue_retries_total{name="csi-attacher-va"}`,
			`workqueue_queue_duration_seconds_count{name="csi-attacher-va"}`,
			`rest_client_requests_total{code="200",host=`,
			`leader_election_master_status{name="` + names.AttacherLeaseName(driver.DefaultName) + `"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})

	t.Run("the binary with an upstream command line", func(t *testing.T) {
		bin, err := cluster.Binary("fenceline-attacher")
		if err != nil {
			t.Fatal(err)
		}
		w := newWorld(t, admin, "binary", true)
		w.taintOutOfService(t)
		addr := freeAddress(t)
		cmd := exec.Command(bin,
			"--csi-address="+strings.TrimPrefix(w.drv.Endpoint(), "unix://"),
			"--kubeconfig="+saKubeconfig,
			"--v=2", "--timeout=15s", "--leader-election", "--leader-election-namespace="+namespace,
			"--http-endpoint="+addr, "--worker-threads=4", "--kube-api-qps=50", "--kube-api-burst=100")
		var logs strings.Builder
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("attacher exited with %v; log:\n%s", err, logs.String())
				}
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Errorf("attacher did not stop on SIGTERM; log:\n%s", logs.String())
			}
		})
		va := w.attach(t)
		w.stage(t, va.Status.AttachmentMetadata)
		w.deleteVA(t)
		w.waitVAGone(t, timeout)
		w.wantUnpublish(t, true, "OK")
		if code, _ := httpGet(t, "http://"+addr+app.LeaderElectionHealthPath); code != http.StatusOK {
			t.Errorf("leader-election health = %d, want 200", code)
		}
	})

	t.Run("driver without UNPUBLISH_FENCE: plain unpublish and a warning", func(t *testing.T) {
		w := newWorld(t, admin, "nofence", false)
		w.taintOutOfService(t)
		w.startAttacher(t, saConfig, time.Second)
		w.attach(t)
		w.deleteVA(t)
		w.waitVAGone(t, timeout)
		w.wantUnpublish(t, false, "OK")
		w.waitEvent(t, v1.EventTypeWarning, "FenceUnsupported")
	})

	t.Run("strict refusal keeps the finalizer, a taint fences at once", func(t *testing.T) {
		w := newWorld(t, admin, "strict", true)
		// A long backoff: only the Node-update re-queue can detach in time.
		w.startAttacher(t, saConfig, 5*time.Minute)
		va := w.attach(t)
		w.stage(t, va.Status.AttachmentMetadata)
		w.deleteVA(t)
		err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			va, err := admin.StorageV1().VolumeAttachments().Get(ctx, w.va, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return va.Status.DetachError != nil && slices.Contains(va.Finalizers, finalizer), nil
		})
		if err != nil {
			t.Fatalf("no detachError with the finalizer kept: %v", err)
		}
		w.wantUnpublish(t, false, "FailedPrecondition")
		w.waitEvent(t, v1.EventTypeWarning, "DetachFailed")
		w.taintOutOfService(t)
		w.waitVAGone(t, 10*time.Second)
		w.wantUnpublish(t, true, "OK")
	})

	t.Run("switch-over: a VA attached by upstream is detached by us", func(t *testing.T) {
		w := newWorld(t, admin, "switch", true)
		// What the upstream external-attacher leaves behind.
		if _, err := csi.NewControllerClient(w.conn).ControllerPublishVolume(w.ctx, &csi.ControllerPublishVolumeRequest{
			VolumeId: w.volumeID, NodeId: w.node, VolumeCapability: mountCapability(),
		}); err != nil {
			t.Fatalf("publish as upstream: %v", err)
		}
		w.createPV(t, []string{finalizer})
		va := vaObject(w.va, w.pv, w.node)
		va.Finalizers = []string{finalizer}
		va.Annotations = map[string]string{names.NodeIDAnnotation: w.node}
		created, err := admin.StorageV1().VolumeAttachments().Create(w.ctx, va, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create VA: %v", err)
		}
		created.Status.Attached = true
		if _, err := admin.StorageV1().VolumeAttachments().UpdateStatus(w.ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("set VA status: %v", err)
		}
		w.startAttacher(t, saConfig, time.Second)
		w.deleteVA(t)
		w.waitVAGone(t, timeout)
		w.wantUnpublish(t, false, "OK")
		recs := w.audit(t)
		if n := audit.Count(recs, audit.Method("ControllerPublishVolume")); n != 1 {
			t.Errorf("ControllerPublishVolume calls = %d, want only upstream's one", n)
		}
	})
}
