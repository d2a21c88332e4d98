package fence

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// ValidateFence checks one ListFences entry against the contract: a node
// ID, and either volume IDs (none of them empty) or all_volumes, never both;
// a fenced_at, when present, that is a valid timestamp. A driver that
// returns an entry failing it breaks every CO that shows fences.
func ValidateFence(f *fencev1.Fence) error {
	switch {
	case f == nil:
		return errors.New("fence entry is nil")
	case f.GetNodeId() == "":
		return errors.New("fence entry has no node_id")
	case f.GetAllVolumes() && len(f.GetVolumeIds()) > 0:
		return fmt.Errorf("fence of node %s is node-wide (all_volumes) and also lists volume_ids %q", f.GetNodeId(), f.GetVolumeIds())
	case !f.GetAllVolumes() && len(f.GetVolumeIds()) == 0:
		return fmt.Errorf("fence of node %s names no volume and is not node-wide (all_volumes)", f.GetNodeId())
	}
	for _, v := range f.GetVolumeIds() {
		if v == "" {
			return fmt.Errorf("fence of node %s lists an empty volume ID", f.GetNodeId())
		}
	}
	if t := f.GetFencedAt(); t != nil {
		if err := t.CheckValid(); err != nil {
			return fmt.Errorf("fence of node %s has an invalid fenced_at: %w", f.GetNodeId(), err)
		}
	}
	return nil
}

// Covers reports whether fence f cuts nodeID off volumeID: same node, and
// the volume is listed or the fence is node-wide.
func Covers(f *fencev1.Fence, nodeID, volumeID string) bool {
	if f.GetNodeId() != nodeID {
		return false
	}
	if f.GetAllVolumes() {
		return true
	}
	for _, v := range f.GetVolumeIds() {
		if v == volumeID {
			return true
		}
	}
	return false
}

// ValidateListFencesRequest returns the INVALID_ARGUMENT status error a
// driver answers to a ListFences request it must refuse (a negative
// max_entries), or nil. The starting_token is checked by PageFences, which
// issued it.
func ValidateListFencesRequest(req *fencev1.ListFencesRequest) error {
	if req.GetMaxEntries() < 0 {
		return status.Errorf(codes.InvalidArgument, "max_entries must not be negative, got %d", req.GetMaxEntries())
	}
	return nil
}

// ValidateLiftFenceRequest returns the INVALID_ARGUMENT status error a
// driver answers to a LiftFence request it must refuse (no node_id, an
// empty volume ID), or nil. A node or volume the driver does not know is no
// error: there is nothing to lift there.
func ValidateLiftFenceRequest(req *fencev1.LiftFenceRequest) error {
	if req.GetNodeId() == "" {
		return status.Error(codes.InvalidArgument, "node_id is required: LiftFence lifts the fences of one node")
	}
	for i, v := range req.GetVolumeIds() {
		if v == "" {
			return status.Errorf(codes.InvalidArgument, "volume_ids[%d] is empty", i)
		}
	}
	return nil
}

