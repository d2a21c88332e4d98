package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"fenceline.io/fenceline/pkg/controller/app"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// write is one write request of the controller's identity in the audit log.
type write struct {
	userAgent, verb, resource, subresource, name string
}

// controllerWrites reads the writes that the controller's ServiceAccount
// made from kube-apiserver's audit log.
func controllerWrites(t *testing.T, path string) []write {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening audit log: %v", err)
	}
	defer func() { _ = f.Close() }()
	user := "system:serviceaccount:" + world.Namespace + ":" + world.ControllerServiceAccount
	var out []write
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line the API server is still writing
		}
		if ev.User.Username != user || ev.ObjectRef == nil || ev.Stage != auditv1.StageResponseComplete {
			continue
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			out = append(out, write{ev.UserAgent, ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Subresource, ev.ObjectRef.Name})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading audit log: %v", err)
	}
	return out
}

// TestUserAgentPerControllerIntegration: every write of fenceline-controller
// carries the user agent of the part that made it, so that the API server's
// audit log attributes a force deletion to its controller. podgc and
// force-eviction each delete a pod (with its status update and Event), and
// leader election writes the Lease; the audit log must name each.
func TestUserAgentPerControllerIntegration(t *testing.T) {
	e := newEnvWith(t, cluster.Options{AuditLog: true})
	o := testOptions(podgc.Name, forceeviction.Name)
	o.LeaderElection, o.Identity = true, "ua"
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	e.runController(o)
	e.oosBarrier()      // podgc deletes a "barrier-*" pod
	e.evictionBarrier() // force-eviction deletes an "eb-*" pod

	// by returns, per user agent, whether a write matching the condition
	// was made with it.
	by := func(ws []write, match func(write) bool) map[string]bool {
		agents := map[string]bool{}
		for _, w := range ws {
			if match(w) {
				agents[w.userAgent] = true
			}
		}
		return agents
	}
	var writes []write
	e.waitFor("the Events of both controllers in the audit log", func(context.Context) (bool, error) {
		writes = controllerWrites(t, e.cluster.AuditLogPath())
		events := by(writes, func(w write) bool { return w.resource == "events" })
		return events[app.UserAgent(podgc.Name)] && events[app.UserAgent(forceeviction.Name)], nil
	})
	checks := []struct {
		what  string
		match func(write) bool
		want  string
	}{
		{"podgc's pod writes", func(w write) bool { return w.resource == "pods" && strings.HasPrefix(w.name, "barrier-") }, app.UserAgent(podgc.Name)},
		{"force-eviction's pod writes", func(w write) bool { return w.resource == "pods" && strings.HasPrefix(w.name, "eb-") }, app.UserAgent(forceeviction.Name)},
		{"the leader Lease", func(w write) bool { return w.resource == "leases" && w.name == app.Component }, app.UserAgent("leader-election")},
	}
	for _, c := range checks {
		got := by(writes, c.match)
		if len(got) != 1 || !got[c.want] {
			t.Errorf("%s made with user agents %v, want only %q", c.what, got, c.want)
		}
	}
	for _, w := range writes {
		if !strings.HasPrefix(w.userAgent, app.Component+"/") {
			t.Errorf("%s %s/%s %s with user agent %q, which names no part of %s", w.verb, w.resource, w.subresource, w.name, w.userAgent, app.Component)
		}
	}
	deletes := by(writes, func(w write) bool { return w.resource == "pods" && w.verb == "delete" })
	if !deletes[app.UserAgent(podgc.Name)] || !deletes[app.UserAgent(forceeviction.Name)] {
		t.Errorf("pod deletions by user agent: %v, want both controllers", deletes)
	}
}
