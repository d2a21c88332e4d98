package app

import (
	"strings"
	"testing"

	"fenceline.io/fenceline/pkg/component/events"
)

// Two replicas on one host get different identities; one process keeps
// its identity (the elector and the heartbeat use the same); a set one is
// kept.
func TestElectionIdentity(t *testing.T) {
	host := events.Hostname(userAgent)
	_, a := electionNamespaceAndIdentity(Options{LeaderElectionNamespace: "ns"})
	_, b := electionNamespaceAndIdentity(Options{LeaderElectionNamespace: "ns"})
	if a != b {
		t.Errorf("identity changed within one process: %q, then %q", a, b)
	}
	if !strings.HasPrefix(a, host+"_") || len(a) <= len(host)+1 {
		t.Errorf("identity = %q, want the host name %q, an underscore and a per-process ID", a, host)
	}
	replicaID = "other-process"
	defer func() { replicaID = strings.TrimPrefix(a, host+"_") }()
	if _, c := electionNamespaceAndIdentity(Options{LeaderElectionNamespace: "ns"}); c == a {
		t.Errorf("two processes on one host share the identity %q", c)
	}
	if _, d := electionNamespaceAndIdentity(Options{LeaderElectionNamespace: "ns", LeaderElectionIdentity: "set"}); d != "set" {
		t.Errorf("identity = %q, want the one set", d)
	}
}
