package world

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/mock-driver/api/csiaddons/fence"
	"fenceline.io/fenceline/test/csiaddons"
)

// NetworkFenceClassName is the NetworkFenceClass of the mock driver in a
// world with Options.NetworkFence; networkFenceSecret is the Secret it
// names, in the default namespace.
const (
	NetworkFenceClassName = "mock-network-fence"
	networkFenceSecret    = "mock-network-fence"
)

// NodeIP is the InternalIP of the i-th KWOK node of a world with
// Options.NetworkFence: distinct per node, as a network fence needs.
func NodeIP(i int) string { return fmt.Sprintf("10.200.%d.%d", i/250, i%250+1) }

// nodeIP is the InternalIP the world gives node n ("" for KWOK's default).
func (w *World) nodeIP(n string) string {
	if !w.networkFence {
		return ""
	}
	for i, name := range w.Nodes {
		if name == n {
			return NodeIP(i)
		}
	}
	return ""
}

// CSIAddonsSocket is the mock driver's csi-addons endpoint in a world
// with Options.NetworkFence.
func (w *World) CSIAddonsSocket() string { return w.csiAddonsSocket() }

func (w *World) csiAddonsSocket() string {
	return "unix://" + filepath.Join(w.Cluster.Dir(), "sock", "csi-addons.sock")
}

// networkFenceArgs are the mock driver's flags of a world with
// Options.NetworkFence: its csi-addons socket, and each KWOK node's
// address, which the array sees its node plugin reach it from.
func (w *World) networkFenceArgs() []string {
	args := []string{"--csi-addons-endpoint=" + w.csiAddonsSocket()}
	for _, n := range w.Nodes {
		args = append(args, "--node-address="+n+"="+w.nodeIP(n))
	}
	return args
}

// startNetworkFence installs the csi-addons NetworkFence CRDs, the mock
// driver's NetworkFenceClass and its Secret, and, with standIn, runs the
// stand-in csi-addons controller in this process until the world stops.
func (w *World) startNetworkFence(ctx context.Context, standIn bool) error {
	cfg := w.Cluster.AdminConfig()
	if err := csiaddons.InstallCRDs(ctx, cfg); err != nil {
		return fmt.Errorf("installing the csi-addons CRDs: %w", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: networkFenceSecret, Namespace: metav1.NamespaceDefault}, StringData: map[string]string{"user": "fenceline-test"}}
	if _, err := w.Cluster.Client().CoreV1().Secrets(metav1.NamespaceDefault).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Secret %s: %w", networkFenceSecret, err)
	}
	class := csiaddons.NetworkFenceClass{}
	class.Name = NetworkFenceClassName
	class.Spec.Provisioner = DriverName
	class.Spec.Parameters = map[string]string{csiaddons.SecretNameParameter: networkFenceSecret, csiaddons.SecretNamespaceParameter: metav1.NamespaceDefault}
	u, err := class.ToUnstructured()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("a dynamic client: %w", err)
	}
	if _, err := dyn.Resource(csiaddons.NetworkFenceClassResource).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating NetworkFenceClass %s: %w", NetworkFenceClassName, err)
	}
	if !standIn {
		return nil
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(w.standinCtx))
	w.stopNetworkFence = cancel
	go func() {
		// A retry waits at most a second, not the real controller's 1000 s,
		// so that a test that clears a fault sees the fence at once.
		opts := csiaddons.Options{Drivers: map[string]string{DriverName: w.csiAddonsSocket()}, RetryMaxDelay: time.Second}
		if err := csiaddons.Run(runCtx, cfg, opts); err != nil {
			klog.FromContext(runCtx).Error(err, "The stand-in csi-addons controller stopped")
		}
	}()
	return nil
}

// ArrayNetworkFences are the CIDR blocks the mock driver's array fences,
// as its csi-addons ListClusterFence answers.
func (w *World) ArrayNetworkFences(ctx context.Context) ([]string, error) {
	conn, err := grpc.NewClient(w.csiAddonsSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to the csi-addons socket: %w", err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := fence.NewFenceControllerClient(conn).ListClusterFence(ctx, &fence.ListClusterFenceRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListClusterFence: %w", err)
	}
	var out []string
	for _, c := range resp.GetCidrs() {
		out = append(out, c.GetCidr())
	}
	return out, nil
}
