package monitoring

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/test/world"
)

const (
	// alertTimeout bounds each wait for an alert to fire or resolve: a
	// probe (every 5 s in the world), a scrape and an evaluation (every
	// second), or a failover on the test cluster's short timings.
	alertTimeout = 2 * time.Minute
	// silentEvaluations is how many evaluations of every rule group a
	// healthy install must pass with no alert pending or firing.
	silentEvaluations = 10
)

// TestAlertsOnARealPrometheus runs a real Prometheus server against a
// world installed as in production (replicas under leader election, a BMC
// and FenceTarget per node, a FencePolicy, a StatefulSet with a volume),
// scraping every component and evaluating the shipped alerting rules with
// their `for` removed. The healthy install is silent: no alert pending or
// firing over ten evaluations, every rule evaluating without error. Then
// each failure fires the alerts that exist for it, on the real series and
// with the labels their descriptions name, and no other alert:
//   - a BMC that stops answering: FencelineFenceTargetUnreachable and
//     FencelineNodesNotFenceable, both resolved once it answers again;
//   - a power loss whose fenced detach the driver keeps refusing:
//     FencelineFencedDetachFailing (on the attacher replica that tried),
//     which stays for its 10-minute window after the driver recovers;
//   - every fenceline-attacher down: FencelineAttacherNoLeader, resolved
//     once they run again;
//   - the fence agent down, then every controller replica:
//     FencelineFenceAgentNoLeader, then FencelineControllerNoLeader.
func TestAlertsOnARealPrometheus(t *testing.T) {
	rules, err := readAlerts()
	must(t, err)
	w := world.Start(t, world.Options{
		Metrics:            true,
		Fencing:            true,
		ControllerReplicas: 2,
		AttacherReplicas:   2,
		FenceAgentArgs:     []string{"--leader-election", "--leader-election-namespace=" + world.Namespace},
		WriteInterval:      100 * time.Millisecond,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fencing, err := w.SetUpFencing(ctx, world.BMCRedfish, nil, nil)
	must(t, err)
	dbNode := startWorkload(ctx, t, w)
	prom := startPrometheus(ctx, t, w, immediate(rules))
	prom.waitSilent(ctx, t, len(w.MetricsEndpoints()))

	other := w.Nodes[slices.IndexFunc(w.Nodes, func(n string) bool { return n != dbNode })]
	t.Logf("the BMC of %s stops answering", other)
	must(t, fencing.BMCs[other].SetFaults(world.BMCFaults{Unreachable: true}))
	prom.waitFiring(ctx, t, map[string]model.LabelSet{
		"FencelineFenceTargetUnreachable": {"target": model.LabelValue(other)},
		"FencelineNodesNotFenceable":      {"policy": world.FencePolicyName},
	})
	must(t, fencing.BMCs[other].SetFaults(world.BMCFaults{}))
	prom.waitResolved(ctx, t, "FencelineFenceTargetUnreachable", "FencelineNodesNotFenceable")

	t.Logf("%s loses power; the driver refuses every ControllerUnpublishVolume", dbNode)
	must(t, w.SetDriverFaults(ctx, faults.FailNext("ControllerUnpublishVolume", 1000, codes.Unavailable)))
	must(t, fencing.BMCs[dbNode].PowerLoss(ctx))
	must(t, world.WaitFor(ctx, alertTimeout, "a failed fenced unpublish from "+dbNode, func(context.Context) (bool, error) {
		recs, err := w.Audit()
		return err == nil && audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(dbNode), audit.Fenced(), audit.Code("Unavailable")) > 0, err
	}))
	prom.waitFiring(ctx, t, map[string]model.LabelSet{
		"FencelineFencedDetachFailing": {"namespace": world.Namespace, "mode": "fenced"},
	})
	must(t, w.SetDriverFaults(ctx))

	t.Log("every fenceline-attacher stops")
	must(t, w.StopAttacher())
	// The failed detaches stay in FencelineFencedDetachFailing's 10-minute
	// window whether or not their attacher is scraped.
	prom.waitFiring(ctx, t, map[string]model.LabelSet{"FencelineAttacherNoLeader": {}}, "FencelineFencedDetachFailing")
	must(t, w.StartAttacher())
	prom.waitResolved(ctx, t, "FencelineAttacherNoLeader")

	t.Log("fenceline-fence-agent stops")
	w.FenceAgent.Kill()
	prom.waitFiring(ctx, t, map[string]model.LabelSet{"FencelineFenceAgentNoLeader": {}}, "FencelineFencedDetachFailing")
	t.Log("every fenceline-controller replica stops")
	for _, p := range w.Controllers {
		p.Kill()
	}
	prom.waitFiring(ctx, t, map[string]model.LabelSet{
		"FencelineFenceAgentNoLeader": {}, "FencelineControllerNoLeader": {},
	}, "FencelineFencedDetachFailing")
}

// startWorkload runs a one-pod StatefulSet with a volume and returns its
// node once the pod runs.
func startWorkload(ctx context.Context, t *testing.T, w *world.World) string {
	t.Helper()
	const ns = "app"
	must(t, w.CreateNamespace(ctx, ns))
	must(t, w.CreateStorageClass(ctx))
	_, err := w.ProvisionStatefulSet(ctx, ns, "db", 1)
	must(t, err)
	_, err = w.Cluster.Client().AppsV1().StatefulSets(ns).Create(ctx, world.StatefulSet(ns, "db", 1), metav1.CreateOptions{})
	must(t, err)
	pod, err := w.WaitRunning(ctx, ns, "db-0", "", alertTimeout)
	must(t, err)
	return pod.Spec.NodeName
}

// waitSilent waits until every target is scraped, every rule evaluates
// without error and no alert is pending or firing, then fails the test if
// any alert was pending or firing in silentEvaluations evaluations of every
// group from then on.
func (s *promServer) waitSilent(ctx context.Context, t *testing.T, targets int) {
	t.Helper()
	var why string
	err := world.WaitFor(ctx, alertTimeout, "every target up, every rule healthy, no alert", func(ctx context.Context) (bool, error) {
		up, down, err := s.targetsUp(ctx, targets)
		if err != nil || !up {
			why = "targets: " + down
			return false, err
		}
		bad, _, err := s.ruleHealth(ctx)
		if err != nil || len(bad) > 0 {
			why = "rules: " + strings.Join(bad, "; ")
			return false, err
		}
		active, err := s.activeAlerts(ctx)
		why = "alerts: " + active
		return err == nil && active == "", err
	})
	if err != nil {
		t.Fatalf("%v (last: %s)", err, why)
	}
	start := time.Now()
	must(t, world.WaitFor(ctx, alertTimeout, fmt.Sprintf("%d more evaluations", silentEvaluations), func(ctx context.Context) (bool, error) {
		_, oldest, err := s.ruleHealth(ctx)
		return err == nil && oldest.After(start.Add(silentEvaluations*promInterval)), err
	}))
	window := time.Since(start).Round(time.Second)
	vec, err := s.query(ctx, fmt.Sprintf("max_over_time(ALERTS[%s])", model.Duration(window)))
	must(t, err)
	if len(vec) > 0 {
		t.Fatalf("a healthy install raised alerts within %s: %s", window, vec)
	}
	t.Logf("healthy install: no alert pending or firing over %s (%d targets scraped)", window, targets)
}

// waitFiring waits until every alert of want fires with a series that
// carries want's labels, and fails the test if any alert fires or is
// pending then that is neither in want nor in also.
func (s *promServer) waitFiring(ctx context.Context, t *testing.T, want map[string]model.LabelSet, also ...string) {
	t.Helper()
	var firing map[string][]model.LabelSet
	err := world.WaitFor(ctx, alertTimeout, fmt.Sprintf("%v firing", slices.Sorted(maps.Keys(want))), func(ctx context.Context) (bool, error) {
		var err error
		if firing, err = s.alerts(ctx, promv1.AlertStateFiring); err != nil {
			return false, err
		}
		for name, labels := range want {
			if !slices.ContainsFunc(firing[name], func(got model.LabelSet) bool { return hasLabels(got, labels) }) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v; firing: %v", err, firing)
	}
	pending, err := s.alerts(ctx, promv1.AlertStatePending)
	must(t, err)
	for name, series := range firing {
		if _, ok := want[name]; !ok && !slices.Contains(also, name) {
			t.Errorf("%s fires too: %v", name, series)
		}
	}
	for name, series := range pending {
		t.Errorf("%s is pending with no `for`: %v", name, series)
	}
	t.Logf("firing: %v", firing)
}

// waitResolved waits until none of names is pending or firing.
func (s *promServer) waitResolved(ctx context.Context, t *testing.T, names ...string) {
	t.Helper()
	must(t, world.WaitFor(ctx, alertTimeout, fmt.Sprintf("%v resolved", names), func(ctx context.Context) (bool, error) {
		res, err := s.api.Alerts(ctx)
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(res.Alerts, func(a promv1.Alert) bool {
			return slices.Contains(names, string(a.Labels[model.AlertNameLabel]))
		}), nil
	}))
}

// activeAlerts describes every pending or firing alert, "" for none.
func (s *promServer) activeAlerts(ctx context.Context) (string, error) {
	res, err := s.api.Alerts(ctx)
	if err != nil {
		return "", err
	}
	var out []string
	for _, a := range res.Alerts {
		out = append(out, fmt.Sprintf("%s %s %v", a.Labels[model.AlertNameLabel], a.State, a.Labels))
	}
	return strings.Join(out, "; "), nil
}

// hasLabels reports whether got carries every label of want.
func hasLabels(got, want model.LabelSet) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
