package sanity

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// The cases of this file check the optional ListFences and LiftFence calls.
// Each first checks that the controller advertises the call it makes, so
// that the suite never sends a driver a call it did not advertise.

// maxPages bounds a walk through ListFences or ListVolumes pages, so that a
// driver whose tokens never end fails instead of hanging the suite.
const maxPages = 10000

// requireListFences skips a case for a driver without LIST_FENCES.
func (e *env) requireListFences() error {
	if !e.s.caps.listFences {
		return skipf("the controller does not advertise LIST_FENCES")
	}
	return nil
}

// requireFenceToList skips a case that needs a fence of its own to look at
// for a driver without UNPUBLISH_FENCE.
func (e *env) requireFenceToList(what string) error {
	if !e.s.caps.unpublishFence {
		return skipf("%s needs a fence set by the suite, and the controller does not advertise UNPUBLISH_FENCE", what)
	}
	return nil
}

// fenceClient returns a client of the controller endpoint's extension
// service.
func (e *env) fenceClient() (fencev1.FenceCapabilitiesClient, error) {
	c, err := e.s.conn(e.s.cfg.ControllerEndpoint)
	if err != nil {
		return nil, err
	}
	return fencev1.NewFenceCapabilitiesClient(c), nil
}

// walkFences returns every fence ListFences shows for nodeID ("" for all),
// max entries per page (0: the driver decides), and checks each page
// against the contract: valid entries, the filter applied, no page larger
// than max, no token handed out twice.
func (e *env) walkFences(nodeID string, max int32) (fences []*fencev1.Fence, pages int, err error) {
	client, err := e.fenceClient()
	if err != nil {
		return nil, 0, err
	}
	req := &fencev1.ListFencesRequest{NodeId: nodeID, MaxEntries: max, Secrets: e.s.cfg.Secrets.ListFences}
	tokens := map[string]bool{}
	for pages = 1; pages <= maxPages; pages++ {
		resp, err := e.listPage(client, req)
		if err != nil {
			return nil, pages, err
		}
		if max > 0 && len(resp.GetEntries()) > int(max) {
			return nil, pages, fmt.Errorf("ListFences with max_entries=%d returned %d entries", max, len(resp.GetEntries()))
		}
		for _, f := range resp.GetEntries() {
			if err := fence.ValidateFence(f); err != nil {
				return nil, pages, fmt.Errorf("ListFences: %w", err)
			}
			if nodeID != "" && f.GetNodeId() != nodeID {
				return nil, pages, fmt.Errorf("ListFences with node_id=%q returned a fence of node %q", nodeID, f.GetNodeId())
			}
		}
		fences = append(fences, resp.GetEntries()...)
		next := resp.GetNextToken()
		if next == "" {
			return fences, pages, nil
		}
		if tokens[next] {
			return nil, pages, fmt.Errorf("ListFences returned next_token %q twice: the walk would not end", next)
		}
		tokens[next] = true
		req.StartingToken = next
	}
	return nil, pages, fmt.Errorf("ListFences still returns a next_token after %d pages", maxPages)
}

// listPage sends one ListFences request with its own deadline.
func (e *env) listPage(client fencev1.FenceCapabilitiesClient, req *fencev1.ListFencesRequest) (*fencev1.ListFencesResponse, error) {
	ctx, cancel := e.rpcContext()
	defer cancel()
	resp, err := client.ListFences(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("ListFences (node_id %q, max_entries %d, starting_token %q): %w", req.GetNodeId(), req.GetMaxEntries(), req.GetStartingToken(), err)
	}
	return resp, nil
}

// covering returns the first fence of fs that cuts nodeID off volumeID.
func covering(fs []*fencev1.Fence, nodeID, volumeID string) *fencev1.Fence {
	for _, f := range fs {
		if fence.Covers(f, nodeID, volumeID) {
			return f
		}
	}
	return nil
}

