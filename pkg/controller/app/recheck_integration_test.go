package app_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/names"
)

// onFirstGet runs hook once, just before the first GET of exactly path: the
// write-time re-read of one object, which informers (list and watch) never
// make.
type onFirstGet struct {
	next http.RoundTripper
	path string
	once sync.Once
	hook func()
}

func (o *onFirstGet) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Path == o.path {
		o.once.Do(o.hook)
	}
	return o.next.RoundTrip(req)
}

// nodeBack plays the returning kubelet from inside the controller's request
// (not the test goroutine): Ready since now.
func nodeBack(e *env, name string) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.admin.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		testobj.ReadySince(time.Now())(n)
		_, err = e.admin.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Errorf("setting node %s Ready: %v", name, err)
	}
}

// TestRecheckAtWriteTimeIntegration runs the real controller: podgc decides
// from its cache that a stuck pod must go, and the node turns Ready just
// before the write (when the actuator reads it fresh). The pod is left
// alone, with an Event and a metric saying the decision changed; once the
// node is NotReady again the controller decides again and deletes it.
func TestRecheckAtWriteTimeIntegration(t *testing.T) {
	e := newEnv(t)
	const node = "rc-1"
	cfg := rest.CopyConfig(e.saConfig)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return &onFirstGet{next: rt, path: "/api/v1/nodes/" + node, hook: func() { nodeBack(e, node) }}
	}
	e.saConfig = cfg
	e.runController(testOptions(podgc.Name))

	e.createNode(node, false)
	p := e.createStuckPod("rc-1-a", node)
	e.addTaint(node, names.OutOfServiceTaint, v1.TaintEffectNoExecute)

	ev := e.waitEvent("Pod", ns, p.Name, p.UID, actuator.EventDecisionChanged)
	if !strings.Contains(ev.Message, "Ready") {
		t.Errorf("event %q does not say the node is Ready", ev.Message)
	}
	cur, err := e.admin.CoreV1().Pods(ns).Get(e.ctx, p.Name, metav1.GetOptions{})
	if err != nil || cur.UID != p.UID {
		t.Fatalf("pod deleted although its node turned Ready before the write: %v", err)
	}
	if cur.Status.Phase == v1.PodFailed {
		t.Error("pod marked Failed although its node turned Ready before the write")
	}
	if got := e.metricValue("fenceline_controller_decision_changed_total", "force-delete pod"); got < 1 {
		t.Errorf("decision_changed_total = %v, want >= 1", got)
	}

	// The node dies again: the controller decides again, and now it holds.
	e.setReady(node, false)
	e.waitPodGone(p)
	e.waitFor("the pod's force deletion Event", func(context.Context) (bool, error) {
		return len(e.events("Pod", ns, p.Name, p.UID, actuator.EventForceDeleted)) > 0, nil
	})
}
