package driver

import (
	"strings"
	"testing"
)

// TestValidateBackend checks the backend switches: the memory backend is
// the default and takes no fence method, the tgt backend needs node IDs
// that name initiators one-to-one and an attach step.
func TestValidateBackend(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "default is memory", mutate: func(*Config) {}},
		{name: "zero backend is memory", mutate: func(c *Config) { c.Backend = "" }},
		{name: "fence method without tgt", mutate: func(c *Config) { c.FenceMethod = "acl" }, wantErr: "needs the tgt backend"},
		{name: "unknown backend", mutate: func(c *Config) { c.Backend = "ceph" }, wantErr: `unknown backend "ceph"`},
		{name: "tgt", mutate: func(c *Config) { c.Backend = BackendTgt }},
		{name: "tgt, acl", mutate: func(c *Config) { c.Backend, c.FenceMethod = BackendTgt, "acl" }},
		{name: "tgt, pr", mutate: func(c *Config) { c.Backend, c.FenceMethod = BackendTgt, "pr" }},
		{name: "tgt, unknown method", mutate: func(c *Config) { c.Backend, c.FenceMethod = BackendTgt, "zone" }, wantErr: "unknown fence method"},
		{
			name:    "tgt, node ID that is no IQN",
			mutate:  func(c *Config) { c.Backend, c.NodeEndpoints = BackendTgt, map[string]string{"Node_B": "/b.sock"} },
			wantErr: `node ID "Node_B" cannot name an iSCSI initiator`,
		},
		{name: "tgt without an attach step", mutate: func(c *Config) { c.Backend, c.NoAttach = BackendTgt, true }, wantErr: "never gets"},
		{name: "memory state", mutate: func(c *Config) { c.MemoryState = true }},
		{name: "tgt with memory state", mutate: func(c *Config) { c.Backend, c.MemoryState = BackendTgt, true }, wantErr: "needs the state on disk"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.StateDir, c.Endpoint, c.NodeID = "/state", "/c.sock", "node-a"
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
