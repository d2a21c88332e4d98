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

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/controller/testobj"
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

// TestRecheckAtWriteTimeIntegration: every write re-decides on what the API
// server holds at the moment of the write, not on the cached copy the
// controller decided on. The node turning Ready (a kubelet reporting in)
// between the decision and the write, or during it (a conflict), stops the
// write.
func TestRecheckAtWriteTimeIntegration(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	admin := c.Client()
	ctx := t.Context()

	// setReady plays the returning kubelet: Ready now, and what else it
	// reports.
	setReady := func(t *testing.T, name string, also func(*v1.Node)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			testobj.ReadySince(time.Now())(n)
			if also != nil {
				also(n)
			}
			_, err = admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// deadNode creates a node that is not Ready, with the taints given.
	deadNode := func(t *testing.T, name string, opts ...testobj.NodeOption) *v1.Node {
		t.Helper()
		want := testobj.Node(name, append([]testobj.NodeOption{testobj.NotReadySince(time.Now().Add(-time.Hour))}, opts...)...)
		want.UID = ""
		n, err := admin.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status = want.Status
		n, err = admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// stuckPod is a pod on the node, deleted gracefully and so
	// terminating, as the controller's cache shows it.
	stuckPod := func(t *testing.T, name, node string) *v1.Pod {
		t.Helper()
		p := testobj.Pod(ns, name, testobj.OnNode(node))
		p.UID, p.Status = "", v1.PodStatus{}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		grace := int64(300)
		if err := admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
		cur, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}
	untouched := func(t *testing.T, p *v1.Pod) {
		t.Helper()
		cur, err := admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || cur.UID != p.UID {
			t.Fatalf("pod was deleted although the node turned Ready: %v", err)
		}
		if cur.Status.Phase == v1.PodFailed {
			t.Errorf("pod was marked Failed although the node turned Ready")
		}
	}
	oos := testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)

	t.Run("node turns Ready between the cached decision and the write: pod left alone", func(t *testing.T) {
		cachedNode := deadNode(t, "rc-1", oos)
		cachedPod := stuckPod(t, "rc-1-a", "rc-1")
		if d := podgc.Decide(cachedNode, cachedPod); !d.Delete {
			t.Fatalf("setup: the cached decision must be to delete, got %+v", d)
		}
		setReady(t, "rc-1", nil)
		rec := record.NewFakeRecorder(10)
		a := &actuator.Actuator{Client: admin, Recorder: rec}
		err := a.ForceDeletePod(ctx, cachedPod, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "test", Recheck: podgc.Recheck})
		if !actuator.IsDecisionChanged(err) {
			t.Errorf("ForceDeletePod: error %v, want a DecisionChangedError", err)
		}
		untouched(t, cachedPod)
		if ev := <-rec.Events; !strings.Contains(ev, actuator.EventDecisionChanged) || !strings.Contains(ev, "Ready") {
			t.Errorf("event %q does not say the decision changed because the node is Ready", ev)
		}
	})

	t.Run("kubelet reports in while the pod is being marked: conflict, re-decide, no overwrite", func(t *testing.T) {
		cachedNode := deadNode(t, "rc-2", oos)
		cachedPod := stuckPod(t, "rc-2-a", "rc-2")
		if d := podgc.Decide(cachedNode, cachedPod); !d.Delete {
			t.Fatalf("setup: the cached decision must be to delete, got %+v", d)
		}
		client := hookedClient(t, c, http.MethodPut, "/pods/rc-2-a/status", func() {
			setReady(t, "rc-2", nil)
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p, err := admin.CoreV1().Pods(ns).Get(ctx, "rc-2-a", metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Status.Phase = v1.PodRunning
				p.Status.Message = "kubelet is back"
				_, err = admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
		a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10)}
		err := a.ForceDeletePod(ctx, cachedPod, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "test", Recheck: podgc.Recheck})
		if !actuator.IsDecisionChanged(err) {
			t.Errorf("ForceDeletePod: error %v, want a DecisionChangedError", err)
		}
		untouched(t, cachedPod)
		cur, _ := admin.CoreV1().Pods(ns).Get(ctx, "rc-2-a", metav1.GetOptions{})
		if cur.Status.Message != "kubelet is back" {
			t.Errorf("the kubelet's status was overwritten: %+v", cur.Status)
		}
	})

	t.Run("kubelet reports in while volumes are being released: conflict, re-decide, list kept", func(t *testing.T) {
		vol := nodeutil.CSIUniqueVolumeName("safe.example", "h1")
		cachedNode := deadNode(t, "rc-3", testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule), testobj.VolumesInUse(vol))
		safe := func(string) bool { return true }
		decide := func(n *v1.Node) (bool, string) {
			vols, why := quarantine.VolumesToRelease(n, safe, nil, time.Now(), time.Second)
			return len(vols) > 0, why
		}
		if ok, why := decide(cachedNode); !ok {
			t.Fatalf("setup: the cached decision must be to release, got %s", why)
		}
		client := hookedClient(t, c, http.MethodPut, "/nodes/rc-3/status", func() {
			setReady(t, "rc-3", func(n *v1.Node) { n.Status.VolumesInUse = []v1.UniqueVolumeName{vol} })
		})
		a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10)}
		_, err := a.ReleaseVolumes(ctx, cachedNode, []v1.UniqueVolumeName{vol}, false, "test", decide)
		if !actuator.IsDecisionChanged(err) {
			t.Errorf("ReleaseVolumes: error %v, want a DecisionChangedError", err)
		}
		n, err := admin.CoreV1().Nodes().Get(ctx, "rc-3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Status.VolumesInUse) != 1 {
			t.Errorf("volumesInUse of a node whose kubelet reported in was changed: %v", n.Status.VolumesInUse)
		}
	})
}
