package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"fenceline.io/fenceline/mock-driver/api/csiaddons/fence"
)

func TestRedactAddonsSecrets(t *testing.T) {
	secrets := func() map[string]string { return map[string]string{"userKey": "s3cret"} }
	tests := []struct {
		name string
		req  proto.Message
	}{
		{"fence", &fence.FenceClusterNetworkRequest{Secrets: secrets()}},
		{"unfence", &fence.UnfenceClusterNetworkRequest{Secrets: secrets()}},
		{"list", &fence.ListClusterFenceRequest{Secrets: secrets()}},
		{"clients", &fence.GetFenceClientsRequest{Secrets: secrets()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.req)
			got, ok := redactAddonsSecrets(tc.req).(interface{ GetSecrets() map[string]string })
			if !ok || got.GetSecrets()["userKey"] != "***stripped***" || len(got.GetSecrets()) != 1 {
				t.Fatalf("redacted = %v", got)
			}
			if !proto.Equal(before, tc.req) {
				t.Fatal("the request itself was changed")
			}
		})
	}
	plain := &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: "10.0.0.1/32"}}}
	if got := redactAddonsSecrets(plain); got != any(plain) {
		t.Fatalf("a request without secrets was copied: %v", got)
	}
}
