package tgt

import (
	"strings"
	"testing"
)

func TestDescribeFence(t *testing.T) {
	tests := []struct {
		name   string
		method FenceMethod
		node   string
		want   []string
	}{
		{name: "acl+sessions", method: MethodACLSessions, node: "node-a", want: []string{"iqn.2026-11.io.fenceline.node:node-a", "iqn.2026-11.io.fenceline.mock:vol-1", "sessions ended"}},
		{name: "pr", method: MethodPR, node: "node-a", want: []string{"iqn.2026-11.io.fenceline.node:node-a", "reservation key", "preempted"}},
		{name: "acl", method: MethodACL, node: "node-a", want: []string{"sessions left alone"}},
		{name: "node ID no initiator carries", method: MethodACLSessions, node: "Node_A", want: []string{"cut off by absence"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := (&Backend{opts: Options{Method: tc.method}}).DescribeFence("vol-1", tc.node)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("DescribeFence = %q, want it to contain %q", got, w)
				}
			}
		})
	}
}
