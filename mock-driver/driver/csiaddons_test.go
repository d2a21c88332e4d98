package driver_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/api/csiaddons/fence"
	"fenceline.io/fenceline/mock-driver/api/csiaddons/identity"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/faults"
)

// addonsWorld is a world whose driver serves csi-addons, with node-a at
// 10.0.0.1 and fd00::1 and node-b at 10.0.0.2.
func addonsWorld(t *testing.T) *world {
	return newWorld(t, func(c *driver.Config) {
		c.CSIAddonsEndpoint = "unix://" + filepath.Join(filepath.Dir(strings.TrimPrefix(c.Endpoint, "unix://")), "addons.sock")
		c.NodeAddresses = map[string][]string{"node-a": {"10.0.0.1", "fd00::1"}, "node-b": {"10.0.0.2"}}
	})
}

func cidrs(s ...string) []*fence.CIDR {
	var out []*fence.CIDR
	for _, c := range s {
		out = append(out, &fence.CIDR{Cidr: c})
	}
	return out
}

func TestCSIAddonsIdentity(t *testing.T) {
	w := addonsWorld(t)
	cc := dial(t, w.d.CSIAddonsEndpoint())
	id := identity.NewIdentityClient(cc)
	info, err := id.GetIdentity(w.ctx, &identity.GetIdentityRequest{})
	if err != nil || info.GetName() != driver.DefaultName {
		t.Fatalf("GetIdentity = %v, %v; want the driver name %s", info, err, driver.DefaultName)
	}
	caps, err := id.GetCapabilities(w.ctx, &identity.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var controller, networkFence, clients bool
	for _, c := range caps.GetCapabilities() {
		controller = controller || c.GetService().GetType() == identity.Capability_Service_CONTROLLER_SERVICE
		networkFence = networkFence || c.GetNetworkFence().GetType() == identity.Capability_NetworkFence_NETWORK_FENCE
		clients = clients || c.GetNetworkFence().GetType() == identity.Capability_NetworkFence_GET_CLIENTS_TO_FENCE
	}
	if !controller || !networkFence || !clients {
		t.Fatalf("capabilities %v: want CONTROLLER_SERVICE, NETWORK_FENCE and GET_CLIENTS_TO_FENCE", caps)
	}
	if p, err := id.Probe(w.ctx, &identity.ProbeRequest{}); err != nil || !p.GetReady().GetValue() {
		t.Fatalf("Probe = %v, %v; want ready", p, err)
	}
}

// TestCSIAddonsNetworkFence fences node-a's address over the csi-addons
// socket and shows that the array refuses node-a, not node-b, until the
// unfence, across a restart.
func TestCSIAddonsNetworkFence(t *testing.T) {
	w := addonsWorld(t)
	va, vb := w.createVolume("pvc-a"), w.createVolume("pvc-b")
	w.attachAndMount(va, "node-a")
	w.attachAndMount(vb, "node-b")
	fc := fence.NewFenceControllerClient(dial(t, w.d.CSIAddonsEndpoint()))

	clients, err := fc.GetFenceClients(w.ctx, &fence.GetFenceClientsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"node-a=10.0.0.1/32,fd00::1/128", "node-b=10.0.0.2/32"}
	var got []string
	for _, c := range clients.GetClients() {
		var as []string
		for _, a := range c.GetAddresses() {
			as = append(as, a.GetCidr())
		}
		got = append(got, c.GetId()+"="+strings.Join(as, ","))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GetFenceClients = %v, want %v", got, want)
	}

	_, err = fc.FenceClusterNetwork(w.ctx, &fence.FenceClusterNetworkRequest{})
	wantCode(t, "fence without cidrs", err, codes.InvalidArgument)
	_, err = fc.FenceClusterNetwork(w.ctx, &fence.FenceClusterNetworkRequest{Cidrs: cidrs("10.0.0.1")})
	wantCode(t, "fence of a bare address", err, codes.InvalidArgument)
	_, err = fc.UnfenceClusterNetwork(w.ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: cidrs("not-a-cidr/8")})
	wantCode(t, "unfence of garbage", err, codes.InvalidArgument)

	req := &fence.FenceClusterNetworkRequest{Cidrs: cidrs("10.0.0.1/32"), Secrets: map[string]string{"userKey": "s3cret"}, Parameters: map[string]string{"clusterID": "c1"}}
	for range 2 { // idempotent
		if _, err := fc.FenceClusterNetwork(w.ctx, req); err != nil {
			t.Fatalf("FenceClusterNetwork: %v", err)
		}
	}
	listed := func() []string {
		t.Helper()
		l, err := fc.ListClusterFence(w.ctx, &fence.ListClusterFenceRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range l.GetCidrs() {
			out = append(out, c.GetCidr())
		}
		return out
	}
	if got := listed(); !reflect.DeepEqual(got, []string{"10.0.0.1/32"}) {
		t.Fatalf("ListClusterFence = %v", got)
	}

	err = client.Write(w.ctx, w.nodes["node-a"], va, []byte("x"))
	wantCode(t, "write from fenced node-a", err, codes.PermissionDenied)
	if !strings.Contains(err.Error(), "10.0.0.1/32") {
		t.Errorf("refusal %q does not name the fenced block", err)
	}
	if err := client.Write(w.ctx, w.nodes["node-b"], vb, []byte("x")); err != nil {
		t.Fatalf("write from node-b: %v", err)
	}
	_, err = w.node("node-a").NodePublishVolume(w.ctx, &csi.NodePublishVolumeRequest{
		VolumeId: va, StagingTargetPath: w.stagingPath("node-a"), TargetPath: w.targetPath("node-a") + "2", VolumeCapability: rwoCap(),
	})
	wantCode(t, "NodePublishVolume on fenced node-a", err, codes.FailedPrecondition)
	vc := w.createVolume("pvc-c")
	_, err = w.ctrl.ControllerPublishVolume(w.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vc, NodeId: "node-a", VolumeCapability: rwoCap()})
	wantCode(t, "ControllerPublishVolume to fenced node-a", err, codes.FailedPrecondition)

	// The fence is the array's: a restart keeps it, and the node plugins
	// register their addresses again.
	w.d.Stop()
	w.start()
	fc = fence.NewFenceControllerClient(dial(t, w.d.CSIAddonsEndpoint()))
	if got := listed(); !reflect.DeepEqual(got, []string{"10.0.0.1/32"}) {
		t.Fatalf("ListClusterFence after a restart = %v", got)
	}
	wantCode(t, "write from fenced node-a after a restart", client.Write(w.ctx, w.nodes["node-a"], va, []byte("x")), codes.PermissionDenied)

	// A failing unfence (an injected fault) leaves the fence.
	w.d.Faults().Set([]faults.Fault{faults.FailNext("UnfenceClusterNetwork", 1, codes.Unavailable)})
	_, err = fc.UnfenceClusterNetwork(w.ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: cidrs("10.0.0.1/32")})
	wantCode(t, "unfence with an injected fault", err, codes.Unavailable)
	if _, err := fc.UnfenceClusterNetwork(w.ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: cidrs("10.0.0.1/32")}); err != nil {
		t.Fatalf("UnfenceClusterNetwork: %v", err)
	}
	if got := listed(); len(got) != 0 {
		t.Fatalf("ListClusterFence after the unfence = %v", got)
	}
	if err := client.Write(w.ctx, w.nodes["node-a"], va, []byte("x")); err != nil {
		t.Fatalf("write from node-a after the unfence: %v", err)
	}

	// The audit log has the fence calls with their blocks and the names of
	// their secrets, never the values.
	fences := audit.Filter(w.audit(), audit.Method("FenceClusterNetwork"), audit.Code("OK"))
	if len(fences) != 2 || fences[0].Message != "cidrs=10.0.0.1/32 secrets=userKey parameters=clusterID" {
		t.Fatalf("audited fences %+v", fences)
	}
	if raw, err := os.ReadFile(w.d.AuditPath()); err != nil || strings.Contains(string(raw), "s3cret") {
		t.Fatalf("the audit log holds a secret's value (or cannot be read: %v)", err)
	}
}

