package sanity

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// statuses builds the expected status of every case: def for all, then the
// name/status pairs of kv.
func statuses(def Status, kv ...string) map[string]Status {
	m := map[string]Status{}
	for _, c := range Cases() {
		m[c] = def
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = Status(kv[i+1])
	}
	return m
}

func TestRunAgainstFakeDrivers(t *testing.T) {
	both := fence.Capabilities{UnpublishFence: true, ForceUnpublish: true}
	all := fence.Capabilities{UnpublishFence: true, ForceUnpublish: true, ListFences: true, LiftFence: true}
	tests := []struct {
		name     string
		drv      *fakeDriver
		register bool
		noIO     bool
		secrets  Secrets
		want     map[string]Status
	}{
		// The fake serves one node: there is nowhere to move a volume to.
		{name: "conforming driver", drv: &fakeDriver{caps: all}, register: true, want: statuses(Pass, caseVolumeMoves, "SKIP")},
		{name: "driver without the extension", drv: &fakeDriver{}, register: false, want: statuses(Skip, caseDiscovery, "PASS")},
		{name: "no I/O hook", drv: &fakeDriver{caps: all}, register: true, noIO: true, want: statuses(Pass, caseFenceCutsIO, "SKIP", caseVolumeMoves, "SKIP")},
		{
			name: "fence only", drv: &fakeDriver{caps: fence.Capabilities{UnpublishFence: true}}, register: true,
			want: statuses(Pass, caseForceUnpublish, "SKIP", caseVolumeMoves, "SKIP", caseListFences, "SKIP", caseListPaging, "SKIP", caseLiftFence, "SKIP"),
		},
		{
			name: "fence and force, neither list nor lift", drv: &fakeDriver{caps: both}, register: true,
			want: statuses(Pass, caseVolumeMoves, "SKIP", caseListFences, "SKIP", caseListPaging, "SKIP", caseLiftFence, "SKIP"),
		},
		{
			name: "list without lift", drv: &fakeDriver{caps: fence.Capabilities{UnpublishFence: true, ForceUnpublish: true, ListFences: true}}, register: true,
			want: statuses(Pass, caseVolumeMoves, "SKIP", caseLiftFence, "SKIP"),
		},
		{
			// Without a fence of its own the suite still pages through
			// what the storage holds and checks the codes.
			name: "list without UNPUBLISH_FENCE", drv: &fakeDriver{caps: fence.Capabilities{ForceUnpublish: true, ListFences: true}}, register: true,
			want: statuses(Skip, caseDiscovery, "PASS", caseErrorCodes, "PASS", caseForceUnpublish, "PASS", caseListPaging, "PASS"),
		},
		{
			name: "lies about UNPUBLISH_FENCE", drv: &fakeDriver{caps: all, ignoreFence: true}, register: true,
			want: statuses(Pass, caseFenceCutsIO, "FAIL", caseNoRepublish, "FAIL", caseNoNodeID, "FAIL", caseVolumeMoves, "SKIP",
				caseListFences, "FAIL", caseListPaging, "FAIL", caseLiftFence, "FAIL"),
		},
		{
			name: "refuses a publish to a fenced node with the wrong code", drv: &fakeDriver{caps: all, refusal: codes.Internal}, register: true,
			want: statuses(Pass, caseNoRepublish, "FAIL", caseNoNodeID, "FAIL", caseVolumeMoves, "SKIP"),
		},
		{
			name: "rejects a fence without node_id", drv: &fakeDriver{caps: all, needNode: true}, register: true,
			want: statuses(Pass, caseNoNodeID, "FAIL", caseVolumeMoves, "SKIP"),
		},
		{
			name: "needs secrets, given them", drv: &fakeDriver{caps: all, secret: "s3cret"}, register: true, secrets: allSecrets("s3cret"),
			want: statuses(Pass, caseVolumeMoves, "SKIP"),
		},
		{
			// Every case that makes a volume fails, each naming the call
			// the driver refused; discovery needs no secrets.
			name: "needs secrets, given none", drv: &fakeDriver{caps: all, secret: "s3cret"}, register: true,
			want: statuses(Fail, caseDiscovery, "PASS", caseVolumeMoves, "SKIP"),
		},
		{
			name: "lifts the fence only on a forced clean-up", drv: &fakeDriver{caps: all, needForce: true}, register: true,
			want: statuses(Pass, caseCleanupLifts, "FAIL", caseVolumeMoves, "SKIP", caseListFences, "FAIL"),
		},
		{
			name: "hides its fences", drv: &fakeDriver{caps: all, fenceFlaws: fenceFlaws{hideFences: true}}, register: true,
			want: statuses(Pass, caseVolumeMoves, "SKIP", caseListFences, "FAIL", caseListPaging, "FAIL", caseLiftFence, "FAIL"),
		},
		{
			name: "pages from the start on a foreign token", drv: &fakeDriver{caps: all, fenceFlaws: fenceFlaws{acceptAnyToken: true}}, register: true,
			want: statuses(Pass, caseVolumeMoves, "SKIP", caseListPaging, "FAIL"),
		},
		{
			name: "answers a lift it did not carry out", drv: &fakeDriver{caps: all, fenceFlaws: fenceFlaws{liftKeepsFence: true}}, register: true,
			want: statuses(Pass, caseVolumeMoves, "SKIP", caseLiftFence, "FAIL"),
		},
		{
			// ListVolumes shows the attachment the lift made.
			name: "publishes at the lift, no I/O hook", drv: &fakeDriver{caps: all, fenceFlaws: fenceFlaws{liftPublishes: true}}, register: true, noIO: true,
			want: statuses(Pass, caseFenceCutsIO, "SKIP", caseVolumeMoves, "SKIP", caseLiftFence, "FAIL"),
		},
		{
			// Without ListVolumes, the node's write after the lift shows it.
			name: "publishes at the lift, no ListVolumes", drv: &fakeDriver{caps: all, fenceFlaws: fenceFlaws{liftPublishes: true, noListVolumes: true}}, register: true,
			want: statuses(Pass, caseVolumeMoves, "SKIP", caseLiftFence, "FAIL"),
		},
	}
	for _, tc := range tests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{ControllerEndpoint: serveFake(t, tc.drv, tc.register), IO: tc.drv, Timeout: 30 * time.Second, Secrets: tc.secrets}
			if tc.noIO {
				cfg.IO = nil
			}
			checkResults(t, cfg, tc.want)
			checkNeverCalled(t, tc.drv)
		})
	}
}

