// Command olddriver is the smallest CSI controller plugin that fences with
// the Fenceline extension and reads its node through client-go, built with
// the dependency versions of a driver of the Kubernetes 1.30 era.
package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"fenceline.io/fenceline/pkg/fence"
)

type controller struct {
	csi.UnimplementedControllerServer
	kube kubernetes.Interface
}

func (c *controller) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if fence.IsFenced(req) {
		node, err := c.kube.CoreV1().Nodes().Get(ctx, req.GetNodeId(), metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("looking up node %s: %w", req.GetNodeId(), err)
		}
		_ = node.Status.Addresses // revoke these at the storage here
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func main() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lis, err := net.Listen("unix", "/csi/csi.sock")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, &controller{kube: kube})
	fence.RegisterCapabilitiesServer(srv, fence.Capabilities{UnpublishFence: true})
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
