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
	"fenceline.io/fenceline/pkg/fence/fencev1"
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
	// {UnpublishFence:true ForceUnpublish:false ListFences:false LiftFence:false}
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

// exampleStore is the fence store of a driver whose storage keeps one fence
// per node and volume.
type exampleStore struct {
	fences []*fencev1.Fence
}

func (s *exampleStore) Fences(context.Context, *fencev1.ListFencesRequest) ([]*fencev1.Fence, error) {
	return s.fences, nil
}

func (s *exampleStore) LiftFences(_ context.Context, req *fencev1.LiftFenceRequest) ([]*fencev1.Fence, error) {
	var kept, lifted []*fencev1.Fence
	for _, f := range s.fences {
		if f.GetNodeId() == req.GetNodeId() && (len(req.GetVolumeIds()) == 0 || fence.Covers(f, req.GetNodeId(), req.GetVolumeIds()[0])) {
			// Only stop refusing the node: its access comes back through a
			// later ControllerPublishVolume, never from here.
			lifted = append(lifted, f)
			continue
		}
		kept = append(kept, f)
	}
	s.fences = kept
	return lifted, nil
}

// startExampleDriver serves what register adds on a unix socket in a
// temporary directory and connects to it, as a CO connects to a driver.
func startExampleDriver(register func(*grpc.Server) error) (*grpc.ClientConn, func(), error) {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		return nil, nil, err
	}
	sock := filepath.Join(dir, "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	srv := grpc.NewServer()
	if err := register(srv); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	stop := func() {
		if conn != nil {
			conn.Close()
		}
		srv.Stop()
		os.RemoveAll(dir)
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return conn, stop, nil
}

// A driver that lists and lifts its fences registers its store with the
// capabilities; a CO shows the fences of a node and, once it knows the node
// rebooted, lifts them. The helpers page through the answers and never call
// what the driver did not advertise.
func ExampleRegisterFenceServer() {
	store := &exampleStore{fences: []*fencev1.Fence{
		{NodeId: "node-1", VolumeIds: []string{"vol-1"}, Details: "initiator removed, 1 session ended"},
		{NodeId: "node-1", VolumeIds: []string{"vol-2"}, Details: "initiator removed"},
		{NodeId: "node-2", VolumeIds: []string{"vol-3"}},
	}}
	caps := fence.Capabilities{UnpublishFence: true, ListFences: true, LiftFence: true}
	conn, stop, err := startExampleDriver(func(srv *grpc.Server) error {
		return fence.RegisterFenceServer(srv, caps, store) // driver side
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	// CO side.
	ctx := context.Background()
	found, err := fence.Discover(ctx, conn)
	if err != nil {
		fmt.Println(err)
		return
	}
	fences, err := fence.ListFences(ctx, conn, found, &fencev1.ListFencesRequest{NodeId: "node-1", MaxEntries: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range fences {
		fmt.Println("fenced:", f.GetNodeId(), f.GetVolumeIds(), f.GetDetails())
	}
	lifted, err := fence.LiftFence(ctx, conn, found, &fencev1.LiftFenceRequest{NodeId: "node-1", Reason: "node-1 rebooted: new boot ID"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("lifted:", len(lifted))
	fences, err = fence.ListFences(ctx, conn, found, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("left:", len(fences), fences[0].GetNodeId())
	// Output:
	// fenced: node-1 [vol-1] initiator removed, 1 session ended
	// fenced: node-1 [vol-2] initiator removed
	// lifted: 2
	// left: 1 node-2
}