// checkNeverCalled fails when the suite sent the driver ListFences or
// LiftFence although it did not advertise them.
func checkNeverCalled(t *testing.T, d *fakeDriver) {
	t.Helper()
	for method, advertised := range map[string]bool{"ListFences": d.caps.ListFences, "LiftFence": d.caps.LiftFence} {
		if n := d.callCount(method); !advertised && n > 0 {
			t.Errorf("the suite called %s %d times, which the driver does not advertise", method, n)
		}
	}
}

// allSecrets gives every call the password.
func allSecrets(password string) Secrets {
	m := map[string]string{"password": password}
	return Secrets{CreateVolume: m, DeleteVolume: m, ControllerPublishVolume: m, ControllerUnpublishVolume: m, NodeStageVolume: m, NodePublishVolume: m, ListFences: m, LiftFence: m}
}

// checkResults runs the suite and compares every case's status.
func checkResults(t *testing.T, cfg Config, want map[string]Status) {
	t.Helper()
	results, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(results), len(want), results)
	}
	for _, r := range results {
		if r.Status != want[r.Name] {
			t.Errorf("%s: %s (%s), want %s; log:\n%s", r.Name, r.Status, r.Reason, want[r.Name], strings.Join(r.Log, "\n"))
		}
		if r.Status != Pass && r.Reason == "" {
			t.Errorf("%s: %s without a reason", r.Name, r.Status)
		}
	}
}

// badCapabilities answers GetFenceCapabilities wrongly, in turn.
type badCapabilities struct {
	fencev1.UnimplementedFenceCapabilitiesServer
	answers []*fencev1.GetFenceCapabilitiesResponse
	err     error

	mu    sync.Mutex
	calls int
}

func (b *badCapabilities) GetFenceCapabilities(context.Context, *fencev1.GetFenceCapabilitiesRequest) (*fencev1.GetFenceCapabilitiesResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	a := b.answers[b.calls%len(b.answers)]
	b.calls++
	return a, nil
}