func TestCSIAddonsConfig(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		mutate  func(*driver.Config)
		wantErr string
	}{
		{name: "address of a node not served", mutate: func(c *driver.Config) { c.NodeAddresses = map[string][]string{"node-z": {"10.0.0.9"}} }, wantErr: `node address for node "node-z"`},
		{name: "not an address", mutate: func(c *driver.Config) { c.NodeAddresses = map[string][]string{"node-a": {"10.0.0.0/8"}} }, wantErr: `address "10.0.0.0/8"`},
		{name: "csi-addons on the CSI socket", mutate: func(c *driver.Config) { c.CSIAddonsEndpoint = c.Endpoint }, wantErr: "must differ"},
		{name: "csi-addons on a node socket", mutate: func(c *driver.Config) { c.CSIAddonsEndpoint = c.NodeEndpoints["node-a"] }, wantErr: "also node node-a's endpoint"},
		{name: "bad csi-addons endpoint", mutate: func(c *driver.Config) { c.CSIAddonsEndpoint = "http://x" }, wantErr: "csi-addons endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newConfig(dir)
			tc.mutate(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	// Without csi-addons the driver serves none of it.
	w := newWorld(t, nil)
	if ep := w.d.CSIAddonsEndpoint(); ep != "" {
		t.Fatalf("CSIAddonsEndpoint = %q without the option", ep)
	}
	_, err := fence.NewFenceControllerClient(w.ctrlCC).ListClusterFence(w.ctx, &fence.ListClusterFenceRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("ListClusterFence on the CSI socket: %v, want Unimplemented", err)
	}
}
