package fence_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fenceline.io/fenceline/pkg/fence"
)

// exampleController is the controller service of a fence-aware driver.
type exampleController struct {
	csi.UnimplementedControllerServer
}

func (exampleController) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if fence.IsFenced(req) {
		// Revoke req.NodeId's access to req.VolumeId at the storage and wait
		// until the revocation is in effect before returning.
		fmt.Println("fencing", req.GetNodeId(), "off from", req.GetVolumeId())
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// A driver registers the extension service on the gRPC server that serves its
// CSI services; a CO connected to the same socket discovers it and sends
// fenced requests.
func ExampleRegisterCapabilitiesServer() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}

	// Driver side.
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, exampleController{})
	fence.RegisterCapabilitiesServer(srv, fence.Capabilities{UnpublishFence: true})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// CO side.
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	ctx := context.Background()
	caps, err := fence.Discover(ctx, conn)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%+v\n", caps)

	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
	fence.SetFence(req, caps.UnpublishFence)
	if _, err := csi.NewControllerClient(conn).ControllerUnpublishVolume(ctx, req); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {UnpublishFence:true ForceUnpublish:false}
	// fencing node-1 off from vol-1
}

// SetFence adds the two bytes 0x20 0x01 (field 4, varint 1) to the request's
// unknown fields; setting it again changes nothing, and false removes it.
func ExampleSetFence() {
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
	fence.SetFence(req, true)
	fence.SetFence(req, true)
	fmt.Printf("fenced=%v unknown=[% x]\n", fence.IsFenced(req), req.ProtoReflect().GetUnknown())
	fence.SetFence(req, false)
	fmt.Printf("fenced=%v unknown=[% x]\n", fence.IsFenced(req), req.ProtoReflect().GetUnknown())
	// Output:
	// fenced=true unknown=[20 01]
	// fenced=false unknown=[]
}
