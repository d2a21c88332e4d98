package fence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

var testTime = time.Date(2026, 11, 22, 2, 0, 24, 0, time.UTC)

// memStore is a FenceStore over a list of fences; it counts the calls that
// reach it, so that tests can prove a call was never made.
type memStore struct {
	mu     sync.Mutex
	fences []*fencev1.Fence
	calls  int
}

func (m *memStore) Fences(_ context.Context, _ *fencev1.ListFencesRequest) ([]*fencev1.Fence, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	return append([]*fencev1.Fence(nil), m.fences...), nil
}

// LiftFences lifts per-volume fences volume by volume, and refuses to lift
// a node-wide fence partly, as the contract says.
func (m *memStore) LiftFences(_ context.Context, req *fencev1.LiftFenceRequest) ([]*fencev1.Fence, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	var kept, lifted []*fencev1.Fence
	for _, f := range m.fences {
		switch {
		case f.GetNodeId() != req.GetNodeId():
			kept = append(kept, f)
		case f.GetAllVolumes() && len(req.GetVolumeIds()) > 0:
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is fenced off every volume", f.GetNodeId())
		case len(req.GetVolumeIds()) == 0 || Covers(f, req.GetNodeId(), req.GetVolumeIds()[0]):
			lifted = append(lifted, f)
		default:
			kept = append(kept, f)
		}
	}
	m.fences = kept
	return lifted, nil
}

func (m *memStore) callCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

func TestNewFenceServerRefusesContractBreaks(t *testing.T) {
	tests := []struct {
		name    string
		caps    Capabilities
		store   FenceStore
		wantErr string
	}{
		{name: "fence only, no store", caps: Capabilities{UnpublishFence: true}},
		{name: "list and lift", caps: Capabilities{ListFences: true, LiftFence: true}, store: &memStore{}},
		{name: "list only", caps: Capabilities{ListFences: true}, store: &memStore{}},
		{name: "list without a store", caps: Capabilities{ListFences: true}, wantErr: "without a FenceStore"},
		{name: "lift without list", caps: Capabilities{LiftFence: true}, store: &memStore{}, wantErr: "LiftFence advertised without ListFences"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFenceServer(tc.caps, tc.store)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("NewFenceServer = %v, want an error containing %q", err, tc.wantErr)
			}
			var r recordingRegistrar
			if err := RegisterFenceServer(&r, tc.caps, tc.store); (err != nil) != (tc.wantErr != "") || (err == nil) != (len(r.services) == 1) {
				t.Errorf("RegisterFenceServer = %v after registering %v", err, r.services)
			}
		})
	}
}

// TestCapabilitiesServerNeverAdvertisesListOrLift: the server without a
// store drops what it could not serve, so a CO never calls it.
func TestCapabilitiesServerNeverAdvertisesListOrLift(t *testing.T) {
	conn := startServer(t, func(s *grpc.Server) {
		RegisterCapabilitiesServer(s, Capabilities{UnpublishFence: true, ListFences: true, LiftFence: true})
	})
	ctx := testContext(t)
	caps, err := Discover(ctx, conn)
	if err != nil || caps != (Capabilities{UnpublishFence: true}) {
		t.Fatalf("Discover = %+v, %v; want UnpublishFence only", caps, err)
	}
	_, err = fencev1.NewFenceCapabilitiesClient(conn).ListFences(ctx, &fencev1.ListFencesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("ListFences on a capabilities-only server = %v, want UNIMPLEMENTED", err)
	}
}