// describe is a fence as the log shows it.
func describe(f *fencev1.Fence) string {
	what := fmt.Sprintf("volumes %q", f.GetVolumeIds())
	if f.GetAllVolumes() {
		what = "every volume"
	}
	when := "no fenced_at"
	if t := f.GetFencedAt(); t != nil {
		when = "fenced_at " + t.AsTime().UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("node %s off %s, %s, details %q", f.GetNodeId(), what, when, f.GetDetails())
}

// listFences: after a fenced ControllerUnpublishVolume, ListFences shows a
// fence of that node covering the volume, with and without the node_id
// filter, shows nothing for a node without fences, and no longer shows it
// once the node-side clean-up lifted it.
func listFences(e *env) error {
	if err := e.requireListFences(); err != nil {
		return err
	}
	if err := e.requireFenceToList("listing a fence"); err != nil {
		return err
	}
	a, err := e.fencedAttachment()
	if err != nil {
		return err
	}
	for _, node := range []string{"", a.nodeID} {
		fs, _, err := e.walkFences(node, 0)
		if err != nil {
			return err
		}
		f := covering(fs, a.nodeID, a.vol.id)
		if f == nil {
			return fmt.Errorf("ListFences (node_id %q) shows no fence of node %s covering volume %s after ControllerUnpublishVolume with fence=true returned OK; it shows %d fences", node, a.nodeID, a.vol.id, len(fs))
		}
		e.logf("ListFences (node_id %q) shows %s", node, describe(f))
	}
	unknown := fmt.Sprintf("%s-no-such-node-%d", e.s.cfg.VolumeNamePrefix, time.Now().UnixNano())
	fs, _, err := e.walkFences(unknown, 0)
	if err != nil {
		return fmt.Errorf("a node without fences is no error: %w", err)
	}
	if len(fs) != 0 {
		return fmt.Errorf("ListFences with node_id=%q, a node the driver never saw, shows %d fences", unknown, len(fs))
	}
	e.logf("ListFences for an unknown node is OK and empty")
	if err := e.nodeCleanup(a, false); err != nil {
		return err
	}
	if fs, _, err = e.walkFences(a.nodeID, 0); err != nil {
		return err
	}
	if f := covering(fs, a.nodeID, a.vol.id); f != nil {
		return fmt.Errorf("ListFences still shows %s after the node-side clean-up, which lifts the fence", describe(f))
	}
	e.logf("the fence is gone from ListFences after the node-side clean-up")
	return nil
}

// listFencesPagination: a bad starting_token is ABORTED, a negative
// max_entries INVALID_ARGUMENT, and a walk one entry per page returns every
// fence exactly once.
func listFencesPagination(e *env) error {
	if err := e.requireListFences(); err != nil {
		return err
	}
	if err := e.listCodes(); err != nil {
		return err
	}
	var set []*attachment
	if e.s.caps.unpublishFence {
		var err error
		if set, err = e.fenceSeveral(); err != nil {
			return err
		}
	} else {
		e.logf("the controller does not advertise UNPUBLISH_FENCE: paging through the fences the storage already holds")
	}
	before, _, err := e.walkFences("", 0)
	if err != nil {
		return err
	}
	paged, pages, err := e.walkFences("", 1)
	if err != nil {
		return err
	}
	after, _, err := e.walkFences("", 0)
	if err != nil {
		return err
	}
	e.logf("%d fences in all, walked one per page: %d requests", len(before), pages)
	if err := checkWalk(paged, before, after, set); err != nil {
		return err
	}
	if len(set) > 0 {
		mine, _, err := e.walkFences(set[0].nodeID, 1)
		if err != nil {
			return err
		}
		if err := checkWalk(mine, nil, nil, set); err != nil {
			return fmt.Errorf("with node_id=%q: %w", set[0].nodeID, err)
		}
	}
	if len(before) < 2 {
		e.logf("fewer than two fences: next_token was not exercised")
	}
	return nil
}

// listCodes checks the codes of the invalid ListFences requests.
func (e *env) listCodes() error {
	client, err := e.fenceClient()
	if err != nil {
		return err
	}
	bad := fmt.Sprintf("%s-not-a-token-%d", e.s.cfg.VolumeNamePrefix, time.Now().UnixNano())
	for _, c := range []struct {
		what string
		req  *fencev1.ListFencesRequest
		want codes.Code
	}{
		{"ListFences with a starting_token the driver never issued", &fencev1.ListFencesRequest{StartingToken: bad}, codes.Aborted},
		{"ListFences with a negative max_entries", &fencev1.ListFencesRequest{MaxEntries: -1}, codes.InvalidArgument},
	} {
		c.req.Secrets = e.s.cfg.Secrets.ListFences
		_, err := e.listPage(client, c.req)
		if got := status.Code(err); got != c.want {
			return fmt.Errorf("%s: got %s (%v), want %s", c.what, got, err, c.want)
		}
		e.logf("%s: %s", c.what, c.want)
	}
	return nil
}

// fenceSeveral fences three fresh volumes off the first node (one when the
// suite works on a configured volume), so that a walk has pages to turn.
func (e *env) fenceSeveral() ([]*attachment, error) {
	n := 3
	if e.s.cfg.VolumeID != "" {
		n = 1
	}
	var out []*attachment
	for i := 0; i < n; i++ {
		a, err := e.fencedAttachment()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// checkWalk checks a paged walk: no fence twice, every fence the case set
// present and, when the storage did not change during the walk (before
// and after agree), exactly the fences of a single listing.
func checkWalk(paged, before, after []*fencev1.Fence, set []*attachment) error {
	seen := map[string]bool{}
	for _, f := range paged {
		k := fenceKey(f)
		if seen[k] {
			return fmt.Errorf("a walk one entry per page returned %s twice", describe(f))
		}
		seen[k] = true
	}
	for _, a := range set {
		if covering(paged, a.nodeID, a.vol.id) == nil {
			return fmt.Errorf("a walk one entry per page missed the fence of node %s off volume %s", a.nodeID, a.vol.id)
		}
	}
	if before == nil || !sameFences(before, after) {
		return nil
	}
	if !sameFences(paged, before) {
		return fmt.Errorf("a walk one entry per page returned %d fences, a single listing %d: every fence must come exactly once", len(paged), len(before))
	}
	return nil
}

// fenceKey identifies a fence by everything it says.
func fenceKey(f *fencev1.Fence) string {
	vols := append([]string(nil), f.GetVolumeIds()...)
	sort.Strings(vols)
	return fmt.Sprintf("%q %v %q %v %q", f.GetNodeId(), f.GetAllVolumes(), vols, f.GetFencedAt().AsTime().UnixNano(), f.GetDetails())
}

// sameFences reports whether a and b hold the same fences.
func sameFences(a, b []*fencev1.Fence) bool {
	keys := func(fs []*fencev1.Fence) string {
		var ks []string
		for _, f := range fs {
			ks = append(ks, fenceKey(f))
		}
		sort.Strings(ks)
		return strings.Join(ks, "\n")
	}
	return keys(a) == keys(b)
}

// publishedTo reports whether ListVolumes shows volumeID published to
// nodeID, or why it cannot tell.
func (e *env) publishedTo(volumeID, nodeID string) (published bool, err error) {
	ctrl, err := e.controller()
	if err != nil {
		return false, err
	}
	req := &csi.ListVolumesRequest{}
	for pages := 0; pages < maxPages; pages++ {
		ctx, cancel := e.rpcContext()
		resp, err := ctrl.ListVolumes(ctx, req)
		cancel()
		if err != nil {
			return false, fmt.Errorf("ListVolumes: %w", err)
		}
		for _, entry := range resp.GetEntries() {
			if entry.GetVolume().GetVolumeId() != volumeID {
				continue
			}
			for _, n := range entry.GetStatus().GetPublishedNodeIds() {
				if n == nodeID {
					return true, nil
				}
			}
			return false, nil
		}
		if resp.GetNextToken() == "" {
			return false, fmt.Errorf("ListVolumes does not list volume %s", volumeID)
		}
		req.StartingToken = resp.GetNextToken()
	}
	return false, fmt.Errorf("ListVolumes still returns a next_token after %d pages", maxPages)
}

// lift sends LiftFence with the configured secrets and its own deadline.
func (e *env) lift(req *fencev1.LiftFenceRequest) ([]*fencev1.Fence, error) {
	client, err := e.fenceClient()
	if err != nil {
		return nil, err
	}
	req.Secrets = e.s.cfg.Secrets.LiftFence
	ctx, cancel := e.rpcContext()
	defer cancel()
	resp, err := client.LiftFence(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.GetLifted(), nil
}
