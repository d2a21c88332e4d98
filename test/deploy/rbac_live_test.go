package deploy

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/rbaccheck"
)

const (
	liveTimeout  = 60 * time.Second
	controllerSA = "fenceline-controller"
	fenceAgentSA = "fenceline-fence-agent"
)

// TestComponentRBAC runs the components for a short real scenario with the
// identities and arguments from deploy/, then compares the API calls the API
// server audited with the RBAC rules in deploy/. A call no rule allows fails
// the test (the component would fail in a cluster); permissions no call used
// are logged, since a short scenario cannot reach every code path.
func TestComponentRBAC(t *testing.T) {
	attacherBin := binary(t, "fenceline-attacher")
	controllerBin := binary(t, "fenceline-controller")
	driverBin := binary(t, "mock-driver")
	fenceAgentBin := binary(t, "fenceline-fence-agent")
	c := cluster.Start(t, cluster.Options{AuditLog: true})
	cs := c.Client()
	kc := "--kubeconfig=" + c.AdminKubeconfig()
	runKubectl(t, kc, "apply", "-k", repoRoot(t)+"/deploy")
	rendered, _ := runKubectl(t, "kustomize", repoRoot(t)+"/deploy")
	policy, err := rbaccheck.ParseManifests([]byte(rendered))
	if err != nil {
		t.Fatalf("parsing deploy RBAC: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The array serves node-1's node service too, so it knows the node.
	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	driver, err := cluster.StartProcess("mock-driver", c.LogDir(), driverBin,
		"--endpoint=unix://"+sock, "--state-dir="+filepath.Join(dir, "state"), "--name="+mockDriverName, "--fence",
		"--node-endpoint=node-1=unix://"+filepath.Join(dir, "node-1.sock"))
	if err != nil {
		t.Fatal(err)
	}
	c.Track(driver)
	volumeID := createVolume(ctx, t, sock)

	// Each component gets its manifest's arguments; only what a Pod gets
	// from its environment (socket path, in-cluster config, namespace)
	// differs.
	var procs []*cluster.Process
	for _, comp := range []struct{ bin, path, dir, sa string }{
		{"fenceline-attacher", attacherBin, "deploy/examples/mock-driver", attacherSA},
		{"fenceline-controller", controllerBin, "deploy", controllerSA},
		{"fenceline-fence-agent", fenceAgentBin, "deploy", fenceAgentSA},
	} {
		_, saKubeconfig := c.ServiceAccountConfig(t, fencelineNamespace, comp.sa)
		container := manifestContainer(t, comp.dir, comp.bin)
		args, httpAddr := processArgs(t, container, sock, saKubeconfig)
		p, err := cluster.StartProcess(comp.bin, c.LogDir(), comp.path, args...)
		if err != nil {
			t.Fatal(err)
		}
		c.Track(p)
		procs = append(procs, p)
		if probe := container.LivenessProbe; probe != nil && probe.HTTPGet != nil {
			url := "http://" + httpAddr + probe.HTTPGet.Path
			waitFor(ctx, t, comp.bin+" liveness probe "+url, func(ctx context.Context) (bool, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					return false, err
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					return false, nil // not listening yet
				}
				res.Body.Close()
				return res.StatusCode == http.StatusOK, nil
			})
		}
	}

	createNode(ctx, t, cs, "node-1")
	pod := createBoundPod(ctx, t, cs, "node-1")
	pv := createPV(ctx, t, cs, "pv-1", volumeID)
	va := attachVA(ctx, t, cs, "va-1", pv.Name, "node-1")

	// The node dies and is declared out of service: the controller
	// force-deletes the pod stuck in Terminating, and the detach is fenced.
	markNodeDown(ctx, t, cs, "node-1")
	if err := cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod: %v", err)
	}
	if err := cs.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting VolumeAttachment: %v", err)
	}
	waitFor(ctx, t, "Terminating pod force-deleted", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	waitFor(ctx, t, "VolumeAttachment detached and gone", func(ctx context.Context) (bool, error) {
		_, err := cs.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})

	// Stop gracefully so that lease release and event flushes are audited too.
	for _, p := range procs {
		p.Stop(10 * time.Second)
	}
	driver.Stop(5 * time.Second)

	calls, err := rbaccheck.ReadAuditLog(c.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{attacherSA, controllerSA, fenceAgentSA} {
		user := rbaccheck.ServiceAccountUser(fencelineNamespace, sa)
		rep, err := rbaccheck.Check(policy, user, calls)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Calls == 0 {
			t.Errorf("%s made no API calls; the audit log does not show the component at all", sa)
		}
		if len(rep.Denied) > 0 {
			t.Errorf("%s made calls that deploy/ RBAC does not allow:\n%s", sa, rep)
		} else {
			t.Logf("%s", rep)
		}
	}
}

// manifestContainer returns the container running binary in the rendered
// kustomization dir.
func manifestContainer(t *testing.T, dir, binary string) corev1.Container {
	t.Helper()
	for _, w := range workloads(t, render(t, dir)) {
		if c, ok := containerRunning(w.Pod, binary); ok {
			return c
		}
	}
	t.Fatalf("%s runs no %s container", dir, binary)
	return corev1.Container{}
}

// processArgs turns a container's arguments into those of a process outside
// a Pod: the CSI socket and HTTP endpoint move to test-owned places, and the
// in-cluster configuration and namespace are given explicitly. It also
// returns the HTTP endpoint's address.
func processArgs(t *testing.T, c corev1.Container, sock, kubeconfig string) (args []string, httpAddr string) {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr = fmt.Sprintf("127.0.0.1:%d", port)
	for _, a := range c.Args {
		switch flagName(a) {
		case "csi-address":
			a = "--csi-address=" + sock
		case "http-endpoint":
			a = "--http-endpoint=" + httpAddr
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+kubeconfig)
	if _, ok := flagValueOf(c.Args, "leader-election-namespace"); !ok {
		args = append(args, "--leader-election-namespace="+fencelineNamespace)
	}
	return args, httpAddr
}

func waitFor(ctx context.Context, t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, liveTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// createVolume creates a 1 GiB volume on the mock array over its CSI socket,
// once the driver serves it.
func createVolume(ctx context.Context, t *testing.T, sock string) string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("connecting to the mock driver: %v", err)
	}
	defer conn.Close()
	var id string
	waitFor(ctx, t, "CreateVolume on the mock driver", func(ctx context.Context) (bool, error) {
		res, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name:          "vol-1",
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
			VolumeCapabilities: []*csi.VolumeCapability{{
				AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
				AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			}},
		})
		if err != nil {
			return false, nil // not serving yet
		}
		id = res.GetVolume().GetVolumeId()
		return true, nil
	})
	return id
}