// TestFenceServerOverGRPC lists and lifts through the CO helpers against a
// driver's FenceStore, step by step.
func TestFenceServerOverGRPC(t *testing.T) {
	store := &memStore{fences: []*fencev1.Fence{
		perVolume("node-a", "vol-1"), perVolume("node-a", "vol-2"), perVolume("node-b", "vol-3"), nodeWide("node-c"),
	}}
	caps := Capabilities{UnpublishFence: true, ListFences: true, LiftFence: true}
	conn := startServer(t, func(s *grpc.Server) {
		if err := RegisterFenceServer(s, caps, store); err != nil {
			t.Fatal(err)
		}
	})
	ctx := testContext(t)
	if got, err := Discover(ctx, conn); err != nil || got != caps {
		t.Fatalf("Discover = %+v, %v; want %+v", got, err, caps)
	}
	steps := []struct {
		name     string
		lift     *fencev1.LiftFenceRequest // nil: only list
		wantLift []string
		wantCode codes.Code
		want     []string // every fence afterwards, walked one per page
	}{
		{name: "list", want: []string{"node-a:vol-1", "node-a:vol-2", "node-b:vol-3", "node-c:*"}},
		{name: "lift one volume", lift: &fencev1.LiftFenceRequest{NodeId: "node-a", VolumeIds: []string{"vol-2"}, Reason: "rebooted"}, wantLift: []string{"node-a:vol-2"}, want: []string{"node-a:vol-1", "node-b:vol-3", "node-c:*"}},
		{name: "lift it again", lift: &fencev1.LiftFenceRequest{NodeId: "node-a", VolumeIds: []string{"vol-2"}}, want: []string{"node-a:vol-1", "node-b:vol-3", "node-c:*"}},
		{name: "lift an unknown node", lift: &fencev1.LiftFenceRequest{NodeId: "node-z"}, want: []string{"node-a:vol-1", "node-b:vol-3", "node-c:*"}},
		{name: "lift without node_id", lift: &fencev1.LiftFenceRequest{VolumeIds: []string{"vol-1"}}, wantCode: codes.InvalidArgument, want: []string{"node-a:vol-1", "node-b:vol-3", "node-c:*"}},
		{name: "lift a node-wide fence partly", lift: &fencev1.LiftFenceRequest{NodeId: "node-c", VolumeIds: []string{"vol-1"}}, wantCode: codes.FailedPrecondition, want: []string{"node-a:vol-1", "node-b:vol-3", "node-c:*"}},
		{name: "lift a node", lift: &fencev1.LiftFenceRequest{NodeId: "node-c"}, wantLift: []string{"node-c:*"}, want: []string{"node-a:vol-1", "node-b:vol-3"}},
	}
	for _, st := range steps {
		if st.lift != nil {
			lifted, err := LiftFence(ctx, conn, caps, st.lift)
			if status.Code(err) != st.wantCode {
				t.Fatalf("%s: LiftFence = %v, want code %s", st.name, err, st.wantCode)
			}
			if got := fenceKeys(lifted); strings.Join(got, " ") != strings.Join(st.wantLift, " ") {
				t.Errorf("%s: lifted %v, want %v", st.name, got, st.wantLift)
			}
		}
		fences, err := ListFences(ctx, conn, caps, &fencev1.ListFencesRequest{MaxEntries: 1})
		if err != nil {
			t.Fatalf("%s: ListFences: %v", st.name, err)
		}
		if got := fenceKeys(fences); strings.Join(got, " ") != strings.Join(st.want, " ") {
			t.Errorf("%s: fences %v, want %v", st.name, got, st.want)
		}
	}
}