func TestDiscoveryRejectsBadCapabilityAnswers(t *testing.T) {
	list := func(c ...fencev1.FenceCapability) *fencev1.GetFenceCapabilitiesResponse {
		return &fencev1.GetFenceCapabilitiesResponse{Capabilities: c}
	}
	tests := []struct {
		name    string
		svc     *badCapabilities
		wantMsg string
	}{
		{name: "error other than UNIMPLEMENTED", svc: &badCapabilities{err: status.Error(codes.Unavailable, "array down")}, wantMsg: "only UNIMPLEMENTED"},
		{name: "answer changes", svc: &badCapabilities{answers: []*fencev1.GetFenceCapabilitiesResponse{list(fencev1.FenceCapability_UNPUBLISH_FENCE), list()}}, wantMsg: "must not change"},
		{name: "FENCE_CAPABILITY_UNKNOWN sent", svc: &badCapabilities{answers: []*fencev1.GetFenceCapabilitiesResponse{list(fencev1.FenceCapability_FENCE_CAPABILITY_UNKNOWN)}}, wantMsg: "never sent"},
		{name: "LIFT_FENCE without LIST_FENCES", svc: &badCapabilities{answers: []*fencev1.GetFenceCapabilitiesResponse{list(fencev1.FenceCapability_LIFT_FENCE)}}, wantMsg: "LIFT_FENCE without LIST_FENCES"},
	}
	for _, tc := range tests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			drv := &fakeDriver{volumes: map[string]*fakeVolume{}}
			sock := filepath.Join(t.TempDir(), "csi.sock")
			lis, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			csi.RegisterIdentityServer(srv, drv)
			csi.RegisterControllerServer(srv, drv)
			csi.RegisterNodeServer(srv, drv)
			fencev1.RegisterFenceCapabilitiesServer(srv, tc.svc)
			go func() { _ = srv.Serve(lis) }()
			t.Cleanup(srv.Stop)

			results, err := Run(context.Background(), Config{ControllerEndpoint: sock})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range results {
				switch {
				case r.Name == caseDiscovery && (r.Status != Fail || !strings.Contains(r.Reason, tc.wantMsg)):
					t.Errorf("discovery: %s %q, want FAIL containing %q", r.Status, r.Reason, tc.wantMsg)
				case r.Name != caseDiscovery && (r.Status != Skip || !strings.Contains(r.Reason, "discovery did not pass")):
					t.Errorf("%s: %s %q, want SKIP because discovery failed", r.Name, r.Status, r.Reason)
				}
			}
		})
	}
}

// TestTest runs the suite through the testing API against a conforming
// driver, as a driver author does.
func TestTest(t *testing.T) {
	drv := &fakeDriver{caps: fence.Capabilities{UnpublishFence: true, ForceUnpublish: true}}
	Test(t, Config{
		ControllerEndpoint: serveFake(t, drv, true),
		Nodes:              []Node{{ID: fakeNode}},
		IO:                 IOFunc(drv.Write),
		Run:                regexp.MustCompile("^(discovery|fence-cuts-io)$"),
	})
}

// TestRunSelectsCases runs one case: discovery still runs first, unreported,
// and the suite leaves no directory behind.
func TestRunSelectsCases(t *testing.T) {
	drv := &fakeDriver{caps: fence.Capabilities{UnpublishFence: true}}
	dir := t.TempDir()
	checkResults(t, Config{
		ControllerEndpoint: serveFake(t, drv, true),
		IO:                 drv,
		StagingDir:         dir,
		TargetDir:          dir,
		Run:                regexp.MustCompile("^fence-cuts-io$"),
	}, map[string]Status{caseFenceCutsIO: Pass})
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Errorf("left behind in the staging/target directory: %v (%v)", left, err)
	}
}

func TestTarget(t *testing.T) {
	tests := []struct {
		endpoint, want string
		wantErr        bool
	}{
		{endpoint: "unix:///run/csi.sock", want: "unix:///run/csi.sock"},
		{endpoint: "/run/csi.sock", want: "unix:///run/csi.sock"},
		{endpoint: "tcp://127.0.0.1:10000", want: "passthrough:///127.0.0.1:10000"},
		{endpoint: "unix://", wantErr: true},
		{endpoint: "tcp://", wantErr: true},
		{endpoint: "csi.sock", wantErr: true},
	}
	for _, tc := range tests {
		got, err := Target(tc.endpoint)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("Target(%q) = %q, %v; want %q, error %v", tc.endpoint, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "minimal", cfg: Config{ControllerEndpoint: "/run/csi.sock"}},
		{name: "no controller", cfg: Config{}, wantErr: "controller endpoint is required"},
		{name: "negative capacity", cfg: Config{ControllerEndpoint: "/c", CapacityBytes: -1}, wantErr: "capacity"},
		{name: "negative timeout", cfg: Config{ControllerEndpoint: "/c", Timeout: -1}, wantErr: "timeout"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
