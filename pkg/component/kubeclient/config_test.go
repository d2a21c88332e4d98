package kubeclient

import (
	"testing"

	"k8s.io/client-go/rest"
)

// TestConfig: protobuf with a JSON fallback, the given limits and user
// agent, and the base left alone.
func TestConfig(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:6443", UserAgent: "base"}
	c, err := Config(Options{Base: base, QPS: 7, Burst: 9, UserAgent: "fenceline-test"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ContentType != "application/vnd.kubernetes.protobuf" || c.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("content type %q, accept %q; want protobuf with a JSON fallback", c.ContentType, c.AcceptContentTypes)
	}
	if c.QPS != 7 || c.Burst != 9 || c.UserAgent != "fenceline-test" || c.Host != base.Host {
		t.Errorf("QPS %v burst %d user agent %q host %q", c.QPS, c.Burst, c.UserAgent, c.Host)
	}
	if base.UserAgent != "base" || base.QPS != 0 {
		t.Errorf("Config modified its base: %+v", base)
	}
	part := WithUserAgent(c, "fenceline-test/part")
	if part.UserAgent != "fenceline-test/part" || c.UserAgent != "fenceline-test" || part.QPS != 7 {
		t.Errorf("WithUserAgent: copy %q (QPS %v), original %q", part.UserAgent, part.QPS, c.UserAgent)
	}
	if _, err := Config(Options{Kubeconfig: "/nonexistent/kubeconfig"}); err == nil {
		t.Error("a missing kubeconfig is no error")
	}
}
