package sanity

import (
	"context"
	"path"
	"sort"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// fenceFlaws are the fake driver's switchable flaws around ListFences and
// LiftFence, and the capabilities it can go without.
type fenceFlaws struct {
	// hideFences: ListFences shows nothing.
	hideFences bool
	// liftKeepsFence: LiftFence answers as if it lifted, and lifts nothing.
	liftKeepsFence bool
	// liftPublishes: LiftFence also attaches the volume to the node again.
	liftPublishes bool
	// acceptAnyToken: ListFences reads a token it never issued as the
	// start, instead of answering ABORTED.
	acceptAnyToken bool
	// noListVolumes: no LIST_VOLUMES / LIST_VOLUMES_PUBLISHED_NODES.
	noListVolumes bool
}

// count is a server interceptor that counts the calls of every method, so
// that the tests can prove the suite never made a call.
func (d *fakeDriver) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	d.mu.Lock()
	d.calls[path.Base(info.FullMethod)]++
	d.mu.Unlock()
	return handler(ctx, req)
}

// callCount returns how often method was called.
func (d *fakeDriver) callCount(method string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[method]
}

// registerFences registers the extension service with the fake as its
// FenceStore, behind the token flaw when it is switched on.
func (d *fakeDriver) registerFences(t *testing.T, srv *grpc.Server) {
	t.Helper()
	svc, err := fence.NewFenceServer(d.caps, d)
	if err != nil {
		t.Fatal(err)
	}
	if d.acceptAnyToken {
		svc = anyToken{svc}
	}
	fencev1.RegisterFenceCapabilitiesServer(srv, svc)
}

// anyToken drops a starting_token the server refuses and starts over.
type anyToken struct {
	fencev1.FenceCapabilitiesServer
}

func (a anyToken) ListFences(ctx context.Context, req *fencev1.ListFencesRequest) (*fencev1.ListFencesResponse, error) {
	resp, err := a.FenceCapabilitiesServer.ListFences(ctx, req)
	if status.Code(err) == codes.Aborted {
		req.StartingToken = ""
		return a.FenceCapabilitiesServer.ListFences(ctx, req)
	}
	return resp, err
}

// Fences implements fence.FenceStore: one fence per fenced volume.
func (d *fakeDriver) Fences(_ context.Context, req *fencev1.ListFencesRequest) ([]*fencev1.Fence, error) {
	if err := d.authenticate("ListFences", req.GetSecrets()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hideFences {
		return nil, nil
	}
	var out []*fencev1.Fence
	for id, v := range d.volumes {
		if v.fenced {
			out = append(out, &fencev1.Fence{NodeId: fakeNode, VolumeIds: []string{id}, FencedAt: timestamppb.New(v.fencedAt), Details: "fake"})
		}
	}
	return out, nil
}

// LiftFences implements fence.FenceStore: the fence goes, and with it what
// the node held of the volume (a node that may be lifted has nothing left);
// the attachment is not given back.
func (d *fakeDriver) LiftFences(_ context.Context, req *fencev1.LiftFenceRequest) ([]*fencev1.Fence, error) {
	if err := d.authenticate("LiftFence", req.GetSecrets()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.GetNodeId() != fakeNode {
		return nil, nil
	}
	ids := req.GetVolumeIds()
	if len(ids) == 0 {
		for id := range d.volumes {
			ids = append(ids, id)
		}
	}
	var lifted []*fencev1.Fence
	for _, id := range ids {
		v, ok := d.volumes[id]
		if !ok || !v.fenced {
			continue
		}
		lifted = append(lifted, &fencev1.Fence{NodeId: fakeNode, VolumeIds: []string{id}, FencedAt: timestamppb.New(v.fencedAt), Details: "fake"})
		if d.liftKeepsFence {
			continue
		}
		v.fenced, v.staged, v.targets = false, false, map[string]bool{}
		v.attached = v.attached || d.liftPublishes
	}
	return lifted, nil
}

// ListVolumes lists every volume at once, published to the node when
// attached.
func (d *fakeDriver) ListVolumes(context.Context, *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]string, 0, len(d.volumes))
	for id := range d.volumes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	resp := &csi.ListVolumesResponse{}
	for _, id := range ids {
		entry := &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: id}, Status: &csi.ListVolumesResponse_VolumeStatus{}}
		if d.volumes[id].attached {
			entry.Status.PublishedNodeIds = []string{fakeNode}
		}
		resp.Entries = append(resp.Entries, entry)
	}
	return resp, nil
}
