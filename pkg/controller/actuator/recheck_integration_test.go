package actuator_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// beforeFirst runs hook once, just before the first request whose method is
// method and whose path ends with suffix reaches the API server: the place
// where a kubelet reporting in races our write.
type beforeFirst struct {
	next           http.RoundTripper
	method, suffix string
	once           sync.Once
	hook           func()
}

func (b *beforeFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == b.method && strings.HasSuffix(req.URL.Path, b.suffix) {
		b.once.Do(b.hook)
	}
	return b.next.RoundTrip(req)
}

// hookedClient is a client whose first matching request runs hook first.
func hookedClient(t *testing.T, c *cluster.Cluster, method, suffix string, hook func()) kubernetes.Interface {
	t.Helper()
	cfg := c.AdminConfig()
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return &beforeFirst{next: rt, method: method, suffix: suffix, hook: hook}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// rcEnv is a real API server where the test plays the node controller and
// the kubelet.
type rcEnv struct {
	t     *testing.T
	c     *cluster.Cluster
	admin kubernetes.Interface
}

// setReady plays the returning kubelet: Ready now, and what else it
// reports.
func (e *rcEnv) setReady(name string, also func(*v1.Node)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.admin.CoreV1().Nodes().Get(e.t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		testobj.ReadySince(time.Now())(n)
		if also != nil {
			also(n)
		}
		_, err = e.admin.CoreV1().Nodes().UpdateStatus(e.t.Context(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Error(err)
	}
}

// deadNode creates a node that has not been Ready for an hour.
func (e *rcEnv) deadNode(name string, opts ...testobj.NodeOption) *v1.Node {
	e.t.Helper()
	want := testobj.Node(name, append([]testobj.NodeOption{testobj.NotReadySince(time.Now().Add(-time.Hour))}, opts...)...)
	want.UID = ""
	n, err := e.admin.CoreV1().Nodes().Create(e.t.Context(), want, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	n.Status = want.Status
	if n, err = e.admin.CoreV1().Nodes().UpdateStatus(e.t.Context(), n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// stuckPod is a pod on the node, deleted gracefully and so terminating, as
// the controller's cache shows it.
func (e *rcEnv) stuckPod(name, node string) *v1.Pod {
	e.t.Helper()
	pods := e.admin.CoreV1().Pods(ns)
	p := testobj.Pod(ns, name, testobj.OnNode(node))
	p.UID, p.Status = "", v1.PodStatus{}
	if _, err := pods.Create(e.t.Context(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	grace := int64(300)
	if err := pods.Delete(e.t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		e.t.Fatal(err)
	}
	cur, err := pods.Get(e.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return cur
}

// untouched fails unless the pod still exists and is not Failed.
func (e *rcEnv) untouched(t *testing.T, p *v1.Pod) *v1.Pod {
	t.Helper()
	cur, err := e.admin.CoreV1().Pods(ns).Get(t.Context(), p.Name, metav1.GetOptions{})
	if err != nil || cur.UID != p.UID {
		t.Fatalf("pod was deleted although the node turned Ready: %v", err)
	}
	if cur.Status.Phase == v1.PodFailed {
		t.Errorf("pod was marked Failed although the node turned Ready")
	}
	return cur
}

// TestRecheckAtWriteTimeIntegration: every write re-decides on what the API
// server holds at the moment of the write, not on the cached copy the
// controller decided on. The node turning Ready (a kubelet reporting in)
// between the decision and the write, or during it (a conflict), stops the
// write.
func TestRecheckAtWriteTimeIntegration(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	e := &rcEnv{t: t, c: c, admin: c.Client()}
	oos := testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)

	t.Run("node turns Ready between the cached decision and the write: pod left alone", func(t *testing.T) {
		cachedNode, cachedPod := e.deadNode("rc-1", oos), e.stuckPod("rc-1-a", "rc-1")
		if d := podgc.Decide(cachedNode, cachedPod); !d.Delete {
			t.Fatalf("setup: the cached decision must be to delete, got %+v", d)
		}
		e.setReady("rc-1", nil)
		rec := record.NewFakeRecorder(10)
		a := &actuator.Actuator{Client: e.admin, Recorder: rec}
		err := a.ForceDeletePod(t.Context(), cachedPod, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "test", Recheck: podgc.Recheck})
		if !actuator.IsDecisionChanged(err) {
			t.Errorf("ForceDeletePod: error %v, want a DecisionChangedError", err)
		}
		e.untouched(t, cachedPod)
		if ev := <-rec.Events; !strings.Contains(ev, actuator.EventDecisionChanged) || !strings.Contains(ev, "Ready") {
			t.Errorf("event %q does not say the decision changed because the node is Ready", ev)
		}
	})

	t.Run("kubelet reports in while the pod is being marked: conflict, re-decide, no overwrite", func(t *testing.T) {
		cachedNode, cachedPod := e.deadNode("rc-2", oos), e.stuckPod("rc-2-a", "rc-2")
		if d := podgc.Decide(cachedNode, cachedPod); !d.Delete {
			t.Fatalf("setup: the cached decision must be to delete, got %+v", d)
		}
		client := hookedClient(t, c, http.MethodPut, "/pods/rc-2-a/status", func() {
			e.setReady("rc-2", nil)
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p, err := e.admin.CoreV1().Pods(ns).Get(t.Context(), "rc-2-a", metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Status.Phase, p.Status.Message = v1.PodRunning, "kubelet is back"
				_, err = e.admin.CoreV1().Pods(ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
		a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10)}
		err := a.ForceDeletePod(t.Context(), cachedPod, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "test", Recheck: podgc.Recheck})
		if !actuator.IsDecisionChanged(err) {
			t.Errorf("ForceDeletePod: error %v, want a DecisionChangedError", err)
		}
		if cur := e.untouched(t, cachedPod); cur.Status.Message != "kubelet is back" {
			t.Errorf("the kubelet's status was overwritten: %+v", cur.Status)
		}
	})

	t.Run("kubelet reports in while volumes are being released: conflict, re-decide, list kept", func(t *testing.T) {
		testReleaseRedecides(t, e)
	})
}

// testReleaseRedecides: the kubelet reports Ready and its volumes just
// before quarantine's release reaches the API server.
func testReleaseRedecides(t *testing.T, e *rcEnv) {
	vol := nodeutil.CSIUniqueVolumeName("safe.example", "h1")
	cachedNode := e.deadNode("rc-3", testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule), testobj.VolumesInUse(vol))
	safe := func(string) bool { return true }
	decide := func(n *v1.Node) (bool, string) {
		r := quarantine.VolumesToRelease(n, safe, quarantine.Attachers{"safe.example": {Serving: true}}, func(v1.UniqueVolumeName) string { return "" }, nil, time.Now(), time.Second)
		return len(r.Volumes) > 0, r.Why
	}
	if ok, why := decide(cachedNode); !ok {
		t.Fatalf("setup: the cached decision must be to release, got %s", why)
	}
	client := hookedClient(t, e.c, http.MethodPut, "/nodes/rc-3/status", func() {
		e.setReady("rc-3", func(n *v1.Node) { n.Status.VolumesInUse = []v1.UniqueVolumeName{vol} })
	})
	a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10)}
	_, err := a.ReleaseVolumes(t.Context(), cachedNode, []v1.UniqueVolumeName{vol}, false, "test", decide)
	if !actuator.IsDecisionChanged(err) {
		t.Errorf("ReleaseVolumes: error %v, want a DecisionChangedError", err)
	}
	n, err := e.admin.CoreV1().Nodes().Get(t.Context(), "rc-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Status.VolumesInUse) != 1 {
		t.Errorf("volumesInUse of a node whose kubelet reported in was changed: %v", n.Status.VolumesInUse)
	}
}
