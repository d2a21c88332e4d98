package driver_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/fence"
)

func TestRestartKeepsVolumesAttachmentsAndFences(t *testing.T) {
	w := newWorld(t, nil)
	vol := w.createVolume("pvc-1")
	w.attachAndMount(vol, "node-a")
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-a"}
	fence.SetFence(req, true)
	if _, err := w.ctrl.ControllerUnpublishVolume(w.ctx, req); err != nil {
		t.Fatal(err)
	}
	w.attachAndMount(vol, "node-b")

	w.d.Stop()
	w.start()

	list, err := w.ctrl.ListVolumes(w.ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetEntries()) != 1 || list.GetEntries()[0].GetVolume().GetVolumeId() != vol {
		t.Fatalf("volumes after restart: %v", list.GetEntries())
	}
	if got := list.GetEntries()[0].GetStatus().GetPublishedNodeIds(); len(got) != 1 || got[0] != "node-b" {
		t.Fatalf("published nodes after restart: %v", got)
	}
	wantCode(t, "write from fenced node-a after restart", client.Write(w.ctx, w.nodes["node-a"], vol, nil), codes.PermissionDenied)
	if err := client.Write(w.ctx, w.nodes["node-b"], vol, nil); err != nil {
		t.Fatalf("write from node-b after restart: %v", err)
	}
	// The audit log is appended to, not replaced, across restarts.
	if n := audit.Count(w.audit(), audit.Method("CreateVolume")); n != 1 {
		t.Fatalf("CreateVolume records after restart: %d, want 1", n)
	}
}

// TestMemoryStateIsNotSaved: with MemoryState the driver writes no
// state.json, and a restart forgets its volumes; the audit log is still
// kept.
func TestMemoryStateIsNotSaved(t *testing.T) {
	w := newWorld(t, func(c *driver.Config) { c.MemoryState = true })
	vol := w.createVolume("pvc-1")
	w.attachAndMount(vol, "node-a")
	if _, err := os.Stat(w.d.StatePath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("state file with memory state: %v, want none", err)
	}
	w.d.Stop()
	w.start()
	list, err := w.ctrl.ListVolumes(w.ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetEntries()) != 0 {
		t.Fatalf("volumes after a restart with memory state: %v, want none", list.GetEntries())
	}
	if n := audit.Count(w.audit(), audit.Method("CreateVolume")); n != 1 {
		t.Fatalf("CreateVolume records after restart: %d, want 1", n)
	}
}

func TestCorruptStateFileAtStart(t *testing.T) {
	dir := t.TempDir()
	cfg := newConfig(dir)
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(cfg.StateDir, driver.StateFile)
	if err := os.WriteFile(statePath, []byte(`{"volumes": {"vol-`), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ctx: context.Background(), dir: dir, cfg: cfg}
	w.start()

	matches, _ := filepath.Glob(statePath + ".corrupt-*")
	if len(matches) != 1 {
		t.Fatalf("corrupt file kept aside as %v, want one file", matches)
	}
	recs := w.audit()
	if i := audit.FirstIndex(recs, audit.Method("LoadState"), audit.Code("DataLoss")); i != 0 || !strings.Contains(recs[0].Message, matches[0]) {
		t.Fatalf("audit log does not start with the recovery record: %+v", recs)
	}
	// The driver serves, and a second start does not see the corruption.
	w.createVolume("pvc-1")
	w.d.Stop()
	w.start()
	if n := audit.Count(w.audit(), audit.Method("LoadState")); n != 1 {
		t.Fatalf("LoadState records after a clean restart: %d, want 1", n)
	}
}

func TestFaultInjection(t *testing.T) {
	f, err := faults.ParseFault("ControllerUnpublishVolume:Unavailable:2")
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, func(c *driver.Config) { c.Faults = []faults.Fault{f} })
	vol := w.createVolume("pvc-1")
	unpub := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-a"}
	for i := 1; i <= 2; i++ {
		_, err := w.ctrl.ControllerUnpublishVolume(w.ctx, unpub)
		wantCode(t, "injected unpublish failure", err, codes.Unavailable)
	}
	if _, err := w.ctrl.ControllerUnpublishVolume(w.ctx, unpub); err != nil {
		t.Fatalf("third unpublish: %v", err)
	}

	// At runtime, through any socket.
	rules := []faults.Fault{
		{Method: "Write", Code: codes.Aborted, Count: 1},
		{Method: "ControllerPublishVolume", Latency: 30 * time.Millisecond},
	}
	if err := client.SetFaults(w.ctx, w.nodes["node-b"], rules...); err != nil {
		t.Fatal(err)
	}
	got, err := client.ListFaults(w.ctx, w.ctrlCC)
	if err != nil || len(got) != 2 || got[0] != rules[0] || got[1] != rules[1] {
		t.Fatalf("ListFaults = %+v, %v; want %+v", got, err, rules)
	}
	start := time.Now()
	w.attachAndMount(vol, "node-a")
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("publish with 30ms injected latency took %v", took)
	}
	wantCode(t, "injected write failure", client.Write(w.ctx, w.nodes["node-a"], vol, nil), codes.Aborted)
	if err := client.Write(w.ctx, w.nodes["node-a"], vol, nil); err != nil {
		t.Fatalf("second write: %v", err)
	}
	if err := client.ClearFaults(w.ctx, w.ctrlCC); err != nil {
		t.Fatal(err)
	}
	if got, _ := client.ListFaults(w.ctx, w.ctrlCC); len(got) != 0 {
		t.Fatalf("faults after ClearFaults: %+v", got)
	}
	err = client.SetFaults(w.ctx, w.ctrlCC, faults.Fault{Method: "Write"})
	wantCode(t, "rule injecting nothing", err, codes.InvalidArgument)

	recs := w.audit()
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Code("Unavailable")); n != 2 {
		t.Fatalf("audited injected failures: %d, want 2", n)
	}
}