// createNode creates a Ready node with a CSINode for the mock driver, as a
// kubelet would.
func createNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Annotations: map[string]string{names.ControllerManagedAttachAnnotation: "true"},
	}}
	node, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node: %v", err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting node status: %v", err)
	}
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: mockDriverName, NodeID: name}}},
	}
	if _, err := cs.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CSINode: %v", err)
	}
}

// markNodeDown does what kube-controller-manager and an operator do to a
// dead node: Ready becomes Unknown, and the out-of-service taint is added.
func markNodeDown(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if node, err = cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking node NotReady: %v", err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: names.OutOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if _, err := cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("tainting node out-of-service: %v", err)
	}
}

// createPV creates a PersistentVolume for a mock volume.
func createPV(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, volumeID string) *corev1.PersistentVolume {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: mockDriverName, VolumeHandle: volumeID,
			}},
		},
	}
	pv, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating PV: %v", err)
	}
	return pv
}

// attachVA creates a VolumeAttachment of the mock driver, as the
// attach/detach controller would, and waits until it is attached.
func attachVA(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, pvName, node string) *storagev1.VolumeAttachment {
	t.Helper()
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: mockDriverName, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName},
		},
	}
	if _, err := cs.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating VolumeAttachment: %v", err)
	}
	waitFor(ctx, t, "VolumeAttachment attached", func(ctx context.Context) (bool, error) {
		got, err := cs.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		return err == nil && got.Status.Attached, nil // not attached yet
	})
	return va
}

// createBoundPod creates a pod already bound to node, as the scheduler
// would. With no kubelet, deleting it leaves it Terminating, like a pod on a
// dead node.
func createBoundPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db-0"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "db", Image: "db"}},
		},
	}
	pod, err := cs.CoreV1().Pods("app").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	return pod
}
