package fence

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// ErrNotAdvertised is returned, wrapped, by ListFences and LiftFence when
// the driver did not advertise the call: the contract forbids calling it,
// so they make no call at all.
var ErrNotAdvertised = errors.New("the driver does not advertise this call")

// ListFences returns every fence the driver behind conn enforces, walking
// all pages. caps is what Discover returned for conn; without ListFences it
// returns ErrNotAdvertised and calls nothing. req supplies the node_id
// filter, the page size (max_entries; 0 lets the driver choose) and the
// secrets; its starting_token is ignored. It fails, wrapping the driver's
// status error, on the first failed page (ABORTED included: the caller
// starts again), and when the driver hands back a token it already gave,
// which would never end.
func ListFences(ctx context.Context, conn grpc.ClientConnInterface, caps Capabilities, req *fencev1.ListFencesRequest) ([]*fencev1.Fence, error) {
	if !caps.ListFences {
		return nil, fmt.Errorf("ListFences: %w (LIST_FENCES)", ErrNotAdvertised)
	}
	page := &fencev1.ListFencesRequest{}
	if req != nil {
		page = proto.Clone(req).(*fencev1.ListFencesRequest)
	}
	page.StartingToken = ""
	client := fencev1.NewFenceCapabilitiesClient(conn)
	seen := map[string]bool{}
	var out []*fencev1.Fence
	for {
		resp, err := client.ListFences(ctx, page)
		if err != nil {
			return nil, fmt.Errorf("ListFences (starting_token %q): %w", page.StartingToken, err)
		}
		out = append(out, resp.GetEntries()...)
		next := resp.GetNextToken()
		if next == "" {
			return out, nil
		}
		if seen[next] {
			return nil, fmt.Errorf("ListFences: the driver returned next_token %q twice; the walk would not end", next)
		}
		seen[next] = true
		page.StartingToken = next
	}
}

// LiftFence asks the driver behind conn to lift the fences req names and
// returns those it lifted (none when nothing was in force). caps is what
// Discover returned for conn; without LiftFence it returns ErrNotAdvertised
// and calls nothing. The caller must first know that the node holds nothing
// of those volumes any more (a reboot since the fence, a re-installation,
// an operator's word): the driver does not check it. Lifting gives the node
// nothing back; a later ControllerPublishVolume does.
func LiftFence(ctx context.Context, conn grpc.ClientConnInterface, caps Capabilities, req *fencev1.LiftFenceRequest) ([]*fencev1.Fence, error) {
	if !caps.LiftFence {
		return nil, fmt.Errorf("LiftFence: %w (LIFT_FENCE)", ErrNotAdvertised)
	}
	resp, err := fencev1.NewFenceCapabilitiesClient(conn).LiftFence(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("LiftFence of node %q: %w", req.GetNodeId(), err)
	}
	return resp.GetLifted(), nil
}