// PageFences answers a ListFences request from every fence the storage
// enforces, in any order: it validates the request, keeps the fences of
// req.node_id when set, sorts them into a stable order and returns the page
// that starts after req.starting_token, with at most req.max_entries
// entries (all when 0) and the token of the next page.
//
// A token names the last entry returned, not an index, so a walk returns
// every fence in force throughout it exactly once even when others are set
// or lifted between pages. A token PageFences did not issue is ABORTED, as
// for CSI ListVolumes. An entry that fails ValidateFence is INTERNAL: it is
// the driver's bug, better reported than shown. The errors are gRPC status
// errors a driver returns as they are.
func PageFences(req *fencev1.ListFencesRequest, all []*fencev1.Fence) (*fencev1.ListFencesResponse, error) {
	if err := ValidateListFencesRequest(req); err != nil {
		return nil, err
	}
	var after *pageKey
	if tok := req.GetStartingToken(); tok != "" {
		k, err := decodeToken(tok)
		if err != nil {
			return nil, status.Errorf(codes.Aborted, "invalid starting_token %q: %v", tok, err)
		}
		after = &k
	}
	type keyed struct {
		key   pageKey
		fence *fencev1.Fence
	}
	var entries []keyed
	for _, f := range all {
		if err := ValidateFence(f); err != nil {
			return nil, status.Errorf(codes.Internal, "the driver listed an invalid fence: %v", err)
		}
		if req.GetNodeId() != "" && f.GetNodeId() != req.GetNodeId() {
			continue
		}
		k := keyOf(f)
		if after != nil && k.compare(*after) <= 0 {
			continue
		}
		entries = append(entries, keyed{k, f})
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].key.compare(entries[j].key) < 0 })
	resp := &fencev1.ListFencesResponse{}
	if max := int(req.GetMaxEntries()); max > 0 && len(entries) > max {
		entries = entries[:max]
		resp.NextToken = encodeToken(entries[max-1].key)
	}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, e.fence)
	}
	return resp, nil
}

// pageKey is the position of a fence in PageFences' order: node, then
// node-wide before per-volume, then the volumes, the time, and a digest of
// the details, so that two different fences never share a position.
type pageKey struct {
	Node    string   `json:"n"`
	All     bool     `json:"a,omitempty"`
	Volumes []string `json:"v,omitempty"`
	HasTime bool     `json:"t,omitempty"`
	Seconds int64    `json:"s,omitempty"`
	Nanos   int32    `json:"ns,omitempty"`
	Details string   `json:"d,omitempty"`
}

func keyOf(f *fencev1.Fence) pageKey {
	vols := append([]string(nil), f.GetVolumeIds()...)
	sort.Strings(vols)
	k := pageKey{Node: f.GetNodeId(), All: f.GetAllVolumes(), Volumes: vols}
	if t := f.GetFencedAt(); t != nil {
		k.HasTime, k.Seconds, k.Nanos = true, t.GetSeconds(), t.GetNanos()
	}
	if d := f.GetDetails(); d != "" {
		// A digest keeps tokens short however long the details are.
		sum := sha256.Sum256([]byte(d))
		k.Details = hex.EncodeToString(sum[:8])
	}
	return k
}

// compare orders keys: negative when k comes first.
func (k pageKey) compare(o pageKey) int {
	if c := strings.Compare(k.Node, o.Node); c != 0 {
		return c
	}
	if k.All != o.All {
		if k.All {
			return -1
		}
		return 1
	}
	for i := 0; i < len(k.Volumes) && i < len(o.Volumes); i++ {
		if c := strings.Compare(k.Volumes[i], o.Volumes[i]); c != 0 {
			return c
		}
	}
	if c := compareInts(int64(len(k.Volumes)), int64(len(o.Volumes))); c != 0 {
		return c
	}
	if k.HasTime != o.HasTime {
		if !k.HasTime {
			return -1
		}
		return 1
	}
	if c := compareInts(k.Seconds, o.Seconds); c != 0 {
		return c
	}
	if c := compareInts(int64(k.Nanos), int64(o.Nanos)); c != 0 {
		return c
	}
	return strings.Compare(k.Details, o.Details)
}

func compareInts(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// tokenPrefix versions the token format, so that a later format can tell
// its tokens from these.
const tokenPrefix = "f1."

func encodeToken(k pageKey) string {
	// Marshalling a struct of strings, bools and integers cannot fail.
	b, _ := json.Marshal(k)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(tok string) (pageKey, error) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return pageKey{}, errors.New("not a token of this driver")
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return pageKey{}, fmt.Errorf("decoding: %w", err)
	}
	var k pageKey
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil {
		return pageKey{}, fmt.Errorf("decoding: %w", err)
	}
	if k.Node == "" {
		return pageKey{}, errors.New("names no node")
	}
	return k, nil
}