// TestUnadvertisedCallsAreNeverMade: the CO helpers refuse what Discover
// did not report, and the server refuses what it did not advertise, in
// both cases without reaching the store.
func TestUnadvertisedCallsAreNeverMade(t *testing.T) {
	store := &memStore{fences: []*fencev1.Fence{perVolume("node-a", "vol-1")}}
	served := Capabilities{UnpublishFence: true}
	conn := startServer(t, func(s *grpc.Server) {
		if err := RegisterFenceServer(s, served, store); err != nil {
			t.Fatal(err)
		}
	})
	ctx := testContext(t)
	tests := []struct {
		name     string
		call     func() error
		wantErr  error
		wantCode codes.Code
	}{
		{name: "ListFences helper", call: func() error {
			_, err := ListFences(ctx, conn, served, nil)
			return err
		}, wantErr: ErrNotAdvertised},
		{name: "LiftFence helper", call: func() error {
			_, err := LiftFence(ctx, conn, served, &fencev1.LiftFenceRequest{NodeId: "node-a"})
			return err
		}, wantErr: ErrNotAdvertised},
		{name: "ListFences sent anyway", call: func() error {
			_, err := fencev1.NewFenceCapabilitiesClient(conn).ListFences(ctx, &fencev1.ListFencesRequest{})
			return err
		}, wantCode: codes.Unimplemented},
		{name: "LiftFence sent anyway", call: func() error {
			_, err := fencev1.NewFenceCapabilitiesClient(conn).LiftFence(ctx, &fencev1.LiftFenceRequest{NodeId: "node-a"})
			return err
		}, wantCode: codes.Unimplemented},
	}
	for _, tc := range tests {
		err := tc.call()
		if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
		}
		if tc.wantErr == nil && status.Code(err) != tc.wantCode {
			t.Errorf("%s: %v, want code %s", tc.name, err, tc.wantCode)
		}
	}
	if n := store.callCount(); n != 0 {
		t.Errorf("the store was reached %d times, want never", n)
	}
}

// loopingLister hands back the same next_token for ever, as a broken
// driver might.
type loopingLister struct {
	fencev1.UnimplementedFenceCapabilitiesServer
}

func (loopingLister) ListFences(context.Context, *fencev1.ListFencesRequest) (*fencev1.ListFencesResponse, error) {
	return &fencev1.ListFencesResponse{Entries: []*fencev1.Fence{perVolume("node-a", "vol-1")}, NextToken: "again"}, nil
}

func TestListFencesStopsAWalkThatWouldNotEnd(t *testing.T) {
	conn := startServer(t, func(s *grpc.Server) { fencev1.RegisterFenceCapabilitiesServer(s, loopingLister{}) })
	_, err := ListFences(testContext(t), conn, Capabilities{ListFences: true}, nil)
	if err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("ListFences against a looping driver = %v, want an error about the repeated token", err)
	}
}

// TestListFencesWrapsTheStatus: a driver's error keeps its code through the
// helper's wrapping, so a CO can tell ABORTED from UNAVAILABLE.
func TestListFencesWrapsTheStatus(t *testing.T) {
	store := &memStore{}
	caps := Capabilities{ListFences: true}
	conn := startServer(t, func(s *grpc.Server) {
		if err := RegisterFenceServer(s, caps, store); err != nil {
			t.Fatal(err)
		}
	})
	_, err := ListFences(testContext(t), conn, caps, &fencev1.ListFencesRequest{MaxEntries: -1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ListFences") {
		t.Errorf("ListFences with a negative page size = %v, want INVALID_ARGUMENT wrapped", err)
	}
}

func TestRedactSecrets(t *testing.T) {
	list := &fencev1.ListFencesRequest{NodeId: "node-a", Secrets: map[string]string{"password": "s3cret"}}
	lift := &fencev1.LiftFenceRequest{NodeId: "node-a", Reason: "rebooted", Secrets: map[string]string{"password": "s3cret"}}
	plain := &fencev1.LiftFenceRequest{NodeId: "node-a"}
	tests := []struct {
		name string
		req  any
		keep bool // returned as it is
	}{
		{name: "ListFences with secrets", req: list},
		{name: "LiftFence with secrets", req: lift},
		{name: "LiftFence without secrets", req: plain, keep: true},
		{name: "another message", req: &fencev1.GetFenceCapabilitiesRequest{}, keep: true},
		{name: "not a message", req: "text", keep: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RedactSecrets(tc.req)
			if tc.keep {
				if got != tc.req {
					t.Errorf("RedactSecrets changed %v into %v", tc.req, got)
				}
				return
			}
			text := fmt.Sprint(got)
			if strings.Contains(text, "s3cret") || !strings.Contains(text, "stripped") || !strings.Contains(text, "node-a") {
				t.Errorf("redacted request logs as %s", text)
			}
		})
	}
	if list.GetSecrets()["password"] != "s3cret" || lift.GetSecrets()["password"] != "s3cret" {
		t.Error("RedactSecrets changed the request it was given")
	}
}
