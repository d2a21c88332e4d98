package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/app"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func (e *env) leaseHolder() string {
	l, err := e.admin.CoordinationV1().Leases(world.Namespace).Get(e.ctx, app.Component, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func (e *env) httpGet(url string) (int, string, error) {
	req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestLeaderElectionAndHTTPIntegration(t *testing.T) {
	e := newEnv(t)
	type replica struct {
		id, addr string
		stop     func()
	}
	var replicas []replica
	for _, id := range []string{"replica-a", "replica-b"} {
		o := testOptions(podgc.Name)
		o.LeaderElection = true
		o.Identity = id
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
		o.HTTPEndpoint = freeAddr(t)
		o.Registry = prometheus.NewRegistry()
		replicas = append(replicas, replica{id: id, addr: o.HTTPEndpoint, stop: e.runController(o)})
	}
	var leader string
	e.waitFor("a leader", func(context.Context) (bool, error) {
		leader = e.leaseHolder()
		return leader != "", nil
	})
	for _, r := range replicas {
		e.waitFor("/healthz of "+r.id, func(context.Context) (bool, error) {
			code, body, err := e.httpGet("http://" + r.addr + "/healthz")
			return err == nil && code == http.StatusOK && body == "ok", nil
		})
	}

	e.oosBarrier() // the leader works
	var standby replica
	for _, r := range replicas {
		if r.id == leader {
			code, body, err := e.httpGet("http://" + r.addr + "/metrics")
			if err != nil || code != http.StatusOK {
				t.Fatalf("GET /metrics: %d %v", code, err)
			}
			for _, want := range []string{`pod_gc_collector_force_delete_pods_total{namespace="default",reason="out-of-service"} 1`, "fenceline_controller_force_delete_latency_seconds_bucket",
				// The standard series of every Kubernetes component.
				"\ngo_goroutines ", "\nprocess_cpu_seconds_total ", `workqueue_adds_total{name="podgc"}`, `workqueue_depth{name="podgc"}`,
				`workqueue_retries_total{name="podgc"}`, `rest_client_requests_total{code="200",host=`, `leader_election_master_status{name=`} {
				if !strings.Contains(body, want) {
					t.Errorf("leader's /metrics lacks %q", want)
				}
			}
			r.stop() // releases the lease on the way out
		} else {
			standby = r
		}
	}
	e.waitFor("the standby to take over", func(context.Context) (bool, error) {
		return e.leaseHolder() == standby.id, nil
	})
	e.oosBarrier() // and the new leader works
}

func TestDryRunIntegration(t *testing.T) {
	o := testOptions(podgc.Name, quarantine.Name)
	o.DryRun = true
	o.Settings[quarantine.Name].(*quarantine.Settings).Delay = testDelay
	e := startEnv(t, o)
	e.createNode("dry-1", false, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	p := e.createStuckPod("dry-1-a", "dry-1")
	ev := e.waitEvent("Pod", ns, p.Name, p.UID, actuator.EventForceDeleted)
	if !strings.HasPrefix(ev.Message, "Dry run") {
		t.Errorf("event %q does not say dry run", ev.Message)
	}
	cur, err := e.admin.CoreV1().Pods(ns).Get(e.ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("dry run deleted the pod: %v", err)
	}
	if cur.Status.Phase == v1.PodFailed || (cur.DeletionGracePeriodSeconds != nil && *cur.DeletionGracePeriodSeconds == 0) {
		t.Errorf("dry run changed the pod: phase %s, grace %v", cur.Status.Phase, *cur.DeletionGracePeriodSeconds)
	}

	// Quarantine shows its whole plan: taint, then deletion.
	e.safeDetachDriver(safeDriver, true)
	e.heartbeat(safeDriver, time.Now())
	claim, unique := e.volume("dry-q", safeDriver, v1.ReadWriteOnce)
	e.createNode("dry-2", false, testobj.VolumesInUse(unique))
	q := e.createStuckPod("dry-2-a", "dry-2", testobj.Claim("data", claim))
	nev := e.waitEvent("Node", "", "dry-2", "", actuator.EventTainted)
	pev := e.waitEvent("Pod", ns, q.Name, q.UID, actuator.EventForceDeleted)
	if !strings.HasPrefix(nev.Message, "Dry run") || !strings.HasPrefix(pev.Message, "Dry run") {
		t.Errorf("events do not say dry run: %q, %q", nev.Message, pev.Message)
	}
	n := e.node("dry-2")
	if nodeutil.HasTaint(n, names.QuarantineTaint) || len(n.Status.VolumesInUse) != 1 || !e.podExists(q) {
		t.Errorf("dry run changed something: taints %v, volumesInUse %v, pod exists %v", n.Spec.Taints, n.Status.VolumesInUse, e.podExists(q))
	}
}