func TestMetrics(t *testing.T) {
	w := newWorld(t, func(c *driver.Config) { c.HTTPEndpoint = "127.0.0.1:0" })
	w.createVolume("pvc-1")
	_, err := w.ctrl.DeleteVolume(w.ctx, &csi.DeleteVolumeRequest{})
	wantCode(t, "delete without ID", err, codes.InvalidArgument)

	resp, err := http.Get("http://" + w.d.MetricsAddress() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`csi_plugin_operations_seconds_count{driver_name="mock.fenceline.io",grpc_status_code="OK",method_name="CreateVolume"} 1`,
		`csi_plugin_operations_seconds_count{driver_name="mock.fenceline.io",grpc_status_code="InvalidArgument",method_name="DeleteVolume"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s; got:\n%s", want, body)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*driver.Config)
		wantErr string
	}{
		{name: "valid", mutate: func(*driver.Config) {}},
		{name: "bad name", mutate: func(c *driver.Config) { c.Name = "mock.fenceline.io." }, wantErr: "not a valid CSI driver name"},
		{name: "no state dir", mutate: func(c *driver.Config) { c.StateDir = "" }, wantErr: "state directory"},
		{name: "no endpoint", mutate: func(c *driver.Config) { c.Endpoint = "" }, wantErr: "endpoint is required"},
		{name: "node served twice", mutate: func(c *driver.Config) { c.NodeID = "node-a" }, wantErr: "served twice"},
		{name: "shared socket", mutate: func(c *driver.Config) { c.NodeEndpoints["node-b"] = c.Endpoint }, wantErr: "is used by"},
		{name: "negative limit", mutate: func(c *driver.Config) { c.MaxVolumesPerNode = -1 }, wantErr: "max volumes"},
		{name: "fake fence of a fencing driver", mutate: func(c *driver.Config) { c.FakeFence = true }, wantErr: "fake fence needs fencing switched off"},
		{name: "fake fence", mutate: func(c *driver.Config) { c.Fence, c.FakeFence = false, true }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newConfig("/srv/mock")
			tc.mutate(&cfg)
			err := cfg.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in, network, addr string
		wantErr           bool
	}{
		{in: "unix:///run/csi.sock", network: "unix", addr: "/run/csi.sock"},
		{in: "unix:/run/csi.sock", network: "unix", addr: "/run/csi.sock"},
		{in: "/run/csi.sock", network: "unix", addr: "/run/csi.sock"},
		{in: "tcp://127.0.0.1:10000", network: "tcp", addr: "127.0.0.1:10000"},
		{in: "csi.sock", wantErr: true},
		{in: "unix://", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			n, a, err := driver.ParseEndpoint(tc.in)
			if (err != nil) != tc.wantErr || n != tc.network || a != tc.addr {
				t.Fatalf("ParseEndpoint = %q, %q, %v", n, a, err)
			}
		})
	}
}

func TestTCPEndpoint(t *testing.T) {
	w := newWorld(t, func(c *driver.Config) {
		c.Endpoint = "tcp://127.0.0.1:0"
		c.NodeEndpoints = map[string]string{"node-a": "tcp://127.0.0.1:0"}
	})
	if strings.HasPrefix(w.d.Endpoint(), "unix") || strings.HasSuffix(w.d.Endpoint(), ":0") {
		t.Fatalf("Endpoint() = %q, want the bound host:port", w.d.Endpoint())
	}
	vol := w.createVolume("pvc-1")
	w.attachAndMount(vol, "node-a")
	if err := client.Write(w.ctx, w.nodes["node-a"], vol, nil); err != nil {
		t.Fatalf("write over TCP: %v", err)
	}
}
