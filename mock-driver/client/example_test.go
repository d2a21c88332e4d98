package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/fence"
)

// A node loses write access the moment a fenced ControllerUnpublishVolume
// returns, and the audit log shows it.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "mock-driver-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "controller.sock")
	cfg.NodeEndpoints = map[string]string{"node-a": "unix://" + filepath.Join(dir, "node-a.sock")}
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Stop()

	ctrlConn, _ := grpc.NewClient(d.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer ctrlConn.Close()
	nodeConn, _ := grpc.NewClient(d.NodeEndpoint("node-a"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer nodeConn.Close()
	ctrl := csi.NewControllerClient(ctrlConn)

	rwo := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{rwo}})
	if err != nil {
		log.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if _, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: rwo}); err != nil {
		log.Fatal(err)
	}
	// The node stages the volume, as a kubelet does before it starts a pod.
	if _, err := csi.NewNodeClient(nodeConn).NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: filepath.Join(dir, "stage"), VolumeCapability: rwo,
	}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("write before fence:", status.Code(client.Write(ctx, nodeConn, id, []byte("data"))))

	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}
	fence.SetFence(req, true)
	if _, err := ctrl.ControllerUnpublishVolume(ctx, req); err != nil {
		log.Fatal(err)
	}
	fmt.Println("write after fence:", status.Code(client.Write(ctx, nodeConn, id, []byte("late"))))

	recs, err := audit.ReadFile(d.AuditPath())
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range audit.Filter(recs, audit.Volume(id)) {
		fmt.Println(r.Method, r.NodeID, "fence:", r.Fence, r.Code)
	}
	// Output:
	// write before fence: OK
	// write after fence: PermissionDenied
	// CreateVolume  fence: false OK
	// ControllerPublishVolume node-a fence: false OK
	// NodeStageVolume node-a fence: false OK
	// Write node-a fence: false OK
	// ControllerUnpublishVolume node-a fence: true OK
	// Write node-a fence: false PermissionDenied
}
