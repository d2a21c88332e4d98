package fence

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// perVolume is a fence of node off the volumes vols.
func perVolume(node string, vols ...string) *fencev1.Fence {
	return &fencev1.Fence{NodeId: node, VolumeIds: vols, FencedAt: timestamppb.New(testTime)}
}

// nodeWide is a node-wide fence of node.
func nodeWide(node string) *fencev1.Fence {
	return &fencev1.Fence{NodeId: node, AllVolumes: true, Details: "client 10.0.0.7 blocklisted"}
}

func TestValidateFence(t *testing.T) {
	tests := []struct {
		name    string
		fence   *fencev1.Fence
		wantErr string
	}{
		{name: "per volume", fence: perVolume("node-a", "vol-1", "vol-2")},
		{name: "node-wide", fence: nodeWide("node-a")},
		{name: "without a time", fence: &fencev1.Fence{NodeId: "node-a", VolumeIds: []string{"vol-1"}}},
		{name: "nil", fence: nil, wantErr: "nil"},
		{name: "no node", fence: &fencev1.Fence{VolumeIds: []string{"vol-1"}}, wantErr: "no node_id"},
		{name: "no volume", fence: &fencev1.Fence{NodeId: "node-a"}, wantErr: "names no volume"},
		{name: "both", fence: &fencev1.Fence{NodeId: "node-a", AllVolumes: true, VolumeIds: []string{"vol-1"}}, wantErr: "also lists volume_ids"},
		{name: "empty volume ID", fence: &fencev1.Fence{NodeId: "node-a", VolumeIds: []string{"vol-1", ""}}, wantErr: "empty volume ID"},
		{name: "bad time", fence: &fencev1.Fence{NodeId: "node-a", AllVolumes: true, FencedAt: &timestamppb.Timestamp{Nanos: -1}}, wantErr: "invalid fenced_at"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateFence(tc.fence)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("ValidateFence = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		name         string
		fence        *fencev1.Fence
		node, volume string
		want         bool
	}{
		{name: "listed volume", fence: perVolume("node-a", "vol-1", "vol-2"), node: "node-a", volume: "vol-2", want: true},
		{name: "other volume", fence: perVolume("node-a", "vol-1"), node: "node-a", volume: "vol-3", want: false},
		{name: "other node", fence: perVolume("node-a", "vol-1"), node: "node-b", volume: "vol-1", want: false},
		{name: "node-wide", fence: nodeWide("node-a"), node: "node-a", volume: "vol-9", want: true},
		{name: "node-wide, other node", fence: nodeWide("node-a"), node: "node-b", volume: "vol-9", want: false},
		{name: "nil", fence: nil, node: "node-a", volume: "vol-1", want: false},
	}
	for _, tc := range tests {
		if got := Covers(tc.fence, tc.node, tc.volume); got != tc.want {
			t.Errorf("%s: Covers = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestValidateRequests(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{name: "list everything", err: ValidateListFencesRequest(&fencev1.ListFencesRequest{}), want: codes.OK},
		{name: "list a page of a node", err: ValidateListFencesRequest(&fencev1.ListFencesRequest{MaxEntries: 5, NodeId: "node-a"}), want: codes.OK},
		{name: "negative max_entries", err: ValidateListFencesRequest(&fencev1.ListFencesRequest{MaxEntries: -1}), want: codes.InvalidArgument},
		{name: "lift a node", err: ValidateLiftFenceRequest(&fencev1.LiftFenceRequest{NodeId: "node-a"}), want: codes.OK},
		{name: "lift volumes", err: ValidateLiftFenceRequest(&fencev1.LiftFenceRequest{NodeId: "node-a", VolumeIds: []string{"vol-1"}}), want: codes.OK},
		{name: "lift without node_id", err: ValidateLiftFenceRequest(&fencev1.LiftFenceRequest{VolumeIds: []string{"vol-1"}}), want: codes.InvalidArgument},
		{name: "lift a nil request", err: ValidateLiftFenceRequest(nil), want: codes.InvalidArgument},
		{name: "lift an empty volume ID", err: ValidateLiftFenceRequest(&fencev1.LiftFenceRequest{NodeId: "node-a", VolumeIds: []string{"vol-1", ""}}), want: codes.InvalidArgument},
	}
	for _, tc := range tests {
		if got := status.Code(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, tc.err, tc.want)
		}
	}
}

// fenceKeys names each fence for comparisons: node, volumes, node-wide.
func fenceKeys(fs []*fencev1.Fence) []string {
	var out []string
	for _, f := range fs {
		k := f.GetNodeId() + ":" + strings.Join(f.GetVolumeIds(), ",")
		if f.GetAllVolumes() {
			k += "*"
		}
		out = append(out, k)
	}
	return out
}

func TestPageFences(t *testing.T) {
	all := []*fencev1.Fence{perVolume("node-b", "vol-2"), nodeWide("node-c"), perVolume("node-a", "vol-2"), perVolume("node-a", "vol-1"), nodeWide("node-a")}
	tests := []struct {
		name     string
		req      *fencev1.ListFencesRequest
		want     []string
		wantNext bool
		wantCode codes.Code
	}{
		{name: "everything, sorted", req: &fencev1.ListFencesRequest{}, want: []string{"node-a:*", "node-a:vol-1", "node-a:vol-2", "node-b:vol-2", "node-c:*"}},
		{name: "one node", req: &fencev1.ListFencesRequest{NodeId: "node-a"}, want: []string{"node-a:*", "node-a:vol-1", "node-a:vol-2"}},
		{name: "unknown node", req: &fencev1.ListFencesRequest{NodeId: "node-z"}, want: nil},
		{name: "first page", req: &fencev1.ListFencesRequest{MaxEntries: 2}, want: []string{"node-a:*", "node-a:vol-1"}, wantNext: true},
		{name: "page as large as the rest", req: &fencev1.ListFencesRequest{MaxEntries: 5}, want: []string{"node-a:*", "node-a:vol-1", "node-a:vol-2", "node-b:vol-2", "node-c:*"}},
		{name: "negative max_entries", req: &fencev1.ListFencesRequest{MaxEntries: -2}, wantCode: codes.InvalidArgument},
		{name: "foreign token", req: &fencev1.ListFencesRequest{StartingToken: "after:vol-1"}, wantCode: codes.Aborted},
		{name: "token that is not base64", req: &fencev1.ListFencesRequest{StartingToken: tokenPrefix + "!!"}, wantCode: codes.Aborted},
		{name: "token of another shape", req: &fencev1.ListFencesRequest{StartingToken: tokenPrefix + "eyJ4IjoxfQ"}, wantCode: codes.Aborted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := PageFences(tc.req, all)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("PageFences = %v, want code %s", err, tc.wantCode)
			}
			if err != nil {
				return
			}
			if got := fenceKeys(resp.GetEntries()); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("entries %v, want %v", got, tc.want)
			}
			if (resp.GetNextToken() != "") != tc.wantNext {
				t.Errorf("next_token %q, want one: %v", resp.GetNextToken(), tc.wantNext)
			}
		})
	}
}

