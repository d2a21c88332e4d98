package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/faults"
)

func TestParseFlags(t *testing.T) {
	base := func(mutate func(*driver.Config)) driver.Config {
		c := driver.DefaultConfig()
		c.Endpoint = "unix:///csi/csi.sock"
		c.StateDir = "/var/lib/mock-driver"
		mutate(&c)
		return c
	}
	tests := []struct {
		name    string
		args    []string
		want    driver.Config
		wantErr string
	}{
		{name: "defaults", want: base(func(*driver.Config) {})},
		{
			name: "multi-node array",
			args: []string{"--endpoint=unix:///run/mock/c.sock", "--node-id=n1", "--node-endpoint=n2=unix:///run/mock/n2.sock", "--node-endpoint=n3=/run/mock/n3.sock", "--state-dir=/run/mock/s"},
			want: base(func(c *driver.Config) {
				c.Endpoint, c.NodeID, c.StateDir = "unix:///run/mock/c.sock", "n1", "/run/mock/s"
				c.NodeEndpoints = map[string]string{"n2": "unix:///run/mock/n2.sock", "n3": "/run/mock/n3.sock"}
			}),
		},
		{
			name: "driver that cannot fence",
			args: []string{"--fence=false", "--force-unpublish=false", "--unsafe-unpublish", "--max-volumes-per-node=4", "--name=other.example.com"},
			want: base(func(c *driver.Config) {
				c.Fence, c.ForceUnpublish, c.Unpublish, c.MaxVolumesPerNode, c.Name = false, false, array.UnpublishRealArray, 4, "other.example.com"
			}),
		},
		{
			name: "driver that neither lists nor lifts fences",
			args: []string{"--list-fences=false", "--lift-fence=false"},
			want: base(func(c *driver.Config) { c.ListFences, c.LiftFence = false, false }),
		},
		{
			name: "driver that lists fences but does not lift them",
			args: []string{"--lift-fence=false"},
			want: base(func(c *driver.Config) { c.LiftFence = false }),
		},
		{
			name: "driver lying about UNPUBLISH_FENCE",
			args: []string{"--fence=false", "--fake-fence"},
			want: base(func(c *driver.Config) { c.Fence, c.FakeFence = false, true }),
		},
		{
			name: "real-array unpublish",
			args: []string{"--unpublish-mode=real-array"},
			want: base(func(c *driver.Config) { c.Unpublish = array.UnpublishRealArray }),
		},
		{
			name: "old flag switched off is strict",
			args: []string{"--unpublish-mode=real-array", "--unsafe-unpublish=false"},
			want: base(func(*driver.Config) {}),
		},
		{name: "unknown unpublish mode", args: []string{"--unpublish-mode=lenient"}, wantErr: "unknown unpublish mode"},
		{
			name: "tgt backend without a fence",
			args: []string{"--backend=tgt", "--fence-method=acl"},
			want: base(func(c *driver.Config) { c.Backend, c.FenceMethod = driver.BackendTgt, "acl" }),
		},
		{
			name: "state in memory only",
			args: []string{"--memory-state"},
			want: base(func(c *driver.Config) { c.MemoryState = true }),
		},
		{
			name: "faults",
			args: []string{"--fault=ControllerUnpublishVolume:Unavailable:3", "--latency=ControllerPublishVolume:50ms"},
			want: base(func(c *driver.Config) {
				c.Faults = []faults.Fault{
					{Method: "ControllerUnpublishVolume", Code: codes.Unavailable, Count: 3},
					{Method: "ControllerPublishVolume", Latency: 50 * time.Millisecond},
				}
			}),
		},
		{
			name: "csi-addons network fence with node addresses",
			args: []string{"--node-id=n1", "--node-endpoint=n2=/n2.sock", "--csi-addons-endpoint=unix:///run/mock/addons.sock", "--node-address=10.0.0.1", "--node-address=n2=10.0.0.2,fd00::2", "--node-address=n2=10.0.1.2"},
			want: base(func(c *driver.Config) {
				c.NodeID, c.NodeEndpoints, c.CSIAddonsEndpoint = "n1", map[string]string{"n2": "/n2.sock"}, "unix:///run/mock/addons.sock"
				c.NodeAddresses = map[string][]string{"n1": {"10.0.0.1"}, "n2": {"10.0.0.2", "fd00::2", "10.0.1.2"}}
			}),
		},
		{name: "node address without a node", args: []string{"--node-address=10.0.0.1"}, wantErr: "needs --node-id"},
		{name: "node address not an address", args: []string{"--node-address=n2=10.0.0.0/24"}, wantErr: "node address"},
		{name: "node address with an empty node", args: []string{"--node-address==10.0.0.1"}, wantErr: "want [<node-id>=]<ip>"},
		{name: "bad node endpoint", args: []string{"--node-endpoint=n2"}, wantErr: "want <node-id>=<endpoint>"},
		{name: "node endpoint twice", args: []string{"--node-endpoint=n2=/a", "--node-endpoint=n2=/b"}, wantErr: "given twice"},
		{name: "bad fault", args: []string{"--fault=CreateVolume:Broken"}, wantErr: "unknown gRPC code"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("config = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