func TestPageFencesRefusesInvalidEntries(t *testing.T) {
	_, err := PageFences(&fencev1.ListFencesRequest{}, []*fencev1.Fence{perVolume("node-a", "vol-1"), {NodeId: "node-b"}})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "names no volume") {
		t.Errorf("PageFences with an invalid entry = %v, want INTERNAL naming the flaw", err)
	}
}

// TestPageFencesWalk walks every page size over fences that change between
// pages: a fence in force throughout is returned exactly once, wherever the
// changes fall.
func TestPageFencesWalk(t *testing.T) {
	var stable []*fencev1.Fence
	for i := 0; i < 7; i++ {
		stable = append(stable, perVolume(fmt.Sprintf("node-%d", i%3), fmt.Sprintf("vol-%d", i)))
	}
	stable = append(stable, nodeWide("node-1"))
	changes := []struct {
		name   string
		mutate func(page int, fences []*fencev1.Fence) []*fencev1.Fence
	}{
		{name: "nothing changes", mutate: func(_ int, fs []*fencev1.Fence) []*fencev1.Fence { return fs }},
		{name: "a fence set before each page", mutate: func(page int, fs []*fencev1.Fence) []*fencev1.Fence {
			return append(fs, perVolume(fmt.Sprintf("node-%d", page%4), fmt.Sprintf("new-%d", page)))
		}},
		{name: "the order reversed each page", mutate: func(_ int, fs []*fencev1.Fence) []*fencev1.Fence {
			out := make([]*fencev1.Fence, len(fs))
			for i, f := range fs {
				out[len(fs)-1-i] = f
			}
			return out
		}},
	}
	for _, ch := range changes {
		for size := int32(1); size <= int32(len(stable))+1; size++ {
			t.Run(fmt.Sprintf("%s, %d per page", ch.name, size), func(t *testing.T) {
				seen := map[string]int{}
				fences := append([]*fencev1.Fence(nil), stable...)
				req := &fencev1.ListFencesRequest{MaxEntries: size}
				for page := 0; ; page++ {
					if page > len(stable)*3 {
						t.Fatal("the walk does not end")
					}
					fences = ch.mutate(page, fences)
					resp, err := PageFences(req, fences)
					if err != nil {
						t.Fatalf("page %d: %v", page, err)
					}
					if len(resp.GetEntries()) > int(size) {
						t.Fatalf("page %d has %d entries, more than max_entries %d", page, len(resp.GetEntries()), size)
					}
					for _, k := range fenceKeys(resp.GetEntries()) {
						seen[k]++
					}
					if resp.GetNextToken() == "" {
						break
					}
					req = proto.Clone(req).(*fencev1.ListFencesRequest)
					req.StartingToken = resp.GetNextToken()
				}
				for _, k := range fenceKeys(stable) {
					if seen[k] != 1 {
						t.Errorf("fence %s returned %d times, want once", k, seen[k])
					}
				}
			})
		}
	}
}

// FuzzPageFencesToken feeds PageFences any starting_token: it never
// panics, and answers either a page or ABORTED, never another code, since a
// CO reads ABORTED as "start again".
func FuzzPageFencesToken(f *testing.F) {
	all := []*fencev1.Fence{perVolume("node-a", "vol-1"), perVolume("node-b", "vol-2"), nodeWide("node-c")}
	first, err := PageFences(&fencev1.ListFencesRequest{MaxEntries: 1}, all)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{first.GetNextToken(), "", tokenPrefix, tokenPrefix + "e30", "after:vol-1", tokenPrefix + "eyJuIjoiIn0"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		resp, err := PageFences(&fencev1.ListFencesRequest{MaxEntries: 2, StartingToken: token}, all)
		switch code := status.Code(err); {
		case code == codes.Aborted:
		case err != nil:
			t.Fatalf("token %q: %v, want a page or ABORTED", token, err)
		case len(resp.GetEntries()) > 2:
			t.Fatalf("token %q: %d entries on a page of 2", token, len(resp.GetEntries()))
		}
	})
}
